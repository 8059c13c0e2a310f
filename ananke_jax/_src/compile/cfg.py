"""Token-level tables of a context-free grammar (numpy, host).

From each lexer state, a token's bytes may complete terminals on the way; since the lexer has
no priorities, every place where a terminal ends may be a cut or not. A token's *outcome* is one
way through: the terminals it completes (ignored ones left out) and the lexer state after its
last byte. Whether an outcome is possible depends on the parser's stack only, so the device
checks outcomes, not tokens: a token is allowed when one of its outcomes is. This module lists
the outcomes of every (lexer state, token) pair, walking the distinct byte-class spellings of
the vocabulary through a prefix tree from all lexer states at once.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import itertools

import jax
import numpy as np

from ananke_jax._src.compile.arrays import (
    concatenated_ranges,
    hash_multipliers,
    pack_bits,
    padded_groups,
    sorted_unique,
    stable_order,
    unique_first_inverse,
    unique_inverse,
)
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, pausing_gc, row_groups
from ananke_jax._src.compile.budget import charge_bytes, check_time
from ananke_jax._src.compile.lark_lexer import contextual_lexing
from ananke_jax._src.compile.lexer import Lexer, begins_outside, build_lexer, without_empty_terminals
from ananke_jax._src.compile.lr import LRTables, fused_reductions, lr_tables, terminal_follow
from ananke_jax._src.compile.outcome_trie import MAX_LANES, outcome_tries
from ananke_jax._src.compile.outcome_walk import CHUNK_ROWS, Cuts, WalkedOutcomes, context_free_cuts, walk_outcomes
from ananke_jax._src.compile.token_refs import spell_token_refs
from ananke_jax._src.compile.token_table import spell_tokens
from ananke_jax._src.compile.token_trie import TokenTrie, classes_of_hashes, distinct_rows
from ananke_jax._src.compile.unit_loops import LoopColumns, UnitLanguage, UnitLoops, completed_into, expand_unit_loops, loop_columns
from ananke_jax._src.engines.lr import fork_width
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.ir import Grammar, TerminalDef
from ananke_jax._src.vocab import Vocabulary

EMPTY_SET = 0  # the outcome set of tokens that are never allowed


@dataclasses.dataclass(frozen=True)
class CFGTables:
    """Everything the pushdown engine's tables are made from.

    Attributes:
      lexer: the terminals' product automaton.
      lr: the LALR(1) tables, with `lr.fused_reductions`.
      column_terminal: int32[T], the lexer terminal of each LR column (-1: the end of input).
      outcome_terminals: int32[O, M], the LR columns an outcome completes (padded with -1).
      outcome_length: int32[O].
      outcome_lexer: int32[O], the lexer state after the token.
      state_outcomes: int32[Q, P], the outcomes that occur from each lexer state (padded -1);
        an outcome's *local* index is its position in its state's row.
      set_members: int32[NS, Z], the local outcomes of each outcome set (padded with -1);
        set 0 is empty. A set means the same local indices from every lexer state.
      token_class: int32[logits_width], tokens alike from every lexer state share a class.
      class_row: int32[Q], each lexer state's row of ``class_set``.
      class_set: int32[D, C], the outcome set of each token class from the lexer states of each
        row (states along a length-bounded string share a few rows).
    """

    lexer: Lexer
    lr: LRTables
    column_terminal: np.ndarray
    outcome_terminals: np.ndarray
    outcome_length: np.ndarray
    outcome_lexer: np.ndarray
    state_outcomes: np.ndarray
    set_members: np.ndarray
    token_class: np.ndarray
    class_row: np.ndarray
    class_set: np.ndarray


def cfg_tables(grammar: Grammar, vocab: Vocabulary, *, max_actions: int = 1) -> CFGTables:
    """Compile a validated grammar IR against a vocabulary (LR tables with up to
    ``max_actions`` actions a cell).

    Raises:
      GrammarError: LR conflicts beyond ``max_actions``, or terminals too complex to combine.
    """
    grammar, dfas = without_empty_terminals(grammar.validate())
    lr = lr_tables(grammar, max_actions=max_actions)
    begins, follow = terminal_follow(grammar, lr.terminals)
    if grammar.lexer == "lark":
        if any(t.not_followed_by for t in grammar.terminals):
            raise GrammarError("lexer='lark' takes no terminal's not_followed_by: Lark's lexer reads the next text itself")
        lexing = contextual_lexing(grammar, dfas, lr, follow)
        lr, lexer, loops, column_terminal = lexing.lr, lexing.lexer, (), lexing.column_terminal
        # The byte classes also keep apart the bytes that cuts treat differently.
        spelled = spell_tokens(np.vstack([lexer.transitions, lexing.cut_targets.reshape(-1, 256)]), vocab, merged=False)
        transitions, targets = np.split(spelled.transitions, [lexer.num_states])
        may_start = np.ones((len(lr.terminals), lexer.num_states), bool)
        cuts = Cuts(lexing.cut_columns, lexing.follow, may_start, targets=targets.reshape(lexer.num_states, -1, targets.shape[1]))
    else:
        column = {name: j for j, name in enumerate(lr.terminals)}
        lr_column = np.array([-1 if t.name in grammar.ignore else column[t.name] for t in grammar.terminals], np.int32)
        column_terminal = np.append(np.flatnonzero(lr_column >= 0), -1)
        excluded_after = [()] * len(follow)
        for t, a in zip(grammar.terminals, lr_column):
            if t.not_followed_by and a < 0:
                raise GrammarError(f"ignored terminal {t.name} has a not_followed_by, which only a terminal of the rules may have")
            if t.not_followed_by:
                excluded_after[a] = t.not_followed_by
        _check_exclusions(grammar, dfas, lr.terminals, follow, excluded_after)
        start_begins, start_excluded, start_of_context = _lexer_starts(lr_column, begins, follow, excluded_after)
        lexer, loops = _lexer_with_loops(grammar.terminals, dfas, start_begins, start_excluded)
        cuts = context_free_cuts(lexer, lr_column, follow, lexer.starts[start_of_context])
        check_time()
        spelled = spell_tokens(lexer.transitions, vocab, merged=False)
        transitions = spelled.transitions

    def walk(transitions, trie, sources):
        return walk_outcomes(lexer, transitions, trie, cuts, sources, lr.terminals)

    # Later starts are never between tokens; loops' states get their outcomes per vocabulary.
    later = np.setdiff1d(lexer.starts[1:], lexer.starts[:1])  # (a context's start may be the initial one)
    skipped = functools.reduce(np.union1d, [loop.rows[0] for loop in loops], later)
    walked = walk(transitions, spelled.trie, np.setdiff1d(np.arange(1, lexer.num_states), skipped))
    looped = [_loop_outcomes(lexer, loop, vocab, walk) for loop in loops]
    check_time()
    q, column, outcome, table = walked.q, walked.column, walked.outcome, (walked.terminals, walked.lengths, walked.lexer_after)
    # Each loop's rows follow those before, one pseudo-column per value after their columns.
    firsts = [walked.num_columns + 1]  # each loop's first pseudo-column, and the end of the last
    for loop in looped:
        table, (ids, looped_ids) = _merged_outcomes(table, loop.outcomes)
        pair_q, pair_value, pair_outcome = loop.triples(looped_ids)
        q = np.concatenate([q, pair_q])
        column = np.concatenate([column, firsts[-1] + pair_value])
        outcome = np.concatenate([ids[outcome], pair_outcome])
        firsts.append(firsts[-1] + int(pair_value.max(initial=0)) + 1)
    terminals, lengths, lexer_after = table
    # The (state, outcome) pairs that occur, sorted; an outcome's local index is its rank in its
    # state's row (a dense [Q, O] table of them took gigabytes on large lexers).
    keys = q * len(lengths) + outcome
    pairs = sorted_unique(keys)
    state_q, state_outcome = pairs // len(lengths), pairs % len(lengths)
    local = np.searchsorted(pairs, keys) - np.searchsorted(state_q, np.arange(lexer.num_states))[q]
    check_time()
    group_q, group_column, set_of_group, set_members = _outcome_sets(q, column, local)
    check_time()
    is_walked = group_column < walked.num_columns

    # Columns whose outcome sets agree in every lexer state form a class. The (state, column)
    # table of sets is sparse (EMPTY_SET = 0 elsewhere), so the columns are hashed from the
    # groups; the last column stands for tokens never allowed.
    multipliers = hash_multipliers(lexer.num_states)
    hashes = np.zeros((len(multipliers), walked.num_columns + 1), np.uint64)
    for row, weights in zip(hashes, multipliers):
        np.add.at(row, group_column[is_walked], weights[group_q[is_walked]] * set_of_group[is_walked].astype(np.uint64))
    column_class, representatives = classes_of_hashes(hashes)
    string_column = np.where(walked.string_column >= 0, walked.string_column, walked.num_columns)
    token_class = np.full(vocab.logits_width, column_class[-1], np.int64)
    token_class[spelled.token_ids] = column_class[string_column[spelled.spelling]]
    class_index = np.full(walked.num_columns + 1, -1, np.int64)
    class_index[representatives] = np.arange(len(representatives))
    chosen = is_walked & (class_index[np.minimum(group_column, walked.num_columns)] >= 0)
    walked_sets = (group_q[chosen], class_index[group_column[chosen]], set_of_group[chosen])
    read_by_class = [np.arange(len(representatives))]  # per part, the column each token class reads
    for loop in looped:
        token_class, before, loop_of_class = loop.split_classes(token_class)
        read_by_class = [*(reads[before] for reads in read_by_class), loop_of_class]
    loop_sets = [loop.sets(set_of_group[(group_column >= lo) & (group_column < hi)]) for loop, lo, hi in zip(looped, firsts, firsts[1:])]
    parts = [(*sets, reads) for sets, reads in zip([walked_sets, *loop_sets], read_by_class)]
    class_row, class_set = _class_table(lexer.num_states, parts)

    return CFGTables(
        lexer=lexer,
        lr=fused_reductions(lr),
        column_terminal=column_terminal.astype(np.int32),
        outcome_terminals=terminals,
        outcome_length=lengths,
        outcome_lexer=lexer_after,
        state_outcomes=padded_groups(state_q, state_outcome, lexer.num_states),
        set_members=set_members,
        token_class=token_class.astype(np.int32),
        class_row=class_row,
        class_set=class_set,
    )


def _lexer_with_loops(
    terminals: tuple[TerminalDef, ...], dfas: dict[str, ByteDFA], begins: np.ndarray, excluded: tuple[tuple, ...] | None = None
) -> tuple[Lexer, tuple[UnitLoops, ...]]:
    """The lexer (`build_lexer`), the terminals' placeholder units (`TerminalDef.units`) spliced
    in as loops (`unit_loops.expand_unit_loops`), whose states `_loop_outcomes` steps per
    vocabulary. A language loops for each placeholder byte, the one whose loops hold the most
    states (those that read a placeholder, times the live states of a unit: a JSON string's
    characters, say, and one set of code points); the others' terminals are spelled out. Where
    a terminal ends inside a loop, or a loop's state reads other bytes, its units are spliced in
    all the same but walked with the other states (no loops); where a lexer state reads a unit
    beside a terminal that begins with one of its bytes, the lexer is built again with that
    language's terminals spelled out."""
    held = collections.Counter()
    for t in terminals:
        if t.units is not None:
            reading = np.count_nonzero(dfas[t.name].transitions[:, t.units.placeholder])
            held[t.units] += int(reading) * (t.units.dfa.num_states - 1)
    kept: list[UnitLanguage] = []
    for language, _ in held.most_common():
        if all(language.placeholder != other.placeholder for other in kept):
            kept.append(language)
    while True:
        spelled = {
            t.name: dfas[t.name] if t.units is None or t.units in kept else expand_unit_loops(dfas[t.name], t.units)[0] for t in terminals
        }
        lexer, loops = build_lexer(terminals, spelled, begins, excluded), []
        for language in kept:
            spliced = _spliced(lexer, language)
            if spliced is None:
                kept.remove(language)
                break
            lexer, loop = spliced
            loops += [] if loop is None else [loop]
        else:
            return lexer, tuple(loops)


