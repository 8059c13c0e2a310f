"""LALR(1) parse tables of a grammar IR, built with lark's LALR analyser (numpy, host).

The parser works on terminals; the tables are dense int arrays that the device engine gathers
from. A conflict is not resolved: its cell holds every action, and the engine forks a parse on
it (GLR-style). Where forks are not wanted, conflicts are refused with the rules involved.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import sys
import threading

import numpy as np
from lark.common import ParserConf
from lark.grammar import NonTerminal, Rule, Terminal
from lark.parsers import grammar_analysis
from lark.parsers.lalr_analysis import LALR_Analyzer

from ananke_jax._src.compile.budget import charge_bytes, charge_states, check_time
from ananke_jax._src.compile.grammar_sets import grammar_sets
from ananke_jax._src.engines.lr import ACCEPT, ERROR, MAX_RULE_LENGTH, REDUCE, SHIFT, SHIFT_REDUCE
from ananke_jax._src.errors import ConflictError, GrammarError
from ananke_jax._src.ir import Grammar

END = "$END"

# Python frames live on the C stack before 3.11: there, much deeper recursion would crash.
_MAX_EXTRA_FRAMES = 10_000 if sys.version_info < (3, 11) else sys.maxsize
_process_wide = threading.Lock()  # held while a setting of the process is changed for a block


@contextlib.contextmanager
def _room_to_recurse(frames: int):
    """Raise Python's recursion limit by ``frames`` (at most `_MAX_EXTRA_FRAMES`) for the block."""
    with _process_wide:
        limit = sys.getrecursionlimit()
        sys.setrecursionlimit(limit + min(frames, _MAX_EXTRA_FRAMES))
        try:
            yield
        finally:
            sys.setrecursionlimit(limit)


@dataclasses.dataclass(frozen=True)
class LRTables:
    """Dense LALR(1) tables.

    Attributes:
      terminals: terminal names by column; the last column is the end of input.
      nonterminals: nonterminal names, and ``goto_column`` (int32[N]) the goto column of each:
        nonterminals that no state has a goto on both of may share one (`shared_columns`).
      action_kind: int8[S, T + 1, A], ERROR, SHIFT, REDUCE or ACCEPT (and SHIFT_REDUCE after
        `fused_reductions`): the actions of each cell, A of them where cells conflict most
        (1 for an LALR(1) grammar), ERROR-padded.
      action_arg: int32[S, T + 1, A], the state to shift to, or the rule to reduce by.
      goto: int32[S, G], the state after reducing to a nonterminal of each column (-1 where
        none is defined; after `fused_reductions`, the state after the unit rules that follow).
      rule_lhs: int32[R], the goto column of each rule's left-hand side.
      rule_length: int32[R], the number of symbols each rule pops.
      start_state: the state before any input.
    """

    terminals: tuple[str, ...]
    nonterminals: tuple[str, ...]
    goto_column: np.ndarray
    action_kind: np.ndarray
    action_arg: np.ndarray
    goto: np.ndarray
    rule_lhs: np.ndarray
    rule_length: np.ndarray
    start_state: int


