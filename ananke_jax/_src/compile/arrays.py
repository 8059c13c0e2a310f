"""Small numpy helpers shared by the compilers (host)."""

from __future__ import annotations

import functools
import itertools

import numpy as np


def run_starts(values: np.ndarray) -> np.ndarray:
    """bool[N]: where each run of equal values of a 1-D array starts (cheaper than ``np.diff``,
    whose fixed cost dominates on small arrays)."""
    starts = np.empty(len(values), bool)
    starts[:1] = True
    np.not_equal(values[1:], values[:-1], out=starts[1:])
    return starts


def sorted_unique(keys: np.ndarray) -> np.ndarray:
    """The distinct values of a 1-D array, sorted: of non-negative integers under four times
    their count, by a table of the range (no sort); else by a sort (``np.unique`` hashes, far
    slower). On 9.7M lexer states inside loops (119k distinct), 0.23 s -> 0.05 s."""
    if len(keys) > _SMALL_SORT and keys.dtype.kind in "iu" and keys.min() >= 0 and (high := int(keys.max())) < 4 * len(keys):
        present = np.zeros(high + 1, bool)
        present[keys] = True
        return np.flatnonzero(present).astype(keys.dtype, copy=False)
    keys = np.sort(keys)
    return keys[run_starts(keys)]


_SMALL_SORT = 1024


