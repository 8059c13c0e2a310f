"""Token alignment: a byte DFA times a vocabulary gives token-level tables (numpy, host).

Tokens are first rewritten as strings of the DFA's byte classes; only the distinct strings are
walked, from every state at once (rows of a numpy array) and through a prefix tree (one gather
per tree level), so shared prefixes are walked once. Tokens whose columns agree in every state
share a *class*; the run-time step is then one mask-row gather and one ``next[state, class]``
gather.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ananke_jax._src.compile.arrays import concatenated_ranges, pack_bits
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, row_groups
from ananke_jax._src.vocab import Vocabulary

# Mask rows are built from (word, class) pairs when they number under 1/_SPARSE_ROWS_FACTOR of
# the tokens, else token by token (the per-pair work costs about that much more).
_SPARSE_ROWS_FACTOR = 4
# Upper bound on the (start state, state) pairs of one level of a trie walk, to bound memory.
_MAX_PAIRS = 1 << 22


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

    @property
    def num_nodes(self) -> int:
        return 1 + sum(len(p) for p in self.parents)


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


def build_trie(tokens: list[bytes], ids: list[int]) -> TokenTrie:
    """Build the prefix tree of non-empty byte strings ``tokens`` with the given ids."""
    order = sorted(range(len(tokens)), key=tokens.__getitem__)
    tokens = [tokens[i] for i in order]
    ids = np.asarray(ids, np.int32)[order] if order else np.zeros(0, np.int32)
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


def live_column_hashes(trie: TokenTrie, transitions: np.ndarray, multipliers: np.ndarray) -> np.ndarray:
    """Random linear hashes of every trie node's column: the state after its string, from each
    start state (a function from states to states).

    The walk goes level by level over the live nodes only, and computes each distinct function
    once: a child's function is its parent's followed by one symbol, so children whose parents
    have equal functions and whose symbols agree share one (all two-letter words inside a free
    string, say). A function is stored as its live (start state, state) pairs.

    Args:
      trie: a `TokenTrie` over the alphabet of ``transitions``.
      transitions: int32[S, A] (state 0 dead and absorbing).
      multipliers: uint64[H, S], one random multiplier per hash and start state.

    Returns:
      uint64[H, trie.num_nodes]: ``sum_s multipliers[:, s] * state_after(s)`` (wrapping; dead
      pairs add 0, so a node dead from every state hashes to 0).
    """
    hashes = np.zeros((len(multipliers), trie.num_nodes), np.uint64)
    pending = [np.arange(1, len(transitions))]
    while pending:
        starts = pending.pop()
        terms = _live_hash_terms(trie, transitions, multipliers, starts)
        if terms is None:  # too many pairs at once: walk each half of the start states alone
            pending += [starts[: len(starts) // 2], starts[len(starts) // 2 :]]
            continue
        for nodes, values in terms:
            hashes[:, nodes] += values
    return hashes


def _live_hash_terms(trie: TokenTrie, transitions: np.ndarray, multipliers: np.ndarray, starts: np.ndarray):
    """The terms of ``live_column_hashes`` from the start states ``starts``, as (nodes,
    uint64[H, n] values) per level; None when a level would hold more than `_MAX_PAIRS` pairs
    (never with one start state: a level has fewer nodes)."""
    flat, alphabet = transitions.reshape(-1), transitions.shape[1]
    terms = []
    # The live nodes of the current level, the function of each (an index into the level's
    # functions), and the functions as blocks of (start state, state) pairs.
    nodes, node_function = np.zeros(1, np.int64), np.zeros(1, np.int64)
    origin, current = starts.astype(np.int64), starts.astype(np.int64)
    function_start, function_length = np.zeros(1, np.int64), np.array([len(starts)])
    offset = 1  # the id of the level's first node
    for parents, labels in zip(trie.parents, trie.labels):
        first_child = np.searchsorted(parents, nodes)
        num_children = np.searchsorted(parents, nodes, side="right") - first_child
        child = concatenated_ranges(first_child, num_children)  # level-local ids, ascending
        step, step_of_child = np.unique(np.repeat(node_function, num_children) * alphabet + labels[child], return_inverse=True)
        parent_function, symbol = step // alphabet, step % alphabet
        if function_length[parent_function].sum() > max(_MAX_PAIRS, len(parents)):
            return None
        # Apply each distinct (function, symbol) step to the function's pairs.
        pair = concatenated_ranges(function_start[parent_function], function_length[parent_function])
        step_of_pair = np.repeat(np.arange(len(step)), function_length[parent_function])
        after = flat[current[pair] * alphabet + symbol[step_of_pair]]
        live = np.flatnonzero(after)
        if not len(live):
            break
        origin, current, step_of_pair = origin[pair[live]], after[live].astype(np.int64), step_of_pair[live]
        pair_start = np.flatnonzero(np.diff(step_of_pair, prepend=-1))
        live_step = step_of_pair[pair_start]
        step_hash = np.add.reduceat(multipliers[:, origin] * current.astype(np.uint64), pair_start, axis=1)
        # Steps with equal results are one function of the new level.
        function_of_live_step, representative = classes_of_hashes(step_hash)
        function_of_step = np.full(len(step), -1, np.int64)
        function_of_step[live_step] = function_of_live_step
        child_function = function_of_step[step_of_child.reshape(-1)]
        alive = child_function >= 0
        nodes, node_function = child[alive] + offset, child_function[alive]
        terms.append((nodes, step_hash[:, representative][:, node_function]))
        lengths = np.diff(pair_start, append=len(step_of_pair))
        kept = concatenated_ranges(pair_start[representative], lengths[representative])
        origin, current = origin[kept], current[kept]
        function_length = lengths[representative]
        function_start = np.cumsum(function_length) - function_length
        offset += len(parents)
    return terms


@dataclasses.dataclass(frozen=True)
class Spelling:
    """The vocabulary's ordinary tokens rewritten over an automaton's byte classes.

    Bytes that act alike in every state form a class, and tokens spelling the same string of
    classes act alike, so only the distinct strings need walking.

    Attributes:
      transitions: int32[S, K], the automaton's transitions per byte class.
      strings: the distinct class strings.
      token_ids: int64[N], the ordinary token ids.
      spelling: int64[N], the index in ``strings`` of each of those tokens.
    """

    transitions: np.ndarray
    strings: list[bytes]
    token_ids: np.ndarray
    spelling: np.ndarray


def spell_tokens(transitions: np.ndarray, vocab: Vocabulary) -> Spelling:
    """Rewrite the ordinary tokens of ``vocab`` over the byte classes of ``transitions`` [S, 256]."""
    byte_class, first_byte = byte_classes(transitions)
    ids, tokens = ordinary_token_ids(vocab), vocab.tokens
    translation = bytes(byte_class.astype(np.uint8))  # at most 256 classes
    index: dict[bytes, int] = {}
    spelling = np.array([index.setdefault(tokens[i].translate(translation), len(index)) for i in ids.tolist()], np.int64)
    return Spelling(transitions[:, first_byte], list(index), ids, spelling)


@dataclasses.dataclass(frozen=True)
class TokenTables:
    """Token-level tables of a regular constraint (numpy; see `CompiledGrammar` for the layout)."""

    mask_rows: np.ndarray  # uint32[R, W]
    row_of_state: np.ndarray  # int32[S]
    class_of_token: np.ndarray  # int32[logits_width]
    next_state: np.ndarray  # int32[S, C]
    accepting: np.ndarray  # bool[S]
    start: int


def token_tables(dfa: ByteDFA, vocab: Vocabulary) -> TokenTables:
    """Align a byte DFA with a vocabulary.

    The states are the DFA's (0 dead) plus one *finished* state, entered by EOS from an accepting
    state, in which only EOS is allowed. Special tokens, empty tokens and padding ids beyond the
    tokenizer lead to the dead state from everywhere, so they are never allowed.

    Tokens whose columns (the state after the token, from every state) agree form a class. The
    columns are hashed by a walk of the vocabulary's prefix tree that follows only live (node,
    state) pairs (`live_column_hashes`); then only one token per class is walked from every state.
    """
    finished = dfa.num_states
    num_states = finished + 1
    accepting = np.append(dfa.accepting, True)
    eos_target = np.where(accepting, finished, DEAD).astype(np.int32)
    transitions = np.vstack([dfa.transitions, np.full((1, dfa.transitions.shape[1]), DEAD, np.int32)])

    trie = vocabulary_trie(vocab)
    multipliers = hash_multipliers(num_states)
    node_hashes = live_column_hashes(trie, transitions, multipliers)
    eos_hash = (multipliers * eos_target.astype(np.uint64)).sum(axis=1)
    # Items: the tokens alive from some state (a column of zeros hashes to 0), EOS, and a token
    # that is never allowed (the class of all other tokens).
    token_hashes = node_hashes[:, trie.token_nodes]
    live = np.flatnonzero(token_hashes[0] | token_hashes[1])
    item_class, representatives = classes_of_hashes(np.column_stack([token_hashes[:, live], eos_hash, np.zeros(len(multipliers), np.uint64)]))
    eos_item, never_item = len(live), len(live) + 1

    # The transition table needs one column per class: walk the representatives alone.
    token_reps = np.flatnonzero(representatives < eos_item)
    rep_ids = trie.token_ids[live[representatives[token_reps]]]
    rep_trie = build_trie([vocab.tokens[i] for i in rep_ids.tolist()], list(range(len(rep_ids))))
    next_state = np.zeros((num_states, len(representatives)), np.int32)
    next_state[:, token_reps[rep_trie.token_ids]] = walk_tokens(rep_trie, transitions, np.arange(num_states))
    next_state[:, np.flatnonzero(representatives == eos_item)] = eos_target[:, None]

    class_of_token = np.full(vocab.logits_width, item_class[never_item], np.int32)
    class_of_token[trie.token_ids[live]] = item_class[:eos_item]
    class_of_token[list(vocab.eos_token_ids)] = item_class[eos_item]

    mask_rows, row_of_state = packed_mask_rows(next_state != DEAD, class_of_token)
    return TokenTables(
        mask_rows=mask_rows,
        row_of_state=row_of_state,
        class_of_token=class_of_token,
        next_state=next_state,
        accepting=accepting,
        start=dfa.start,
    )


def packed_mask_rows(allowed: np.ndarray, class_of_token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicated packed masks from bool[S, C] allowed classes.

    A mask word is the OR of the bits of the (word, class) pairs among its 32 tokens whose class
    is allowed somewhere. When those pairs are few (most tokens in a few classes, the usual case
    for structured output) the rows are built from the pairs alone, else token by token.

    Returns:
      mask_rows uint32[R, ceil(V / 32)] (bit j of word i = token 32 * i + j) and int32[S], the
      row of each state.
    """
    row_of_state = row_groups(allowed)
    num_classes = allowed.shape[1]
    rows = np.zeros((int(row_of_state.max()) + 1, num_classes), bool)
    rows[row_of_state] = allowed
    tokens = np.flatnonzero(rows.any(axis=0)[class_of_token])
    keys = (tokens >> 5) * num_classes + class_of_token[tokens]
    order = np.argsort(keys, kind="stable")
    keys, tokens = keys[order], tokens[order]
    first = np.flatnonzero(np.diff(keys, prepend=-1))  # the start of each (word, class) pair
    if len(first) * _SPARSE_ROWS_FACTOR > len(class_of_token):
        return pack_bits(np.take(rows, class_of_token, axis=1)), row_of_state.astype(np.int32)
    mask_rows = np.zeros((len(rows), -(-len(class_of_token) // 32)), np.uint32)
    if len(first):
        pair_bits = np.bitwise_or.reduceat(np.left_shift(np.uint32(1), (tokens & 31).astype(np.uint32)), first)
        word, pair_class = keys[first] // num_classes, keys[first] % num_classes
        word_first = np.flatnonzero(np.diff(word, prepend=-1))
        terms = np.where(rows[:, pair_class], pair_bits, np.uint32(0))
        mask_rows[:, word[word_first]] = np.bitwise_or.reduceat(terms, word_first, axis=1)
    return mask_rows, row_of_state.astype(np.int32)


def hash_multipliers(num_states: int) -> np.ndarray:
    """uint64[2, num_states]: odd random multipliers of two independent 64-bit column hashes."""
    return np.random.default_rng(0).integers(1, 2**63, size=(2, num_states), dtype=np.uint64) | np.uint64(1)


def classes_of_hashes(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group items by their column hashes (uint64[2, N], two independent random linear hashes
    of a column; equal classes unless both collide, probability ~2^-120).

    Returns:
      class_of_item: int32[N]; representatives: int64[C], one item per class.
    """
    _, representatives, class_of_item = np.unique(hashes[0], return_index=True, return_inverse=True)
    if not (hashes[1] == hashes[1][representatives][class_of_item]).all():
        _, representatives, class_of_item = np.unique(hashes.T, axis=0, return_index=True, return_inverse=True)
    return class_of_item.reshape(-1).astype(np.int32), representatives
