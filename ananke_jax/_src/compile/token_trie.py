"""The vocabulary as a prefix tree, walked level by level through an automaton (numpy, host)."""

from __future__ import annotations

import dataclasses
import functools
import itertools

import numpy as np

from ananke_jax._src.compile.arrays import concatenated_ranges, hash_multipliers, run_starts, unique_first_inverse
from ananke_jax._src.vocab import Vocabulary


@dataclasses.dataclass(frozen=True)
class TokenTrie:
    """Strings over a small alphabet (token spellings) as a prefix tree laid out level by level.

    Node 0 is the root; the nodes of depth d are numbered consecutively after those of depth d-1.

    Attributes:
      parents: per depth d >= 1, int32[n_d], the parent node id of each node of that depth.
      labels: per depth d >= 1, uint8[n_d], the symbol on the edge into each node.
      token_ids: int32[N], the id given to each string.
      token_nodes: int32[N], the node each string ends at.
    """

    parents: tuple[np.ndarray, ...]
    labels: tuple[np.ndarray, ...]
    token_ids: np.ndarray
    token_nodes: np.ndarray

    @functools.cached_property
    def child_starts(self) -> tuple[np.ndarray, ...]:
        """Per depth d >= 1, int64[n_{d-1} + 1]: the children of the i-th node of depth d - 1
        are the nodes ``child_starts[i]:child_starts[i + 1]`` of depth d (level-local ids)."""
        starts, first, previous = [], 0, 1  # the first id and the number of nodes of depth d - 1
        for parents in self.parents:
            starts.append(np.searchsorted(parents, np.arange(first, first + previous + 1)))
            first, previous = first + previous, len(parents)
        return tuple(starts)

    @functools.cached_property
    def parent_positions(self) -> tuple[np.ndarray, ...]:
        """Per depth d >= 1, int64[n_d]: the position of each node's parent among the nodes of
        depth d - 1."""
        positions, first, previous = [], 0, 1  # the first id and the number of nodes of depth d - 1
        for parents in self.parents:
            positions.append(parents.astype(np.int64) - first)
            first, previous = first + previous, len(parents)
        return tuple(positions)

    @property
    def num_nodes(self) -> int:
        return 1 + sum(len(p) for p in self.parents)

    @functools.cached_property
    def node_strings(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The strings that end at each node: int64[num_nodes], the first of them (-1: none);
        and the others (tokens spelled alike), int64[D] strings and int64[D] their nodes."""
        order = np.argsort(self.token_nodes, kind="stable")
        first = run_starts(self.token_nodes[order])
        string = np.full(self.num_nodes, -1, np.int64)
        string[self.token_nodes[order[first]]] = order[first]
        others = order[~first]
        return string, others, self.token_nodes[others].astype(np.int64)


@dataclasses.dataclass(frozen=True)
class TokenGroups:
    """A partition of the strings of a vocabulary trie, each group's token ids listed together.

    Attributes:
      of_string: int64[N], the group of each string (in the order of the trie's ``token_ids``).
      of_id: int64[logits_width], the group of each token id (G for the ids of no string:
        special tokens, padding).
      ids: int64[N], the token ids of the strings ordered by group.
      position: int64[N], where each string's token id is in ``ids``.
      offsets: int64[G + 1]; the ids of group g are ``ids[offsets[g]:offsets[g + 1]]``.
    """

    of_string: np.ndarray
    of_id: np.ndarray
    ids: np.ndarray
    position: np.ndarray
    offsets: np.ndarray

    @property
    def num_groups(self) -> int:
        return len(self.offsets) - 1


def token_groups(trie: TokenTrie, of_string: np.ndarray, logits_width: int) -> TokenGroups:
    """The `TokenGroups` of the strings of ``trie``, int64[N] ``of_string`` the group of each."""
    order = np.argsort(of_string, kind="stable")
    position = np.empty(len(order), np.int64)
    position[order] = np.arange(len(order))
    num_groups = int(of_string.max(initial=-1)) + 1
    of_id = np.full(logits_width, num_groups, np.int64)
    of_id[trie.token_ids] = of_string
    offsets = np.concatenate([[0], np.cumsum(np.bincount(of_string, minlength=num_groups))])
    groups = TokenGroups(of_string, of_id, trie.token_ids[order].astype(np.int64), position, offsets)
    for array in vars(groups).values():  # cached per vocabulary: shared, so read-only
        array.setflags(write=False)
    return groups


@functools.lru_cache(maxsize=8)
def ordinary_token_ids(vocab: Vocabulary) -> np.ndarray:
    """int64[N]: ids of the tokens a grammar can allow (non-special, non-empty), cached."""
    special = vocab.special_token_ids
    return np.asarray([i for i, t in enumerate(vocab.tokens) if t and i not in special], np.int64)


@functools.lru_cache(maxsize=8)
def vocabulary_trie(vocab: Vocabulary) -> TokenTrie:
    """The byte prefix tree of the ordinary tokens of ``vocab`` (ids are token ids), cached."""
    ids = ordinary_token_ids(vocab).tolist()
    return build_trie([vocab.tokens[i] for i in ids], ids)


@functools.lru_cache(maxsize=8)
def single_group(vocab: Vocabulary) -> TokenGroups:
    """The ordinary tokens of ``vocab`` as one `TokenGroups` group, cached."""
    trie = vocabulary_trie(vocab)
    return token_groups(trie, np.zeros(len(trie.token_ids), np.int64), vocab.logits_width)


def build_trie(tokens: list[bytes], ids: list[int]) -> TokenTrie:
    """Build the prefix tree of non-empty byte strings ``tokens`` with the given ids."""
    if not tokens:
        return TokenTrie((), (), np.zeros(0, np.int32), np.zeros(0, np.int32))
    order = sorted(range(len(tokens)), key=tokens.__getitem__)
    tokens = [tokens[i] for i in order]
    ids = np.asarray(ids, np.int32)[order]
    lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
    width = int(lengths.max(initial=0))
    padded = np.zeros((len(tokens), width), np.uint8)
    flat = np.frombuffer(b"".join(tokens), np.uint8)
    rows = np.repeat(np.arange(len(tokens)), lengths)
    cols = concatenated_ranges(np.zeros(len(tokens), np.int64), lengths)
    padded[rows, cols] = flat
    # Longest common prefix with the previous token in sorted order.
    differs = padded[1:] != padded[:-1]
    first_diff = np.where(differs.any(axis=1), differs.argmax(axis=1), width)
    lcp = np.concatenate([[0], np.minimum(first_diff, np.minimum(lengths[1:], lengths[:-1]))])[: len(tokens)]

    parents, labels = [], []
    token_nodes = np.zeros(len(tokens), np.int32)
    node_prev = np.zeros(len(tokens), np.int64)  # node of each token at depth d - 1
    next_id = 1
    for d in range(1, width + 1):
        active = np.flatnonzero(lengths >= d)
        # Tokens sharing their first d bytes are contiguous in sorted order: a new node starts
        # wherever the length-d prefix differs from the previous token's.
        new = lcp[active] < d
        starters = active[new]
        parents.append(node_prev[starters].astype(np.int32))
        labels.append(padded[starters, d - 1])
        node_prev[active] = next_id + np.cumsum(new) - 1
        next_id += len(starters)
        ends = active[lengths[active] == d]
        token_nodes[ends] = node_prev[ends]
    return TokenTrie(tuple(parents), tuple(labels), ids, token_nodes)


def walk_tokens(trie: TokenTrie, transitions: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """End state of every string of the trie from each start state.

    Args:
      trie: a `TokenTrie` over an alphabet of A symbols.
      transitions: int32[S, A] transitions (state 0 dead and absorbing).
      starts: int[k] start states.

    Returns:
      int32[k, N], in the order of ``trie.token_ids``.
    """
    flat, alphabet = transitions.reshape(-1), transitions.shape[1]
    node_states = np.empty((len(starts), trie.num_nodes), np.int32)
    node_states[:, 0] = starts
    offset = 1
    for parents, labels in zip(trie.parents, trie.labels):
        n = len(parents)
        node_states[:, offset : offset + n] = flat.take(node_states[:, parents] * alphabet + labels)
        offset += n
    return node_states[:, trie.token_nodes]


def classes_of_hashes(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group items by their column hashes (uint64[2, N], two independent random linear hashes
    of a column; equal classes unless both collide, probability ~2^-120).

    Returns:
      class_of_item: int32[N]; representatives: int64[C], one item per class.
    """
    if hashes.shape[1] < 2:
        return np.zeros(hashes.shape[1], np.int32), np.arange(hashes.shape[1])
    _, representatives, class_of_item = unique_first_inverse(hashes[0])
    if not (hashes[1] == hashes[1][representatives][class_of_item]).all():
        _, representatives, class_of_item = np.unique(hashes.T, axis=0, return_index=True, return_inverse=True)
    return class_of_item.reshape(-1).astype(np.int32), representatives


def distinct_rows(*tables: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct rows of the tables side by side (each [N, ...]): int32[N], each row's
    class, and int64[D], a row of each class. Rows are hashed, as columns are elsewhere (sorting
    thousands of wide rows took seconds)."""
    columns = [x.reshape(len(x), -1) for x in tables]
    bounds = np.cumsum([0, *(x.shape[1] for x in columns)])
    multipliers = hash_multipliers(int(bounds[-1]))
    return classes_of_hashes(sum(multipliers[:, a:b] @ x.T.astype(np.uint64) for x, (a, b) in zip(columns, itertools.pairwise(bounds))))
