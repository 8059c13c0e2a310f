"""LR tables against the Earley oracle, on terminal sequences: LALR(1) grammars, and grammars
whose conflicting cells hold every action (followed GLR-style, each fork a stack of its own)."""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from lark.grammar import NonTerminal, Rule, Terminal
from lark.parsers import grammar_analysis

from ananke_jax import CompileBudget, GrammarError
from ananke_jax._src.compile.budget import metered
from ananke_jax._src.compile.grammar_sets import grammar_sets
from ananke_jax._src.compile.lr import _lalr_analyzer, fused_reductions, includes_lookback, lr_tables, shared_columns
from ananke_jax._src.engines.lr import ACCEPT, ERROR, MAX_RULE_LENGTH, REDUCE, SHIFT, SHIFT_REDUCE, LRActions, feed, pack_actions
from ananke_jax._src.errors import BudgetError
from ananke_jax._src.ir import grammar

from cfg_grammars import AMBIGUOUS, DANGLING_ELSE, OPTIONAL_SEPARATORS, OPTIONAL_SPACES
from earley import EarleyRecogniser
from test_frontends import load_grammar_file

ARITHMETIC = grammar(
    [("e", ["e", "PLUS", "t"]), ("e", ["t"]), ("t", ["t", "STAR", "f"]), ("t", ["f"]), ("f", ["LP", "e", "RP"]), ("f", ["NUM"])],
    {"PLUS": r"\+", "STAR": r"\*", "LP": r"\(", "RP": r"\)", "NUM": "n"},
    "e",
)
# Nullable rules, right recursion and a list with separators.
LISTS = grammar(
    [
        ("s", ["LB", "items", "RB"]),
        ("items", []),
        ("items", ["item", "more"]),
        ("more", []),
        ("more", ["COMMA", "item", "more"]),
        ("item", ["X"]),
        ("item", ["s"]),
    ],
    {"LB": r"\[", "RB": r"\]", "COMMA": ",", "X": "x"},
    "s",
)


def lr_parse(tables, terminals: list[str]) -> str:
    """'accept', 'viable' (a prefix that some fork took without error) or 'error': every action
    of a cell is followed, each fork on a stack of its own (reductions that only grow the stack
    stop at 32 states)."""
    column = {name: j for j, name in enumerate(tables.terminals)}

    def read(stacks, col) -> tuple[set, bool]:
        """The stacks after shifting column ``col``, and whether some fork accepted it."""
        shifted, accepted, todo, seen = set(), False, list(stacks), set(stacks)
        while todo:
            stack = todo.pop()
            for kind, arg in zip(tables.action_kind[stack[-1], col], tables.action_arg[stack[-1], col]):
                if kind == SHIFT:
                    shifted.add((*stack, int(arg)))
                elif kind == ACCEPT:
                    accepted = True
                elif kind in (REDUCE, SHIFT_REDUCE):  # (a shift-reduce never pushed the state it pops)
                    below = stack[: len(stack) - int(tables.rule_length[arg]) + (kind == SHIFT_REDUCE)]
                    after = (*below, int(tables.goto[below[-1], tables.rule_lhs[arg]]))
                    if kind == SHIFT_REDUCE:
                        shifted.add(after)
                    elif after not in seen and len(after) < 32:
                        seen.add(after)
                        todo.append(after)
        return shifted, accepted

    stacks = {(tables.start_state,)}
    for name in terminals:
        stacks, _ = read(stacks, column[name])
        if not stacks:
            return "error"
    return "accept" if read(stacks, column["$END"])[1] else "viable"


@pytest.mark.parametrize("fused", [False, True], ids=["tables", "fused-reductions"])
@pytest.mark.parametrize(
    "g",
    [ARITHMETIC, LISTS, AMBIGUOUS, DANGLING_ELSE, OPTIONAL_SPACES, OPTIONAL_SEPARATORS],
    ids=["arithmetic", "lists", "ambiguous", "dangling-else", "optional-spaces", "optional-separators"],
)
def test_lr_agrees_with_earley_on_random_terminal_sequences(g, fused):
    tables = lr_tables(g.validate(), max_actions=4)
    assert (tables.action_kind.shape[2] > 1) == (g not in (ARITHMETIC, LISTS))  # conflicts where meant
    if fused:
        tables = fused_reductions(tables)
        assert (tables.action_kind == SHIFT_REDUCE).any()
    earley = EarleyRecogniser(g)
    char = {t.name: t.regex.replace("\\", "") for t in g.terminals}
    names = list(char)
    rng = np.random.default_rng(0)
    seen = {"accept": 0, "viable": 0, "error": 0}
    for _ in range(2500):
        seq = [str(x) for x in rng.choice(names, size=int(rng.integers(0, 9)))]
        data = "".join(char[n] for n in seq).encode()
        result = lr_parse(tables, seq)
        seen[result] += 1
        assert (result == "accept") == earley.accepts(data), seq
        assert (result != "error") == earley.viable(data), seq
    assert min(seen.values()) >= 10  # every outcome is exercised


