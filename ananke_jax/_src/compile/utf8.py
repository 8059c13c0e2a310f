"""Unicode code-point ranges to UTF-8 byte-range sequences.

A character class such as ``[α-ω]`` is a set of code points; the constraint runs over bytes.
Each code-point range is split into pieces whose UTF-8 encodings form a product of byte ranges,
so ``[lo, hi]`` becomes a few sequences like ``[(0xCE, 0xCE), (0xB1, 0xBF)]``.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

MAX_CODE_POINT = 0x10FFFF
SURROGATES = (0xD800, 0xDFFF)
# Last code point encoded with 1, 2, 3 and 4 bytes.
_LENGTH_LIMITS = (0x7F, 0x7FF, 0xFFFF, MAX_CODE_POINT)

ByteRangeSequence = tuple[tuple[int, int], ...]


def utf8_sequences(lo: int, hi: int) -> Iterator[ByteRangeSequence]:
    """Yield byte-range sequences whose union is the UTF-8 encoding of code points ``[lo, hi]``.

    Surrogates (U+D800..U+DFFF) have no UTF-8 encoding and are left out.

    Args:
      lo: first code point, inclusive.
      hi: last code point, inclusive.

    Yields:
      Tuples of ``(first_byte, last_byte)`` pairs, one pair per byte position.
    """
    for first, last in _without_surrogates(lo, hi):
        start = first
        for limit in _LENGTH_LIMITS:
            if start > last:
                break
            if start <= limit:
                yield from _split_same_length(start, min(last, limit))
                start = limit + 1


def _without_surrogates(lo: int, hi: int) -> Iterator[tuple[int, int]]:
    s_lo, s_hi = SURROGATES
    if hi < s_lo or lo > s_hi:
        yield lo, hi
        return
    if lo < s_lo:
        yield lo, s_lo - 1
    if hi > s_hi:
        yield s_hi + 1, hi


def _split_same_length(lo: int, hi: int) -> Iterator[ByteRangeSequence]:
    """Split ``[lo, hi]`` (same encoded length) until every continuation byte spans freely."""
    n = len(chr(lo).encode("utf-8"))
    for i in range(1, n):
        low_bits = (1 << (6 * i)) - 1
        if lo & ~low_bits != hi & ~low_bits:
            if lo & low_bits:
                yield from _split_same_length(lo, lo | low_bits)
                yield from _split_same_length((lo | low_bits) + 1, hi)
                return
            if hi & low_bits != low_bits:
                yield from _split_same_length(lo, (hi & ~low_bits) - 1)
                yield from _split_same_length(hi & ~low_bits, hi)
                return
    yield tuple(zip(chr(lo).encode("utf-8"), chr(hi).encode("utf-8")))


def complement(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Return the code-point ranges not covered by ``ranges`` (within 0..U+10FFFF)."""
    out, nxt = [], 0
    for lo, hi in normalise(ranges):
        if lo > nxt:
            out.append((nxt, lo - 1))
        nxt = hi + 1
    if nxt <= MAX_CODE_POINT:
        out.append((nxt, MAX_CODE_POINT))
    return out


def normalise(ranges: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sort and merge overlapping or adjacent ranges."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out
