"""Loops of units (a JSON string's characters) as placeholders: expansion and token columns (host).

A free or length-bounded JSON string is a quote, a run of *units* (characters, raw or escaped)
counted by a chain of automaton states, and a quote. Compiled with one placeholder byte per unit,
a schema's automaton stays small, and `expand_unit_loops` then splices the unit automaton into
each state that counts units.

Every token acts alike on every such chain: from each state of the unit automaton it reads some
whole units and then ends inside the loop (at some unit state), or leaves it through the exit byte
with a remainder, or dies. These *outcomes* are computed once per vocabulary (`token_outcomes`);
the string states of a schema then get their token columns from its count chains and a walk of
the few remainders only (`loop_columns`), and the walk of the whole vocabulary skips them.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections.abc import Callable

import numpy as np

from ananke_jax._src.compile.arrays import concatenated_ranges, hash_multipliers, run_starts, stable_order
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, row_groups
from ananke_jax._src.compile.budget import charge_dfa_states, check_time
from ananke_jax._src.compile.token_trie import (
    TokenGroups,
    TokenTrie,
    build_trie,
    classes_of_hashes,
    token_groups,
    vocabulary_trie,
    walk_tokens,
)
from ananke_jax._src.vocab import Vocabulary


@dataclasses.dataclass(frozen=True, eq=False)
class UnitLanguage:
    """The words a loop repeats (compared by identity, so that outcomes are cached per language).

    Attributes:
      dfa: the minimal DFA of ``unit*``; its start, the boundary between units, is its only
        accepting state (the units are a prefix code).
      exit_byte: the byte that ends a loop at a boundary (dead there in ``dfa``).
      placeholder: the byte that stands for one unit in an automaton (never in UTF-8 text).
    """

    dfa: ByteDFA
    exit_byte: int
    placeholder: int


@dataclasses.dataclass(frozen=True)
class UnitLoops:
    """Where an expanded automaton reads units.

    Attributes:
      language: the `UnitLanguage`.
      unit_target: int32[S], per state at a unit boundary, the state after one more unit (DEAD:
        it reads none; DEAD also for the states inside a unit).
      inside: int32[S, A], ``inside[t, a]``: the state at unit state ``a`` inside a unit that
        completes into state ``t`` (DEAD: none).
    """

    language: UnitLanguage
    unit_target: np.ndarray
    inside: np.ndarray

    @property
    def rows(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The states inside loops, int64[R] each: the state, its unit state, the boundary state
        its units are counted from, and the units that state is behind (1 inside a unit)."""
        boundary = np.flatnonzero(self.unit_target)
        within_target, within_unit = np.nonzero(self.inside)
        start = np.zeros(len(boundary), np.int64) + self.language.dfa.start
        return (
            np.concatenate([boundary, self.inside[within_target, within_unit]]),
            np.concatenate([start, within_unit]),
            np.concatenate([boundary, within_target]),
            np.concatenate([np.zeros(len(boundary), np.int64), np.ones(len(within_target), np.int64)]),
        )


def expand_unit_loops(
    dfa: ByteDFA, language: UnitLanguage, what: str = "a DFA with its strings' characters spelled out"
) -> tuple[ByteDFA, UnitLoops | None] | None:
    """``dfa`` with each placeholder byte read as one unit of ``language``, its states charged to
    the compile budget as ``what`` before its table is built.

    The states inside a unit are keyed by the state the unit completes into: those of two counting
    states with one target act alike, and the result of a minimal ``dfa`` is minimal (tests check
    it against the automaton of the units spelled out).

    Returns:
      The expanded automaton and its `UnitLoops`, or None when a state reads both a unit and a
      literal byte that begins one (an alternation inside a string; such a ``dfa`` must be built
      from the units spelled out). The `UnitLoops` are None when ``dfa`` reads no placeholder, or
      when a state that counts units, or that one more unit leads to, reads a byte other than the
      exit byte that begins no unit (`loop_columns` assumes it does not).
    """
    t, units = dfa.transitions, language.dfa
    target = t[:, language.placeholder]
    reading = np.flatnonzero(target)
    if not len(reading):
        return dfa, None
    boundary = units.start
    begins = np.flatnonzero(units.transitions[boundary])  # the bytes that begin a unit
    if t[np.ix_(reading, begins)].any():
        return None
    targets, mids = _inner_states(dfa, language)
    num_states = dfa.num_states + len(targets) * len(mids)
    charge_dfa_states(num_states, what)
    inside = np.zeros((num_states, units.num_states), np.int32)
    inside[np.ix_(targets, mids)] = dfa.num_states + np.arange(len(targets) * len(mids)).reshape(len(targets), len(mids))
    # A unit state's value seen from a unit that completes into each target (boundary: the target).
    completing = inside.copy()
    completing[:, boundary] = np.arange(num_states)
    table = np.empty((num_states, 256), np.int32)
    table[: dfa.num_states] = t
    _fill_inside(table[dfa.num_states :].reshape(len(targets), len(mids), 256), targets, mids, units, dfa.num_states)
    table[np.ix_(reading, begins)] = completing[target[reading][:, None], units.transitions[boundary, begins][None]]
    table[:, language.placeholder] = DEAD
    unit_target = np.zeros(num_states, np.int32)
    unit_target[reading] = target[reading]
    accepting = np.concatenate([dfa.accepting, np.zeros(num_states - dfa.num_states, bool)])
    expanded = ByteDFA(table.astype(np.int32, copy=False), accepting, dfa.start)
    others = np.setdiff1d(np.arange(256), [*begins, language.exit_byte, language.placeholder])
    if t[np.ix_(np.union1d(reading, targets), others)].any():
        return expanded, None
    return expanded, UnitLoops(language, unit_target, inside)