def test_fused_reductions_read_a_number_in_one_action_where_the_tables_take_three():
    """``n`` from the start: a shift, then f ::= NUM and t ::= f in the tables (t ::= f's state
    only reduces; t's may also shift STAR); one shift-reduce by f ::= NUM whose goto goes on
    through t ::= f in the fused ones."""
    tables = lr_tables(ARITHMETIC.validate())
    fused = fused_reductions(tables)
    num, star, start = tables.terminals.index("NUM"), tables.terminals.index("STAR"), tables.start_state
    nonterminal = dict(zip(tables.nonterminals, tables.goto_column.tolist()))
    assert tables.action_kind[start, num, 0] == SHIFT
    assert fused.action_kind[start, num, 0] == SHIFT_REDUCE
    assert tables.rule_lhs[fused.action_arg[start, num, 0]] == nonterminal["f"]
    after_t = tables.goto[start, nonterminal["t"]]
    assert fused.goto[start, nonterminal["f"]] == fused.goto[start, nonterminal["t"]] == after_t
    assert tables.goto[start, nonterminal["f"]] != after_t
    assert fused.action_kind[after_t, star, 0] == SHIFT


def _action_fields(tables):
    return tables.action_kind, tables.action_arg, tables.rule_lhs, tables.rule_length


def test_actions_pack_alike_on_the_host_and_on_device():
    tables = fused_reductions(lr_tables(AMBIGUOUS.validate(), max_actions=4))
    host = pack_actions(*_action_fields(tables))
    assert host.dtype == np.int32 and (tables.action_kind == SHIFT_REDUCE).any()
    np.testing.assert_array_equal(host, np.asarray(jax.jit(pack_actions)(*_action_fields(tables))))


@pytest.mark.parametrize("fused", [False, True], ids=["tables", "fused-reductions"])
def test_a_shift_reduce_needs_stack_room_only_for_what_it_pushes(fused):
    """``( n )`` on a stack of 3 states: the plain tables shift RP onto a full stack (overflow);
    fused, RP's shift-reduce by f ::= LP e RP pops two states and pushes one."""
    tables = lr_tables(ARITHMETIC.validate())
    tables = fused_reductions(tables) if fused else tables
    lr = LRActions(jnp.asarray(pack_actions(*_action_fields(tables))), jnp.asarray(tables.goto), 1)
    columns = jnp.asarray([tables.terminals.index(name) for name in ("LP", "NUM", "RP", "$END")], jnp.int32)
    stack = jnp.zeros(3, jnp.int32).at[0].set(tables.start_state)
    p = feed(lr, stack, jnp.int32(1), columns, jnp.int32(4))
    assert bool(p.ok[0] & (p.pos[0] == 4)) == fused
    assert bool(p.overflow[0]) == (not fused)


def test_only_grammars_with_conflicts_have_cells_of_several_actions():
    assert lr_tables(ARITHMETIC.validate(), max_actions=4).action_kind.shape[2] == 1
    tables = lr_tables(AMBIGUOUS.validate(), max_actions=4)
    assert tables.action_kind.shape[2] == 2
    both = tables.action_kind[:, tables.terminals.index("PLUS")]
    assert sorted(map(tuple, both[(both != ERROR).all(axis=1)])) == [(SHIFT, REDUCE)]  # the shift first
    assert ERROR == 0  # the zero of the action table is the error action (and a cell's padding)


def test_conflicts_beyond_the_actions_a_cell_may_hold_are_refused_naming_the_rules():
    with pytest.raises(GrammarError, match=r"not LALR\(1\):\n  shift/reduce conflict before terminal PLUS: reduce by e ::= e PLUS e"):
        lr_tables(AMBIGUOUS)
    three = grammar([("s", ["a"]), ("s", ["b"]), ("s", ["c"]), ("a", ["X"]), ("b", ["X"]), ("c", ["X"])], {"X": "x"}, "s")
    with pytest.raises(
        GrammarError,
        match=r"a cell of the LR tables has 3 actions, more than the budget of max_configs=2 parse configurations can fork into.*\n  reduce/reduce conflict before terminal \$END: reduce by a ::= X; b ::= X; c ::= X",
    ):
        lr_tables(three, max_actions=2)


def test_an_alternative_longer_than_the_engine_takes_is_refused_naming_its_rule():
    long = grammar([("s", ["X"] * (MAX_RULE_LENGTH + 1))], {"X": "x"}, "s")
    with pytest.raises(GrammarError, match=rf"rule 's' has {MAX_RULE_LENGTH + 1} symbols; the engine takes at most {MAX_RULE_LENGTH}"):
        lr_tables(long)


