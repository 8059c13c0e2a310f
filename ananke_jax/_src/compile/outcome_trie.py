"""Prefix trees of the terminal sequences the device must check from each lexer state (host).

From a lexer state, every outcome of a token feeds a sequence of terminals to the parser and
then needs one of the terminals its final lexer state may still complete to be acceptable
(its *lookahead*). Outcomes share prefixes, and many share lookaheads, so the device checks the
nodes of one prefix tree per lexer state, each node feeding a single terminal to the parser
configuration of its parent. Nodes are numbered breadth first and cut into *chunks* of at most
``lanes`` consecutive nodes whose parents all lie in earlier chunks: a chunk is one vectorised
parser step on the device.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import numpy as np

from ananke_jax._src.compile.arrays import stack_padded
from ananke_jax._src.compile.budget import check_time


@dataclasses.dataclass(frozen=True)
class OutcomeTries:
    """Per lexer state, padded to common shapes (Q states, N nodes, P outcomes).

    Attributes:
      node_parent: int32[Q, N + lanes], the parent node (-1: the configuration itself; also
        the padding, so that a chunk read past the last node stays in bounds).
      node_column: int32[Q, N + lanes], the LR column a node feeds.
      chunk_start: int32[Q, CH], the first node of each chunk; num_chunks: int32[Q];
        node_chunk: int32[Q, N + lanes], the chunk of each node (`NO_CHUNK` past the last).
      outcome_node: int32[Q, P], the node that ends an outcome's terminals (-1: none).
      outcome_lookahead: int32[Q, P, L], the nodes of its lookahead terminals (-1 padding).
      outcome_free: bool[Q, P], its final lexer state needs no lookahead.
      outcome_lexer: int32[Q, P], its final lexer state (-1: padding, not an outcome).
      complete_node: int32[Q, E], nodes whose acceptance means the output is complete (EOS
        allowed), -1 padding.
      lanes: nodes per chunk.
    """

    node_parent: np.ndarray
    node_column: np.ndarray
    chunk_start: np.ndarray
    num_chunks: np.ndarray
    node_chunk: np.ndarray
    outcome_node: np.ndarray
    outcome_lookahead: np.ndarray
    outcome_free: np.ndarray
    outcome_lexer: np.ndarray
    complete_node: np.ndarray
    lanes: int


def outcome_tries(
    state_outcomes: np.ndarray,
    terminals: np.ndarray,
    lengths: np.ndarray,
    lexer_after: np.ndarray,
    pending: np.ndarray,
    pending_free: np.ndarray,
    completions: list[list[list[int]]],
    max_lanes: int = 32,
) -> OutcomeTries:
    """Build the tries.

    Args:
      state_outcomes: int32[Q, P], the outcomes of each lexer state (padded -1).
      terminals, lengths, lexer_after: per outcome, its LR columns (int32[O, M]), how many,
        and its final lexer state.
      pending: bool[Q, T], the LR columns a lexer state may still complete.
      pending_free: bool[Q], lexer states that need no lookahead.
      completions: per lexer state, the LR inputs that would complete the output at EOS.
      max_lanes: the most nodes in one chunk.
    """
    num_states, width = state_outcomes.shape
    sequences = [row[:n] for row, n in zip(terminals.tolist(), lengths.tolist())]
    lookahead_columns = [[] if free else np.flatnonzero(row).tolist() for row, free in zip(pending, pending_free.tolist())]
    after_of = lexer_after.tolist()
    tries = []
    for q in range(num_states):
        check_time()
        building = _Trie()
        outcomes = state_outcomes[q][state_outcomes[q] >= 0].tolist()
        ends = [building.path(sequences[o]) for o in outcomes]
        lookaheads = [[building.node(at, col) for col in lookahead_columns[after_of[o]]] for at, o in zip(ends, outcomes)]
        finals = [building.path(sequence) for sequence in completions[q]]
        tries.append(building.breadth_first(ends, lookaheads, finals))

    widest_level = max(trie.widest_level for trie in tries)
    lanes = int(min(max_lanes, 1 << max(0, widest_level - 1).bit_length()))
    parents = [trie.parents for trie in tries]
    nodes = max(1, max(map(len, parents))) + lanes
    chunk_start, num_chunks, node_chunk = chunk_layout(parents, lanes, nodes)
    looks = max(1, max((len(x) for trie in tries for x in trie.lookaheads), default=1))
    lookahead = np.full((num_states, width, looks), -1, np.int32)
    for q, trie in enumerate(tries):
        for p, row in enumerate(trie.lookaheads):
            lookahead[q, p, : len(row)] = row
    after = [lexer_after[row[row >= 0]] for row in state_outcomes]
    return OutcomeTries(
        node_parent=stack_padded(parents, -1, np.int32, nodes),
        node_column=stack_padded([trie.columns for trie in tries], 0, np.int32, nodes),
        chunk_start=chunk_start,
        num_chunks=num_chunks,
        node_chunk=node_chunk,
        outcome_node=stack_padded([trie.ends for trie in tries], -1, np.int32, width),
        outcome_lookahead=lookahead,
        outcome_free=stack_padded([pending_free[a] for a in after], False, bool, width),
        outcome_lexer=stack_padded(after, -1, np.int32, width),
        complete_node=stack_padded([trie.finals for trie in tries], -1, np.int32),
        lanes=lanes,
    )


class _Trie:
    """A prefix tree of LR columns under construction (node -1 is the root)."""

    def __init__(self):
        self.index: dict[tuple[int, int], int] = {}
        self.parent: list[int] = []
        self.column: list[int] = []
        self.level: list[int] = []

    def node(self, under: int, col: int) -> int:
        """The child of ``under`` by ``col``, made if new."""
        key = (under, col)
        if key not in self.index:
            self.index[key] = len(self.parent)
            self.parent.append(under)
            self.column.append(col)
            self.level.append(self.level[under] + 1 if under >= 0 else 1)
        return self.index[key]

    def path(self, columns: list[int]) -> int:
        """The node of the sequence ``columns`` (-1 when empty), made if new."""
        at = -1
        for col in columns:
            at = self.node(at, col)
        return at

    def breadth_first(self, ends, lookaheads, finals) -> _Numbered:
        """The nodes numbered breadth first, and the given node ids renumbered alike."""
        order = np.argsort(np.asarray(self.level, np.int64), kind="stable")
        rank = np.append(np.argsort(order), -1)  # rank[-1]: the root stays -1
        renumber = lambda ids: rank[np.asarray(ids, np.int64)].tolist() if ids else []
        return _Numbered(
            parents=rank[np.asarray(self.parent, np.int64)[order]] if len(order) else np.zeros(0, np.int64),
            columns=np.asarray(self.column, np.int64)[order],
            ends=renumber(ends),
            lookaheads=[renumber(looks) for looks in lookaheads],
            finals=renumber(finals),
            widest_level=int(np.bincount(self.level).max(initial=1)) if self.level else 1,
        )


class _Numbered(NamedTuple):
    """A lexer state's trie, numbered breadth first (parents before children)."""

    parents: np.ndarray
    columns: np.ndarray
    ends: list[int]
    lookaheads: list[list[int]]
    finals: list[int]
    widest_level: int


NO_CHUNK = np.iinfo(np.int32).max  # the chunk of the padding after a trie's last node


def chunk_layout(parents: list[np.ndarray], lanes: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunks of each lexer state's trie (``parents``: its nodes' parents, breadth first):
    chunk_start int32[Q, CH], num_chunks int32[Q] and node_chunk int32[Q, width]."""
    chunks = [_chunks(p, lanes) for p in parents]
    node_chunk = [np.repeat(np.arange(len(c)), np.diff(c + [len(p)])) for c, p in zip(chunks, parents)]
    return (
        stack_padded(chunks, 0, np.int32),
        np.asarray([len(c) for c in chunks], np.int32),
        stack_padded(node_chunk, NO_CHUNK, np.int32, width),
    )


def _chunks(parents: np.ndarray, lanes: int) -> list[int]:
    """Greedy chunk starts: up to ``lanes`` consecutive nodes, none the parent of another."""
    starts, start = [], 0
    while start < len(parents):
        end = start + 1
        while end < len(parents) and end - start < lanes and parents[end] < start:
            end += 1
        starts.append(start)
        start = end
    return starts
