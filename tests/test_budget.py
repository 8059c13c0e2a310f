"""Compile budgets: grammar bombs are refused from estimates before the work, with the limit and
the JSON pointer named; the other limits stop the work as it goes; schemas that only look large
compile."""

import pytest

import ananke_jax as aj
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import CHECK_EVERY, NFABuilder, determinise
from ananke_jax._src.compile.budget import charge_states, check_time, metered
from ananke_jax._src.compile.regex import parse_regex
from ananke_jax._src.json_schema import api as json_schema_api


def _nested_one_of(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"oneOf": [{"type": "integer"}, schema]}
    return schema


def test_a_regex_bomb_is_refused_from_its_estimate(sentencepiece_vocab):
    with pytest.raises(aj.BudgetError, match=r"a regex's NFA of 3,00\d,\d+ states is over the compile budget max_states=200,000") as e:
        aj.compile_regex("(a{1000}){1000}", sentencepiece_vocab)
    assert e.value.budget == "max_states"
    assert isinstance(e.value, aj.GrammarError)


def test_a_counted_repeat_is_refused_for_its_configurations_before_its_dfa(sentencepiece_vocab):
    """A repeat whose copies overlap keeps, per state of its body, the fewest copies reaching it
    (`automaton.counted`): where those configurations multiply, their (state, count) pairs meet
    ``max_states`` while they are found."""
    pattern = "(.{1,100}|[ -~]{0,100}[0-9]){0,16}"
    with pytest.raises(aj.BudgetError, match=r"a repeat's configurations .* over the compile budget max_states=20,000") as e:
        aj.compile_regex(pattern, sentencepiece_vocab, budget=aj.CompileBudget(max_states=20_000))
    assert e.value.budget == "max_states"


def test_a_large_enum_is_refused_with_the_budget_and_compiles_under_a_larger_one(sentencepiece_vocab):
    """Refused from the length of its values' text, before their tree is built."""
    schema = {"enum": [f"value-{i}" for i in range(10_000)]}
    with pytest.raises(aj.SchemaError, match="an enum's NFA of 237,780 states is over the compile budget max_states=200,000 at #"):
        aj.compile_json_schema(schema, sentencepiece_vocab)
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, budget=aj.CompileBudget(max_states=10**6))
    for text, member in [('"value-9999"', True), ('"value-0"', True), ('"value-10000"', False), ('"value-"', False)]:
        matcher = aj.Matcher(cg, sentencepiece_vocab)
        assert (matcher.accept_string(text) and matcher.is_completed()) == member, text


def test_a_pattern_over_the_budget_names_its_subschema(sentencepiece_vocab):
    schema = {"type": "object", "properties": {"a": {"type": "array", "items": {"type": "string", "pattern": "^.{0,20}x.{30}$"}}}}
    with pytest.raises(aj.SchemaError, match="max_states=5,000 at #/properties/a/items") as e:
        aj.compile_json_schema(schema, sentencepiece_vocab, budget=aj.CompileBudget(max_states=5_000))
    assert e.value.pointer == "#/properties/a/items"


@pytest.mark.parametrize("bounds", [{"maxLength": 40_960}, {"minLength": 40_960}])
def test_a_long_string_is_refused_from_its_length_before_its_automaton_is_built(bounds, sentencepiece_vocab):
    """The characters of a bounded string become a chain of one copy of the character automaton
    per position, on the regular route and on the pushdown route alike; recursion (the pushdown
    route) does not hide it."""
    schema = {"type": "object", "properties": {"s": {"type": "string", **bounds}, "next": {"$ref": "#"}}}
    with pytest.raises(
        aj.SchemaError, match="a length-bounded string's automaton of 532,493 states is over the compile budget max_states=200,000"
    ) as e:
        aj.compile_json_schema(schema, sentencepiece_vocab)
    assert e.value.pointer == "#/properties/s"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(64)}},
        {"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(24)}, "minProperties": 3, "maxProperties": 9},
        {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(200)} | {"d200": {"type": "string"}}, "$ref": "#/$defs/d0"},
        _nested_one_of(10),
    ],
    ids=["64-optional", "24-optional-counted", "ref-chain-200", "oneOf-10-deep"],
)
def test_schemas_that_only_look_large_compile_within_the_default_budget(schema, sentencepiece_vocab):
    """Shared subtrees (each optional member's continuation) are built once, so these stay far
    below the budget (their languages are tested in test_json_schema and test_automaton)."""
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, whitespace="compact")
    assert cg.num_states < 20_000


