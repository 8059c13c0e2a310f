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

import numpy as np


@dataclasses.dataclass(frozen=True)
class OutcomeTries:
    """Per lexer state, padded to common shapes (Q states, N nodes, P outcomes).

    Attributes:
      node_parent: int32[Q, N + lanes], the parent node (-1: the configuration itself; also
        the padding, so that a chunk read past the last node stays in bounds).
      node_column: int32[Q, N + lanes], the LR column a node feeds.
      chunk_start: int32[Q, CH], the first node of each chunk; num_chunks: int32[Q].
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
    max_lanes: int = 64,
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
    per_state = []
    for q in range(num_states):
        trie = _Trie()
        outcomes = state_outcomes[q][state_outcomes[q] >= 0].tolist()
        ends = [trie.path(sequences[o]) for o in outcomes]
        lookaheads = [[trie.node(at, col) for col in lookahead_columns[after_of[o]]] for at, o in zip(ends, outcomes)]
        finals = [trie.path(sequence) for sequence in completions[q]]
        per_state.append(trie.breadth_first(ends, lookaheads, finals))

    widest_level = max((int(np.bincount(_levels(p)).max()) for p, *_ in per_state if len(p)), default=1)
    most_finals = max(1, max(len(f) for *_, f in per_state))
    lanes = int(min(max_lanes, 1 << max(0, widest_level - 1).bit_length()))
    chunks = [_chunks(p, lanes) for p, *_ in per_state]
    nodes = max(1, max(len(p) for p, *_ in per_state))
    looks = max(1, max((len(x) for *_, ls, _ in per_state for x in ls), default=1))
    out = OutcomeTries(
        node_parent=np.full((num_states, nodes + lanes), -1, np.int32),
        node_column=np.zeros((num_states, nodes + lanes), np.int32),
        chunk_start=np.zeros((num_states, max(1, max(map(len, chunks)))), np.int32),
        num_chunks=np.asarray([len(c) for c in chunks], np.int32),
        outcome_node=np.full((num_states, width), -1, np.int32),
        outcome_lookahead=np.full((num_states, width, looks), -1, np.int32),
        outcome_free=np.zeros((num_states, width), bool),
        outcome_lexer=np.full((num_states, width), -1, np.int32),
        complete_node=np.full((num_states, most_finals), -1, np.int32),
        lanes=lanes,
    )
    for q, (parents, columns, ends, lookaheads, finals) in enumerate(per_state):
        out.complete_node[q, : len(finals)] = finals
        out.node_parent[q, : len(parents)] = parents
        out.node_column[q, : len(columns)] = columns
        out.chunk_start[q, : len(chunks[q])] = chunks[q]
        outcomes = state_outcomes[q][state_outcomes[q] >= 0]
        out.outcome_node[q, : len(ends)] = ends
        for p, looks in enumerate(lookaheads):
            out.outcome_lookahead[q, p, : len(looks)] = looks
        out.outcome_free[q, : len(outcomes)] = pending_free[lexer_after[outcomes]]
        out.outcome_lexer[q, : len(outcomes)] = lexer_after[outcomes]
    return out


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

    def breadth_first(self, ends, lookaheads, finals):
        """(parents, columns) of the nodes numbered breadth first, and the given node ids
        renumbered alike."""
        order = np.argsort(np.asarray(self.level, np.int64), kind="stable")
        rank = np.append(np.argsort(order), -1)  # rank[-1]: the root stays -1
        parents = rank[np.asarray(self.parent, np.int64)[order]] if len(order) else np.zeros(0, np.int64)
        renumber = lambda ids: rank[np.asarray(ids, np.int64)].tolist() if ids else []
        return parents, np.asarray(self.column, np.int64)[order], renumber(ends), [renumber(looks) for looks in lookaheads], renumber(finals)


def _levels(parents: np.ndarray) -> np.ndarray:
    """int64[N]: the depth of each node (breadth-first numbering, parents first)."""
    level = np.zeros(len(parents), np.int64)
    for i, p in enumerate(parents.tolist()):
        level[i] = level[p] + 1 if p >= 0 else 1
    return level


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