def _spliced(lexer: Lexer, language: UnitLanguage) -> tuple[Lexer, UnitLoops | None] | None:
    """``lexer`` with the units of ``language`` spliced in, and their loops where they can be
    stepped per vocabulary (else None: a terminal ends inside them, or a state of theirs reads
    other bytes); None where a state reads a unit beside a byte that begins one
    (`expand_unit_loops`)."""
    whole = ByteDFA(lexer.transitions, lexer.ends.any(axis=1), lexer.start)
    expanded = expand_unit_loops(whole, language, "the lexer (the terminals' product automaton)")
    if expanded is None:
        return None
    dfa, loops = expanded
    # A state inside a unit ends no terminal and is alive for those of the state the unit completes into.
    new = completed_into(whole, language)
    ends = np.vstack([lexer.ends, np.zeros((len(new), len(lexer.terminals)), bool)])
    lexer = Lexer(lexer.terminals, dfa.transitions, ends, np.vstack([lexer.alive, lexer.alive[new]]), lexer.starts)
    steppable = loops is not None and not lexer.ends[np.flatnonzero(loops.unit_target)].any()
    return lexer, loops if steppable else None


@dataclasses.dataclass(frozen=True)
class _LoopOutcomes:
    """The outcomes of the tokens from the states inside unit loops (`_loop_outcomes`).

    Attributes:
      columns: the `LoopColumns`; a column's *value* is a lexer state v < Q (the token completes
        no terminal and ends in v) or Q + k, the k-th (state, remainder) pair walked after an exit.
      outcomes: (terminals int32[O, M], lengths int32[O], lexer_after int32[O]), the outcomes.
      value, outcome: int64[X] each, the (value, outcome) pairs.
    """

    columns: LoopColumns
    outcomes: tuple[np.ndarray, np.ndarray, np.ndarray]
    value: np.ndarray
    outcome: np.ndarray

    @functools.cached_property
    def _pairs(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The distinct (row, value) pairs of the entries, sorted: their rows and values, the pair
        of each entry, and the number of outcomes of each pair's value."""
        entries = self.columns
        width = int(entries.value.max(initial=0)) + 1
        keys = entries.row * width + entries.value
        # The entries come in long runs of rising rows (a class's, from one unit state): sorting
        # and searching them is about twice as fast as `unique_inverse`'s stable order.
        pairs = sorted_unique(keys)
        pair_of_entry = np.searchsorted(pairs, keys)
        value = pairs % width
        return pairs // width, value, pair_of_entry, np.bincount(self.value[self.value < width], minlength=width)[value]

    def triples(self, outcome_of: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(state, value, outcome) for each value in each row and each outcome of that value,
        sorted by row and value; ``outcome_of`` the merged id of each of ``outcomes``."""
        row, value, _, lines = self._pairs
        order = stable_order(self.value)
        first = np.searchsorted(self.value[order], value)
        chosen = order[concatenated_ranges(first, lines)]
        return np.repeat(self.columns.rows[row], lines), np.repeat(value, lines), outcome_of[self.outcome[chosen]]

    def split_classes(self, token_class: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Token classes (``token_class``, int[V]: the walk's, or those of an earlier split) split
        by loop class: the new class of each token, and of each new class its class before the
        split and its loop class (-1: none)."""
        entries = self.columns
        num_loop = entries.num_classes
        loop_class = np.append(entries.class_of_group, -1)[np.minimum(entries.groups.of_id, len(entries.class_of_group))]
        classes, token_class = unique_inverse(token_class * (num_loop + 1) + loop_class + 1)
        return token_class, classes // (num_loop + 1), classes % (num_loop + 1) - 1

    def sets(self, set_id: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(state, loop class, set) of the entries that do not die, from ``set_id``, the set of
        each (state, value) group of `triples`, in its order."""
        _, _, pair_of_entry, lines = self._pairs
        set_of_pair = np.full(len(lines), EMPTY_SET, set_id.dtype)
        set_of_pair[lines > 0] = set_id
        entries = self.columns
        return entries.rows[entries.row], entries.klass, set_of_pair[pair_of_entry]


def _class_table(num_states: int, parts: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, np.ndarray]:
    """The table int32[Q, C] of the outcome sets of the token classes from each lexer state,
    given sparsely and kept once per distinct row: int32[Q], each state's row, and int32[D, C].

    Args:
      num_states: Q.
      parts: per kind of lexer state, int64[E] states, int64[E] columns and int[E] sets: its
        entries (every other is EMPTY_SET), in columns of its own; and int64[C], the column each
        class reads (-1: none). The entries of a state all lie in one part.

    Rows are told apart by random linear hashes, computed from the entries (a class's weight
    summed into the column it reads), so the [Q, C] table is never made.
    """
    num_classes = len(parts[0][3])
    weights = hash_multipliers(num_classes)
    hashes = np.zeros((len(weights), num_states), np.uint64)
    for q, column, sets, of_class in parts:
        check_time()
        reads = of_class >= 0
        for row, weight in zip(hashes, weights):
            column_weight = np.zeros(int(max(column.max(initial=-1), of_class.max(initial=-1))) + 1, np.uint64)
            np.add.at(column_weight, of_class[reads], weight[reads])
            np.add.at(row, q, column_weight[column] * sets.astype(np.uint64))
    class_row, member = classes_of_hashes(hashes)
    charge_bytes(4 * len(member) * num_classes, "the mask tables")
    position = np.full(num_states, -1, np.int64)
    position[member] = np.arange(len(member))
    class_set = np.full((len(member), num_classes), EMPTY_SET, np.int32)
    for q, column, sets, of_class in parts:
        kept = position[q] >= 0
        rows = sorted_unique(position[q[kept]])
        # One more column, EMPTY_SET, for the classes that read none.
        dense = np.full((len(member), int(max(column.max(initial=-1), of_class.max(initial=-1))) + 2), EMPTY_SET, np.int32)
        dense[position[q[kept]], column[kept]] = sets[kept]
        class_set[rows] = dense[rows][:, of_class]
    return class_row, class_set


def _lookup(keys: np.ndarray, values: np.ndarray, queries: np.ndarray, default: int) -> np.ndarray:
    """The value of each query's key (``default`` where there is none); ``keys`` sorted, distinct."""
    if not len(keys):
        return np.full(queries.shape, default)
    at = np.minimum(np.searchsorted(keys, queries), len(keys) - 1)
    return np.where(keys[at] == queries, values[at], default)


def _loop_outcomes(lexer: Lexer, loops: UnitLoops, vocab: Vocabulary, walk) -> _LoopOutcomes:
    """The outcomes of every token from the states inside ``loops``, from the vocabulary's outcomes
    of the unit language (`unit_loops.loop_columns`): a token that stays in its loop completes no
    terminal; one that leaves it goes on as its remainder does from the state the exit enters,
    walked here (``walk(transitions, trie, sources)``, `outcome_walk.walk_outcomes`) once per remainder and
    such state."""
    tables, values = [], []

    def after_remainders(entered: np.ndarray, trie: TokenTrie) -> np.ndarray:
        found: WalkedOutcomes = walk(lexer.transitions, trie, entered)
        # A value per (state, column) pair that occurs.
        width = found.num_columns + 1
        keys, key_of = np.unique(found.q * width + found.column, return_inverse=True)
        column = found.string_column[trie.token_ids]
        queries = entered[:, None] * width + np.where(column >= 0, column, found.num_columns)[None, :]
        tables.append((found.terminals[found.outcome], found.lengths[found.outcome], found.lexer_after[found.outcome]))
        values.append(lexer.num_states + key_of.reshape(-1))
        return _lookup(keys, lexer.num_states + np.arange(len(keys)), queries, DEAD)

    columns = loop_columns(loops, lexer.transitions, vocab, after_remainders)
    check_time()
    # Values below Q: the token completes no terminal and ends in that state.
    states = sorted_unique(columns.value)
    states = states[(states != DEAD) & (states < lexer.num_states)]
    tables.insert(0, (np.full((len(states), 1), -1, np.int32), np.zeros(len(states), np.int32), states.astype(np.int32)))
    values.insert(0, states)
    outcomes, ids = _merged_outcomes(*tables)
    return _LoopOutcomes(columns, outcomes, np.concatenate(values), np.concatenate(ids))


def _merged_outcomes(*tables) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[np.ndarray]]:
    """One table of the distinct outcomes of several (terminals int32[O, M], lengths int32[O],
    lexer_after int32[O]) tables, and the merged id of each outcome of each."""
    width = max(t[0].shape[1] for t in tables)
    padded = [np.pad(t[0], ((0, 0), (0, width - t[0].shape[1])), constant_values=-1) for t in tables]
    rows = np.concatenate([np.column_stack([p, t[1], t[2]]) for p, t in zip(padded, tables)])
    _, first, inverse = unique_first_inverse(row_groups(rows))  # np.unique(axis=0) took 0.4 s on loops' outcomes
    distinct = rows[first]
    bounds = np.cumsum([0, *(len(t[1]) for t in tables)])
    inverse = inverse.reshape(-1)
    merged = (
        np.ascontiguousarray(distinct[:, :width], np.int32),
        distinct[:, width].astype(np.int32),
        distinct[:, width + 1].astype(np.int32),
    )
    return merged, [inverse[a:b] for a, b in itertools.pairwise(bounds)]


def _check_exclusions(
    grammar: Grammar, dfas: dict[str, ByteDFA], columns: tuple[str, ...], follow: np.ndarray, excluded_after: list[tuple]
) -> None:
    """Refuse a terminal whose ``not_followed_by`` excludes every string of a terminal that the
    rules let follow it somewhere, unless an ignored terminal may come between: the parser, which
    knows terminals and not their first characters, could take text after which nothing may
    follow (a dead end). Otherwise whatever the parser needs next can begin outside the class,
    and masks stay exact. (Conservative: the follower may not be the only way on.)"""
    for a, ranges in enumerate(excluded_after):
        if not ranges or any(begins_outside(dfas[name], ranges) for name in grammar.ignore):
            continue
        blocked = [columns[b] for b in np.flatnonzero(follow[a]) if columns[b] in dfas and not begins_outside(dfas[columns[b]], ranges)]
        if blocked:
            raise GrammarError(
                f"terminal {columns[a]} may not be followed by a character of its lookahead, with which every string of "
                f"{', '.join(blocked)} begins, and the rules let {'them' if len(blocked) > 1 else 'it'} follow it: "
                "text could be written that nothing completes (allow some text between them, or drop the lookahead)"
            )


def _lexer_starts(
    lr_column: np.ndarray, begins: np.ndarray, follow: np.ndarray, excluded_after: list[tuple]
) -> tuple[np.ndarray, tuple[tuple, ...], np.ndarray]:
    """The lexer's start states: after a cut, only the terminals that may follow the one cut,
    and no first character the cut one excludes.

    Args:
      lr_column: int32[n], each lexer terminal's LR column (-1: ignored).
      begins, follow: bool[T] and bool[T, T] from `terminal_follow`.
      excluded_after: per LR column, the code point ranges no text after it begins with.

    Returns:
      bool[K, n], the terminals each start may begin, the initial state's first; the ranges each
      start excludes; and int[T + 1], the start after each LR column a (at a + 1; 0: after an
      ignored terminal, or none yet). An ignored terminal hides the terminal before it, so a
      grammar with ignored terminals gets starts that begin them all.
    """
    if (lr_column < 0).any():
        rows = np.ones((len(follow) + 1, len(lr_column)), bool)
    else:
        rows = np.concatenate([begins[None], follow])[:, lr_column]
    contexts = [(row.tobytes(), excluded) for row, excluded in zip(rows, [(), *excluded_after])]
    first: dict[tuple, int] = {}  # each distinct context's first row: the initial state's first
    for i, context in enumerate(contexts):
        first.setdefault(context, i)
    index = {context: k for k, context in enumerate(first)}
    return rows[list(first.values())], tuple(excluded for _, excluded in first), np.array([index[c] for c in contexts], np.int64)


def _outcome_sets(q: np.ndarray, string: np.ndarray, outcome: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Intern the set of (local) outcomes of each (state, string) group.

    The rows come from `outcome_walk.walk_outcomes`, distinct and with the rows of a group contiguous.

    Returns:
      The state, string and set id of each group, and int32[NS, Z], the outcomes of each set
      padded with -1 (set 0 is empty).
    """
    starts = np.flatnonzero(np.concatenate([[True], (q[1:] != q[:-1]) | (string[1:] != string[:-1])])) if len(q) else np.zeros(0, np.int64)
    group_size = np.diff(np.append(starts, len(outcome)))
    set_of_group = np.empty(len(starts), np.int64)
    # A group of one row (most, often all) holds the set of its one outcome, numbered by it.
    single = np.flatnonzero(group_size == 1)
    value = outcome[starts[single]]
    present = np.zeros(int(outcome.max(initial=0)) + 1, bool)
    present[value] = True
    number = np.cumsum(present) - 1
    set_of_group[single] = number[value]
    first = np.empty(int(present.sum()), np.int64)  # one group of each set
    first[number[value]] = single
    several = np.flatnonzero(group_size > 1)
    if len(several):  # sets of several outcomes, compared by two random 64-bit sums of their members (collisions ~2^-120)
        rows = outcome[concatenated_ranges(starts[several], group_size[several])]
        offsets = np.cumsum(group_size[several]) - group_size[several]
        weights = np.random.default_rng(0).integers(1, 2**63, size=(2, len(present)), dtype=np.uint64)
        set_of_several, first_of_set = classes_of_hashes(np.stack([np.add.reduceat(w[rows], offsets) for w in weights]))
        set_of_group[several] = len(first) + set_of_several
        first = np.concatenate([first, several[first_of_set]])
    sizes = group_size[first]
    owner = np.repeat(np.arange(len(first)), sizes)
    members = outcome[concatenated_ranges(starts[first], sizes)]
    set_members = np.full((len(first) + 1, int(sizes.max(initial=1))), -1, np.int32)
    set_members[owner + 1, concatenated_ranges(np.zeros(len(first), np.int64), sizes)] = members[np.lexsort((members, owner))]
    return q[starts], string[starts], (set_of_group + 1).astype(np.int32), set_members


def _mask_parts(class_set: np.ndarray, token_class: np.ndarray, num_sets: int, words: int) -> tuple[np.ndarray, ...]:
    """The masks of the lexer states of each row of ``class_set`` (int32[D, C]) as sums of parts
    gated by outcome sets.

    A set that holds many tokens from a state gets a dense packed row; the tokens of the other
    sets are listed one by one (most lexer states allow few tokens).

    Returns:
      Per row: state_sets int32[D, NSq], the sets that occur from the state, local index 0
      being the empty set; rows uint32[R, W] (row 0 is empty); dense_row, dense_set int32[D, B]:
      the state's rows and the local sets that gate them; sparse_token, sparse_set int32[D, Z].
      Padding is 0 throughout (the empty row, the empty set).
    """
    threshold = max(32, words // 32)
    num_states, num_classes = class_set.shape
    class_size = np.bincount(token_class, minlength=num_classes)
    by_class = stable_order(token_class)  # the tokens of each class, contiguous
    class_start = np.cumsum(class_size) - class_size
    states = np.arange(num_states, dtype=np.int64)
    pair_state, pair_set, pair_of, size = _state_set_pairs(class_set, class_size, num_sets)
    local = pair_of - np.searchsorted(pair_state, states)[:, None]  # a set's rank among its state's
    size[pair_set == EMPTY_SET] = 0
    big = np.flatnonzero(size >= threshold)
    # A dense row is the tokens of the classes in its set: rows are made once per class pattern.
    members = (class_set[pair_state[big]] == pair_set[big][:, None]) & (class_size > 0)
    row_of = row_groups(members)  # np.unique(axis=0) took seconds on wide rows
    patterns = np.empty((int(row_of.max(initial=-1)) + 1, members.shape[1]), bool)
    patterns[row_of] = members
    charge_bytes(4 * words * len(patterns), "the mask tables")
    rows = [np.zeros((1, words), np.uint32)]
    for chunk in range(0, len(patterns), 64):
        check_time()
        rows.append(pack_bits(np.take(patterns[chunk : chunk + 64], token_class, axis=1)))  # (3x faster than [:, token_class])
    # The other sets' tokens, class by class.
    check_time()
    small_q, small_c = np.nonzero((size[pair_of] > 0) & (size[pair_of] < threshold))
    token_state = np.repeat(small_q, class_size[small_c])
    padded = lambda keys, values: np.maximum(padded_groups(keys, values, num_states), 0)
    return (
        padded(pair_state, pair_set),
        np.concatenate(rows),
        padded(pair_state[big], row_of.reshape(-1) + 1),
        padded(pair_state[big], big - np.searchsorted(pair_state, pair_state[big])),
        padded(token_state, by_class[concatenated_ranges(class_start[small_c], class_size[small_c])]),
        padded(token_state, np.repeat(local[small_q, small_c], class_size[small_c])),
    )


def _state_set_pairs(class_set: np.ndarray, class_size: np.ndarray, num_sets: int) -> tuple[np.ndarray, ...]:
    """The (state, set) pairs that occur in ``class_set`` (int32[Q, C]), the empty set in every
    state, in order: int64[P] states and sets; int64[Q, C], each entry's pair; and float64[P],
    the tokens of each pair (``class_size``, int[C], the tokens of each class). Counted in blocks
    of states over a dense [block, ``num_sets``] table (sorting the Q x C keys took seconds)."""
    rows = max(1, CHUNK_ROWS // max(num_sets, 1))
    states, sets, sizes = [], [], []
    pair_of = np.empty(class_set.shape, np.int64)
    found = 0
    for lo in range(0, len(class_set), rows):
        check_time()
        block = class_set[lo : lo + rows]
        flat = (np.arange(len(block))[:, None] * num_sets + block).ravel()
        occurs = np.bincount(flat, minlength=len(block) * num_sets).reshape(len(block), num_sets) > 0
        occurs[:, EMPTY_SET] = True
        tokens = np.bincount(flat, weights=np.broadcast_to(class_size, block.shape).ravel(), minlength=len(block) * num_sets)
        state, set_ = np.nonzero(occurs)
        pair_of[lo : lo + rows] = (np.cumsum(occurs.ravel()) - 1 + found)[flat].reshape(block.shape)
        states.append(state + lo)
        sets.append(set_)
        sizes.append(tokens[state * num_sets + set_])
        found += len(state)
    concat = lambda parts, dtype: np.concatenate(parts) if parts else np.zeros(0, dtype)
    return concat(states, np.int64), concat(sets, np.int64), pair_of, concat(sizes, np.float64)


_TRIE_TABLES = (
    "node_parent",
    "node_column",
    "chunk_start",
    "num_chunks",
    "node_chunk",
    "outcome_node",
    "outcome_lookahead",
    "outcome_free",
    "complete_node",
)


@pausing_gc
def compile_ir(grammar: Grammar, vocab: Vocabulary, *, stack_depth: int = 64, max_configs: int = 4, forks: bool = True) -> PushdownGrammar:
    """Compile a grammar IR for ``vocab`` into the pushdown engine's device tables.

    Args:
      grammar: the grammar IR.
      vocab: the vocabulary.
      stack_depth: static LR stack depth D; deeper nesting is masked and flagged.
      max_configs: static number K of parse configurations kept for lexing and parsing ambiguity.
      forks: fork the parse where the LR tables conflict (up to K actions a cell); False: refuse.

    Raises:
      GrammarError: malformed grammar, empty language or LR conflicts beyond ``forks``.
    """
    if stack_depth < 2 or max_configs < 1:
        raise ValueError(f"need stack_depth >= 2 and max_configs >= 1, got {stack_depth}, {max_configs}")
    grammar, vocab = spell_token_refs(grammar, vocab)
    t = cfg_tables(grammar, vocab, max_actions=max_configs if forks else 1)
    lexer, lr = t.lexer, t.lr
    columns, end = len(lr.terminals), len(lr.terminals) - 1
    pending = np.zeros((lexer.num_states, columns), bool)
    pending[:, :end] = lexer.alive[:, t.column_terminal[:end]]
    ignored = ~np.isin(np.arange(len(lexer.terminals)), t.column_terminal)
    is_start = np.arange(lexer.num_states) == lexer.start
    pending_free = is_start | (lexer.alive & ignored).any(axis=1)
    # At EOS the output is complete when the terminal being read may end here and the parser
    # then takes the end of input (or nothing is being read): found once per distinct row of
    # ends (each kind's state is its first), and numbered in the order the lexer states have them.
    kind, kind_state = distinct_rows(lexer.ends, is_start)
    completion_ids: dict[tuple, int] = {}
    id_of_kind = np.zeros(len(kind_state), np.int64)
    for k in np.argsort(kind_state).tolist():
        q = int(kind_state[k])
        done = [(end,)] if is_start[q] else []
        for i in np.flatnonzero(lexer.ends[q]).tolist():
            done += [(int(col), end) for col in np.flatnonzero(t.column_terminal == i)] if not ignored[i] else [(end,)]
        id_of_kind[k] = completion_ids.setdefault(tuple(done), len(completion_ids))
    completions = [[list(c) for c in done] for done in completion_ids]
    # A chunk steps lanes x forks simulations at once: forking tables take fewer lanes.
    max_lanes = max(1, MAX_LANES // fork_width(lr.action_kind.shape[2], max_configs))
    tries = outcome_tries(
        t.state_outcomes,
        t.outcome_terminals,
        t.outcome_length,
        t.outcome_lexer,
        pending,
        pending_free,
        (id_of_kind[kind], completions),
        max_lanes=max_lanes,
    )
    words = -(-vocab.logits_width // 32)
    eos_bits = np.zeros(vocab.logits_width, bool)
    eos_bits[list(vocab.eos_token_ids)] = True
    check_time()
    state_sets, mask_rows, *mask_parts = _mask_parts(t.class_set, t.token_class, len(t.set_members), words)
    # The tables of the states along a large terminal (a length-bounded string) are alike: they
    # are kept once per distinct row of them all; only the outcomes' ids and lexer states are
    # each state's own.
    lexer_row, member = distinct_rows(np.column_stack([t.class_row, tries.trie_of_state]))
    mask_tables = dict(
        zip(["state_sets", "class_set", "dense_row", "dense_set", "sparse_token", "sparse_set"], [state_sets, t.class_set, *mask_parts])
    )
    mask_tables = {name: x[t.class_row[member]] for name, x in mask_tables.items()}
    trie_tables = {name: getattr(tries, name)[tries.trie_of_state[member]] for name in _TRIE_TABLES}
    per_state = dict(zip(["outcome_start", "state_outcomes", "outcome_lexer"], outcome_runs(t.state_outcomes, tries.outcome_lexer)))
    per_state["lexer_row"] = lexer_row
    tables = {**mask_tables, "mask_rows": mask_rows, **trie_tables, **per_state}
    sparse_width = tables["sparse_token"].shape[1]
    tables.update(zip(["sparse_start", "sparse_token", "sparse_set"], sparse_runs(tables.pop("sparse_token"), tables.pop("sparse_set"))))
    tables = {name: _narrowed(x) if name in _NARROW_TABLES else x for name, x in tables.items()}
    charge_bytes(
        sum(x.nbytes for x in (*tables.values(), t.token_class, t.set_members, lr.goto, lr.action_kind, lr.action_arg)),
        "the mask and LR tables",
    )
    check_time()  # before the tables go to the device
    host = dict(
        lexer_start=_host(lexer.start, np.int32),
        action_kind=_host(lr.action_kind, np.int8),
        action_arg=_host(lr.action_arg, np.int32),
        goto=_host(lr.goto, np.int32),
        rule_lhs=_host(lr.rule_lhs, np.int32),
        rule_length=_host(lr.rule_length, np.int32),
        lr_start=_host(lr.start_state, np.int32),
        **{name: _host(x) for name, x in tables.items()},
        outcome_terminals=_host(t.outcome_terminals),
        outcome_length=_host(t.outcome_length),
        set_members=_host(t.set_members),
        token_class=_host(t.token_class),
        eos_mask=_host(pack_bits(eos_bits)),
        fallback_token=_host(vocab.eos_token_ids[0], np.int32),
    )
    return PushdownGrammar(
        **jax.device_put(host),  # one call: a call per table cost about 2 ms more
        vocab_size=len(vocab),
        logits_width=vocab.logits_width,
        stack_depth=stack_depth,
        max_configs=max_configs,
        lanes=tries.lanes,
        sparse_width=sparse_width,
    )


def as_runs(has: np.ndarray, *rows: np.ndarray, pad: int = 0) -> tuple[np.ndarray, ...]:
    """Rows int[N, Z] whose entries ``has`` (bool[N, Z], each row's first ones) as runs of flat
    tables: int32[N + 1], each row's start, then each table's entries followed by ``pad`` zeros."""
    return np.append(0, np.cumsum(has.sum(axis=1))).astype(np.int32), *(np.append(x[has], np.zeros(pad, x.dtype)) for x in rows)


def outcome_runs(state_outcomes: np.ndarray, outcome_lexer: np.ndarray) -> tuple[np.ndarray, ...]:
    """The rows int[Q, P] of each lexer state's outcomes and final lexer states (padded with -1)
    as runs (`PushdownGrammar.outcome_start`): most states have few of the P outcomes a state
    may have (a fifth or less on real-world schemas), so rows took seven times the bytes."""
    return as_runs(state_outcomes >= 0, state_outcomes, outcome_lexer)


def sparse_runs(token: np.ndarray, sets: np.ndarray) -> tuple[np.ndarray, ...]:
    """The rows int[D, Z] of each row's sparse tokens and their local sets (padded with set 0) as
    runs (`PushdownGrammar.sparse_start`), then Z entries of set 0, so that a row's window of Z
    entries never passes the end: most rows list a sixth or less of the Z tokens of the busiest
    (real-world schemas)."""
    return as_runs(sets > 0, token, sets, pad=sets.shape[1])


# Tables the engine only indexes with and compares (trie nodes, outcome sets, local indices),
# not computes on: int16 where their ids fit. On 131k tokens the tables of 24 real-world
# schemas' grammars, `{}`, C and JSON came to 1.94 GB instead of 2.63 (26% less).
_NARROW_TABLES = ("outcome_node", "outcome_lookahead", "complete_node", "class_set", "state_sets", "dense_set", "sparse_set")


def _narrowed(x: np.ndarray) -> np.ndarray:
    """``x`` as int16 where its values fit, else as it is."""
    int16 = np.iinfo(np.int16)
    return x.astype(np.int16) if not x.size or (int16.min <= x.min() and x.max() <= int16.max) else x


def _host(x, dtype=None) -> np.ndarray:
    """A table with its device dtype fixed on the host (int64 becomes int32): a dtype conversion
    on the device would compile a small XLA program per table shape."""
    x = np.asarray(x, dtype)
    return x.astype(np.int32) if x.dtype == np.int64 else x
