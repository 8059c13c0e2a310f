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
import itertools

import numpy as np

from ananke_jax._src.compile.arrays import concatenated_ranges, hash_multipliers, pack_bits, run_starts, stable_order, unique_first_inverse
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, row_groups
from ananke_jax._src.compile.budget import charge_bytes, check_time
from ananke_jax._src.compile.token_trie import TokenGroups, TokenTrie, classes_of_hashes, single_group, vocabulary_trie
from ananke_jax._src.compile.unit_loops import LoopColumns, UnitLoops, loop_columns
from ananke_jax._src.vocab import Vocabulary

# Mask rows are built token by token when the tokens flipped between neighbouring rows number
# over 1/_DENSE_ROWS_FACTOR of rows x tokens (a flipped token costs about that much more).
_DENSE_ROWS_FACTOR = 8
# Upper bound on the (start state, state) pairs of one level of a trie walk, to bound memory.
_MAX_PAIRS = 1 << 22
# Levels of a trie walk with at most this many live children skip merging equal functions.
_NARROW_LEVEL = 16
_FILL_ENTRIES = 1 << 19  # loop cells written at once: the time between deadline checks


@dataclasses.dataclass(frozen=True)
class StringClasses:
    """The classes of the strings of a trie (strings whose columns agree) and their columns.

    A string dead from every walked state takes its group's class; the few strings alive from
    one are listed apart.

    Attributes:
      groups: the `TokenGroups` of the strings.
      of_group: int64[G], the class of a group's strings dead from every walked state (-1: dead
        from every state, or the group has no such string).
      remaining: int64[G], the number of those strings in each group.
      walked: int64[E], the strings alive from some walked state, ascending.
      of_walked: int64[E], their classes.
      columns: int32[S, C + spare], the column of each of the C classes, then ``spare`` columns
        of DEAD for the caller to fill (`token_columns`).
      num_classes: C.
    """

    groups: TokenGroups
    of_group: np.ndarray
    remaining: np.ndarray
    walked: np.ndarray
    of_walked: np.ndarray
    columns: np.ndarray
    num_classes: int

    def of_string(self) -> np.ndarray:
        """int64[N], the class of each string in the order of the trie's ``token_ids`` (-1: dead
        from every state)."""
        classes = self.of_group[self.groups.of_string]
        classes[self.walked] = self.of_walked
        return classes


