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

from ananke_jax._src.compile.arrays import pack_bits
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, row_groups
from ananke_jax._src.vocab import Vocabulary

# Upper bound on the entries of one (states x trie nodes) block, to bound compile memory.
_BLOCK_ENTRIES = 1 << 23


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
    cols = np.arange(len(flat)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
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
    byte_class = row_groups(transitions.T)
    first_byte = np.zeros(int(byte_class.max()) + 1, np.int64)
    first_byte[byte_class[::-1]] = np.arange(255, -1, -1)
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

    Bytes that act alike in every state form a byte class, and tokens that spell the same string
    of byte classes act alike, so only the distinct class strings are walked (for a pattern like
    ``[^"]{0,200}`` a few thousand instead of the whole vocabulary).
    """
    finished = dfa.num_states
    num_states = finished + 1
    accepting = np.append(dfa.accepting, True)
    eos_target = np.where(accepting, finished, DEAD).astype(np.int32)

    spelled = spell_tokens(dfa.transitions, vocab)
    transitions = np.vstack([spelled.transitions, np.full((1, spelled.transitions.shape[1]), DEAD, np.int32)])
    ids, spelling, strings = spelled.token_ids, spelled.spelling, spelled.strings
    eos_item, never_item = len(strings), len(strings) + 1

    def columns(trie: TokenTrie, states: np.ndarray) -> np.ndarray:
        """int32[k, N + 2]: the state after each of the trie's N strings, EOS and a never-allowed
        token (the last two columns), from each of ``states``."""
        n = len(trie.token_ids)
        out = np.zeros((len(states), n + 2), np.int32)
        out[:, trie.token_ids] = walk_tokens(trie, transitions, states)
        out[:, n] = eos_target[states]
        return out

    trie = build_trie(strings, list(range(len(strings))))
    block = max(1, _BLOCK_ENTRIES // max(trie.num_nodes, len(strings) + 2))
    item_class, representatives = token_classes(lambda states: columns(trie, states), num_states, block)
    # The transition table needs one column per class: walk the representatives alone.
    rep_strings = [strings[r] for r in representatives if r < len(strings)]
    rep_columns = columns(build_trie(rep_strings, list(range(len(rep_strings)))), np.arange(num_states))
    position = np.cumsum(representatives < len(strings)) - 1  # column of each string representative
    position[representatives == eos_item] = len(rep_strings)
    position[representatives == never_item] = len(rep_strings) + 1
    next_state = rep_columns[:, position]

    class_of_token = np.full(vocab.logits_width, item_class[never_item], np.int32)
    class_of_token[ids] = item_class[spelling]
    class_of_token[list(vocab.eos_token_ids)] = item_class[eos_item]

    mask_rows, row_of_state = packed_mask_rows(next_state != DEAD, class_of_token)
    return TokenTables(
        mask_rows=mask_rows,
        row_of_state=row_of_state,
        class_of_token=class_of_token,
        next_state=next_state.astype(np.int32),
        accepting=accepting,
        start=dfa.start,
    )


def packed_mask_rows(allowed: np.ndarray, class_of_token: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicated packed masks from bool[S, C] allowed classes.

    Returns:
      mask_rows uint32[R, ceil(V / 32)] (bit j of word i = token 32 * i + j) and int32[S], the
      row of each state.
    """
    row_of_state = row_groups(allowed)
    unique_rows = np.zeros((int(row_of_state.max()) + 1, allowed.shape[1]), bool)
    unique_rows[row_of_state] = allowed
    return pack_bits(unique_rows[:, class_of_token]), row_of_state.astype(np.int32)


def token_classes(columns, num_states: int, block: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Group tokens whose columns (state after the token, for every state) are identical.

    Columns are compared through two independent 64-bit random linear hashes, computed over
    blocks of states (all at once by default) so memory stays bounded; a collision of both has
    probability ~2^-120.

    Returns:
      class_of_token: int32[N], the class of each column; representatives: int64[C], one column
      per class.
    """
    multipliers = np.random.default_rng(0).integers(1, 2**63, size=(2, num_states), dtype=np.uint64) | np.uint64(1)
    hashes = 0
    block = block or num_states
    for lo in range(0, num_states, block):
        states = np.arange(lo, min(lo + block, num_states))
        hashes = hashes + multipliers[:, states] @ columns(states).astype(np.uint64)
    _, representatives, class_of_token = np.unique(hashes[0], return_index=True, return_inverse=True)
    if not (hashes[1] == hashes[1][representatives][class_of_token]).all():
        _, representatives, class_of_token = np.unique(hashes.T, axis=0, return_index=True, return_inverse=True)
    return class_of_token.reshape(-1).astype(np.int32), representatives