_SYMBOLS = [NonTerminal(f"n{i}") for i in range(5)] + [Terminal(f"T{i}") for i in range(3)]
# Random grammars: (origin, expansion) pairs over five nonterminals and three terminals.
_RULES = st.lists(
    st.tuples(st.sampled_from(_SYMBOLS[:5]), st.lists(st.sampled_from(_SYMBOLS), max_size=4).map(tuple)),
    min_size=1,
    max_size=12,
    unique=True,
)


@settings(max_examples=400, deadline=None)
@given(_RULES)
def test_grammar_sets_are_lark_s_first_follow_and_nullable(rules):
    """`grammar_sets` against lark's own fixpoint (``calculate_sets``), on random grammars:
    nullable chains, left and right recursion, symbols repeated in a rule."""
    origins = {origin for origin, _ in rules}
    lark_rules = [Rule(o, list(e)) for o, e in rules if all(s.is_term or s in origins for s in e)]
    if lark_rules:
        ours = grammar_sets([(r.origin, r.expansion) for r in lark_rules], lambda s: s.is_term)
        assert ours == grammar_analysis.calculate_sets(lark_rules)


def _relations(rules: list[Rule], start: str, compute) -> tuple[dict, dict]:
    """The includes and lookback relations that ``compute`` fills in a fresh analyser of ``rules``."""
    analyzer = _lalr_analyzer(rules, start)
    analyzer.compute_lr0_states()
    analyzer.compute_reads_relations()
    compute(analyzer)
    return dict(analyzer.includes), dict(analyzer.lookback)


def _same_relations(rules: list[Rule], start: str) -> None:
    ours = _relations(rules, start, includes_lookback)
    lark_s = _relations(rules, start, lambda analyzer: analyzer.compute_includes_lookback())
    # Item sets hash by identity: compare them by kernel across the two analysers.
    named = lambda relations: [{_named(k): {_named(v) for v in vs} for k, vs in r.items()} for r in relations]
    assert named(ours) == named(lark_s)


def _named(pair):
    state, other = pair
    return frozenset((item.rule, item.index) for item in state.kernel), other


@settings(max_examples=300, deadline=None)
@given(_RULES)
def test_includes_and_lookback_are_lark_s(rules):
    """`includes_lookback` (lark's ``compute_includes_lookback`` took 54 s on a large schema)
    against lark's own, on random grammars: the same relations between the same item sets."""
    defined = [Rule(o, list(e)) for o, e in rules]
    while True:  # without the rules that use a nonterminal with no rules left
        origins = {r.origin for r in defined}
        kept = [r for r in defined if all(s.is_term or s in origins for s in r.expansion)]
        if len(kept) == len(defined):
            break
        defined = kept
    if defined:
        _same_relations(defined, defined[0].origin.name)


@pytest.mark.parametrize("name", ["json.gbnf", "c_subset.gbnf", "calculator.gbnf", "dangling_else.gbnf", "sql_select.lark"])
def test_includes_and_lookback_are_lark_s_on_the_grammars(name):
    """The same, on the grammars of ``grammars/``."""
    ir = load_grammar_file(name).validate()
    terminals = {t.name for t in ir.terminals}
    symbol = lambda s: Terminal(s) if s in terminals else NonTerminal(s)
    _same_relations([Rule(NonTerminal(r.origin), [symbol(s) for s in r.expansion]) for r in ir.rules], ir.start)


def test_the_lalr_analysis_of_a_large_grammar_does_not_run_lark_s_fixpoint(monkeypatch):
    """lark's fixpoint for FIRST, FOLLOW and NULLABLE took seconds on the thousands of rules of
    large JSON Schemas; the analysis is given `grammar_sets`' instead, and lark's is left as it was."""
    lark_own = grammar_analysis.calculate_sets

    def refused(rules):
        raise AssertionError("lark's calculate_sets ran")

    monkeypatch.setattr(grammar_analysis, "calculate_sets", refused)
    assert lr_tables(LISTS.validate()).rule_lhs.shape == (7,)
    assert grammar_analysis.calculate_sets is refused
    monkeypatch.undo()
    assert grammar_analysis.calculate_sets is lark_own


def _nested_optionals(copies: int):
    """``s -> A o0; o_k -> (empty) | B o_k+1``: the rules a bounded repeat of a nonterminal makes."""
    rules = [("s", ["A", "o0"])]
    for k in range(copies):
        rules += [(f"o{k}", []), (f"o{k}", ["B", f"o{k + 1}"] if k + 1 < copies else ["B"])]
    return grammar(rules, {"A": "a", "B": "b"}, "s")


