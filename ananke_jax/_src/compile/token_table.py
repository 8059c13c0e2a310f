"""Token alignment: a byte DFA times a vocabulary gives token-level tables (numpy, host).

Tokens are first rewritten as strings of the DFA's byte classes; only the distinct strings are
walked, from every state at once (rows of a numpy array) and through a prefix tree (one gather
per tree level), so shared prefixes are walked once. Tokens whose columns agree in every state
share a *class*; the run-time step is then one mask-row gather and one ``next[state, class]``
gather.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ananke_jax._src.compile.arrays import concatenated_ranges, hash_multipliers, pack_bits, run_starts, unique_first_inverse
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, row_groups
from ananke_jax._src.compile.token_trie import TokenTrie, classes_of_hashes, ordinary_token_ids, vocabulary_trie
from ananke_jax._src.compile.unit_loops import UnitLoops, loop_columns
from ananke_jax._src.vocab import Vocabulary

# Mask rows are built token by token when the tokens flipped between neighbouring rows number
# over 1/_DENSE_ROWS_FACTOR of rows x tokens (a flipped token costs about that much more).
_DENSE_ROWS_FACTOR = 8
# Upper bound on the (start state, state) pairs of one level of a trie walk, to bound memory.
_MAX_PAIRS = 1 << 22
# Levels of a trie walk with at most this many live children skip merging equal functions.
_NARROW_LEVEL = 16


def token_columns(trie: TokenTrie, transitions: np.ndarray, known: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
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
      known: the columns of some states found otherwise, which the walk skips: int64[R] states,
        int64[N] the class of each string from them (-1: dead from all), int32[R, C'] the column
        of each class (`unit_loops.loop_columns`).

    Returns:
      int64[N], the class of each string in the order of ``trie.token_ids`` (-1: dead from every
      state), and int32[S, C], the column of each class.
    """
    multipliers = hash_multipliers(len(transitions))
    # Symbols that act alike in every state make equal steps: the walk steps by symbol class.
    symbol_class, first_symbol = byte_classes(transitions)
    class_transitions = transitions[:, first_symbol]
    walks = []  # per walk of some start states: (function class of each string, its functions)
    unknown = np.arange(len(transitions)) > 0  # every state but the dead one, less the known rows
    if known is not None:
        unknown[known[0]] = False
    pending = [np.flatnonzero(unknown)]
    while pending:
        starts = pending.pop()
        functions = _live_functions(trie, class_transitions, symbol_class, multipliers, starts)
        if functions is None:  # too many pairs at once: walk each half of the start states alone
            pending += [starts[: len(starts) // 2], starts[len(starts) // 2 :]]
            continue
        function_class, representatives = classes_of_hashes(functions.hashes)
        # A dead node's function, -1, picks the appended -1.
        walks.append((np.append(function_class, -1)[functions.of_node[trie.token_nodes]], representatives, functions))
    # A string's class is the tuple of its classes in the walks (and the known rows), numbered
    # densely; the tuple of -1s (dead from every state), if any, is key 0 and comes first.
    parts = [(of_token, len(representatives)) for of_token, representatives, _ in walks]
    if known is not None:
        parts.append((known[1], known[2].shape[1]))
    key, bound = 0, 1
    for of_token, num_classes in parts:
        if bound > 1 and bound * (num_classes + 1) > 4 * len(of_token):  # renumber before marking gets costly
            values, key = _dense_unique(key, bound)
            bound = len(values)
        key, bound = key * (num_classes + 1) + of_token + 1, bound * (num_classes + 1)
    values, key = _dense_unique(key, bound)
    dead = int(values[0] == 0)
    classes = key - dead
    member = np.empty(len(values), np.int64)  # a string of each class
    member[key] = np.arange(len(key))
    member = member[dead:]
    columns = np.zeros((len(transitions), len(member)), np.int32)
    for of_token, representatives, functions in walks:
        function_class = of_token[member]
        has = np.flatnonzero(function_class >= 0)
        function = representatives[function_class[has]]
        lengths = functions.offsets[function + 1] - functions.offsets[function]
        pairs = concatenated_ranges(functions.offsets[function], lengths)
        columns[functions.origin[pairs], np.repeat(has, lengths)] = functions.state[pairs]
    if known is not None:
        rows, of_token, known_columns = known
        known_class = of_token[member]
        has = np.flatnonzero(known_class >= 0)
        columns[np.ix_(rows, has)] = known_columns[:, known_class[has]]
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


def token_tables(dfa: ByteDFA, vocab: Vocabulary, loops: UnitLoops | None = None) -> TokenTables:
    """Align a byte DFA with a vocabulary.

    The states are the DFA's (0 dead) plus one *finished* state, entered by EOS from an accepting
    state, in which only EOS is allowed. Special tokens, empty tokens and padding ids beyond the
    tokenizer lead to the dead state from everywhere, so they are never allowed.

    Tokens whose columns (the state after the token, from every state) agree form a class. The
    columns come out of a walk of the vocabulary's prefix tree that follows only live (node,
    state) pairs (`token_columns`); those of the states inside the unit ``loops`` of an automaton
    expanded by `unit_loops.expand_unit_loops`, from per-vocabulary outcomes (`loop_columns`).
    """
    finished = dfa.num_states
    num_states = finished + 1
    accepting = np.append(dfa.accepting, True)
    eos_target = np.where(accepting, finished, DEAD).astype(np.int32)
    transitions = np.vstack([dfa.transitions, np.full((1, dfa.transitions.shape[1]), DEAD, np.int32)])

    trie = vocabulary_trie(vocab)
    known = None if loops is None else loop_columns(loops, transitions, vocab)
    token_class, columns = token_columns(trie, transitions, known)
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
    # Flipped bits per (row, word): distinct bits, so their sum is their OR (`add.at` is fast for
    # uint32, and needs no float64 intermediate as `bincount` does).
    masks = np.zeros((num_rows, num_words), np.uint32)
    bits = np.left_shift(np.uint32(1), (tokens & 31).astype(np.uint32))
    np.add.at(masks.reshape(-1), np.repeat(flip_row, sizes[flip_class]) * num_words + (tokens >> 5), bits)
    # A prefix XOR (ufunc.accumulate over axis 0 is ~20x slower), over 64-bit words where they fit.
    wide = masks.view(np.uint64) if num_words % 2 == 0 else masks
    for i in range(1, num_rows):
        wide[i] ^= wide[i - 1]
    return masks, row_of_state