def _fill_inside(inner: np.ndarray, targets: np.ndarray, mids: np.ndarray, units: ByteDFA, first: int) -> None:
    """Write into ``inner`` (int32[K, M, 256]) the transitions of the states inside a unit: the
    one at ``mids[j]`` completing into ``targets[k]`` is state ``first + k * M + j``. Computed
    from one unit's table rather than gathered per state (these tables are the largest built)."""
    step = units.transitions[mids]  # int[M, 256]: the unit state after each byte
    index = np.zeros(units.num_states, np.int32)
    index[mids] = np.arange(len(mids))
    inner_step = np.isin(step, mids)
    offsets = first + len(mids) * np.arange(len(targets), dtype=np.int32)
    np.multiply(offsets[:, None, None], inner_step[None], out=inner)
    inner += np.where(inner_step, index[step], 0).astype(np.int32)[None]
    j, b = np.nonzero(step == units.start)  # a unit's last byte: on to the target
    inner[:, j, b] = targets[:, None]


def _inner_states(dfa: ByteDFA, language: UnitLanguage) -> tuple[np.ndarray, np.ndarray]:
    """The states ``dfa``'s placeholder leads to, and the unit states inside a unit: `expand_unit_loops`
    numbers the state inside a unit at ``mids[j]`` completing into ``targets[k]``
    ``dfa.num_states + k * len(mids) + j``."""
    target = dfa.transitions[:, language.placeholder]
    states = np.arange(language.dfa.num_states)
    return np.unique(target[target != DEAD]), np.flatnonzero((states != language.dfa.start) & (states != DEAD))


def completed_into(dfa: ByteDFA, language: UnitLanguage) -> np.ndarray:
    """int[N]: of each state `expand_unit_loops` adds to ``dfa`` (inside a unit), the state of
    ``dfa`` that unit completes into."""
    targets, mids = _inner_states(dfa, language)
    return np.repeat(targets, len(mids))


RemainderWalk = Callable[[np.ndarray, TokenTrie], np.ndarray]


@dataclasses.dataclass(frozen=True)
class TokenOutcomes:
    """What each ordinary token does from each state of a unit language's automaton.

    Tokens with the same outcomes from every unit state form a group; the distinct outcomes from
    each unit state are listed once, grouped by unit state.

    Attributes:
      groups: the `TokenGroups` of the strings of the vocabulary trie.
      outcome: int64[G, A], the outcome of each group from each unit state.
      unit_state: int64[O], the unit state of each outcome (ascending).
      units: int64[O], the whole units read before the token ends or exits (0 where it dies).
      ends: int64[O], the unit state the token ends at (DEAD when it exits or dies).
      remainders: int64[O], what follows the exit byte (-1: no exit; 0: nothing; k > 0: the
        string of id k in ``remainder_trie``).
      dies: bool[O], whether the token dies.
      remainder_trie: the `TokenTrie` of the non-empty remainders.
    """

    groups: TokenGroups
    outcome: np.ndarray
    unit_state: np.ndarray
    units: np.ndarray
    ends: np.ndarray
    remainders: np.ndarray
    dies: np.ndarray
    remainder_trie: TokenTrie