def test_every_limit_is_named_when_the_work_passes_it(sentencepiece_vocab):
    with pytest.raises(aj.BudgetError, match="max_table_bytes=1,000") as e:
        aj.compile_regex("[a-z]{1,20}", sentencepiece_vocab, budget=aj.CompileBudget(max_table_bytes=1000))
    assert e.value.budget == "max_table_bytes"
    # The largest table is refused before it is filled; the total after the tables are built.
    with pytest.raises(
        aj.BudgetError, match=r"the token DFA's next-state columns of [\d,]+ bytes are over the compile budget max_table_bytes"
    ):
        aj.compile_regex("[a-z]{1,20}", sentencepiece_vocab, budget=aj.CompileBudget(max_table_bytes=1000))
    with pytest.raises(aj.BudgetError, match=r"the token DFA's tables of [\d,]+ bytes are over the compile budget max_table_bytes=200,000"):
        aj.compile_regex("[a-z]{1,20}", sentencepiece_vocab, budget=aj.CompileBudget(max_table_bytes=200_000))
    with pytest.raises(aj.BudgetError, match="max_states=50"):  # the DFA, past the NFA estimate
        aj.compile_regex("(a|b)*a(a|b){6}", sentencepiece_vocab, budget=aj.CompileBudget(max_states=50))
    with pytest.raises(aj.SchemaError, match="max_seconds=1e-06"):
        aj.compile_json_schema({"type": "string", "format": "date-time"}, sentencepiece_vocab, budget=aj.CompileBudget(max_seconds=1e-6))
    with pytest.raises(aj.BudgetError, match="max_seconds"):
        aj.compile_lark('start: "a"+', sentencepiece_vocab, budget=aj.CompileBudget(max_seconds=1e-6))


def test_a_schema_over_the_budget_whole_and_in_pieces_names_both_limits(sentencepiece_vocab, monkeypatch):
    """A schema without recursion whose one automaton would be over ``max_states`` goes to the
    pushdown engine in pieces; where that stops on a budget too (a deadline, here), the error
    names both limits, not only the one that sent it there."""
    budget = aj.CompileBudget(max_states=500, max_seconds=5)
    monkeypatch.setattr(json_schema_api, "compile_in_pieces", _past_deadline)
    refusal = r"a regex's NFA of [\d,]+ states is over the compile budget max_states=500; in pieces for the pushdown engine, the compile ran past the compile budget max_seconds=5"
    with pytest.raises(aj.SchemaError, match=refusal):
        aj.compile_json_schema(_PATTERNS_ARRAY, sentencepiece_vocab, budget=budget)


def test_a_schema_past_the_token_dfa_cap_and_over_the_budget_in_pieces_names_both(sentencepiece_vocab, monkeypatch):
    """The same where the one automaton is within ``max_states`` but its token DFA would take
    more states than tables within ``max_table_bytes`` hold (`TOKEN_COLUMNS` columns each)."""
    monkeypatch.setattr(json_schema_api, "TOKEN_COLUMNS", 1 << 22)  # 1,024,000 columns on 32k tokens: a cap of 65 states
    monkeypatch.setattr(json_schema_api, "compile_in_pieces", _past_deadline)
    refusal = (
        r"of [\d,]+ states is over 65, the most whose token tables fit max_table_bytes=268,435,456 at 1024000 columns a "
        r"state; in pieces for the pushdown engine, the compile ran past the compile budget max_seconds=5"
    )
    with pytest.raises(aj.SchemaError, match=refusal):
        aj.compile_json_schema(_PATTERNS_ARRAY, sentencepiece_vocab)


def test_past_the_cap_a_schema_the_pieces_refuse_is_one_token_dfa_within_the_budget(sentencepiece_vocab, monkeypatch):
    """The cap is a guess: where the pieces fail on something else than the deadline (an LR
    conflict or an ambiguous lexer, say), the token DFA is built under the budget alone."""
    expected = aj.compile_json_schema(_PATTERNS_ARRAY, sentencepiece_vocab)
    monkeypatch.setattr(json_schema_api, "TOKEN_COLUMNS", 1 << 22)

    def refused(*args, **kwargs):
        raise aj.GrammarError("the grammar's lexer is too ambiguous for this vocabulary")

    monkeypatch.setattr(json_schema_api, "compile_in_pieces", refused)
    cg = aj.compile_json_schema(_PATTERNS_ARRAY, sentencepiece_vocab)
    assert isinstance(cg, aj.RegularGrammar) and cg.num_states == expected.num_states


def test_a_deadline_met_by_the_token_dfa_is_not_followed_by_the_pieces(sentencepiece_vocab, monkeypatch):
    def in_pieces(*args, **kwargs):
        raise AssertionError("the pieces were tried past the deadline")

    monkeypatch.setattr(json_schema_api, "_compile_regular", _past_deadline)
    monkeypatch.setattr(json_schema_api, "compile_in_pieces", in_pieces)
    with pytest.raises(aj.SchemaError, match="max_seconds=5"):
        aj.compile_json_schema(_PATTERNS_ARRAY, sentencepiece_vocab)


_PATTERNS_ARRAY = {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,20}$"}, "maxItems": 30}


def _past_deadline(*args, **kwargs):
    raise aj.BudgetError("the compile ran past the compile budget max_seconds=5", budget="max_seconds")