def lr_tables(grammar: Grammar, *, max_actions: int = 1) -> LRTables:
    """Build LALR(1) tables for ``grammar`` (its ignored terminals are not part of the rules),
    with up to ``max_actions`` actions in a cell: a shift before reductions (in rule order).

    Raises:
      GrammarError: a cell has more actions than ``max_actions`` (`ConflictError`; the message
        names the rules and terminals of the conflicts) or an alternative is longer than the
        engine takes.
    """
    for r in grammar.rules:
        if len(r.expansion) > MAX_RULE_LENGTH:
            raise GrammarError(
                f"an alternative of rule {r.origin!r} has {len(r.expansion)} symbols; the engine takes at most {MAX_RULE_LENGTH}"
            )
    # Lark's analysis cannot be interrupted: a grammar too large for it is refused before it.
    charge_states(sum(len(r.expansion) + 1 for r in grammar.rules), "the grammar's LR(0) items: an automaton")
    check_time()
    terminal_names = tuple(t.name for t in grammar.terminals if t.name not in grammar.ignore)
    nonterminals = grammar.nonterminals
    all_terminals = grammar.terminal_names
    symbol = lambda name: Terminal(name) if name in all_terminals else NonTerminal(name)
    lark_rules = [Rule(NonTerminal(r.origin), [symbol(s) for s in r.expansion], order=i) for i, r in enumerate(grammar.rules)]
    analyzer = _lalr_analyzer(lark_rules, grammar.start)
    analyzer.compute_lr0_states()
    analyzer.compute_reads_relations()
    includes_lookback(analyzer)
    # The lookaheads' digraph walk recurses along chains of nonterminal transitions, as deep as the
    # order of lark's item sets makes them: they hash by identity, so the order follows memory
    # addresses, which follow whatever the process did before. With room for every transition,
    # whether a grammar compiles is the grammar's alone.
    try:
        with _room_to_recurse(len(analyzer.nonterminal_transitions)):
            analyzer.compute_lookaheads()
    except RecursionError:  # only where frames use the C stack
        raise GrammarError(
            f"the grammar's rules nest too deeply for the LALR analysis ({len(grammar.rules):,} rules) on Python "
            f"{sys.version_info.major}.{sys.version_info.minor}: a bounded repeat of a recursive or large item "
            "(a maxItems of hundreds, say) makes one rule per copy"
        ) from None

    itemsets = _breadth_first(analyzer.lr0_start_states[grammar.start])
    index = {s: i for i, s in enumerate(itemsets)}
    columns = {name: j for j, name in enumerate(terminal_names + (END,))}
    nonterminal_index = {name: j for j, name in enumerate(nonterminals)}
    rule_index = {r: i for i, r in enumerate(lark_rules)}
    cells: dict[tuple[int, int], list[tuple[int, int]]] = {}  # (state, column) -> its actions
    gotos = []  # (state, nonterminal, target)
    conflicts = []
    for i, itemset in enumerate(itemsets):
        for sym, target in itemset.transitions.items():
            if sym.is_term:
                cells[i, columns[sym.name]] = [(SHIFT, index[target])]
            elif sym.name in nonterminal_index:
                gotos.append((i, nonterminal_index[sym.name], index[target]))
    goto_state, goto_nonterminal, goto_target = np.array(gotos, np.int64).reshape(-1, 3).T
    goto_column = shared_columns(goto_state, goto_nonterminal, len(itemsets), len(nonterminals))
    num_columns = int(goto_column.max(initial=0)) + 1
    charge_bytes(4 * len(itemsets) * num_columns, "the LR tables' goto columns")  # dense: states x columns
    goto = np.full((len(itemsets), num_columns), -1, np.int32)
    goto[goto_state, goto_column[goto_nonterminal]] = goto_target
    start_state = index[analyzer.lr0_start_states[grammar.start]]
    # Input is complete once the start symbol has been reduced from the start state.
    cells[goto[start_state, goto_column[nonterminal_index[grammar.start]]], columns[END]] = [(ACCEPT, 0)]
    for i, itemset in enumerate(itemsets):
        for lookahead, rules in itemset.lookaheads.items():
            own = sorted((r for r in rules if r in rule_index), key=rule_index.get)  # without lark's root rule
            if not own:
                continue
            actions = cells.setdefault((i, columns[lookahead.name]), [])
            if actions[:1] == [(ACCEPT, 0)]:
                continue  # the input is complete: a reduction at its end could only accept again
            if len(own) > 1 or actions:
                conflicts.append((lookahead.name, own, bool(actions)))  # a shift is there
            actions.extend((REDUCE, rule_index[r]) for r in own)
    width = max(map(len, cells.values()), default=1)
    if width > max_actions:
        limit = (
            "the grammar is not LALR(1)"
            if max_actions == 1
            else f"a cell of the LR tables has {width} actions, more than the budget of max_configs={max_actions} parse configurations can fork into"
        )
        raise ConflictError(limit + ":\n" + "\n".join(_describe(c, grammar) for c in conflicts[:10]))
    charge_bytes(goto.nbytes + 5 * len(itemsets) * len(columns) * width, "the LR tables")  # goto, and actions of 5 bytes a cell
    kind = np.zeros((len(itemsets), len(columns), width), np.int8)
    arg = np.zeros((len(itemsets), len(columns), width), np.int32)
    for (i, col), actions in cells.items():
        kind[i, col, : len(actions)], arg[i, col, : len(actions)] = zip(*actions)
    return LRTables(
        terminals=terminal_names + (END,),
        nonterminals=nonterminals,
        goto_column=goto_column,
        action_kind=kind,
        action_arg=arg,
        goto=goto,
        rule_lhs=goto_column[[nonterminal_index[r.origin] for r in grammar.rules]],
        rule_length=np.array([len(r.expansion) for r in grammar.rules], np.int32),
        start_state=start_state,
    )