@functools.lru_cache(maxsize=32)  # per vocabulary: free strings, and the classes of strings schemas bound
def token_outcomes(vocab: Vocabulary, language: UnitLanguage) -> TokenOutcomes:
    """The `TokenOutcomes` of ``vocab``'s ordinary tokens for ``language`` (cached): one walk of
    the vocabulary trie from every unit state at once, following only the (unit state, node)
    pairs still alive (inside a character, most die at once)."""
    trie = vocabulary_trie(vocab)
    units = language.dfa
    num_units = units.num_states
    a, token, state, count, exit_depth = _live_token_ends(trie, units, language.exit_byte)
    # Remainders after the exit byte, numbered token by token.
    remainder_ids: dict[bytes, int] = {b"": 0}
    remainders = np.full(len(a), -1, np.int64)
    exiting = np.flatnonzero(exit_depth)
    exiting = exiting[np.lexsort((a[exiting], token[exiting]))]
    for k, token_id, depth in zip(exiting.tolist(), trie.token_ids[token[exiting]].tolist(), exit_depth[exiting].tolist()):
        remainders[k] = remainder_ids.setdefault(vocab.tokens[token_id][depth:], len(remainder_ids))
    state[exiting] = DEAD
    # One code per outcome (0: dies, as every pair not listed). Tokens with equal codes from every
    # unit state form a group (hashed: one token of each is enough to find the outcomes); outcomes
    # are numbered by unit state, then code, groups by their outcomes in lexicographic order.
    code = 2 + (count * num_units + state) * (len(remainder_ids) + 1) + remainders
    hashes = np.zeros((2, len(trie.token_ids)), np.uint64)
    for row, weights in zip(hashes, hash_multipliers(num_units)):
        np.add.at(row, token, weights[a] * code.astype(np.uint64))
    same, first = classes_of_hashes(hashes)
    # The codes (and what they stand for) of one token of each group, [A, G].
    listed = np.full(len(trie.token_ids), -1, np.int64)
    listed[first] = np.arange(len(first))
    mine = np.flatnonzero(listed[token] >= 0)
    where = (a[mine], listed[token[mine]])
    rep_code, rep_count, rep_state = (np.zeros((num_units, len(first)), np.int64) for _ in range(3))
    rep_remainder = np.full((num_units, len(first)), -1, np.int64)
    for table, values in ((rep_code, code), (rep_count, count), (rep_state, state), (rep_remainder, remainders)):
        table[where] = values[mine]
    keys = np.arange(num_units)[:, None] * (int(code.max(initial=0)) + 1) + rep_code
    by_key = np.lexsort((np.broadcast_to(first, keys.shape).ravel(), keys.ravel()))  # the first token first
    outcome = np.empty(keys.size, np.int64)
    starts = run_starts(keys.ravel()[by_key])
    outcome[by_key] = np.cumsum(starts) - 1
    unit_state, group = np.divmod(by_key[starts], len(first))
    outcome = outcome.reshape(keys.shape).T  # [G, A], G in the order of `first`
    rank = row_groups(outcome)
    member = np.empty(len(first), np.int64)
    member[rank] = np.arange(len(first))
    return TokenOutcomes(
        groups=token_groups(trie, rank[same], vocab.logits_width),
        outcome=outcome[member],
        unit_state=unit_state,
        units=rep_count[unit_state, group],
        ends=rep_state[unit_state, group],
        remainders=rep_remainder[unit_state, group],
        dies=rep_code[unit_state, group] == 0,
        remainder_trie=build_trie(list(remainder_ids)[1:], list(range(1, len(remainder_ids)))),
    )