def test_a_dfa_of_lone_states_is_refused_as_it_is_built():
    """Subset construction charges the budget every `CHECK_EVERY` states, those kept alone inside
    a copied automaton included: a chain of 20,000 of them under a budget of 10,000 stops at
    the first charge past it, not after it is built."""
    chain = rx.to_dfa(rx.repeat(rx.chars("az"), 20_000, 20_000))
    builder = NFABuilder()
    fragment = builder.copy(chain)
    expected = f"a DFA of {3 * CHECK_EVERY + 1:,} states is over the compile budget max_states=10,000"
    with pytest.raises(aj.BudgetError, match=expected), metered(aj.CompileBudget(max_states=10_000)):
        determinise(builder, fragment)


def test_budgets_nest_and_end_with_their_compile():
    outer, inner = aj.CompileBudget(max_states=10), aj.CompileBudget(max_states=10**6)
    with metered(outer), metered(inner), pytest.raises(aj.BudgetError, match=r"max_states=10$"):  # the outer one holds
        charge_states(11, "an automaton")
    charge_states(11, "an automaton")  # outside any compile: the defaults, no deadline
    check_time()


@pytest.mark.parametrize(
    "fields",
    [{"max_states": 0}, {"max_table_bytes": -1}, {"max_seconds": 0}, {"max_states": 1.5}, {"max_seconds": True}, {"max_states": "9"}],
)
def test_bad_budgets_are_refused(fields):
    with pytest.raises(ValueError, match=f"CompileBudget.{next(iter(fields))}"):
        aj.CompileBudget(**fields)


def test_a_budget_must_be_a_compile_budget(sentencepiece_vocab):
    with pytest.raises(TypeError, match=r"budget must be an ananke_jax\.CompileBudget"):
        aj.compile_regex("a", sentencepiece_vocab, budget={"max_states": 10})


def test_the_estimate_counts_shared_subtrees_once_and_repeats_per_copy():
    shared = rx.star(rx.chars("az"))  # 4 states
    tree = rx.alt(*[rx.seq(rx.chars(str(i % 10)), rx.Text(str(i)), shared) for i in range(100)])
    assert rx.nfa_size(tree) < 100 * 8 + 10  # 100 branches of a class, a text and a seq: the star once
    assert rx.nfa_size(rx.repeat(rx.repeat(rx.Text("a"), 10, 10), 10, 10)) >= 2 * 100
    assert rx.nfa_size(rx.EMPTY) == 1
    long_array = rx.repeat(rx.Text("[1]"), 0, 200)
    members = rx.Interleave((long_array, rx.Text("x")), (False, False), rx.NOTHING, rx.Text(","), 0, None)
    once = rx.nfa_size(members, repeated=False)  # the least its pieces add up to: the array's item once, in every one
    assert once < 100 < 200 * 6 < rx.nfa_size(members)


def test_an_automaton_built_before_is_kept_and_still_charged_to_the_budget():
    """An equal regex tree gets the DFA built the first time (read-only, so no caller can change
    it), and a compile whose budget that DFA is over refuses it as if it were built again."""
    pattern = "(a|b)*a(a|b){8}"  # a small NFA, a DFA of 2^9 states
    dfa = rx.to_dfa(parse_regex(pattern))
    assert rx.to_dfa(parse_regex(pattern)) is dfa
    assert not dfa.transitions.flags.writeable and not dfa.accepting.flags.writeable
    assert rx.nfa_size(parse_regex(pattern)) < 100 < dfa.num_states
    with metered(aj.CompileBudget(max_states=100)), pytest.raises(aj.BudgetError, match="max_states=100"):
        rx.to_dfa(parse_regex(pattern))


def test_a_product_taken_before_is_kept_and_still_charged_to_the_budget():
    """Products of small automata are kept by their operands' tables (a oneOf nested n deep takes
    the same differences about 2^n times), read-only; a compile whose budget a kept product is over
    refuses it as if it were built again."""
    a, b = rx.to_dfa(parse_regex("(a|b)*a(a|b){6}")), rx.to_dfa(parse_regex("[ab]{3,40}"))
    kept = rx.difference(a, b)
    copy_a = type(a)(a.transitions.copy(), a.accepting.copy(), a.start)  # equal tables, another object
    assert rx.difference(copy_a, b) is kept and rx.intersect(a, b) is not kept
    assert not kept.transitions.flags.writeable
    fresh = rx._product(a, b, rx._ACCEPT["and not"], True)[0]
    assert rx.difference(kept, fresh).start == 0 and rx.difference(fresh, kept).start == 0
    with metered(aj.CompileBudget(max_states=50)), pytest.raises(aj.BudgetError, match=r"a product of two automata .* max_states=50"):
        rx.difference(a, b)


def test_a_one_of_nested_ten_deep_builds_each_exclusion_once(monkeypatch):
    """Each level takes the exclusions of the levels inside it twice over (about 2^n products for
    n levels, 498 here); kept, each is built once."""
    built = []
    monkeypatch.setattr(rx, "_product", lambda *args, build=rx._product: built.append(1) or build(*args))
    monkeypatch.setattr(rx, "_PRODUCTS", rx._Kept(max_bytes=32 << 20))  # none kept from other tests
    with pytest.warns(UserWarning, match="compiled as 'anyOf' for number values: negations nested more than 8 deep"):
        aj.json_schema_to_grammar(_nested_one_of(10))
    assert len(built) <= 10