def test_grammars_too_large_for_the_lalr_analysis_are_refused_before_it_and_deep_ones_compile():
    """Lark's analysis cannot be interrupted: a grammar whose LR(0) items are over the budget's
    ``max_states`` is refused before it, naming the budget. Its lookahead walk recurses as deep as
    the order of its item sets (memory addresses: they hash by identity) makes the chains: a grammar
    nested 4,000 deep compiles whatever the process did before and whatever recursion limit it has,
    and leaves that limit as it was. (Where Python frames use the C stack, 3.10, the extra room is
    capped at 10,000 frames, which this grammar fits; deeper ones get a `GrammarError` naming the
    cause, not a `RecursionError`.)"""
    refusal = r"LR\(0\) items.* of 2,002 states is over the compile budget max_states=1,000"
    with metered(CompileBudget(max_states=1_000)), pytest.raises(BudgetError, match=refusal):
        lr_tables(_nested_optionals(500))
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1_000)
    try:
        tables = lr_tables(_nested_optionals(4_000))
        assert tables.rule_lhs.shape == (8_001,)
        assert sys.getrecursionlimit() == 1_000
    finally:
        sys.setrecursionlimit(limit)


@pytest.mark.parametrize("seed", range(6))
def test_nonterminals_share_a_goto_column_only_where_no_state_has_a_goto_on_both(seed):
    rng = np.random.default_rng(seed)
    num_states, num_nonterminals = int(rng.integers(1, 60)), int(rng.integers(1, 40))
    pairs = np.unique(rng.integers(0, [num_states, num_nonterminals], (int(rng.integers(0, 200)), 2)), axis=0)
    column = shared_columns(pairs[:, 0], pairs[:, 1], num_states, num_nonterminals)
    for state in range(num_states):
        mine = column[pairs[pairs[:, 0] == state, 1]]
        assert len(set(mine.tolist())) == len(mine), state
    # At least the most gotos of one state; first fit takes at most one more than the most
    # nonterminals any one shares a state with.
    together = np.zeros((num_nonterminals, num_nonterminals), bool)
    for state in range(num_states):
        mine = pairs[pairs[:, 0] == state, 1]
        together[np.ix_(mine, mine)] = True
    most_shared = (together.sum(axis=1) - together.diagonal()).max(initial=0)
    least = np.bincount(pairs[:, 0], minlength=num_states).max(initial=0)
    assert max(1, least) <= column.max(initial=0) + 1 <= most_shared + 1


def test_a_chain_of_nonterminals_in_one_state_each_shares_goto_columns():
    """A bounded repeat's rules (501 nonterminals) make a goto table of a few columns, where a
    column per nonterminal made it LR states x nonterminals (812 MB on a JSON Schema of 10,065)."""
    tables = lr_tables(_nested_optionals(500))
    assert len(tables.nonterminals) == 501 and tables.goto.shape[1] <= 4
    for name, column in zip(tables.nonterminals, tables.goto_column):
        assert (tables.goto[:, column] >= 0).any(), name


def test_lr_tables_over_the_table_budget_are_refused_before_they_are_made():
    """The goto table is dense (LR states x goto columns): it is charged to ``max_table_bytes`` before it is allocated, and the action tables
    with it before theirs are."""
    grammar = _nested_optionals(500)
    tables = lr_tables(grammar)
    goto, total = tables.goto.nbytes, sum(x.nbytes for x in (tables.goto, tables.action_kind, tables.action_arg))
    with metered(CompileBudget(max_table_bytes=total)):
        lr_tables(grammar)
    with (
        metered(CompileBudget(max_table_bytes=total - 1)),
        pytest.raises(BudgetError, match=r"the LR tables of [\d,]+ bytes .*max_table_bytes"),
    ):
        lr_tables(grammar)
    with (
        metered(CompileBudget(max_table_bytes=goto - 1)),
        pytest.raises(BudgetError, match=r"goto columns of [\d,]+ bytes .*max_table_bytes"),
    ):
        lr_tables(grammar)


@pytest.mark.slow
def test_tables_are_the_same_in_every_process():
    """lark keeps LR(0) states in a set, ordered by string hashes: the states are renumbered
    breadth first, so a grammar's tables do not depend on the process's hash seed."""
    import os
    import pathlib
    import subprocess
    import sys

    script = (
        "import hashlib, pathlib, sys; import numpy as np\n"
        "from ananke_jax import gbnf_to_ir\n"
        "from ananke_jax._src.compile.lr import lr_tables\n"
        "t = lr_tables(gbnf_to_ir(pathlib.Path(sys.argv[1]).read_text()))\n"
        "print(hashlib.sha256(b''.join(np.ascontiguousarray(a).tobytes() for a in (t.action_kind, t.action_arg, t.goto))).hexdigest())\n"
    )
    path = pathlib.Path(__file__).parent.parent / "grammars" / "c_subset.gbnf"
    digests = {
        subprocess.run(
            [sys.executable, "-c", script, str(path)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1  # one digest from three hash seeds