def _live_token_ends(trie: TokenTrie, units: ByteDFA, exit_byte: int) -> tuple[np.ndarray, ...]:
    """The (unit state, token) pairs where a token does not die from that unit state, int64[P]
    each: the unit state, the token (its index in the trie), the unit state it ends at, the whole
    units it reads, and the depth of its exit byte (0: none; where there is one, the state is
    that at the exit)."""
    a = np.arange(1, units.num_states)  # from the dead state every token dies
    node = np.zeros(len(a), np.int64)  # level-local positions
    state, count, exit_depth = a.copy(), np.zeros(len(a), np.int64), np.zeros(len(a), np.int64)
    found, first = [(np.zeros(0, np.int64),) * 5], 1  # no token ends at the root
    for depth, (starts, labels) in enumerate(zip(trie.child_starts, trie.labels), 1):
        children = starts[node + 1] - starts[node]
        node = concatenated_ranges(starts[node], children)
        a, state, count, exit_depth = (np.repeat(x, children) for x in (a, state, count, exit_depth))
        label = labels[node]
        leaving = (exit_depth == 0) & (state == units.start) & (label == exit_byte)
        stepping = (exit_depth == 0) & ~leaving
        state = np.where(stepping, units.transitions[state, label], state)
        count = count + (stepping & (state == units.start))
        exit_depth = np.where(leaving, depth, exit_depth)
        alive = state != DEAD
        a, node, state, count, exit_depth = a[alive], node[alive], state[alive], count[alive], exit_depth[alive]
        found.append((a, first + node, state, count, exit_depth))
        first += len(labels)
    a, node, state, count, exit_depth = (np.concatenate(x) for x in zip(*found))
    # The pairs of the tokens that end at those nodes: the first of each node, then the others
    # spelled alike.
    firsts, others, other_nodes = trie.node_strings
    ending = np.flatnonzero(firsts[node] >= 0)
    by_node = stable_order(node)
    lo, hi = np.searchsorted(node[by_node], other_nodes), np.searchsorted(node[by_node], other_nodes, side="right")
    alike = by_node[concatenated_ranges(lo, hi - lo)]
    pairs = np.concatenate([ending, alike])
    token = np.concatenate([firsts[node[ending]], np.repeat(others, hi - lo)])
    return a[pairs], token, state[pairs], count[pairs], exit_depth[pairs]


@dataclasses.dataclass(frozen=True)
class LoopColumns:
    """The token columns of the states inside loops (`loop_columns`), listed sparsely.

    Attributes:
      rows: int64[R], the states (`UnitLoops.rows`).
      groups: the `TokenGroups` of `token_outcomes`.
      class_of_group: int64[G], the class of each group (-1: dead from every row).
      num_classes: C, the classes.
      row, klass, value: int64[E] each, the (row index, class, column) entries that do not die,
        in no set order; every other entry is DEAD.
    """

    rows: np.ndarray
    groups: TokenGroups
    class_of_group: np.ndarray
    num_classes: int
    row: np.ndarray
    klass: np.ndarray
    value: np.ndarray

    def dense(self) -> np.ndarray:
        """int32[R, C], the column of each class from each row."""
        columns = np.full((len(self.rows), self.num_classes), DEAD, np.int32)
        columns[self.row, self.klass] = self.value
        return columns