def token_columns(
    trie: TokenTrie, transitions: np.ndarray, groups: TokenGroups, known: LoopColumns | None = None, *, spare: int = 0
) -> StringClasses:
    """Class the strings of a trie by their column: the state after the string, from each state.

    The walk goes level by level over the live nodes only, and computes each distinct function
    once: a child's function is its parent's followed by one symbol, so children whose parents
    have equal functions and whose symbols agree share one (all two-letter words inside a free
    string, say), and symbols that act alike in every state step alike (on levels with more than
    `_NARROW_LEVEL` live children: the deep levels' few nodes each keep their own, merged only
    into the final classes). A function is kept as its live (start state, state) pairs, and
    functions are told apart by random linear hashes of those pairs.

    Few strings live from the walked states: the others are classed by group, so that no walk
    or sort goes over the whole vocabulary.

    Args:
      trie: a `TokenTrie` over the alphabet of ``transitions``.
      transitions: int32[S, A] (state 0 dead and absorbing).
      groups: `TokenGroups` of the strings whose members have equal columns in the ``known``
        rows.
      known: the columns of some states found otherwise, which the walk skips
        (`unit_loops.loop_columns`); its groups are ``groups``.
      spare: columns of DEAD made after the classes', for the caller to fill (a copy of the
        table to add them would cost as much as filling it).

    Returns:
      The `StringClasses`.
    """
    multipliers = hash_multipliers(len(transitions))
    # Symbols that act alike in every state make equal steps: the walk steps by symbol class.
    symbol_class, first_symbol = byte_classes(transitions)
    class_transitions = transitions[:, first_symbol]
    walks = []  # per walk of some start states: its live strings, their function classes, the functions
    unknown = np.arange(len(transitions)) > 0  # every state but the dead one, less the known rows
    if known is not None:
        unknown[known.rows] = False
    pending = [np.flatnonzero(unknown)]
    while pending:
        check_time()
        starts = pending.pop()
        functions = _live_functions(trie, class_transitions, symbol_class, multipliers, starts)
        if functions is None:  # too many pairs at once: walk each half of the start states alone
            pending += [starts[: len(starts) // 2], starts[len(starts) // 2 :]]
            continue
        function_class, representatives = classes_of_hashes(functions.hashes)
        strings, string_function = _live_strings(trie, functions)
        walks.append((strings, function_class[string_function], representatives, functions))
    is_walked = np.zeros(len(trie.token_ids), bool)
    for strings, *_ in walks:
        is_walked[strings] = True
    walked = np.flatnonzero(is_walked)
    # Items to class: the groups less their walked strings (those left empty are dropped), then
    # the walked strings. An item's class is the tuple of its classes in the walks (and the known
    # rows), numbered densely; the tuple of -1s (dead from every state), if any, is key 0 and
    # comes first.
    remaining = np.diff(groups.offsets) - np.bincount(groups.of_string[walked], minlength=groups.num_groups)
    kept = np.flatnonzero(remaining)
    item = np.empty(len(is_walked), np.int64)  # of each walked string
    item[walked] = len(kept) + np.arange(len(walked))
    parts = []
    for strings, string_class, representatives, _ in walks:
        of_item = np.full(len(kept) + len(walked), -1, np.int64)
        of_item[item[strings]] = string_class
        parts.append((of_item, len(representatives)))
    if known is not None:
        parts.append((np.concatenate([known.class_of_group[kept], known.class_of_group[groups.of_string[walked]]]), known.num_classes))
    key, bound = 0, 1
    for of_item, num_classes in parts:
        if bound > 1 and bound * (num_classes + 1) > 4 * len(of_item):  # renumber before marking gets costly
            values, key = _dense_unique(key, bound)
            shift = int(values[0] != 0)  # key 0 stays the tuple of -1s, whether or not an item has it
            key, bound = key + shift, len(values) + shift
        key, bound = key * (num_classes + 1) + of_item + 1, bound * (num_classes + 1)
    values, key = _dense_unique(key, bound)
    dead = int(values[0] == 0)
    classes = key - dead
    member = np.empty(len(values), np.int64)  # an item of each class
    member[key] = np.arange(len(key))
    member = member[dead:]
    check_time()
    # The columns are the largest of the token DFA's tables: their budget is charged before they are filled.
    charge_bytes(4 * len(transitions) * (len(member) + spare), "the token DFA's next-state columns")
    columns = np.zeros((len(transitions), len(member) + spare), np.int32)
    for (of_item, _), (*_, representatives, functions) in zip(parts, walks):
        check_time()  # each fill below writes up to the whole table (hundreds of MB)
        function_class = of_item[member]
        has = np.flatnonzero(function_class >= 0)
        function = representatives[function_class[has]]
        lengths = functions.offsets[function + 1] - functions.offsets[function]
        pairs = concatenated_ranges(functions.offsets[function], lengths)
        columns[functions.origin[pairs], np.repeat(has, lengths)] = functions.state[pairs]
    if known is not None:
        # Each loop row's cells read its row of loop classes through each column's class (-1, no
        # class: the DEAD column appended), a block of rows at a time: whole rows written, where a
        # scatter of each entry into its class's columns took about twice as long.
        column_class = parts[-1][0][member]
        order = stable_order(known.row)
        block = max(1, _FILL_ENTRIES // (known.num_classes + len(member) + 1))
        bounds = np.searchsorted(known.row[order], np.arange(0, len(known.rows) + block, block))
        for first, (lo, hi) in enumerate(itertools.pairwise(bounds.tolist())):
            check_time()
            entries = order[lo:hi]
            rows = np.zeros((block, known.num_classes + 1), np.int32)  # (DEAD is 0)
            rows[known.row[entries] - first * block, known.klass[entries]] = known.value[entries]
            mine = known.rows[first * block : (first + 1) * block]
            columns[mine, : len(member)] = rows[: len(mine)][:, column_class]
    of_group = np.full(groups.num_groups, -1, np.int64)
    of_group[kept] = classes[: len(kept)]
    return StringClasses(groups, of_group, remaining, walked, classes[len(kept) :], columns, len(member))


@dataclasses.dataclass(frozen=True)
class _LiveFunctions:
    """The functions of a trie's nodes from some start states (the state after the node's
    string, from each), kept as their live (start state, state) pairs.

    Attributes:
      nodes: int64[L], the nodes alive from some start state, ascending.
      node_function: int64[L], the function of each.
      hashes: uint64[H, F], random linear hashes of each function's pairs.
      origin, state: int64[P]; the pairs of function f are at ``offsets[f]:offsets[f + 1]``.
      offsets: int64[F + 1].
    """

    nodes: np.ndarray
    node_function: np.ndarray
    hashes: np.ndarray
    origin: np.ndarray
    state: np.ndarray
    offsets: np.ndarray


def _live_functions(
    trie: TokenTrie, transitions: np.ndarray, symbol_class: np.ndarray, multipliers: np.ndarray, starts: np.ndarray
) -> _LiveFunctions | None:
    """The `_LiveFunctions` of the trie from the start states ``starts``, stepping by
    ``transitions`` [S, K] over the class ``symbol_class[label]`` of each trie label; None when a
    level would hold more than `_MAX_PAIRS` pairs (never with one start state: a level has fewer
    nodes)."""
    flat, alphabet = transitions.reshape(-1), transitions.shape[1]
    num_functions, live_nodes, live_functions = 0, [], []
    hashes, origins, states, lengths_per_level = [], [], [], []
    # The live nodes of the current level, the function of each (an index into the level's
    # functions), and the functions as blocks of (start state, state) pairs.
    nodes, node_function = np.zeros(1, np.int64), np.zeros(1, np.int64)
    origin, current = starts.astype(np.int64), starts.astype(np.int64)
    function_start, function_length = np.zeros(1, np.int64), np.array([len(starts)])
    offset = 1  # the id of the level's first node
    for parents, labels, child_starts, parent_position in zip(trie.parents, trie.labels, trie.child_starts, trie.parent_positions):
        check_time()
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
        weighted = current.astype(np.uint64)  # (a 1-D reduceat per hash: along axis 1 of [2, P], four times slower)
        step_hash = np.stack([np.add.reduceat(np.take(m, origin) * weighted, pair_start) for m in multipliers])
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
        live_nodes.append(nodes)
        live_functions.append(node_function + num_functions)
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
        nodes=np.concatenate([none, *live_nodes]),
        node_function=np.concatenate([none, *live_functions]),
        hashes=np.concatenate([np.zeros((len(multipliers), 0), np.uint64), *hashes], axis=1),
        origin=np.concatenate([none, *origins]),
        state=np.concatenate([none, *states]),
        offsets=np.concatenate([[0], np.cumsum(np.concatenate([none, *lengths_per_level]))]).astype(np.int64),
    )


def _live_strings(trie: TokenTrie, functions: _LiveFunctions) -> tuple[np.ndarray, np.ndarray]:
    """The strings that end at the live nodes, int64[E], and the function of each, int64[E]."""
    first, others, other_nodes = trie.node_strings
    string = first[functions.nodes]
    ends = np.flatnonzero(string >= 0)
    position = np.minimum(np.searchsorted(functions.nodes, other_nodes), len(functions.nodes) - 1)
    live = np.flatnonzero(functions.nodes[position] == other_nodes) if len(functions.nodes) else np.zeros(0, np.int64)
    strings = np.concatenate([string[ends], others[live]])
    return strings, functions.node_function[np.concatenate([ends, position[live]])]


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
      trie: the distinct class strings as a prefix tree over the K classes, or the distinct byte
        strings' tree with its labels rewritten (`spell_tokens`); string i has id i.
      token_ids: int64[N], the ordinary token ids.
      spelling: int64[N], the string of each of those tokens.
    """

    transitions: np.ndarray
    trie: TokenTrie
    token_ids: np.ndarray
    spelling: np.ndarray

    @property
    def num_strings(self) -> int:
        return len(self.trie.token_ids)


def spell_tokens(transitions: np.ndarray, vocab: Vocabulary, *, merged: bool = True) -> Spelling:
    """Rewrite the ordinary tokens of ``vocab`` over the byte classes of ``transitions`` [S, 256]
    (classes numbered by their lowest byte: automata with the same classes share the spelling,
    cached per vocabulary).

    ``merged=False``: the trie is the vocabulary's byte trie with its labels rewritten (a gather
    a level), where tokens spelled alike keep their own nodes and siblings may share a label; no
    merging per set of classes (15 ms on 131k tokens), for walks whose cost is per distinct step
    rather than per node.
    """
    byte_class, first_byte = byte_classes(transitions)
    order = np.argsort(first_byte)
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    class_of_byte = rank[byte_class].astype(np.uint8)
    raw = vocabulary_trie(vocab)
    if merged:
        trie, spelling = _class_spelling(vocab, class_of_byte.tobytes())
    else:
        strings, spelling = _byte_strings(vocab)
        trie = TokenTrie(
            raw.parents, tuple(class_of_byte[labels] for labels in raw.labels), np.arange(len(strings), dtype=np.int32), strings
        )
    return Spelling(transitions[:, first_byte[order]], trie, raw.token_ids.astype(np.int64), spelling)


@functools.lru_cache(maxsize=8)
def _byte_strings(vocab: Vocabulary) -> tuple[np.ndarray, np.ndarray]:
    """The distinct byte strings of ``vocab``'s ordinary tokens, int32[N] nodes of its byte trie,
    and the string of each, int64[N] (tokens may share their bytes); cached."""
    nodes, _, spelling = unique_first_inverse(vocabulary_trie(vocab).token_nodes)
    nodes = nodes.astype(np.int32)
    for array in (nodes, spelling):
        array.flags.writeable = False
    return nodes, spelling


@functools.lru_cache(maxsize=8)
def _class_spelling(vocab: Vocabulary, partition: bytes) -> tuple[TokenTrie, np.ndarray]:
    """The prefix tree of the class strings of ``vocab``'s ordinary tokens and the string of
    each, for the byte classes ``partition`` (uint8[256] as bytes, the class of each byte).

    The vocabulary's byte prefix tree (cached) has its edges relabelled by class, and the
    children of a node that get the same label are merged, level by level.
    """
    byte_class = np.frombuffer(partition, np.uint8).astype(np.int64)
    num_classes = int(byte_class.max()) + 1
    raw = vocabulary_trie(vocab)
    node_of = np.zeros(raw.num_nodes, np.int64)  # the class-string node of each byte-trie node
    parents, labels = [], []
    raw_first, first = 1, 1  # the first node id of the current depth in each tree
    for raw_parents, raw_labels in zip(raw.parents, raw.labels):
        keys = node_of[raw_parents] * num_classes + byte_class[raw_labels]
        distinct, _, inverse = unique_first_inverse(keys)
        parents.append((distinct // num_classes).astype(np.int32))
        labels.append((distinct % num_classes).astype(np.uint8))
        node_of[raw_first : raw_first + len(keys)] = first + inverse
        raw_first, first = raw_first + len(keys), first + len(distinct)
    nodes, _, spelling = unique_first_inverse(node_of[raw.token_nodes])
    trie = TokenTrie(tuple(parents), tuple(labels), np.arange(len(nodes), dtype=np.int32), nodes.astype(np.int32))
    for array in (*parents, *labels, trie.token_ids, trie.token_nodes, spelling):
        array.flags.writeable = False  # shared by every compile with these classes
    return trie, spelling


@dataclasses.dataclass(frozen=True)
class TokenTables:
    """Token-level tables of a regular constraint (numpy; see `RegularGrammar` for the layout)."""

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
    Tokens with equal outcomes form per-vocabulary groups, so that outside the few tokens alive
    from a walked state, classes are found and masks built group by group.
    """
    finished = dfa.num_states
    accepting = np.append(dfa.accepting, True)
    eos_target = np.where(accepting, finished, DEAD).astype(np.int32)
    transitions = np.vstack([dfa.transitions, np.full((1, dfa.transitions.shape[1]), DEAD, np.int32)])

    trie = vocabulary_trie(vocab)
    if loops is None:
        groups, known = single_group(vocab), None
    else:
        known = loop_columns(loops, transitions, vocab)
        groups = known.groups
    # Classes: those of the tokens alive from some state, then EOS, then the tokens never allowed.
    classes = token_columns(trie, transitions, groups, known, spare=2)
    eos_class, never_class = classes.num_classes, classes.num_classes + 1
    next_state = classes.columns
    next_state[:, eos_class] = eos_target
    class_of_group = np.append(np.where(classes.of_group >= 0, classes.of_group, never_class), never_class)
    class_of_token = class_of_group[groups.of_id].astype(np.int32)
    walked_ids = trie.token_ids[classes.walked]
    eos_ids = np.asarray(vocab.eos_token_ids, np.int64)
    class_of_token[walked_ids] = classes.of_walked
    class_of_token[eos_ids] = eos_class
    runs = _token_runs(classes, class_of_group[:-1], walked_ids, eos_ids)
    check_time()
    mask_rows, row_of_state = packed_mask_rows(next_state != DEAD, class_of_token, runs)
    return TokenTables(
        mask_rows=mask_rows,
        row_of_state=row_of_state,
        class_of_token=class_of_token,
        next_state=next_state,
        accepting=accepting,
        start=dfa.start,
    )


def _token_runs(classes: StringClasses, class_of_group: np.ndarray, walked_ids: np.ndarray, eos_ids: np.ndarray) -> TokenRuns:
    """The tokens in runs of one class: each group's strings dead from every walked state (of
    class ``class_of_group``), the walked strings (ids ``walked_ids``) by class, and EOS (the class
    after the strings')."""
    groups, num_classes = classes.groups, classes.num_classes
    kept = np.ones(len(groups.ids), bool)
    kept[groups.position[classes.walked]] = False
    by_class = stable_order(classes.of_walked)
    lengths = np.concatenate([classes.remaining, np.bincount(classes.of_walked, minlength=num_classes), [len(eos_ids)]])
    return TokenRuns(
        ids=np.concatenate([groups.ids[kept], walked_ids[by_class], eos_ids]),
        starts=np.cumsum(lengths) - lengths,
        lengths=lengths,
        classes=np.concatenate([class_of_group, np.arange(num_classes + 1)]),
    )


@dataclasses.dataclass(frozen=True)
class TokenRuns:
    """Token ids in runs of one class each: run u is ``ids[starts[u]:starts[u] + lengths[u]]``,
    of class ``classes[u]`` (int64 arrays). Tokens in no run are of classes never allowed."""

    ids: np.ndarray
    starts: np.ndarray
    lengths: np.ndarray
    classes: np.ndarray


def packed_mask_rows(allowed: np.ndarray, class_of_token: np.ndarray, runs: TokenRuns | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Deduplicated packed masks from bool[S, C] allowed classes.

    The distinct rows are put in lexicographic order, largest classes first, so that neighbours
    share most of their tokens (the states of a length-bounded string differ by one class of
    token lengths). Each mask is then its predecessor's with the tokens of the classes in which
    the two rows differ flipped: one prefix XOR over the rows. When those flips outnumber the
    tokens of a dense build, the masks are built token by token instead.

    Args:
      allowed: bool[S, C].
      class_of_token: int32[V].
      runs: the tokens by class, where the caller has them (default: from ``class_of_token``);
        they must agree with ``class_of_token`` and list each token of a class that some state
        allows exactly once (a token listed twice would carry into its neighbour's bit).

    Returns:
      mask_rows uint32[R, ceil(V / 32)] (bit j of word i = token 32 * i + j) and int32[S], the
      row of each state.
    """
    num_tokens, num_classes = len(class_of_token), allowed.shape[1]
    if runs is None:
        sizes = np.bincount(class_of_token, minlength=num_classes)
        ids = stable_order(class_of_token)
        runs = TokenRuns(ids, np.cumsum(sizes) - sizes, sizes, np.arange(num_classes))
    sizes = np.bincount(runs.classes, runs.lengths, minlength=num_classes).astype(np.int64)
    # Rows are numbered in lexicographic order with the largest classes first.
    row_of_state = row_groups(np.take(allowed, np.argsort(-sizes, kind="stable"), axis=1)).astype(np.int32)
    check_time()
    num_rows = int(row_of_state.max()) + 1
    rows = np.zeros((num_rows, num_classes), bool)
    rows[row_of_state] = allowed
    flips = rows.copy()
    flips[1:] ^= rows[:-1]
    flip_row, flip_class = np.nonzero(flips)
    if sizes[flip_class].sum() * _DENSE_ROWS_FACTOR > num_rows * num_tokens:
        return pack_bits(np.take(rows, class_of_token, axis=1)), row_of_state
    # The runs of each flip's class, then their tokens.
    runs_of_class = np.bincount(runs.classes, minlength=num_classes)
    first_run = np.cumsum(runs_of_class) - runs_of_class
    flip_runs = stable_order(runs.classes)[concatenated_ranges(first_run[flip_class], runs_of_class[flip_class])]
    run_row = np.repeat(flip_row, runs_of_class[flip_class])
    tokens = runs.ids[concatenated_ranges(runs.starts[flip_runs], runs.lengths[flip_runs])]
    num_words = -(-num_tokens // 32)
    # Flipped bits per (row, word): distinct bits, so their sum is their OR (`add.at` is fast for
    # uint32, and needs no float64 intermediate as `bincount` does).
    masks = np.zeros((num_rows, num_words), np.uint32)
    bits = np.left_shift(np.uint32(1), (tokens & 31).astype(np.uint32))
    np.add.at(masks.reshape(-1), np.repeat(run_row, runs.lengths[flip_runs]) * num_words + (tokens >> 5), bits)
    # A prefix XOR (ufunc.accumulate over axis 0 is ~20x slower), over 64-bit words where they fit.
    wide = masks.view(np.uint64) if num_words % 2 == 0 else masks
    for i in range(1, num_rows):
        wide[i] ^= wide[i - 1]
    return masks, row_of_state