def stable_order(values: np.ndarray) -> np.ndarray:
    """int64[N]: ``np.argsort(values, kind="stable")`` of a 1-D integer array. Non-negative
    values under 2^48 are sorted by their 16-bit digits, each a radix sort (numpy sorts 16-bit
    keys by radix; wider ones by merge sort, 2-5 times slower). Up to `_SMALL_SORT` values,
    a merge sort: the digits' fixed cost is then the larger (15 against 3 us on 75 values)."""
    if len(values) <= _SMALL_SORT or values.dtype.kind not in "iu" or values.min() < 0 or (high := int(values.max())) >= 1 << 48:
        return np.argsort(values, kind="stable")
    digits = max(1, -(-high.bit_length() // 16))
    return np.lexsort([((values >> (16 * d)) & 0xFFFF).astype(np.uint16) for d in range(digits)])


def unique_first_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(keys, return_index=True, return_inverse=True)`` of a 1-D array, with a
    fraction of its fixed cost (which dominates on small arrays)."""
    order = stable_order(keys)
    ordered = keys[order]
    first = run_starts(ordered)
    inverse = np.empty(len(keys), np.int64)
    inverse[order] = np.cumsum(first) - 1
    return ordered[first], order[first], inverse


def unique_inverse(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` of a 1-D array of non-negative integers: by a
    table of the key range where that is small next to the keys (no sort), else by a sort."""
    high = int(keys.max(initial=0))
    if high >= 4 * len(keys) + 1024:
        distinct, _, inverse = unique_first_inverse(keys)
        return distinct, inverse
    present = np.zeros(high + 1, bool)
    present[keys] = True
    return np.flatnonzero(present), (np.cumsum(present) - 1)[keys]


class GrownArray:
    """A 1-D int64 array appended to in place: its room doubles as needed, so n appends of a
    few values cost O(n) in all (``np.append`` copies the whole array each time)."""

    def __init__(self, values=()):
        self._data = np.array(values, np.int64).reshape(-1)
        self._len = len(self._data)

    def __len__(self) -> int:
        return self._len

    @property
    def values(self) -> np.ndarray:
        """int64[len]: the values (a view, valid until the next `extend`)."""
        return self._data[: self._len]

    def extend(self, values: np.ndarray) -> None:
        end = self._len + len(values)
        if end > len(self._data):
            data = np.empty(max(end, 2 * len(self._data)), np.int64)
            data[: self._len] = self.values
            self._data = data
        self._data[self._len : end] = values
        self._len = end


class SortedMap:
    """A map from integer keys to int64 values, held as sorted arrays: a lookup is a
    ``searchsorted``, an insertion a merge (for maps that take a few keys at a time)."""

    def __init__(self, dtype=np.int64):
        self.keys = np.zeros(0, dtype)
        self.values = np.zeros(0, np.int64)

    def get(self, keys: np.ndarray, default: int) -> np.ndarray:
        """int64[N]: the value of each key, ``default`` where absent."""
        if not len(self.keys):
            return np.full(len(keys), default, np.int64)
        at = np.minimum(np.searchsorted(self.keys, keys), len(self.keys) - 1)
        return np.where(self.keys[at] == keys, self.values[at], default)

    def insert(self, keys: np.ndarray, values: np.ndarray) -> None:
        """Add ``keys`` (sorted, distinct, none present) with their ``values``."""
        at = np.searchsorted(self.keys, keys) + np.arange(len(keys))  # their places in the new arrays
        kept = np.ones(len(self.keys) + len(keys), bool)
        kept[at] = False
        merged_keys, merged_values = np.empty(len(kept), self.keys.dtype), np.empty(len(kept), np.int64)
        merged_keys[at], merged_keys[kept] = keys, self.keys
        merged_values[at], merged_values[kept] = values, self.values
        self.keys, self.values = merged_keys, merged_values


def concatenated_ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """int64[sum(lengths)]: ``starts[i] + arange(lengths[i])`` for every i, concatenated."""
    ends = np.cumsum(lengths)
    return np.arange(int(ends[-1]) if len(ends) else 0) - np.repeat(ends - lengths - starts, lengths)


def balanced_slices(counts: np.ndarray, size: int) -> list[slice]:
    """Consecutive slices of ``counts`` (int[n]) that each sum to about ``size`` (a slice where
    the running sum passes a multiple of ``size`` ends there)."""
    groups = np.cumsum(counts) // size
    if not len(groups) or not groups[-1]:
        return [slice(0, len(counts))]
    bounds = [0, *(np.flatnonzero(np.diff(groups)) + 1).tolist(), len(counts)]
    return [slice(a, b) for a, b in itertools.pairwise(bounds)]


def padded_groups(keys: np.ndarray, values: np.ndarray, num_keys: int, *, fill: int = -1, width: int | None = None) -> np.ndarray:
    """int32[num_keys, P]: the values of each key (input sorted by key), padded with ``fill`` to
    ``width`` (default: the largest group, at least 1)."""
    counts = np.bincount(keys, minlength=num_keys)
    out = np.full((num_keys, width if width is not None else max(1, int(counts.max(initial=0)))), fill, np.int32)
    rank = concatenated_ranges(np.zeros(num_keys, np.int64), counts)
    out[keys, rank] = values
    return out


def stack_padded(rows, fill, dtype, width: int | None = None) -> np.ndarray:
    """dtype[len(rows), width]: 1-D sequences stacked as rows, padded with ``fill`` to ``width``
    (default: the longest row, at least 1)."""
    width = width if width is not None else max(1, max(map(len, rows), default=1))
    out = np.full((len(rows), width), fill, dtype)
    for i, row in enumerate(rows):
        out[i, : len(row)] = row
    return out


def pack_bits(bits: np.ndarray) -> np.ndarray:
    """uint32[..., ceil(V / 32)] from bool[..., V]: bit j of word i is entry 32 * i + j (the
    packed mask format)."""
    if bits.shape[-1] % 32:
        padded = np.zeros(bits.shape[:-1] + (32 * -(-bits.shape[-1] // 32),), bool)
        padded[..., : bits.shape[-1]] = bits
        bits = padded
    return np.packbits(bits, axis=-1, bitorder="little").view("<u4").astype(np.uint32, copy=False)


@functools.lru_cache(maxsize=64)
def hash_multipliers(num_states: int) -> np.ndarray:
    """uint64[2, num_states]: odd random multipliers of two independent 64-bit column hashes
    (cached, read-only)."""
    multipliers = np.random.default_rng(0).integers(1, 2**63, size=(2, num_states), dtype=np.uint64) | np.uint64(1)
    multipliers.setflags(write=False)
    return multipliers
