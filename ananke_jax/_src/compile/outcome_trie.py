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

from ananke_jax._src.compile.arrays import (
    GrownArray,
    concatenated_ranges,
    padded_groups,
    sorted_unique,
    stack_padded,
    unique_first_inverse,
    unique_inverse,
)
from ananke_jax._src.compile.automaton import row_groups
from ananke_jax._src.compile.budget import check_time
from ananke_jax._src.compile.token_trie import distinct_rows

MAX_LANES = 32  # the most simulations a trie chunk steps at once


@dataclasses.dataclass(frozen=True)
class OutcomeTries:
    """Per distinct trie (D of them; Q lexer states, N nodes, P outcomes), padded to common
    shapes; only ``outcome_lexer`` and ``trie_of_state`` are per lexer state.

    Attributes:
      trie_of_state: int64[Q], the trie of each lexer state.
      node_parent: int32[D, N + lanes], the parent node (-1: the configuration itself; also
        the padding, so that a chunk read past the last node stays in bounds).
      node_column: int32[D, N + lanes], the LR column a node feeds.
      chunk_start: int32[D, CH], the first node of each chunk; num_chunks: int32[D];
        node_chunk: int32[D, N + lanes], the chunk of each node (`NO_CHUNK` past the last).
      outcome_node: int32[D, P], the node that ends an outcome's terminals (-1: none).
      outcome_lookahead: int32[D, P, L], the nodes of its lookahead terminals (-1 padding).
      outcome_free: bool[D, P], its final lexer state needs no lookahead.
      outcome_lexer: int32[Q, P], its final lexer state (-1: padding, not an outcome).
      complete_node: int32[D, E], nodes whose acceptance means the output is complete (EOS
        allowed), -1 padding.
      lanes: nodes per chunk.
    """

    trie_of_state: np.ndarray
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