def loop_columns(
    loops: UnitLoops, transitions: np.ndarray, vocab: Vocabulary, after_remainders: RemainderWalk | None = None
) -> LoopColumns:
    """The token columns of the states inside loops, from the vocabulary's `token_outcomes`.

    A token that reads ``u`` whole units from a state counting from boundary state ``b`` lands
    ``u`` units after ``b`` along its count chain (less one unit inside a unit, which the first
    unit completes), inside the next unit if it ends mid-unit, and after an exit at the state the
    remainder leads to from the exit byte's target. Each distinct outcome is evaluated once per
    state of its unit state; the groups of `token_outcomes` are classed by random linear hashes
    of their columns. Only the classes that read on from a row's unit state are listed for it
    (most classes die inside a unit).

    Args:
      loops: the automaton's `UnitLoops`.
      transitions: int32[S', 256], the expanded automaton's transitions (S' >= S: states added
        since, another language's units spliced in, say, are not read here; with
        ``after_remainders`` None, they must not be reached by bytes).
      vocab: the vocabulary.
      after_remainders: what follows a remainder read from each state an exit enters, int64[k, M]
        for the k states and the remainder trie's strings (DEAD: dies); None: the state after it.

    Returns:
      The `LoopColumns`: a column is the state after the token, or a value of
      ``after_remainders`` (an empty remainder gives the state the exit enters).
    """
    outcomes = token_outcomes(vocab, loops.language)
    rows, unit_state, base, behind = loops.rows
    num_states, max_units = len(loops.unit_target), int(outcomes.units.max(initial=0))
    transitions = transitions[:num_states]  # without states appended after the expansion
    # along[i, u]: the boundary state u units after the i-th base (DEAD: none).
    bases, base_index = np.unique(base, return_inverse=True)
    along = np.zeros((len(bases), max_units + 2), np.int64)
    along[:, 0] = bases
    for u in range(max_units + 1):
        along[:, u + 1] = loops.unit_target[along[:, u]]
    exit_target = transitions[:, loops.language.exit_byte].astype(np.int64)
    # after[i, m]: the state after remainder m (0: the empty one) from the i-th state an exit
    # enters (row 0: none, DEAD); entry[s]: the row of state s.
    remainders = outcomes.remainder_trie
    entered = np.unique(exit_target[along])
    entered = entered[entered != DEAD]
    entry = np.zeros(num_states, np.int64)
    entry[entered] = np.arange(1, len(entered) + 1)
    after = np.zeros((len(entered) + 1, len(remainders.token_ids) + 1), np.int64)
    after[1:, 0] = entered
    check_time()
    if len(remainders.token_ids) and len(entered):
        walk = after_remainders or (lambda states, trie: walk_tokens(trie, transitions, states))
        after[1:, remainders.token_ids] = walk(entered, remainders)

    check_time()
    # The value of each outcome from each row of its unit state, and the outcome's hash over
    # those rows, one unit state at a time: int64[O_a, R_a] by outcome, then row in order.
    by_unit = stable_order(unit_state)
    num_units = loops.language.dfa.num_states
    row_bounds = itertools.pairwise([0, *np.cumsum(np.bincount(unit_state, minlength=num_units)).tolist()])
    outcome_bounds = itertools.pairwise([0, *np.cumsum(np.bincount(outcomes.unit_state, minlength=num_units)).tolist()])
    multipliers = hash_multipliers(len(transitions) + 1)
    outcome_hash = np.zeros((2, len(outcomes.units) + 1), np.uint64)
    outcome_live = np.zeros(len(outcomes.units) + 1, bool)
    blocks = []
    for (row_lo, row_hi), (lo, hi) in zip(row_bounds, outcome_bounds):
        mine, theirs = by_unit[row_lo:row_hi], slice(lo, hi)
        value = _values(loops, outcomes, theirs, behind[mine], along[base_index[mine]], exit_target, entry, after)
        blocks.append((mine, theirs.start, value))
        outcome_hash[:, theirs] = (value.astype(np.uint64) @ multipliers[:, rows[mine]].T).T
        outcome_live[theirs] = (value != DEAD).any(axis=1)
        check_time()
    group_class, representative = classes_of_hashes(outcome_hash[:, outcomes.outcome].sum(axis=2))
    live = outcome_live[outcomes.outcome[representative]].any(axis=1)
    class_of_class = np.where(live, np.cumsum(live) - 1, -1)
    check_time()
    class_outcome = outcomes.outcome[representative[live]]  # [C, A]: each class's outcome from each unit state
    # The entries of the classes that read on from each unit state, from the rows of that state.
    entries = []
    for a, (mine, first, value) in enumerate(blocks):
        reading = np.flatnonzero(outcome_live[class_outcome[:, a]])
        block = value[class_outcome[reading, a] - first]
        klass, row = np.nonzero(block != DEAD)
        entries.append((mine[row], reading[klass], block[klass, row]))
    row, klass, value = (np.concatenate(column) for column in zip(*entries))
    return LoopColumns(rows, outcomes.groups, class_of_class[group_class], len(class_outcome), row, klass, value)


def _values(loops, outcomes, theirs: slice, behind, along, exit_target, entry, after) -> np.ndarray:
    """int64[O, R], the state after each of the outcomes ``theirs`` (all of one unit state) from
    each of that unit state's R rows (`loop_columns`): ``behind`` int64[R], the units each row
    is behind its base; ``along`` int64[R, U], the boundary states after its base."""
    units, ends = outcomes.units[theirs], outcomes.ends[theirs]
    remainders, dies = outcomes.remainders[theirs], outcomes.dies[theirs]
    # Whole units past the base (inside a unit, the first completes it).
    past = units[:, None] - behind
    landed = np.take_along_axis(along, np.maximum(past, 0).T, axis=1).T
    value = landed.copy()
    mid = np.flatnonzero((ends != loops.language.dfa.start) & (ends != DEAD))  # ends inside a unit
    in_progress = np.where(past[mid] >= 0, loops.unit_target[landed[mid]], landed[mid])
    value[mid] = loops.inside[in_progress, ends[mid, None]]
    exits = np.flatnonzero(remainders >= 0)
    value[exits] = after[entry[exit_target[landed[exits]]], remainders[exits, None]]
    value[dies] = DEAD
    return value