def shared_columns(state: np.ndarray, nonterminal: np.ndarray, num_states: int, num_nonterminals: int) -> np.ndarray:
    """int32[N]: a goto column for each nonterminal, given the (``state``, ``nonterminal``)
    pairs that have a goto (int64[E] each), shared by nonterminals that no state has a goto on
    both of: first fit, the nonterminals with the most gotos first.

    A goto is read only after a reduction, from the state below the rule's symbols, which has a
    goto on the rule's left-hand side (every stack is a path of the LR(0) automaton), so the
    other nonterminals of its column are never read there. The C grammar's 27 nonterminals take
    9 columns; a schema's bounded repeat, one state of whose rules has a goto per count, takes
    no fewer columns than counts (10,065 nonterminals in 5,001 columns: 812 -> 404 MB)."""
    order = np.lexsort((state, nonterminal))
    bounds = np.searchsorted(nonterminal[order], np.arange(num_nonterminals + 1))
    states_of = np.split(state[order], bounds[1:-1])
    column = np.zeros(num_nonterminals, np.int32)
    taken = np.zeros((num_states, 8), bool)  # taken[s, c]: state s has a goto in column c (room doubled as needed)
    used = 1
    for n in np.argsort(-np.diff(bounds), kind="stable").tolist():
        rows = states_of[n]
        free = np.flatnonzero(~taken[rows, :used].any(axis=0))
        column[n] = free[0] if len(free) else used
        used = max(used, column[n] + 1)
        if used > taken.shape[1]:
            taken = np.hstack([taken, np.zeros_like(taken)])
        taken[rows, column[n]] = True
    return column


def fused_reductions(tables: LRTables) -> LRTables:
    """``tables`` with the reductions of states that do nothing else (a state of one completed
    item, such as ``value ::= NUMBER .``) fused into the action that enters them: a shift into one
    becomes a `SHIFT_REDUCE` by its rule, and a goto into one of a unit rule (``value ::= object .``)
    goes on to that rule's goto, for one parser action where there were two or more (a JSON
    document's parse: 46 actions for 21 terminals, 35 fused).

    Those states' lookaheads go unchecked, and the language stays the same: a fused reduction
    still pops its rule's states and pushes its goto, so every stack is still a path of the LR(0)
    automaton and a shift still extends a viable prefix (ACCEPT is only entered from the start
    state, once the whole input reduced to the start symbol). A refusal the skipped state would
    have made comes before the next shift; with forks, such a parse holds its fork until then."""
    kind, arg, goto, states = tables.action_kind, tables.action_arg, tables.goto, len(tables.goto)
    acting, reduces = (kind != ERROR).reshape(states, -1), (kind == REDUCE).reshape(states, -1)
    rule = np.where(reduces, arg.reshape(states, -1), -1).max(axis=1, initial=-1)  # a state's last reduction's
    length, lhs = tables.rule_length[np.maximum(rule, 0)], tables.rule_lhs[np.maximum(rule, 0)]
    only_reduces = (
        reduces.any(axis=1)
        & (reduces == acting).all(axis=1)
        & ((arg.reshape(states, -1) == rule[:, None]) | ~acting).all(axis=1)
        & (goto < 0).all(axis=1)
        & (length > 0)
    )
    target = np.where(kind == SHIFT, arg, 0)
    fused = (kind == SHIFT) & only_reduces[target]
    # A unit rule's reduction pops the state its goto pushed: the state below is the goto's own.
    unit = only_reduces & (length == 1)
    into_unit = lambda to: (to >= 0) & unit[to]  # (bool gathers: goto may be large)
    row, column = np.nonzero(into_unit(goto))
    fused_goto = goto.copy() if len(row) else goto
    # Chains of unit rules go through distinct nonterminals; a cycle of them (an ambiguous
    # grammar) stops after as many steps, in a unit state the parser then reduces as usual.
    for _ in range(goto.shape[1]):
        if not len(row):
            break
        fused_goto[row, column] = goto[row, lhs[fused_goto[row, column]]]
        going_on = np.flatnonzero(into_unit(fused_goto[row, column]))
        row, column = row[going_on], column[going_on]
    return dataclasses.replace(
        tables,
        action_kind=np.where(fused, SHIFT_REDUCE, kind).astype(np.int8),
        action_arg=np.where(fused, rule[target], arg).astype(np.int32),
        goto=fused_goto,
    )


def _lark_sets(rules: list[Rule]) -> tuple[dict, dict, set]:
    """lark's ``calculate_sets(rules)``, by `grammar_sets`."""
    return grammar_sets([(r.origin, r.expansion) for r in rules], lambda symbol: symbol.is_term)