class Paths:
    """Sequences of LR columns, interned: path 0 is empty, path i is path ``parent[i]`` and then
    column ``column[i]``, ``depth[i]`` columns long (int64 arrays, grown in place)."""

    def __init__(self, num_columns: int):
        self.num_columns = num_columns
        self._ids: dict[int, int] = {}  # of paths 1.., by parent * num_columns + column
        self._parent, self._column, self._depth = GrownArray([0]), GrownArray([-1]), GrownArray([0])

    def __len__(self) -> int:
        return len(self._parent)

    parent = property(lambda self: self._parent.values)
    column = property(lambda self: self._column.values)
    depth = property(lambda self: self._depth.values)

    def child(self, paths: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """int64[N]: the paths ``paths`` (int64[N]) each extended by its column (all >= 0)."""
        check_time()
        distinct, inverse = unique_inverse(paths.astype(np.int64) * self.num_columns + columns)
        ids = np.array([self._ids.get(key, -1) for key in distinct.tolist()], np.int64)
        if len(new := np.flatnonzero(ids < 0)):
            ids[new] = len(self) + np.arange(len(new))
            self._ids.update(zip(distinct[new].tolist(), ids[new].tolist()))
            parent = distinct[new] // self.num_columns
            self._depth.extend(self.depth[parent] + 1)
            self._parent.extend(parent)
            self._column.extend(distinct[new] % self.num_columns)
        return ids[inverse]

    def of_rows(self, columns: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """int64[N]: the path of each row of ``columns`` (int[N, M]), its first ``lengths``
        entries; every prefix gets a path too."""
        negated = -np.asarray(lengths)
        order = np.argsort(negated, kind="stable")  # longest first: the rows longer than k are a prefix
        longer = np.searchsorted(negated[order], -np.arange(columns.shape[1]), side="left")
        ordered, paths = columns[order], np.zeros(len(lengths), np.int64)
        for k, n in enumerate(longer.tolist()):
            paths[:n] = self.child(paths[:n], ordered[:n, k])
        out = np.empty_like(paths)
        out[order] = paths
        return out


def outcome_tries(
    state_outcomes: np.ndarray,
    terminals: np.ndarray,
    lengths: np.ndarray,
    lexer_after: np.ndarray,
    pending: np.ndarray,
    pending_free: np.ndarray,
    completions: tuple[np.ndarray, list[list[list[int]]]],
    max_lanes: int = MAX_LANES,
) -> OutcomeTries:
    """Build the tries, one per distinct trie.

    A trie node is a (lexer state, path) pair: the nodes of a state are the paths its outcomes,
    their lookaheads and its completions need, with all their prefixes, numbered breadth first.
    States whose outcomes need the same paths and lookaheads, in the same order, and whose
    completions agree, have equal tries (the states along a length-bounded string): each is
    built once.

    Args:
      state_outcomes: int32[Q, P], the outcomes of each lexer state (padded -1).
      terminals, lengths, lexer_after: per outcome, its LR columns (int32[O, M]), how many,
        and its final lexer state.
      pending: bool[Q, T], the LR columns a lexer state may still complete.
      pending_free: bool[Q], lexer states that need no lookahead.
      completions: int64[Q], the id of each lexer state's completions, and per id the LR
        inputs that would complete the output at EOS.
      max_lanes: the most nodes in one chunk.
    """
    paths = Paths(pending.shape[1])
    outcome_path = paths.of_rows(terminals, lengths)
    # An outcome's part of a trie: its path and the lookahead its final state needs.
    need = row_groups(np.column_stack([pending_free, pending & ~pending_free[:, None]]))
    outcome_key = unique_first_inverse(outcome_path * (int(need.max(initial=0)) + 1) + need[lexer_after])[2]
    completion, inputs = completions
    keys = np.where(state_outcomes >= 0, outcome_key[np.maximum(state_outcomes, 0)] + 1, 0)
    trie_of_state, member = distinct_rows(keys, completion[:, None])
    tries = _tries(
        paths, outcome_path, state_outcomes[member], lexer_after, pending, pending_free, [inputs[c] for c in completion[member]], max_lanes
    )
    after = np.where(state_outcomes >= 0, lexer_after[np.maximum(state_outcomes, 0)], -1).astype(np.int32)
    return OutcomeTries(trie_of_state=trie_of_state.astype(np.int64), outcome_lexer=after, **tries)


def _tries(paths, outcome_path, state_outcomes, lexer_after, pending, pending_free, completions, max_lanes) -> dict[str, np.ndarray]:
    """The `OutcomeTries` tables of the lexer states of ``state_outcomes`` and ``completions``
    (those of `outcome_tries`, less ``outcome_lexer`` and ``trie_of_state``); ``outcome_path``
    the path of each outcome in ``paths``."""
    num_states, width = state_outcomes.shape
    pair_q, pair_p = np.nonzero(state_outcomes >= 0)
    pair_outcome = state_outcomes[pair_q, pair_p]
    pair_after = lexer_after[pair_outcome]
    end_path = outcome_path[pair_outcome]
    look_pair, look_column = np.nonzero(pending[pair_after] & ~pending_free[pair_after][:, None])
    look_path = paths.child(end_path[look_pair], look_column)
    final_q = np.repeat(np.arange(num_states), [len(c) for c in completions])
    final_rows = [row for rows in completions for row in rows]
    final_path = paths.of_rows(stack_padded(final_rows, -1, np.int64), np.array([len(r) for r in final_rows], np.int64))

    # Every (state, path) node with its prefixes, numbered breadth first within its state.
    parent, column, depth = paths.parent, paths.column, paths.depth
    key = lambda q, path: q.astype(np.int64) * len(parent) + path
    keys = sorted_unique(np.concatenate([key(pair_q, end_path), key(pair_q[look_pair], look_path), key(final_q, final_path)]))
    frontier = keys[keys % len(parent) > 0]
    levels = [frontier]
    while len(frontier := frontier[parent[frontier % len(parent)] > 0]):  # one level up each time
        levels.append(frontier := sorted_unique(key(frontier // len(parent), parent[frontier % len(parent)])))
    keys = sorted_unique(np.concatenate(levels))
    node_q, node_path = keys // len(parent), keys % len(parent)
    order = np.lexsort((node_path, depth[node_path], node_q))
    first_of_state = np.searchsorted(node_q[order], np.arange(num_states + 1))
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys)) - first_of_state[node_q[order]]
    rank = np.append(rank, -1)  # read by empty paths past the last key: they are no node
    node = lambda q, path: np.where(path > 0, rank[np.searchsorted(keys, key(q, path))], -1)

    node_row, node_parent = node_q[order], node(node_q, parent[node_path])[order]
    level_sizes = np.bincount(node_q * (int(depth.max()) + 1) + depth[node_path]) if len(keys) else np.ones(1, np.int64)
    lanes = int(min(max_lanes, 1 << max(0, int(level_sizes.max()) - 1).bit_length()))
    nodes = max(1, int(np.diff(first_of_state).max(initial=0))) + lanes
    chunk_start, num_chunks, node_chunk = chunk_layout(np.split(node_parent, first_of_state[1:-1]), lanes, nodes)

    outcome_node = np.full((num_states, width), -1, np.int32)
    outcome_node[pair_q, pair_p] = node(pair_q, end_path)
    look_rank = concatenated_ranges(np.zeros(len(pair_q), np.int64), np.bincount(look_pair, minlength=len(pair_q)))
    lookahead = np.full((num_states, width, max(1, int(look_rank.max(initial=0)) + 1)), -1, np.int32)
    lookahead[pair_q[look_pair], pair_p[look_pair], look_rank] = node(pair_q[look_pair], look_path)
    free = np.zeros((num_states, width), bool)
    free[pair_q, pair_p] = pending_free[pair_after]
    final_node = node(final_q, final_path)
    return dict(
        node_parent=padded_groups(node_row, node_parent, num_states, width=nodes),
        node_column=padded_groups(node_row, column[node_path][order], num_states, fill=0, width=nodes),
        chunk_start=chunk_start,
        num_chunks=num_chunks,
        node_chunk=node_chunk,
        outcome_node=outcome_node,
        outcome_lookahead=lookahead,
        outcome_free=free,
        complete_node=padded_groups(final_q, final_node, num_states),
        lanes=lanes,
    )


NO_CHUNK = np.iinfo(np.int32).max  # the chunk of the padding after a trie's last node


def chunk_layout(parents: list[np.ndarray], lanes: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The chunks of each lexer state's trie (``parents``: its nodes' parents, breadth first):
    chunk_start int32[Q, CH], num_chunks int32[Q] and node_chunk int32[Q, width]; laid out once
    per distinct trie (the states inside a large terminal share a few)."""
    keys = [p.tobytes() for p in parents]
    first: dict[bytes, int] = {}
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    shape_of = {key: j for j, key in enumerate(first)}
    of_state = np.array([shape_of[key] for key in keys], np.int64)
    distinct = [parents[i] for i in first.values()]
    chunks = [_chunks(p, lanes) for p in distinct]
    node_chunk = [np.repeat(np.arange(len(c)), np.diff(c + [len(p)])) for c, p in zip(chunks, distinct)]
    return (
        stack_padded(chunks, 0, np.int32)[of_state],
        np.asarray([len(c) for c in chunks], np.int32)[of_state],
        stack_padded(node_chunk, NO_CHUNK, np.int32, width)[of_state],
    )


def _chunks(parents: np.ndarray, lanes: int) -> list[int]:
    """Greedy chunk starts: up to ``lanes`` consecutive nodes, none the parent of another. A
    chunk from node i ends at the first node whose parent is i or later, which is the least
    first child of the nodes from i on (a node's parent comes before it)."""
    n = len(parents)
    first_child = np.full(n, n, np.int64)
    has_parent = np.flatnonzero(parents >= 0)
    np.minimum.at(first_child, parents[has_parent], has_parent)
    reach = np.minimum.accumulate(first_child[::-1])[::-1]  # the least first child from node i on
    end = np.minimum(np.arange(n) + lanes, reach).tolist()
    starts, start = [], 0
    while start < n:
        starts.append(start)
        start = end[start]
    return starts
