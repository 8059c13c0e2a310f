"""Byte-level automata: a Thompson NFA builder, subset construction and DFA minimisation.

Everything here is host code (Python + numpy). A `ByteDFA` is complete over the 256 byte values
and keeps one dead state, number 0, that every non-co-accessible state collapses into, so "the
prefix can still be completed" is simply ``state != 0``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import numpy as np

from ananke_jax._src.compile import utf8
from ananke_jax._src.errors import GrammarError

DEAD = 0
# A guard against regexes like `(a{1000}){1000}` that would exhaust memory, not a design limit.
MAX_NFA_STATES = 2_000_000
MAX_DFA_STATES = 200_000


@dataclasses.dataclass(frozen=True)
class Fragment:
    """A piece of NFA with one entry and one exit state."""

    start: int
    end: int


class NFABuilder:
    """Builds a byte NFA with epsilon moves, fragment by fragment (Thompson's construction)."""

    def __init__(self):
        self.edges: list[list[tuple[int, int, int]]] = []  # state -> [(lo, hi, target)]
        self.epsilons: list[list[int]] = []

    def state(self) -> int:
        if len(self.edges) >= MAX_NFA_STATES:
            raise GrammarError(f"pattern too large: more than {MAX_NFA_STATES} NFA states")
        self.edges.append([])
        self.epsilons.append([])
        return len(self.edges) - 1

    def empty(self) -> Fragment:
        s = self.state()
        return Fragment(s, s)

    def byte_ranges(self, sequences: Sequence[utf8.ByteRangeSequence]) -> Fragment:
        """One fragment matching any of the byte-range sequences (the UTF-8 of a class)."""
        start, end = self.state(), self.state()
        for seq in sequences:
            src = start
            for i, (lo, hi) in enumerate(seq):
                dst = end if i == len(seq) - 1 else self.state()
                self.edges[src].append((lo, hi, dst))
                src = dst
        return Fragment(start, end)

    def code_points(self, ranges: Sequence[tuple[int, int]]) -> Fragment:
        """Match one code point in ``ranges`` (inclusive pairs), as its UTF-8 bytes."""
        seqs = [s for lo, hi in utf8.normalise(ranges) for s in utf8.utf8_sequences(lo, hi)]
        return self.byte_ranges(seqs)

    def literal(self, data: bytes) -> Fragment:
        return self.concat([self.byte_ranges([((b, b),)]) for b in data])

    def concat(self, parts: Sequence[Fragment]) -> Fragment:
        if not parts:
            return self.empty()
        for a, b in zip(parts, parts[1:]):
            self.epsilons[a.end].append(b.start)
        return Fragment(parts[0].start, parts[-1].end)

    def alternation(self, parts: Sequence[Fragment]) -> Fragment:
        start, end = self.state(), self.state()
        for p in parts:
            self.epsilons[start].append(p.start)
            self.epsilons[p.end].append(end)
        return Fragment(start, end)

    def repeat(self, build: Callable[[], Fragment], lo: int, hi: int | None) -> Fragment:
        """``x{lo,hi}`` (``hi=None``: unbounded); ``build`` makes a fresh copy of ``x``."""
        parts = [build() for _ in range(lo)]
        if hi is None:
            loop = build()
            hub = self.state()
            self.epsilons[hub].append(loop.start)
            self.epsilons[loop.end].append(hub)
            parts.append(Fragment(hub, hub))
        else:
            end = self.state()
            optional = []
            for _ in range(hi - lo):
                frag = build()
                self.epsilons[frag.start].append(end)
                optional.append(frag)
            parts.append(Fragment(*_chain(self, optional, end)))
        return self.concat(parts)


def _chain(builder: NFABuilder, optional: list[Fragment], end: int) -> tuple[int, int]:
    """Chain optional copies so that each may stop early: a? (a? (a? ...))."""
    if not optional:
        return end, end
    for a, b in zip(optional, optional[1:]):
        builder.epsilons[a.end].append(b.start)
    builder.epsilons[optional[-1].end].append(end)
    return optional[0].start, end


@dataclasses.dataclass(frozen=True)
class ByteDFA:
    """A complete deterministic automaton over bytes.

    Attributes:
      transitions: int32[S, 256], next state per byte; state 0 is the dead state.
      accepting: bool[S].
      start: the start state (0 when the language is empty).
    """

    transitions: np.ndarray
    accepting: np.ndarray
    start: int

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    def walk(self, state: int, data: bytes) -> int:
        """Run ``data`` from ``state``; the slow reference the token tables are checked against."""
        for b in data:
            state = int(self.transitions[state, b])
        return state


def determinise(builder: NFABuilder, fragment: Fragment) -> ByteDFA:
    """Subset construction over byte classes, then minimisation."""
    boundaries = sorted({0, 256} | {x for es in builder.edges for lo, hi, _ in es for x in (lo, hi + 1)})
    byte_class = np.zeros(256, np.int32)
    for i, (a, b) in enumerate(zip(boundaries, boundaries[1:])):
        byte_class[a:b] = i
    num_classes = len(boundaries) - 1
    representatives = boundaries[:-1]

    def closure(states: frozenset[int]) -> frozenset[int]:
        seen = set(states)
        stack = list(states)
        while stack:
            for t in builder.epsilons[stack.pop()]:
                if t not in seen:
                    seen.add(t)
                    stack.append(t)
        return frozenset(seen)

    def move(states: frozenset[int], byte: int) -> frozenset[int]:
        return frozenset(t for s in states for lo, hi, t in builder.edges[s] if lo <= byte <= hi)

    start = closure(frozenset([fragment.start]))
    ids: dict[frozenset[int], int] = {frozenset(): DEAD, start: 1}
    order = [frozenset(), start]
    rows: list[list[int]] = [[DEAD] * num_classes]
    i = 1
    while i < len(order):
        current = order[i]
        row = []
        for rep in representatives:
            nxt = move(current, rep)
            if nxt:
                nxt = closure(nxt)
            if nxt not in ids:
                if len(order) >= MAX_DFA_STATES:
                    raise GrammarError(f"pattern too large: more than {MAX_DFA_STATES} DFA states")
                ids[nxt] = len(order)
                order.append(nxt)
            row.append(ids[nxt])
        rows.append(row)
        i += 1
    class_table = np.asarray(rows, np.int32)
    accepting = np.array([fragment.end in s for s in order])
    return minimise(class_table, accepting, start=1, byte_class=byte_class)


def minimise(class_table: np.ndarray, accepting: np.ndarray, *, start: int, byte_class: np.ndarray) -> ByteDFA:
    """Moore partition refinement; states that cannot reach acceptance merge into state 0.

    Args:
      class_table: int32[S, C] transitions per byte class, state 0 dead.
      accepting: bool[S].
      start: start state.
      byte_class: int32[256], the class of each byte.
    """
    live = _co_accessible(class_table, accepting)
    # Start from {dead, live-rejecting, live-accepting}; dead-equivalent states are exactly the
    # non-co-accessible ones, so block 0 is the dead block from the first round on.
    block = row_groups(np.where(live, np.where(accepting, 2, 1), 0)[:, None])
    num_blocks = int(block.max()) + 1
    while True:
        signature = np.concatenate([block[:, None], block[class_table]], axis=1)
        # The dead block stays 0: groups are numbered in row order and its row is all zeros.
        new_block = row_groups(signature)
        count = int(new_block.max()) + 1
        if count == num_blocks:
            break
        block, num_blocks = new_block, count
    block = block.astype(np.int32)
    reps = np.zeros(num_blocks, np.int64)
    reps[block] = np.arange(len(block))
    table = block[class_table[reps]]
    transitions = table[:, byte_class]
    dfa_accepting = np.zeros(num_blocks, bool)
    dfa_accepting[block] = accepting
    return ByteDFA(transitions.astype(np.int32), dfa_accepting, int(block[start]))


def row_groups(rows: np.ndarray) -> np.ndarray:
    """int64[N]: equal rows of ``rows`` [N, K] get equal ids, numbered in lexicographic row order.

    Exact, and much faster than ``np.unique(axis=0)`` (a lexsort over the columns).
    """
    if rows.shape[1] == 0:
        return np.zeros(len(rows), np.int64)
    order = np.lexsort(rows.T[::-1])
    ordered = rows[order]
    starts = np.concatenate([[True], (ordered[1:] != ordered[:-1]).any(axis=1)])
    ids = np.empty(len(rows), np.int64)
    ids[order] = np.cumsum(starts) - 1
    return ids


def _co_accessible(class_table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """bool[S]: states from which an accepting state is reachable."""
    live = accepting.copy()
    while True:
        grown = live | live[class_table].any(axis=1)
        if (grown == live).all():
            return live
        live = grown