def _lalr_analyzer(rules: list[Rule], start: str) -> LALR_Analyzer:
    """lark's LALR analyser of ``rules``, built with `grammar_sets` in place of lark's fixpoint
    for FIRST, FOLLOW and NULLABLE (seconds on the thousands of rules of a large JSON Schema). The
    analyser's constructor calls that function by its module's name, so the name is bound to ours
    while it runs (the same sets: another thread's lark gets them too). A lark without that name
    builds its own."""
    if not hasattr(grammar_analysis, "calculate_sets"):
        return LALR_Analyzer(ParserConf(rules, {}, [start]))
    with _process_wide:
        lark_own = grammar_analysis.calculate_sets
        grammar_analysis.calculate_sets = _lark_sets
        try:
            return LALR_Analyzer(ParserConf(rules, {}, [start]))
        finally:
            grammar_analysis.calculate_sets = lark_own


def includes_lookback(analyzer: LALR_Analyzer) -> None:
    """Fill ``analyzer.includes`` and ``analyzer.lookback``, the relations of DeRemer and
    Pennello's LALR(1) lookaheads, as lark's ``compute_includes_lookback`` does, checking the
    compile time as it goes. lark scans a state's whole closure once per nonterminal transition
    of the state, and again for each rule it follows: 54 s on a JSON Schema of 20,000 rules whose
    states predict thousands of items each. Here a state's items are grouped by the rule's left
    side once, and a rule's nullable tail is found once."""
    items_of: dict[object, dict] = {}  # state -> its items by rule origin

    def items(state, origin) -> list:
        if state not in items_of:
            groups = collections.defaultdict(list)
            for item in state.closure:
                groups[item.rule.origin].append(item)
            items_of[state] = groups
        return items_of[state].get(origin, ())

    tail_of: dict[Rule, int] = {}  # rule -> the first position from which its expansion is nullable

    def tail(rule) -> int:
        if rule not in tail_of:
            position = len(rule.expansion)
            while position and rule.expansion[position - 1] in analyzer.NULLABLE:
                position -= 1
            tail_of[rule] = position
        return tail_of[rule]

    for count, transition in enumerate(analyzer.nonterminal_transitions):
        if count % 256 == 0:
            check_time()
        state, nonterminal = transition
        lookback = analyzer.lookback[transition]
        for item in items(state, nonterminal):
            expansion, end = item.rule.expansion, state
            for i in range(item.index, len(expansion)):
                step = (end, expansion[i])
                end = end.transitions[expansion[i]]
                if i + 1 >= tail(item.rule) and step in analyzer.reads:  # what follows may be empty
                    analyzer.includes[step].add(transition)
            if item.index == 0:
                lookback.update((end, done.rule) for done in items(end, nonterminal) if done.rule == item.rule and done.is_satisfied)


def _breadth_first(start) -> list:
    """The LR(0) states reachable from ``start``, breadth first, each state's transitions taken in
    the order of their symbols' names: numbered the same in every process (lark keeps the states
    in a set, whose order follows string hashes)."""
    order, seen = [start], {start}
    for state in order:
        for _, target in sorted(state.transitions.items(), key=lambda item: (item[0].is_term, item[0].name)):
            if target not in seen:
                seen.add(target)
                order.append(target)
    return order


def _describe(conflict, grammar: Grammar) -> str:
    lookahead, rules, with_shift = conflict
    kinds = "shift/reduce" if with_shift else "reduce/reduce"
    alternatives = "; ".join(f"{r.origin.name} ::= {' '.join(s.name for s in r.expansion) or 'ε'}" for r in rules)
    return f"  {kinds} conflict before terminal {lookahead}: reduce by {alternatives}"


def terminal_follow(grammar: Grammar, terminals: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Which terminals may begin a sentence, bool[T], and which may come right after terminal a
    in some sentence, bool[T, T] (columns as in ``terminals``; ignored terminals are not part of
    the rules and do not count)."""
    column = {name: j for j, name in enumerate(terminals)}
    first, follow, _ = grammar_sets([(r.origin, r.expansion) for r in grammar.rules], column.__contains__)
    begins = np.zeros(len(terminals), bool)
    begins[[column[t] for t in first.get(grammar.start, ())]] = True
    after = np.zeros((len(terminals), len(terminals)), bool)
    for a in terminals:
        after[column[a], [column[b] for b in follow.get(a, ())]] = True
    return begins, after
