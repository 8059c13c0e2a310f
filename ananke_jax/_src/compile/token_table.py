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

from ananke_jax._src.compile.arrays import concatenated_ranges, pack_bits, run_starts, unique_first_inverse
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, row_groups
from ananke_jax._src.vocab import Vocabulary

# Mask rows are built token by token when the tokens flipped between neighbouring rows number
# over 1/_DENSE_ROWS_FACTOR of rows x tokens (a flipped token costs about that much more).
_DENSE_ROWS_FACTOR = 8
# Upper bound on the (start state, state) pairs of one level of a trie walk, to bound memory.
_MAX_PAIRS = 1 << 22
# Levels of a trie walk with at most this many live children skip merging equal functions.
_NARROW_LEVEL = 16


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


def token_columns(trie: TokenTrie, transitions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group the strings of a trie by their column: the state after the string, from each state.

    The walk goes level by level over the live nodes only, and computes each distinct function
    once: a child's function is its parent's followed by one symbol, so children whose parents
    have equal functions and whose symbols agree share one (all two-letter words inside a free
    string, say), and symbols that act alike in every state step alike (on levels with more than
    `_NARROW_LEVEL` live children: the deep levels' few nodes each keep their own, merged only
    into the final classes). A function is kept as its live (start state, state) pairs, and
    functions are told apart by random linear hashes of those pairs.

    Args:
      trie: a `TokenTrie` over the alphabet of ``transitions``.
      transitions: int32[S, A] (state 0 dead and absorbing).

    Returns:
      int64[N], the class of each string in the order of ``trie.token_ids`` (-1: dead from every
      state), and int32[S, C], the column of each class.
    """
    multipliers = hash_multipliers(len(transitions))
    # Symbols that act alike in every state make equal steps: the walk steps by symbol class.
    symbol_class, first_symbol = byte_classes(transitions)
    class_transitions = transitions[:, first_symbol]
    walks = []  # per walk of some start states: (function class of each string, its functions)
    pending = [np.arange(1, len(transitions))]
    while pending:
        starts = pending.pop()
        functions = _live_functions(trie, class_transitions, symbol_class, multipliers, starts)
        if functions is None:  # too many pairs at once: walk each half of the start states alone
            pending += [starts[: len(starts) // 2], starts[len(starts) // 2 :]]
            continue
        function_class, representatives = classes_of_hashes(functions.hashes)
        # A dead node's function, -1, picks the appended -1.
        walks.append((np.append(function_class, -1)[functions.of_node[trie.token_nodes]], representatives, functions))
    # A string's class is the tuple of its classes in the walks, numbered densely.
    key, bound = walks[0][0] + 1, len(walks[0][1]) + 1
    for of_token, representatives, _ in walks[1:]:
        width = len(representatives) + 1
        values, key = _dense_unique(key * width + of_token + 1, bound * width)
        bound = len(values)
    live = np.flatnonzero(np.any([of_token >= 0 for of_token, _, _ in walks], axis=0))
    values, token_class = _dense_unique(key[live], bound)
    classes = np.full(len(key), -1, np.int64)
    classes[live] = token_class
    member = np.empty(len(values), np.int64)  # a string of each class
    member[token_class] = live
    columns = np.zeros((len(transitions), len(values)), np.int32)
    for of_token, representatives, functions in walks:
        function_class = of_token[member]
        has = np.flatnonzero(function_class >= 0)
        function = representatives[function_class[has]]
        lengths = functions.offsets[function + 1] - functions.offsets[function]
        pairs = concatenated_ranges(functions.offsets[function], lengths)
        columns[functions.origin[pairs], np.repeat(has, lengths)] = functions.state[pairs]
    return classes, columns


@dataclasses.dataclass(frozen=True)
class _LiveFunctions:
    """The functions of a trie's nodes from some start states (the state after the node's
    string, from each), kept as their live (start state, state) pairs.

    Attributes:
      of_node: int32[num_nodes], the function of each node (-1: dead from every start state).
      hashes: uint64[H, F], random linear hashes of each function's pairs.
      origin, state: int64[P]; the pairs of function f are at ``offsets[f]:offsets[f + 1]``.
      offsets: int64[F + 1].
    """

    of_node: np.ndarray
    hashes: np.ndarray
    origin: np.ndarray
    state: np.ndarray
    offsets: np.ndarray


def _live_functions(trie: TokenTrie, transitions: np.ndarray, symbol_class: np.ndarray, multipliers: np.ndarray, starts: np.ndarray) -> _LiveFunctions | None:
    """The `_LiveFunctions` of the trie from the start states ``starts``, stepping by
    ``transitions`` [S, K] over the class ``symbol_class[label]`` of each trie label; None when a
    level would hold more than `_MAX_PAIRS` pairs (never with one start state: a level has fewer
    nodes)."""
    flat, alphabet = transitions.reshape(-1), transitions.shape[1]
    of_node, num_functions = np.full(trie.num_nodes, -1, np.int32), 0
    hashes, origins, states, lengths_per_level = [], [], [], []
    # The live nodes of the current level, the function of each (an index into the level's
    # functions), and the functions as blocks of (start state, state) pairs.
    nodes, node_function = np.zeros(1, np.int64), np.zeros(1, np.int64)
    origin, current = starts.astype(np.int64), starts.astype(np.int64)
    function_start, function_length = np.zeros(1, np.int64), np.array([len(starts)])
    offset = 1  # the id of the level's first node
    for parents, labels, child_starts, parent_position in zip(trie.parents, trie.labels, trie.child_starts, trie.parent_positions):
        local = nodes - (offset - len(child_starts) + 1)  # among the nodes of the previous level
        if 2 * len(local) > len(child_starts) - 1:  # most are live: go over all children
            function_of_parent = np.full(len(child_starts) - 1, -1, np.int64)
            function_of_parent[local] = node_function
            function_of_child = function_of_parent[parent_position]
            child = np.flatnonzero(function_of_child >= 0)  # level-local ids, ascending
            steps = function_of_child[child] * alphabet + symbol_class[labels[child]]
        else:
            first_child = child_starts[local]
            num_children = child_starts[local + 1] - first_child
            child = concatenated_ranges(first_child, num_children)
            steps = np.repeat(node_function, num_children) * alphabet + symbol_class[labels[child]]
        # Merging equal steps and functions pays on wide levels only; the final classes merge
        # the functions of the few nodes of the deep levels (long words, whitespace runs).
        merge = len(child) > _NARROW_LEVEL
        step, step_of_child = _dense_unique(steps, len(function_length) * alphabet) if merge else (steps, np.arange(len(child)))
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
        pair_start = np.flatnonzero(run_starts(step_of_pair))
        live_step = step_of_pair[pair_start]
        step_hash = np.add.reduceat(multipliers[:, origin] * current.astype(np.uint64), pair_start, axis=1)
        lengths = _run_lengths(pair_start, len(step_of_pair))
        function_of_step = np.full(len(step), -1, np.int64)
        if merge:  # steps with equal results are one function of the new level
            function_of_live_step, representative = classes_of_hashes(step_hash)
            function_of_step[live_step] = function_of_live_step
            kept = concatenated_ranges(pair_start[representative], lengths[representative])
            origin, current = origin[kept], current[kept]
            step_hash, lengths = step_hash[:, representative], lengths[representative]
        else:
            function_of_step[live_step] = np.arange(len(live_step))
        child_function = function_of_step[step_of_child]
        alive = child_function >= 0
        nodes, node_function = child[alive] + offset, child_function[alive]
        of_node[nodes] = node_function + num_functions
        num_functions += len(lengths)
        hashes.append(step_hash)
        function_length = lengths
        function_start = np.cumsum(function_length) - function_length
        origins.append(origin)
        states.append(current)
        lengths_per_level.append(function_length)
        offset += len(parents)
    none = np.zeros(0, np.int64)
    return _LiveFunctions(
        of_node=of_node,
        hashes=np.concatenate([np.zeros((len(multipliers), 0), np.uint64), *hashes], axis=1),
        origin=np.concatenate([none, *origins]),
        state=np.concatenate([none, *states]),
        offsets=np.concatenate([[0], np.cumsum(np.concatenate([none, *lengths_per_level]))]).astype(np.int64),
    )


def _run_lengths(starts: np.ndarray, total: int) -> np.ndarray:
    """int64[R]: the lengths of the runs that start at ``starts`` in an array of ``total``."""
    lengths = np.empty(len(starts), np.int64)
    lengths[:-1] = starts[1:] - starts[:-1]
    lengths[-1] = total - starts[-1]
    return lengths


def _dense_unique(keys: np.ndarray, bound: int) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, return_inverse=True)`` for keys in ``[0, bound)``, by marking rather
    than sorting when ``bound`` is small beside the number of keys."""
    if bound > 4 * len(keys):
        values, _, inverse = unique_first_inverse(keys)
        return values, inverse
    seen = np.zeros(bound, bool)
    seen[keys] = True
    return np.flatnonzero(seen), (np.cumsum(seen) - 1)[keys]


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
    columns come out of a walk of the vocabulary's prefix tree that follows only live (node,
    state) pairs (`token_columns`).
    """
    finished = dfa.num_states
    num_states = finished + 1
    accepting = np.append(dfa.accepting, True)
    eos_target = np.where(accepting, finished, DEAD).astype(np.int32)
    transitions = np.vstack([dfa.transitions, np.full((1, dfa.transitions.shape[1]), DEAD, np.int32)])

    trie = vocabulary_trie(vocab)
    token_class, columns = token_columns(trie, transitions)
    # Classes: those of the tokens alive from some state, then EOS, then the tokens never allowed.
    eos_class, never_class = columns.shape[1], columns.shape[1] + 1
    next_state = np.column_stack([columns, eos_target, np.full(num_states, DEAD, np.int32)])
    class_of_token = np.full(vocab.logits_width, never_class, np.int32)
    class_of_token[trie.token_ids] = np.where(token_class >= 0, token_class, never_class)
    class_of_token[list(vocab.eos_token_ids)] = eos_class

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

    The distinct rows are put in lexicographic order, largest classes first, so that neighbours
    share most of their tokens (the states of a length-bounded string differ by one class of
    token lengths). Each mask is then its predecessor's with the tokens of the classes in which
    the two rows differ flipped: one prefix XOR over the rows. When those flips outnumber the
    tokens of a dense build, the masks are built token by token instead.

    Returns:
      mask_rows uint32[R, ceil(V / 32)] (bit j of word i = token 32 * i + j) and int32[S], the
      row of each state.
    """
    num_tokens, num_classes = len(class_of_token), allowed.shape[1]
    sizes = np.bincount(class_of_token, minlength=num_classes)
    # Rows are numbered in lexicographic order with the largest classes first.
    row_of_state = row_groups(allowed[:, np.argsort(-sizes, kind="stable")]).astype(np.int32)
    num_rows = int(row_of_state.max()) + 1
    rows = np.zeros((num_rows, num_classes), bool)
    rows[row_of_state] = allowed
    flips = rows.copy()
    flips[1:] ^= rows[:-1]
    flip_row, flip_class = np.nonzero(flips)
    if sizes[flip_class].sum() * _DENSE_ROWS_FACTOR > num_rows * num_tokens:
        return pack_bits(np.take(rows, class_of_token, axis=1)), row_of_state
    tokens_by_class = np.argsort(class_of_token.astype(np.uint16) if num_classes <= 1 << 16 else class_of_token, kind="stable")  # a radix sort
    tokens = tokens_by_class[concatenated_ranges(np.cumsum(sizes)[flip_class] - sizes[flip_class], sizes[flip_class])]
    num_words = -(-num_tokens // 32)
    # Flipped bits per (row, word): distinct bits, so their sum (exact in float64) is their OR.
    flipped = np.bincount(
        np.repeat(flip_row, sizes[flip_class]) * num_words + (tokens >> 5),
        weights=np.left_shift(1, tokens & 31).astype(np.float64),
        minlength=num_rows * num_words,
    )
    masks = flipped.astype(np.uint32).reshape(num_rows, num_words)
    for i in range(1, num_rows):  # a prefix XOR (ufunc.accumulate over axis 0 is ~20x slower)
        masks[i] ^= masks[i - 1]
    return masks, row_of_state


def hash_multipliers(num_states: int) -> np.ndarray:
    """uint64[2, num_states]: odd random multipliers of two independent 64-bit column hashes."""
    return np.random.default_rng(0).integers(1, 2**63, size=(2, num_states), dtype=np.uint64) | np.uint64(1)


def classes_of_hashes(hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group items by their column hashes (uint64[2, N], two independent random linear hashes
    of a column; equal classes unless both collide, probability ~2^-120).

    Returns:
      class_of_item: int32[N]; representatives: int64[C], one item per class.
    """
    _, representatives, class_of_item = unique_first_inverse(hashes[0])
    if not (hashes[1] == hashes[1][representatives][class_of_item]).all():
        _, representatives, class_of_item = np.unique(hashes.T, axis=0, return_index=True, return_inverse=True)
    return class_of_item.reshape(-1).astype(np.int32), representatives
