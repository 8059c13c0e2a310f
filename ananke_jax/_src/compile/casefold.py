"""Case-insensitive classes: code point ranges closed under a regex dialect's case equivalence.

ECMA-262 (``u`` and ``i`` flags) equates code points with the same simple case fold; Python's
``re.IGNORECASE`` equates a text character with a pattern character when its lower case is the
pattern character's, or one of a few extra characters that ``re`` lists (``ı`` for ``i``).
"""

from __future__ import annotations

import _sre
import bisect
import functools

from ananke_jax._src.compile import utf8

try:  # Python >= 3.11: the case pairs re.IGNORECASE adds beyond lower case (such as 's' and 'ſ')
    from re._casefix import _EXTRA_CASES
except ImportError:  # pragma: no cover - Python 3.10
    from sre_compile import _ignorecase_fixes as _EXTRA_CASES  # type: ignore[no-redef]

Ranges = list[tuple[int, int]]
_CASED_BELOW = 0x20000  # planes 2 and up (ideographs, special purpose) have no case


def closed(ranges: Ranges, partners: dict[int, tuple[int, ...]]) -> Ranges:
    """``ranges`` with the ``partners`` (`ecma_partners`, `python_partners`) of their code points."""
    ranges = utf8.normalise(ranges)
    if sum(hi - lo + 1 for lo, hi in ranges) < len(partners):  # a few characters: look each up
        extra = [(p, p) for lo, hi in ranges for cp in range(lo, hi + 1) for p in partners.get(cp, ())]
    else:
        starts = [lo for lo, _ in ranges]
        inside = lambda cp: (i := bisect.bisect_right(starts, cp) - 1) >= 0 and cp <= ranges[i][1]
        extra = [(p, p) for cp, others in partners.items() if inside(cp) for p in others]
    return utf8.normalise(ranges + extra)


@functools.cache
def ecma_partners() -> dict[int, tuple[int, ...]]:
    """The code points that share their simple case fold with others, and those others (the
    single-character `str.casefold` of this Python's Unicode)."""
    chars = list(map(chr, range(_CASED_BELOW)))
    by_fold: dict[str, list[int]] = {}
    for c, fold in zip(chars, map(str.casefold, chars)):
        if c != fold and len(fold) == 1:
            by_fold.setdefault(fold, [ord(fold)]).append(ord(c))
    return {cp: tuple(p for p in group if p != cp) for group in by_fold.values() for cp in group}


@functools.cache
def python_partners() -> dict[int, tuple[int, ...]]:
    """The code points ``re.IGNORECASE`` matches with others, and those others (`re` lowers both
    sides with ``_sre.unicode_tolower`` and adds its ``_EXTRA_CASES``)."""
    by_lower: dict[int, list[int]] = {}  # lower case -> the code points lowered to it, itself first
    for cp, lower in enumerate(map(_sre.unicode_tolower, range(_CASED_BELOW))):
        if cp != lower:
            by_lower.setdefault(lower, [lower]).append(cp)
    for lower in _EXTRA_CASES:
        by_lower.setdefault(lower, [lower])
    partners = {}
    for lower, group in by_lower.items():
        matched = [t for s in (lower, *_EXTRA_CASES.get(lower, ())) for t in by_lower.get(s, [s])]
        partners.update({cp: tuple(t for t in matched if t != cp) for cp in group})
    return partners
