"""The outcomes of a vocabulary's strings from lexer states: a breadth-first walk of the strings'
prefix tree through the lexer, cutting terminals where they end (numpy, host).

From each lexer state, a string's bytes may complete terminals on the way; since the lexer has
no priorities, every place where a terminal ends may be a cut or not. A string's *outcome* is one
way through: the LR columns it completes (ignored terminals left out) and the lexer state after
its last byte. The walk steps a group of source states at once (`_source_groups`), the groups
apart. A trie node's *function* is its set of rows (source state, lexer state, columns so far);
nodes with equal functions act alike below them, so the walk steps each distinct function once
per label, not each node, and once in the whole walk, not once per level (most nodes share a few
functions: the strings inside a string literal, a number, whitespace; below the first few levels
almost every step was taken above).
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np

from ananke_jax._src.compile.arrays import (
    GrownArray,
    SortedMap,
    balanced_slices,
    concatenated_ranges,
    padded_groups,
    run_starts,
    sorted_unique,
    unique_inverse,
)
from ananke_jax._src.compile.automaton import DEAD, row_groups
from ananke_jax._src.compile.budget import check_time
from ananke_jax._src.compile.lark_lexer import NO_CUT
from ananke_jax._src.compile.lexer import Lexer
from ananke_jax._src.compile.outcome_trie import Paths
from ananke_jax._src.compile.token_trie import TokenTrie, classes_of_hashes, distinct_rows
from ananke_jax._src.errors import GrammarError

GROUP_SOURCES = 512  # the source states of a walk, at least, where a lexer has more
MAX_FRONTIER = 20_000_000  # the most rows of a level before its source states are walked in halves
CHUNK_ROWS = 1 << 20  # rows stepped at once: the time between deadline checks
_SORT_SECONDS_PER_ROW = 5e-8  # a level's sort, foreseen at the deadline check before it
_NAMED_SPLITS = 1000  # the longest splits whose terminals a too ambiguous lexer's refusal names
_SEEDS = (0x9E3779B97F4A7C15, 0xD1B54A32D192ED03)  # of the two hashes of a function's rows


@dataclasses.dataclass(frozen=True)
class Cuts:
    """Where `walk_outcomes` may cut a terminal, and how lexing goes on after the cut.

    Attributes:
      columns: int32[Q, E], the LR columns a cut in each lexer state may emit (-1: an ignored
        terminal), padded with ``NO_CUT``.
      follow: bool[T, T], LR column b may come right after a.
      may_start: bool[T + 1, Q], after LR column a (or none), lexer state p may still become a
        terminal that can follow.
      start_after: int[T + 1], the lexer start after LR column a (at a + 1; at 0: no terminal
        yet, or an ignored one); or else
      targets: int[Q, E, C], the lexer state after cut e from each state before each label
        (``lexer="lark"``, `lark_lexer.ContextualLexing`).
    """

    columns: np.ndarray
    follow: np.ndarray
    may_start: np.ndarray
    start_after: np.ndarray | None = None
    targets: np.ndarray | None = None


def context_free_cuts(lexer: Lexer, lr_column: np.ndarray, follow: np.ndarray, start_after: np.ndarray) -> Cuts:
    """The cuts of the context-free reading: wherever a terminal ends, pruned by ``follow``."""
    end_terminals = padded_groups(*np.nonzero(lexer.ends), lexer.num_states)
    columns = np.where(end_terminals >= 0, lr_column[end_terminals], NO_CUT).astype(np.int32)
    # A start that begins every terminal needs this pruning.
    follow_lexer = np.where(lr_column >= 0, follow[:, np.maximum(lr_column, 0)], True)
    # Whether a terminal that may follow is alive in each state: a product of 0/1 matrices (the
    # boolean [T, Q, terminals] array it replaces took gigabytes on large lexers).
    following_alive = follow_lexer.astype(np.float32) @ lexer.alive.T.astype(np.float32) > 0
    may_start = np.concatenate([np.ones((1, lexer.num_states), bool), following_alive])
    return Cuts(columns, follow, may_start, start_after=start_after)


@dataclasses.dataclass(frozen=True)
class WalkedOutcomes:
    """The outcomes of a trie's strings from some lexer states. Strings whose outcomes agree from
    every source share a *column*.

    Attributes:
      string_column: int64[I], the column of each string id (the trie's ``token_ids``; -1: dead
        from every source, or no string).
      num_columns: the number of columns.
      q, column, outcome: int64[X] each, the distinct (source state, column, outcome) triples,
        those of a (source, column) pair together.
      terminals: int32[O, M], the LR columns each outcome completes (padded with -1);
        lengths: int32[O], their count; lexer_after: int32[O], the lexer state after it.
    """

    string_column: np.ndarray
    num_columns: int
    q: np.ndarray
    column: np.ndarray
    outcome: np.ndarray
    terminals: np.ndarray
    lengths: np.ndarray
    lexer_after: np.ndarray


def walk_outcomes(
    lexer: Lexer, transitions: np.ndarray, trie: TokenTrie, cuts: Cuts, sources: np.ndarray, names: tuple[str, ...]
) -> WalkedOutcomes:
    """All outcomes of every (lexer state in ``sources``, string of ``trie``), by a breadth-first
    walk of the trie (over the labels of ``transitions``: byte classes, or bytes).

    Cuts that put two terminals next to each other that never follow one another in the
    grammar (``cuts.follow``) are pruned: no parse could take them, and without the pruning,
    runs of identifier characters would split in exponentially many ways. After a cut the lexer
    goes on from a start (`Cuts`) that begins only the terminals that may follow.

    Raises:
      GrammarError: the strings split into too many terminal sequences (``names``, the LR
        columns' terminals, name those of the longest).
    """
    string_at = np.full(trie.num_nodes, -1, np.int64)
    string_at[trie.token_nodes] = trie.token_ids
    num_ids = int(trie.token_ids.max(initial=-1)) + 1
    start_rows = None if cuts.start_after is None else transitions[cuts.start_after]  # [T + 1, C]
    sequences = Paths(len(cuts.follow))  # the LR columns an outcome completes so far
    alphabet = transitions.shape[1]
    may_cut = (cuts.columns != NO_CUT).any(axis=1)  # bool[Q]: a terminal ends in the lexer state
    follows = np.ones((len(cuts.follow) + 1,) * 2, bool)  # `Cuts.follow` from LR column a - 1 to b - 1; -1: none
    follows[1:, 1:] = cuts.follow

    # Rows (source state, lexer state, sequence) packed into int64 keys, kept function by function,
    # each function's sorted (`_Functions`). While a level is stepped the top field is a step (a
    # function and a label); at the ends, a column.
    q_bits = max(1, (lexer.num_states - 1).bit_length())
    # (the top field holds a new step of one level, or a column: at most a level's nodes or the strings)
    top_shift = 63 - max(1, max([num_ids, *map(len, trie.parents)]).bit_length())
    q_shift = top_shift - q_bits
    lex_shift = q_shift - q_bits  # the sequence id takes the low bits
    state_mask, seq_mask = (1 << q_bits) - 1, (1 << lex_shift) - 1
    row_mask = (1 << top_shift) - 1

    def step(rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, label: np.ndarray) -> np.ndarray:
        """The sorted rows of each step s (``label[s]`` read by ``rows[lo[s] : hi[s]]``)."""
        level = []
        for part in balanced_slices(hi - lo, CHUNK_ROWS):  # a deadline check per slice of a level's rows
            check_time()
            counts = (hi - lo)[part]
            pick = concatenated_ranges(lo[part], counts)
            top = np.repeat(np.arange(len(label))[part] << top_shift, counts)
            read, row = np.repeat(label[part], counts), rows[pick]
            lex = (row >> lex_shift) & state_mask
            # Read on inside the current terminal...
            cont = transitions[lex, read]
            alive = np.flatnonzero(cont != DEAD)
            kept = row[alive] & ((state_mask << q_shift) | seq_mask)  # source state and sequence
            inside = top[alive] | kept | (cont[alive].astype(np.int64) << lex_shift)
            # ...or cut after a terminal that ends here and start the next one with this byte,
            # where the grammar lets the next terminal follow the one just cut.
            if cuts.targets is None:
                ending = np.flatnonzero(may_cut[lex])
                pair, slot = np.nonzero(cuts.columns[lex[ending]] != NO_CUT)
                pair = ending[pair]
            else:  # most cuts of a longest-match lexer are not allowed: only where a target is
                pair, slot = np.nonzero(cuts.targets[lex, :, read] != DEAD)
            # -1: an ignored terminal, which completes none (NO_CUT, -2, is never picked: `lark_lexer` makes its targets DEAD)
            column = cuts.columns[lex[pair], slot]
            seq = row[pair] & seq_mask
            last = sequences.column[seq]
            # (after an ignored terminal, the start of no terminal: the one cut before excludes nothing more)
            cut = start_rows[column + 1, read[pair]] if cuts.targets is None else cuts.targets[lex[pair], slot, read[pair]]
            fits = (cut != DEAD) & follows[last + 1, column + 1] & cuts.may_start[np.where(column >= 0, column, last) + 1, cut]
            fits = np.flatnonzero(fits)
            pair, column, cut, seq = pair[fits], column[fits], cut[fits], seq[fits]
            if (completes := column >= 0).any():  # ignored terminals leave the sequence as it is
                seq[completes] = sequences.child(seq[completes], column[completes])
            if len(sequences) > seq_mask:
                raise _too_ambiguous(sequences, names)
            level += [inside, top[pair] | (row[pair] & (state_mask << q_shift)) | (cut.astype(np.int64) << lex_shift) | seq]
        keys = np.concatenate(level) if level else np.zeros(0, np.int64)
        check_time(ahead=_SORT_SECONDS_PER_ROW * len(keys))
        if len(keys) > MAX_FRONTIER:
            raise _FrontierOverflow
        return sorted_unique(keys)

    def walk_from(live: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The column of each string id and the rows that end strings, walked from the states
        ``live``; raises `_FrontierOverflow` when a level, or the functions kept, would hold
        over `MAX_FRONTIER` rows."""
        functions = _Functions((live << q_shift) | (live << lex_shift), alphabet)  # the root's
        node_function = np.zeros(1, np.int64)  # of the previous level's nodes (-1: dead)
        string_function = np.full(num_ids, -1, np.int64)
        first, offset = 0, 1  # the ids of the previous level's first node and of this level's
        for parents, labels in zip(trie.parents, trie.labels):
            function_of_parent = node_function[parents - first]
            child = np.flatnonzero(function_of_parent >= 0)
            if not len(child):
                break
            pairs = function_of_parent[child] * alphabet + labels[child]
            after = functions.stepped(pairs)
            if (new := after == _UNKNOWN).any():  # steps not taken at an earlier level
                steps, step_of_new = unique_inverse(pairs[new])
                lo, hi = functions.bounds(steps // alphabet)
                keys = step(functions.rows.values, lo, hi, steps % alphabet)
                # Steps with equal rows lead to one function.
                starts = np.flatnonzero(run_starts(keys >> top_shift))
                hashes = (
                    np.stack([np.add.reduceat(_mixed(keys & row_mask, seed), starts) for seed in _SEEDS])
                    if len(keys)
                    else np.zeros((2, 0), np.uint64)
                )
                sizes = np.diff(np.append(starts, len(keys)))
                function_of_step = np.full(len(steps), -1, np.int64)  # no rows: dead
                function_of_step[keys[starts] >> top_shift] = functions.found(hashes, keys & row_mask, starts, sizes)
                functions.remember(steps, function_of_step)
                after[new] = function_of_step[step_of_new]
            node_function = np.full(len(parents), -1, np.int64)
            node_function[child] = after
            strings = string_at[offset : offset + len(parents)]
            ending = np.flatnonzero(strings >= 0)
            string_function[strings[ending]] = node_function[ending]
            first, offset = offset, offset + len(parents)
        # A column per function that ends strings.
        ended = string_function >= 0
        used, rank = unique_inverse(string_function[ended])
        string_column = np.full(num_ids, -1, np.int64)
        string_column[ended] = rank
        lo, hi = functions.bounds(used)
        ends = (np.repeat(np.arange(len(used)), hi - lo) << top_shift) | functions.rows.values[concatenated_ranges(lo, hi - lo)]
        return string_column, ends

    # Sources are walked apart from one another, in groups (`_source_groups`); a walk whose
    # frontier is too large is split in halves, and only one from a single state is refused (its
    # strings split too many ways).
    parts, pending = [], _source_groups(lexer, np.unique(sources).astype(np.int64))
    while pending:
        part = pending.pop()
        try:
            parts.append(walk_from(part))
        except _FrontierOverflow:
            if len(part) == 1:
                raise _too_ambiguous(sequences, names) from None
            pending += [part[len(part) // 2 :], part[: len(part) // 2]]
    string_column, rows = parts[0] if len(parts) == 1 else _merged_parts(parts, top_shift)
    check_time(ahead=_SORT_SECONDS_PER_ROW * len(rows))  # the steps below sort and search every row

    # An outcome is a (terminal sequence, final lexer state) pair, numbered in the order of
    # their columns (not of the sequences' ids, which depend on the order of the walks).
    pairs = (rows & seq_mask) * lexer.num_states + ((rows >> lex_shift) & state_mask)
    unique_pairs = sorted_unique(pairs)
    check_time()
    seqs, lexer_after = unique_pairs // lexer.num_states, unique_pairs % lexer.num_states
    terminals, lengths = _materialise(sequences.parent, sequences.column, seqs)
    order = np.lexsort([lexer_after, *terminals.T[::-1]])
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    return WalkedOutcomes(
        string_column=string_column,
        num_columns=int(string_column.max(initial=-1)) + 1,
        q=(rows >> q_shift) & state_mask,
        column=rows >> top_shift,
        outcome=rank[np.searchsorted(unique_pairs, pairs)],
        terminals=terminals[order],
        lengths=lengths[order],
        lexer_after=lexer_after[order].astype(np.int32),
    )


def _source_groups(lexer: Lexer, sources: np.ndarray) -> list[np.ndarray]:
    """``sources`` (int64[N], sorted) in groups of `GROUP_SOURCES` states or more, those alive for
    the same terminals together, last to be walked first (one group when N is at most
    `GROUP_SOURCES`).

    Two trie nodes share a function only where they act alike from every source walked with
    them, so sources inside different terminals, walked together, share few: on a lexer of 28k
    states (a schema's patterns), the walk in groups stepped 51M rows instead of 117M, in about
    a third of the time."""
    if len(sources) <= GROUP_SOURCES:
        return [sources]
    kind = row_groups(lexer.alive[sources])
    order = np.argsort(kind, kind="stable")
    bounds = [0]
    for end in (np.flatnonzero(np.diff(kind[order])) + 1).tolist():
        if end - bounds[-1] >= GROUP_SOURCES and len(order) - end >= GROUP_SOURCES:
            bounds.append(end)
    bounds.append(len(order))
    return [np.sort(sources[order[a:b]]) for a, b in itertools.pairwise(bounds)][::-1]


_UNKNOWN = -2  # `_Functions.stepped` of a step not taken yet
_DENSE_STEPS = 1 << 22  # the most (function, label) entries of a walk's dense table of steps (32 MB, twice that as it grows)


class _Functions:
    """The distinct functions of one walk, numbered as found, each a sorted run of ``rows``,
    and the steps between them taken so far: a (function, label) step is taken once, at
    whatever level it first comes (deep in the trie, almost every step was taken above).

    The steps taken are a dense table over every (function, label) while it has at most
    `_DENSE_STEPS` entries (a lookup per trie node and level is then a gather, not a search),
    then a `SortedMap`."""

    def __init__(self, root_rows: np.ndarray, alphabet: int):
        self.rows = GrownArray(root_rows)
        self._start, self._size = GrownArray([0]), GrownArray([len(root_rows)])
        self._by_hash, self._check = SortedMap(np.uint64), GrownArray([0])  # by a function's first hash; its second
        # Of each step (function * alphabet + label): the function after it (-1: dead; `_UNKNOWN`: not taken).
        self._alphabet, self._dense, self._sparse = alphabet, GrownArray(np.full(alphabet, _UNKNOWN)), None

    def bounds(self, functions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The rows of ``functions`` (int64[N]): ``rows[lo[i] : hi[i]]``."""
        lo = self._start.values[functions]
        return lo, lo + self._size.values[functions]

    def stepped(self, steps: np.ndarray) -> np.ndarray:
        """int64[N]: the function after each step (-1: dead; `_UNKNOWN`: not taken yet)."""
        return self._dense.values[steps] if self._sparse is None else self._sparse.get(steps, _UNKNOWN)

    def remember(self, steps: np.ndarray, after: np.ndarray) -> None:
        """Keep the function after each of ``steps`` (sorted, none taken before)."""
        if self._sparse is None:
            self._dense.values[steps] = after
        else:
            self._sparse.insert(steps, after)

    def found(self, hashes: np.ndarray, rows: np.ndarray, starts: np.ndarray, sizes: np.ndarray) -> np.ndarray:
        """int64[N]: the function of each of N row sets, by their hashes (uint64[2, N]); new
        functions are kept (set i: ``rows[starts[i] : starts[i] + sizes[i]]``).

        Raises:
          _FrontierOverflow: the functions kept would hold over `MAX_FRONTIER` rows.
        """
        level_class, representative = classes_of_hashes(hashes)
        key, check = hashes[0][representative], hashes[1][representative].astype(np.int64)
        listed = self._by_hash.get(key, -1)
        ids = listed.copy()
        known = (ids >= 0) & (self._check.values[np.maximum(ids, 0)] == check)
        new = representative[~known]
        ids[~known] = len(self._size) + np.arange(len(new))
        if len(self.rows) + sizes[new].sum() > MAX_FRONTIER:
            raise _FrontierOverflow
        self._start.extend(len(self.rows) + np.cumsum(sizes[new]) - sizes[new])
        self._size.extend(sizes[new])
        self.rows.extend(rows[concatenated_ranges(starts[new], sizes[new])])
        self._check.extend(check[~known])
        self._steps_for(len(new))
        unlisted = listed < 0  # (a new function whose first hash another has is not listed)
        self._by_hash.insert(key[unlisted], ids[unlisted])
        return ids[level_class]

    def _steps_for(self, count: int) -> None:
        """Room in the dense step table for the steps of ``count`` new functions, or the table
        moved into a `SortedMap` once it would pass `_DENSE_STEPS` entries."""
        if self._sparse is not None:
            return
        if len(self._size) * self._alphabet <= _DENSE_STEPS:
            self._dense.extend(np.full(count * self._alphabet, _UNKNOWN))
            return
        taken = np.flatnonzero(self._dense.values != _UNKNOWN)
        self._sparse = SortedMap()
        self._sparse.insert(taken, self._dense.values[taken])
        self._dense = None


def _mixed(values: np.ndarray, seed: int) -> np.ndarray:
    """uint64[N]: a 64-bit mix (splitmix64's finaliser) of each value, seeded; summed over a
    set, it hashes the set."""
    z = values.astype(np.uint64) + np.uint64(seed)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _merged_parts(parts: list[tuple[np.ndarray, np.ndarray]], top_shift: int) -> tuple[np.ndarray, np.ndarray]:
    """One walk's (string columns, end rows) from the walks of parts of its sources: a column
    per distinct tuple of the parts' columns, holding their rows."""
    columns = np.stack([p[0] for p in parts], axis=1)
    inverse, representative = distinct_rows(columns)  # hashed: exact unless two 64-bit hashes collide
    distinct = columns[representative]
    live = ~(distinct == -1).all(axis=1)
    column = np.where(live, np.cumsum(live) - 1, -1)
    rows = []
    for (_, ends), part_column in zip(parts, distinct[live].T):
        check_time()
        at = ends >> top_shift
        lo, hi = np.searchsorted(at, part_column), np.searchsorted(at, part_column, side="right")
        picked = ends[concatenated_ranges(lo, hi - lo)] & ((1 << top_shift) - 1)
        rows.append((np.repeat(np.arange(len(part_column)), hi - lo) << top_shift) | picked)
    merged = np.concatenate(rows)
    check_time(ahead=_SORT_SECONDS_PER_ROW * len(merged))
    return column[inverse.reshape(-1)], sorted_unique(merged)


class _FrontierOverflow(Exception):
    """A level of the outcome walk holds more than `MAX_FRONTIER` rows."""


def _too_ambiguous(sequences: Paths, names: tuple[str, ...]) -> GrammarError:
    """The refusal of a lexer whose strings split in too many ways, naming the terminals of the
    longest splits found (they overlap and may follow one another with nothing between)."""

    def spelled(path: int) -> list[str]:
        out = []
        while path:
            out.append(names[sequences.column[path]])
            path = sequences.parent[path]
        return out[::-1]

    depth = sequences.depth
    longest = [spelled(int(p)) for p in np.flatnonzero(depth == depth.max())[:_NAMED_SPLITS]]
    overlapping = sorted({name for split in longest for name in split})
    return GrammarError(
        f"the grammar's lexer is too ambiguous for this vocabulary: tokens read as {len(sequences):,} different terminal "
        f"sequences, such as {' '.join(longest[0])}. The terminals {', '.join(overlapping)} overlap and may follow one "
        "another with nothing between them: require a separator between them, or make them disjoint"
    )


def _materialise(parent: np.ndarray, column: np.ndarray, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int32[O, M] columns of the interned sequences (padded -1) and int32[O] lengths."""
    reversed_cols, cur = [], seqs.copy()
    while (cur > 0).any():
        reversed_cols.append(np.where(cur > 0, column[cur], -1))
        cur = np.where(cur > 0, parent[cur], 0)
    lengths = (np.stack(reversed_cols, axis=1) >= 0).sum(axis=1) if reversed_cols else np.zeros(len(seqs), np.int64)
    width = max(1, len(reversed_cols))
    out = np.full((len(seqs), width), -1, np.int32)
    for i, cols in enumerate(reversed_cols):  # column i holds the i-th terminal from the end
        rows = np.flatnonzero(cols >= 0)
        out[rows, lengths[rows] - 1 - i] = cols[rows]
    return out, lengths.astype(np.int32)
