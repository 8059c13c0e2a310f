"""compile_json_schema: round trips through the device step, layouts, printing, numbers, errors."""

import decimal
import functools
import json
import random
import re
import warnings

import jax
import jax.numpy as jnp
import jsonschema
import numpy as np
import pytest
from lark import Lark

import ananke_jax as aj
from ananke_jax._src.compile import automaton, cfg, outcome_walk, regular, token_table
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.budget import metered
from ananke_jax._src.compile.cfg import _lexer_with_loops
from ananke_jax._src.compile.lexer import without_empty_terminals
from ananke_jax._src.compile.lookaround import MARKER_BYTES
from ananke_jax._src.compile.token_table import token_columns
from ananke_jax._src.compile.token_trie import single_group, vocabulary_trie
from ananke_jax._src.compile.unit_loops import expand_unit_loops, loop_columns
from ananke_jax._src.ir import Rule, TerminalDef
from ananke_jax._src.json_schema import api as json_schema_api
from ananke_jax._src.json_schema import numbers, strings
from ananke_jax._src.json_schema.api import compile_in_pieces, json_schema_rules
from ananke_jax._src.json_schema.assemble import inline, recursive_rules, to_grammar
from ananke_jax._src.json_schema.ecma_regex import pattern_node
from ananke_jax._src.json_schema.gaps import GAP_BYTE, MAX_WHITESPACE_RUN, expand_gaps, with_bounded_gaps

from earley import EarleyRecogniser
from json_schemas import EXAMPLES, RECURSIVE, REGULAR
from oracles import unpack
from schema_suite import Walker
from test_pushdown import _accepts as _accepts_state
from test_pushdown import _advance, _mask

STEPS = 96
_STRUCTURAL = (b"{", b"}", b"[", b"]", b'"', b",", b":", b'":', b'",', b"1", b"0", b"true", b"null", b" ")


@functools.cache
def _bias(vocab):
    """A "model" that favours short structural tokens and EOS, so documents close."""
    bias = np.zeros(vocab.logits_width, np.float32)
    bias[[i for i, t in enumerate(vocab.tokens) if t in _STRUCTURAL]] = 3.0
    bias[list(vocab.eos_token_ids)] = 6.0
    return bias


def _generate(cg, vocab, key):
    """Random-logit constrained generation in one jitted lax.scan; tokens, done flag, state."""

    def step(carry, key):
        state, done = carry
        k1, k2 = jax.random.split(key)
        logits = jax.random.normal(k1, (vocab.logits_width,)) + _bias(vocab)
        token, new_state = aj.constrained_step(cg, state, logits, k2, aj.SamplingParams(temperature=1.0))
        new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new_state)
        return (new_state, done | (token == cg.fallback_token)), jnp.where(done, -1, token)

    (state, done), tokens = jax.lax.scan(step, (cg.init_state(), jnp.bool_(False)), jax.random.split(key, STEPS))
    return tokens, done, state


def _text(vocab, tokens) -> str:
    ids = [int(t) for t in tokens if t >= 0 and t not in vocab.eos_token_ids]
    return b"".join(vocab.token_bytes(t) for t in ids).decode("utf-8")


def _validate(schema, text):
    instance = json.loads(text, parse_float=decimal.Decimal)
    jsonschema.Draft202012Validator(schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER).validate(instance)


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_regular_schemas_round_trip_through_a_bank_under_jit_vmap_and_scan(real_vocab):
    """Regular schemas stacked in one bank: one jitted, vmapped scan generates for each. All of
    every second with the 32k vocabulary, every seventh with the 131k one, whose bank of all 28
    takes 470 MB of tables (each row padded to the widest schema's token classes)."""
    vocab_name, vocab, _ = real_vocab
    names = sorted(REGULAR)[:: 7 if vocab_name == "tekken" else 2]
    compiled = [aj.compile_json_schema(REGULAR[n], vocab) for n in names]
    assert all(isinstance(cg, aj.RegularGrammar) for cg in compiled)
    bank = aj.stack_grammars(compiled)
    run = jax.jit(jax.vmap(lambda cg, key: _generate(cg, vocab, key)))
    finished = dict.fromkeys(names, 0)
    for seed in range(4):
        tokens, done, state = run(bank, jax.random.split(jax.random.key(seed), len(names)))
        for i, n in enumerate(names):
            assert int(state.node[i]) != 0, n
            if bool(done[i]):
                _validate(REGULAR[n], _text(vocab, np.asarray(tokens[i])))
                finished[n] += 1
    assert all(finished.values()), [n for n, k in finished.items() if not k]


@pytest.mark.xla_optimized
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(RECURSIVE))
def test_recursive_schemas_round_trip_through_the_pushdown_engine(name, real_vocab):
    _, vocab, _ = real_vocab
    cg = aj.compile_json_schema(RECURSIVE[name], vocab)
    assert isinstance(cg, aj.PushdownGrammar) and "pushdown" in repr(cg)
    run = jax.jit(lambda key: _generate(cg, vocab, key))
    finished = 0
    for seed in range(2):
        tokens, done, state = run(jax.random.key(seed))
        assert not bool(aj.is_error(cg, state))
        if bool(done):
            _validate(RECURSIVE[name], _text(vocab, np.asarray(tokens)))
            finished += 1
    assert finished


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=pytest.mark.slow) if n in RECURSIVE and n != "linked_list" else n for n in sorted(EXAMPLES)]
)
def test_examples_are_valid_and_accepted_token_by_token(name, sentencepiece_vocab, sentencepiece_encode):
    """The walks of bench/json_schema.py: json.dumps' ", " and ": " are flexible whitespace."""
    schema, text = {**REGULAR, **RECURSIVE}[name], json.dumps(EXAMPLES[name])
    _validate(schema, text)
    cg = aj.compile_json_schema(schema, sentencepiece_vocab)
    state = cg.init_state()
    for token in sentencepiece_encode(text):
        assert bool(aj.is_allowed(_mask(cg, state), token)), (text, sentencepiece_vocab.token_bytes(token))
        state = _advance(cg, state, token)
    assert bool(_accepts_state(cg, state)), text


@pytest.mark.parametrize(
    "name", ["person", *[pytest.param(n, marks=pytest.mark.slow) for n in ("nested_record", "network", "tool_choice")]]
)
def test_a_schema_split_into_small_terminals_allows_what_its_token_dfa_allows(name, sentencepiece_vocab):
    """The route of a schema whose automaton would be too large: the pushdown engine, the
    schema's pieces split along its tree into terminals of at most 40 NFA states (formats stay
    whole; network's split has LR conflicts, so it is compiled coarser), their whitespace gaps
    expanded in each terminal's automaton. Whole masks, EOS included, equal the token DFA's
    along random walks."""
    rules = json_schema_rules(REGULAR[name], placeholder_gaps=True)
    assert len(to_grammar(rules, set(), max_terminal=40).terminals) > 5
    split = compile_in_pieces(rules, sentencepiece_vocab, 40, gap_run=MAX_WHITESPACE_RUN, stack_depth=64, max_configs=8)
    whole = aj.compile_json_schema(REGULAR[name], sentencepiece_vocab)
    assert isinstance(split, aj.PushdownGrammar) and isinstance(whole, aj.RegularGrammar)
    rng = np.random.default_rng(5)
    eos = sentencepiece_vocab.eos_token_ids
    for _ in range(6):
        state, reference = split.init_state(), whole.init_state()
        for _ in range(40):
            allowed = unpack(_mask(whole, reference))
            np.testing.assert_array_equal(unpack(_mask(split, state)), allowed)
            choices = [t for t in np.flatnonzero(allowed[: len(sentencepiece_vocab)]) if t not in eos]
            if not choices:
                break
            token = int(rng.choice(choices))
            state, reference = _advance(split, state, token), _advance(whole, reference, token)


def test_long_strings_split_into_pieces_keep_their_closing_quotes_and_their_loops(sentencepiece_vocab, monkeypatch):
    """A string's characters too many for one small terminal are a terminal with the closing
    quote (not one of their own, which would end where it counts characters), those of one set
    of code points alike: the lexer keeps the loops of both languages, stepped per vocabulary,
    and whole masks equal the token DFA's."""
    from ananke_jax._src.compile import cfg

    strings_ = {"type": "string", "maxLength": 300}
    slug = {"type": "string", "pattern": "^[a-z0-9-]*$", "maxLength": 300}
    schema = {"type": "object", "properties": {"a": strings_, "b": strings_, "s": slug, "n": {"type": "integer"}}, "required": ["a", "n"]}
    rules = json_schema_rules(schema, placeholder_gaps=True)
    lexers, real = [], cfg._lexer_with_loops
    monkeypatch.setattr(cfg, "_lexer_with_loops", lambda *args: lexers.append(real(*args)) or lexers[-1])
    split = compile_in_pieces(rules, sentencepiece_vocab, 40, gap_run=MAX_WHITESPACE_RUN, stack_depth=64, max_configs=8)
    assert isinstance(split, aj.PushdownGrammar)
    characters, slug_characters = sorted(
        (loop.language for loop in lexers[-1][1]), key=lambda language: language is not strings.string_units()
    )
    assert characters is strings.string_units() and slug_characters.dfa.accepts(b"a-9") and not slug_characters.dfa.accepts(b"A")
    whole = aj.compile_json_schema(schema, sentencepiece_vocab)
    assert isinstance(whole, aj.RegularGrammar)
    _assert_walks_alike(split, whole, sentencepiece_vocab, seed=4, walks=6, steps=40)


@pytest.mark.parametrize("recursive", [False, True])
def test_a_piece_held_by_several_runs_is_one_terminal_for_all(recursive, sentencepiece_vocab, monkeypatch):
    """Optional properties in order: each one that comes first is followed by every later one,
    so a later property is held by the run after each earlier one. Kept out of their terminals (`assemble.SHARED_COPY_STATES`), in pieces or beside
    recursion, it is one terminal for all of them: the terminals together take fewer states
    than with a copy in each, and whole masks, EOS included, equal those of the copies along
    random walks."""
    from ananke_jax._src.json_schema import assemble

    properties = {f"k{i}": {"type": "number"} for i in range(12)}
    schema = {"type": "object", "properties": {**properties, **({"next": {"$ref": "#"}} if recursive else {})}}
    rules = json_schema_rules(schema, placeholder_gaps=True)
    keep = recursive_rules(rules)
    assert bool(keep) == recursive

    def grammar(copy_states: float) -> aj.Grammar:
        monkeypatch.setattr(assemble, "SHARED_COPY_STATES", copy_states)
        max_terminal = float("inf") if recursive else 200
        return to_grammar(rules, keep, max_terminal=max_terminal, compiling=True, gap_run=MAX_WHITESPACE_RUN)

    shared, copied = grammar(assemble.SHARED_COPY_STATES), grammar(float("inf"))
    states = [sum(t.dfa.num_states for t in g.terminals) for g in (shared, copied)]
    assert states[0] < 0.8 * states[1], states
    compiled = [aj.compile_grammar(g, sentencepiece_vocab) for g in (shared, copied)]
    _assert_walks_alike(*compiled, sentencepiece_vocab, seed=6, walks=6, steps=40)


def test_a_piece_beside_recursion_too_large_for_one_terminal_is_split(sentencepiece_vocab):
    """Beside recursion every piece without references is one terminal; one over ``max_states``
    (an array of up to 12 objects: 1,389 NFA states against a budget of 1,000) is split into
    smaller terminals instead of refusing the schema. Masks, EOS included, equal those of the
    whole terminal compiled under a larger budget; a budget that neither way fits names both."""
    tag = {"type": "object", "properties": {"k": {"type": "string", "maxLength": 6}, "v": {"type": "integer"}}, "required": ["k"]}
    schema = {"type": "object", "properties": {"tags": {"type": "array", "items": tag, "maxItems": 12}, "next": {"$ref": "#"}}}
    rules = json_schema_rules(schema, placeholder_gaps=True)
    options = dict(gaps=True, stack_depth=64, max_configs=8, max_terminal=40)

    def compiled(max_states: int) -> aj.PushdownGrammar:
        with metered(aj.CompileBudget(max_states=max_states)):
            return json_schema_api.compile_rules(rules, sentencepiece_vocab, **options)

    split, whole = compiled(1_000), compiled(100_000)
    assert split.goto.shape[0] > 2 * whole.goto.shape[0], "the array is rules, not one terminal"
    _assert_walks_alike(split, whole, sentencepiece_vocab, seed=7, walks=6, steps=40)
    with pytest.raises(aj.BudgetError, match=r"NFA of 1,389 states .* max_states=500; in smaller terminals, .* max_states=500"):
        compiled(500)


def test_a_schema_whose_token_dfa_would_be_too_large_goes_to_the_pushdown_engine(sentencepiece_vocab, monkeypatch):
    """A schema without recursion whose token DFA would take more states than tables within
    ``max_table_bytes`` hold (at `TOKEN_COLUMNS` columns a state) goes to the pushdown engine in
    pieces, stopped at that cap before any token table is walked. Masks equal the token DFA's."""
    whole = aj.compile_json_schema(REGULAR["person"], sentencepiece_vocab)
    assert isinstance(whole, aj.RegularGrammar)
    # A cap of about half the token DFA's states.
    columns = aj.CompileBudget().max_table_bytes // (4 * (whole.num_states // 2))
    monkeypatch.setattr(json_schema_api, "TOKEN_COLUMNS", columns * 131_072 // sentencepiece_vocab.logits_width)

    def walked(*args, **kwargs):
        raise AssertionError("the token DFA's tables are walked past the cap")

    monkeypatch.setattr(regular, "token_tables", walked)
    split = aj.compile_json_schema(REGULAR["person"], sentencepiece_vocab)
    assert isinstance(split, aj.PushdownGrammar)
    _assert_walks_alike(split, whole, sentencepiece_vocab, seed=8, walks=4, steps=40)


@pytest.mark.parametrize("failure", [None, aj.BudgetError("pieces over", budget="max_table_bytes"), aj.GrammarError("an LR conflict")])
def test_a_language_estimated_large_goes_to_the_pieces_first_and_to_one_token_dfa_where_they_fail(
    failure, sentencepiece_vocab, monkeypatch
):
    """Over `PIECES_FIRST_STATES` NFA states (lowered here to ``person``'s), no token DFA is built
    unless the pieces fail, for their size or not; masks are alike either way."""
    whole = aj.compile_json_schema(REGULAR["person"], sentencepiece_vocab)
    rules = json_schema_rules(REGULAR["person"], placeholder_gaps=True)
    monkeypatch.setattr(json_schema_api, "PIECES_FIRST_STATES", rx.nfa_size(inline(rules, set())[rules.start]) - 1)
    built = []
    monkeypatch.setattr(json_schema_api, "_compile_regular", lambda *a, **k: built.append(1) or whole)

    def refused(*args, **kwargs):
        raise failure

    if failure is not None:
        monkeypatch.setattr(json_schema_api, "compile_in_pieces", refused)
    compiled = aj.compile_json_schema(REGULAR["person"], sentencepiece_vocab)
    assert (compiled is whole) == bool(built) == (failure is not None)
    if failure is None:
        assert isinstance(compiled, aj.PushdownGrammar)
        _assert_walks_alike(compiled, whole, sentencepiece_vocab, seed=9, walks=4, steps=40)


def test_a_language_over_the_budget_both_ways_names_both_limits(sentencepiece_vocab, monkeypatch):
    monkeypatch.setattr(json_schema_api, "PIECES_FIRST_STATES", 10)
    with pytest.raises(aj.SchemaError, match=r"max_table_bytes=20,000.*; in pieces for the pushdown engine, .*max_table_bytes=20,000"):
        aj.compile_json_schema(REGULAR["person"], sentencepiece_vocab, budget=aj.CompileBudget(max_table_bytes=20_000))


@pytest.mark.parametrize("name", ["any_value", "person"])
def test_outcome_walks_in_groups_of_source_states_give_the_same_tables(name, sentencepiece_vocab, monkeypatch):
    """The outcome walk takes the lexer states in groups (`outcome_walk._source_groups`), each
    walked apart and their columns merged: groups of 8 states, which partition the states, give
    the tables of one walk of them all, array for array (``{}``, and ``person`` split into
    terminals of 40 NFA states)."""
    rules = json_schema_rules(REGULAR.get(name, {}), placeholder_gaps=True)
    if name == "any_value":
        grammar = to_grammar(rules, recursive_rules(rules), compiling=True, gap_run=MAX_WHITESPACE_RUN)
    else:
        grammar = to_grammar(rules, set(), max_terminal=40, compiling=True, gap_run=MAX_WHITESPACE_RUN)
    monkeypatch.setattr(outcome_walk, "GROUP_SOURCES", 10**9)
    whole = cfg.cfg_tables(grammar, sentencepiece_vocab)
    grouped, sizes = outcome_walk._source_groups, []

    def spied(lexer, sources):
        found = grouped(lexer, sources)
        np.testing.assert_array_equal(np.sort(np.concatenate(found)), sources)
        sizes.append(len(found))
        return found

    monkeypatch.setattr(outcome_walk, "GROUP_SOURCES", 8)
    monkeypatch.setattr(outcome_walk, "_source_groups", spied)
    split = cfg.cfg_tables(grammar, sentencepiece_vocab)
    assert max(sizes) > 3, "the walk was in groups"
    for field in (
        "outcome_terminals",
        "outcome_length",
        "outcome_lexer",
        "state_outcomes",
        "set_members",
        "token_class",
        "class_row",
        "class_set",
    ):
        np.testing.assert_array_equal(getattr(split, field), getattr(whole, field), err_msg=field)


@pytest.mark.parametrize("lo, hi", [(2, 30), (0, 3), (3, 3), (2, 3), (3, None)])
def test_repeats_of_large_bodies_are_counted_by_rules(lo, hi, sentencepiece_vocab, sentencepiece_encode):
    """An array of ``lo`` to ``hi`` objects split into terminals of 40 NFA states: the items are
    counted by a left-recursive chain of rules, not spelled out as copies in one terminal, nor
    written as copies in a rule or nested optionals that take a stack entry each (a stack of 12
    holds 30 items). Masks equal the token DFA's along random walks, and the bounds hold token
    by token."""
    item = {"type": "object", "properties": {"k": {"enum": [1, 22]}, "v": {"type": "boolean"}}, "required": ["k"]}
    schema = {"type": "array", "items": item, "minItems": lo} | ({} if hi is None else {"maxItems": hi})
    rules = json_schema_rules(schema, whitespace="compact")
    grammar = to_grammar(rules, set(), max_terminal=40)
    assert max(rx.nfa_size(rx.Automaton(t.dfa)) for t in grammar.terminals) < 40
    split = compile_in_pieces(rules, sentencepiece_vocab, 40, stack_depth=12, max_configs=4)
    whole = aj.compile_json_schema(schema, sentencepiece_vocab, whitespace="compact")
    assert isinstance(split, aj.PushdownGrammar) and isinstance(whole, aj.RegularGrammar)
    _assert_walks_alike(split, whole, sentencepiece_vocab, seed=3, walks=4, steps=40)
    for count in sorted({0, 1, lo - 1, lo, lo + 1, hi or 30, (hi or 30) + 1} - {-1}):
        text = json.dumps([{"k": 22, "v": True}] * count, separators=(",", ":"))
        assert _token_walk(split, sentencepiece_encode(text)) == (lo <= count <= (hi or count)), text


def test_a_repeat_reached_in_several_places_is_counted_by_one_chain(sentencepiece_vocab, sentencepiece_encode):
    """The same bounded array under two optional properties is counted by one chain of rules
    (each place would add some 60 more for 30 items), and each place keeps its bounds."""
    item = {"type": "object", "properties": {"k": {"enum": [1, 22]}, "v": {"type": "boolean"}}, "required": ["k"]}
    items = {"type": "array", "items": item, "minItems": 2, "maxItems": 30}
    one = {"type": "object", "properties": {"a": items}, "additionalProperties": False}
    two = {"type": "object", "properties": {"a": items, "b": items}, "additionalProperties": False}
    sizes = [len(to_grammar(json_schema_rules(s, whitespace="compact"), set(), max_terminal=40).rules) for s in (one, two)]
    assert sizes[1] - sizes[0] < 30, sizes
    split = compile_in_pieces(json_schema_rules(two, whitespace="compact"), sentencepiece_vocab, 40, stack_depth=64, max_configs=4)
    for a, b in [(2, 30), (1, 2), (30, 31), (0, 5)]:
        text = json.dumps({"a": [{"k": 1}] * a, "b": [{"k": 22}] * b}, separators=(",", ":"))
        assert _token_walk(split, sentencepiece_encode(text)) == (2 <= a <= 30 and 2 <= b <= 30), text


LOOPED = {
    "bounded_strings_in_a_tree": {
        "type": "object",
        "properties": {
            "name": {"type": "string", "minLength": 2, "maxLength": 40},
            "note": {"type": "string", "pattern": "^[\\s\\S]*$"},
            "children": {"type": "array", "items": {"$ref": "#"}},
        },
        "required": ["name"],
        "additionalProperties": False,
    },
    "keys_beside_free_strings": {
        "type": "object",
        "properties": {"k": {"type": "string", "maxLength": 3}, "next": {"$ref": "#"}},
        "additionalProperties": {"type": "string", "maxLength": 5},
    },
    "any_value": {},
    # Strings of one set of code points under length bounds loop as that set's characters: the
    # longest class's, another class spelled out (one placeholder byte for both), and beside them
    # the free strings' characters loop too.
    "class_bounded_strings": {
        "type": "object",
        "properties": {
            "arn": {"type": "string", "pattern": "^[^\\s]+$", "minLength": 3, "maxLength": 30},
            "slug": {"type": "string", "pattern": "^[a-z0-9-]*$", "maxLength": 12},
            "tag": {"type": "string", "pattern": "^([a-z0-9-])+$", "maxLength": 8},
            "next": {"$ref": "#"},
        },
        "additionalProperties": {"type": "string", "maxLength": 2},
    },
    # A class of many ranges (some ninety states inside a character, from most of which most
    # tokens die at once).
    "number_class_strings": {
        "type": "object",
        "properties": {"tag": {"type": "string", "pattern": "^[\\p{N} _.-]*$", "maxLength": 12}, "next": {"$ref": "#"}},
    },
}


@pytest.mark.parametrize("name", sorted(LOOPED))
def test_strings_stepped_as_unit_loops_allow_what_spelled_strings_allow(name, real_vocab, monkeypatch):
    """The pushdown engine's lexer reads the characters of free and length-bounded strings (and
    of strings whose pattern every string matches, or that repeat one set of code points) as
    loops whose token outcomes come once per vocabulary. Whole masks, EOS included, equal those
    of the lexer with every string spelled out, along random walks (random tokens mostly stay
    inside strings, so walks reach their length bounds)."""
    _, vocab, _ = real_vocab
    rules = json_schema_rules(LOOPED[name])
    looped, spelled = (to_grammar(rules, recursive_rules(rules), compiling=units) for units in (True, False))
    assert any(t.units is not None for t in looped.terminals) and not any(t.units is not None for t in spelled.terminals)
    languages, loop_outcomes = [], cfg._loop_outcomes
    monkeypatch.setattr(
        cfg, "_loop_outcomes", lambda lexer, loops, *rest: languages.append(loops.language) or loop_outcomes(lexer, loops, *rest)
    )
    cg = aj.compile_grammar(looped, vocab)
    if name == "class_bounded_strings":  # arn's characters: no whitespace, and more than [a-z0-9-]; a string's
        language, characters = languages
        assert language.dfa.accepts('A\\"é'.encode()) and not language.dfa.accepts(b" ")
        assert characters is strings.string_units()
    elif name == "number_class_strings":
        (language,) = languages
        assert language.dfa.num_states > 50 and language.dfa.accepts("\u0663 9.".encode()) and not language.dfa.accepts(b"a")
    else:
        assert languages == [strings.string_units()]
    _assert_walks_alike(cg, aj.compile_grammar(spelled, vocab), vocab, seed=3, walks=5, steps=60)


def test_a_lexer_that_cannot_keep_string_loops_spells_them_out(sentencepiece_vocab):
    """Where one lexer state reads a string's characters as units beside another terminal that
    begins with one of their bytes (the literal "x" beside any string of at most 6 characters,
    both from the start), the lexer cannot step over the loop per vocabulary: every terminal is
    spelled out, and whole masks equal those of the grammar written spelled out."""
    body = strings.quoted(rx.repeat(strings.ANY_UNIT, 0, 6))
    placeholders = rx.to_dfa(strings.with_placeholder_units(body))

    def grammar(string: TerminalDef) -> aj.Grammar:
        return aj.Grammar((Rule("s", ("A",)), Rule("s", ("B",))), (string, TerminalDef("B", '"x"')), "s")

    looped = grammar(TerminalDef("A", "a string", placeholders, strings.string_units()))
    spelled = grammar(TerminalDef("A", "a string", rx.to_dfa(body)))
    ir, dfas = without_empty_terminals(looped)
    assert _lexer_with_loops(ir.terminals, dfas, np.ones((1, 2), bool))[1] == ()
    compiled = (aj.compile_grammar(g, sentencepiece_vocab) for g in (looped, spelled))
    _assert_walks_alike(*compiled, sentencepiece_vocab, seed=0, walks=20, steps=10)


def test_a_lexer_whose_terminal_ends_inside_a_loop_walks_its_spliced_units_whole(sentencepiece_vocab, monkeypatch):
    """Where a terminal ends in a state that counts units (a string's opening piece, "x then up
    to 6 characters", before a closing-quote terminal), its loops cannot be stepped per
    vocabulary: the units are spliced into the lexer all the same, as many states as the lexer of
    the terminals spelled out (not built again), and walked whole; whole masks equal the spelled
    grammar's."""
    from ananke_jax._src.compile import cfg
    from ananke_jax._src.compile.lexer import build_lexer

    def grammar(opening: TerminalDef) -> aj.Grammar:
        return aj.Grammar((Rule("s", ("A", "Q")),), (opening, TerminalDef("Q", '"')), "s")

    chars = rx.seq(rx.Text('"x'), rx.repeat(strings.ANY_UNIT, 0, 6))
    looped = grammar(TerminalDef("A", "an opening", rx.to_dfa(strings.with_placeholder_units(chars)), strings.string_units()))
    spelled = grammar(TerminalDef("A", "an opening", rx.to_dfa(chars)))
    begins = np.ones((1, 2), bool)
    ir, dfas = without_empty_terminals(looped)
    built = []
    monkeypatch.setattr(cfg, "build_lexer", lambda *args: built.append(build_lexer(*args)) or built[-1])
    lexer, loops = _lexer_with_loops(ir.terminals, dfas, begins)
    assert len(built) == 1
    spelled_ir, spelled_dfas = without_empty_terminals(spelled)
    assert loops == () and lexer.num_states == build_lexer(spelled_ir.terminals, spelled_dfas, begins).num_states
    compiled = (aj.compile_grammar(g, sentencepiece_vocab) for g in (looped, spelled))
    _assert_walks_alike(*compiled, sentencepiece_vocab, seed=1, walks=20, steps=10)


def test_whitespace_runs_stay_in_the_runs_that_hold_them(sentencepiece_vocab):
    """Written out (no placeholder gaps: a structural tag's runs that differ from a schema's),
    the whitespace run of every separator is held by dozens of nodes, yet it is never a symbol
    of its own (`assemble._Writer.shared`): the pieces of optional properties stay LALR(1)."""
    from ananke_jax._src.compile.context_free import compile_grammar

    arn = {"type": "string", "pattern": "^arn:aws:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@-]{1,32}$"}
    properties = {**{f"k{i}": {"type": "integer"} for i in range(12)}, "arn": arn}
    rules = json_schema_rules({"type": "object", "properties": properties}, placeholder_gaps=False)
    grammar = to_grammar(rules, set(), max_terminal=200, compiling=True)
    assert not any(t.dfa.accepts(b" ") for t in grammar.terminals)  # no terminal of whitespace alone
    assert isinstance(compile_grammar(grammar, sentencepiece_vocab, forks=False), aj.PushdownGrammar)


def _assert_walks_alike(cg, reference, vocab, *, seed: int, walks: int, steps: int) -> None:
    """Whole masks (EOS included) and acceptance of ``cg`` equal ``reference``'s along random
    walks of tokens ``reference`` allows."""
    rng = np.random.default_rng(seed)
    for _ in range(walks):
        state, expected = cg.init_state(), reference.init_state()
        for _ in range(steps):
            allowed = unpack(_mask(reference, expected))
            np.testing.assert_array_equal(unpack(_mask(cg, state)), allowed)
            choices = np.flatnonzero(allowed[: len(vocab)])
            if not len(choices):
                break
            token = int(rng.choice(choices))
            state, expected = _advance(cg, state, token), _advance(reference, expected, token)
            assert bool(_accepts_state(cg, state)) == bool(_accepts_state(reference, expected))


def _dfa(schema, **options):
    rules = aj.json_schema_to_grammar(schema, **options)
    assert len(rules.terminals) == 1, "a regular schema is one terminal"
    return rules.terminals[0].dfa


def _accepts(dfa, text: str) -> bool:
    return bool(dfa.accepting[dfa.walk(dfa.start, text.encode())])


VALUES = {
    "person": [{"name": "Ann", "age": 30}, {"name": "Bo", "age": 7, "email": "bo@example.com"}],
    "nested_record": [{"id": "123e4567-e89b-12d3-a456-426614174000", "owner": {"name": "x", "admin": False}}],
    "array_of_objects": [[{"sku": "ABC-123", "qty": 2}, {"sku": "XYZ-999", "qty": 99}]],
    "tuple": [["ab", 3], ["", -1, True]],
    "with_defs": [{"price": {"amount": 5, "currency": "EUR"}, "tax": {"amount": 0, "currency": "USD"}}],
}


@pytest.mark.parametrize("layout", ["flexible", "compact", 2, 4])
def test_layouts_accept_their_spellings_and_only_them(layout):
    for name, values in VALUES.items():
        dfa = _dfa(REGULAR[name], whitespace=layout)
        for v in values:
            compact = json.dumps(v, separators=(",", ":"))
            indented = json.dumps(v, indent=layout if isinstance(layout, int) else 2)
            assert _accepts(dfa, compact) == ((layout != 2 and layout != 4) or compact == indented), (name, layout)
            if isinstance(layout, int):
                assert _accepts(dfa, json.dumps(v, indent=layout)), (name, layout)
            else:
                assert _accepts(dfa, json.dumps(v)) == (layout == "flexible"), (name, layout)


def test_flexible_whitespace_runs_are_bounded():
    dfa = _dfa(REGULAR["person"])
    assert _accepts(dfa, '{"name":"A",' + " " * 24 + '"age":1}')
    assert not _accepts(dfa, '{"name":"A",' + " " * 25 + '"age":1}')
    assert not _accepts(dfa, ' {"name":"A","age":1}')  # none outside the value


@pytest.mark.parametrize("name", sorted(REGULAR))
def test_placeholder_gaps_give_the_minimal_automaton_of_bounded_whitespace(name):
    """Flexible gaps compiled as one placeholder byte, then expanded (the regular route) or
    substituted (the pushdown route, automata within included), give the very automaton that
    the regex of bounded whitespace runs gives: same language, same number of states."""
    bounded = _inlined(json_schema_rules(REGULAR[name]))
    placeholders = json_schema_rules(REGULAR[name], placeholder_gaps=True)
    for dfa in (expand_gaps(_inlined(placeholders)), _inlined(placeholders, with_bounded_gaps)):
        assert dfa.num_states == bounded.num_states
        assert rx.difference(dfa, bounded).start == 0 and rx.difference(bounded, dfa).start == 0


def _inlined(rules, rewrite=lambda node: node):
    return rx.to_dfa(rewrite(inline(rules, set())[rules.start]))


# Strings that exercise the count chains: bounds on both sides, several strings, keys after values.
STRING_LOOPS = {
    "bounded_items": {"type": "array", "items": {"type": "string", "minLength": 2, "maxLength": 5}, "maxItems": 3},
    "free_and_min": {
        "type": "object",
        "properties": {"a": {"type": "string"}, "b": {"type": "string", "minLength": 3}},
        "required": ["a", "b"],
    },
    "string_or_null": {"type": ["string", "null"], "maxLength": 1},
}


def _unit_loops(schema):
    """The automaton of ``schema`` with its strings' characters as placeholders, expanded."""
    rules = json_schema_rules(schema, placeholder_gaps=True)
    return expand_unit_loops(expand_gaps(_inlined(rules, strings.with_placeholder_units)), strings.string_units())


@pytest.mark.parametrize("name", sorted(REGULAR) + sorted(STRING_LOOPS))
def test_placeholder_units_give_the_minimal_automaton_of_string_characters(name):
    """Strings' characters compiled as one placeholder byte each, then expanded, give the very
    automaton that the characters spelled out give: same language, same number of states."""
    schema = {**REGULAR, **STRING_LOOPS}[name]
    spelled = expand_gaps(_inlined(json_schema_rules(schema, placeholder_gaps=True)))
    dfa, _ = _unit_loops(schema)
    assert dfa.num_states == spelled.num_states
    assert rx.difference(dfa, spelled).start == 0 and rx.difference(spelled, dfa).start == 0


def test_grouped_tables_do_not_depend_on_how_the_walk_is_split_or_rows_are_built(real_vocab, monkeypatch):
    """With string loops, tokens are classed by group and the walked ones apart, and mask bits
    laid by runs of a class: the walk split into single start states, and masks built as flips
    of those runs or token by token, give the same token partition, columns and masks."""
    _, vocab, _ = real_vocab

    def tables():
        cg = aj.compile_json_schema(REGULAR["weather_call"], vocab)
        class_of_token, next_state = np.asarray(cg.class_of_token), np.asarray(cg.next_state)
        return class_of_token, next_state, np.asarray(cg.mask_rows)[np.asarray(cg.row_of_state)]

    default_classes, default_next, default_masks = tables()
    _, first = np.unique(default_classes, return_index=True)  # a token of each class
    monkeypatch.setattr(token_table, "_MAX_PAIRS", 1)
    for factor in (0, 1 << 30):  # as flips; token by token
        monkeypatch.setattr(token_table, "_DENSE_ROWS_FACTOR", factor)
        classes, next_state, masks = tables()
        assert len(np.unique(np.stack([classes, default_classes]), axis=1)[0]) == len(first)  # one class for one class
        np.testing.assert_array_equal(next_state[:, classes[first]], default_next[:, default_classes[first]])
        np.testing.assert_array_equal(masks, default_masks)


def test_loop_columns_are_the_columns_of_the_vocabulary_walk(real_vocab):
    """The columns of the states inside strings, from per-vocabulary outcomes, are those a walk
    of the whole vocabulary from those states gives: the same token classes, the same columns."""
    _, vocab, _ = real_vocab
    trie = vocabulary_trie(vocab)
    looped = 0
    for schema in [*REGULAR.values(), *STRING_LOOPS.values()]:
        dfa, loops = _unit_loops(schema)
        if loops is None:
            continue
        looped += 1
        walk = token_columns(trie, dfa.transitions, single_group(vocab))
        known = loop_columns(loops, dfa.transitions, vocab)
        assert len(known.rows) > 0
        by_loops = token_columns(trie, dfa.transitions, known.groups, known)
        walked_class, walked, looped_class, columns = walk.of_string(), walk.columns, by_loops.of_string(), by_loops.columns
        assert np.array_equal(walked_class < 0, looped_class < 0)
        # One class for one class: the pairs of class ids are as many as the classes.
        pairs = np.unique(np.stack([walked_class, looped_class])[:, walked_class >= 0], axis=1)
        assert pairs.shape[1] == walked.shape[1] == columns.shape[1]
        assert np.array_equal(walked[:, pairs[0]], columns[:, pairs[1]])
    assert looped >= 10


def test_strings_alternating_characters_with_literals_compile_without_placeholders(sentencepiece_vocab, sentencepiece_encode):
    """A string that is either short or matches a pattern cannot take placeholders (one state
    reads both); it is compiled from its characters spelled out."""
    schema = {"anyOf": [{"type": "string", "maxLength": 2}, {"type": "string", "pattern": "^ab+$"}]}
    assert _unit_loops(schema) is None
    cg = aj.compile_json_schema(schema, sentencepiece_vocab)
    for text, valid in (('"x"', True), ('"abbbb"', True), ('""', True), ('"\\u00e9\u00e9"', True), ('"xyz"', False), ('"abc"', False)):
        assert _token_walk(cg, sentencepiece_encode(text)) == valid, text


def test_count_chains_that_read_other_bytes_keep_the_whole_walk():
    """Loop columns assume a counting state reads only characters and the closing quote; a chain
    that reads another byte (here a control byte after the characters) is expanded all the same,
    to the spelled automaton, but walked whole."""

    def language(unit):
        chars = rx.repeat(unit, 0, 2)
        return rx.alt(rx.seq(rx.Text('"'), chars, rx.Text('"')), rx.seq(rx.Text('"'), chars, rx.Text("\x01")))

    dfa, loops = expand_unit_loops(rx.to_dfa(language(strings.UNIT)), strings.string_units())
    spelled = rx.to_dfa(language(strings.ANY_UNIT))
    assert loops is None and dfa.num_states == spelled.num_states
    assert rx.difference(dfa, spelled).start == 0 and rx.difference(spelled, dfa).start == 0


def _token_walk(cg, tokens) -> bool:
    """Whether every token is allowed in turn and the output is then complete."""
    state = cg.init_state()
    for token in tokens:
        if not aj.is_allowed(_mask(cg, state), token):
            return False
        state = _advance(cg, state, token)
    return bool(_accepts_state(cg, state))


def test_optional_properties_keep_schema_order_and_may_be_omitted():
    schema = {"type": "object", "properties": {k: {"type": "integer"} for k in "abcd"}, "required": ["c"]}
    dfa = _dfa(schema, whitespace="compact")
    assert _accepts(dfa, '{"c":1}') and _accepts(dfa, '{"a":1,"c":2,"d":3}') and _accepts(dfa, '{"a":1,"b":1,"c":1,"d":1}')
    assert not _accepts(dfa, '{"c":1,"a":1}') and not _accepts(dfa, '{"a":1}') and not _accepts(dfa, '{"a":1,,"c":1}')
    assert not _accepts(dfa, '{"c":1,"e":1}')  # closed unless allow_additional
    spec = EarleyRecogniser(aj.json_schema_to_grammar(schema, whitespace="compact", allow_additional=True))
    assert spec.accepts(b'{"c":1,"e":{"x":[1]}}') and not spec.accepts(b'{"c":1,"a":1}')


@pytest.mark.parametrize("bounds", [{}, {"minProperties": 1}, {"minProperties": 3, "maxProperties": 5}])
def test_many_optional_properties_compile_and_match_jsonschema(bounds):
    """Sixteen optional properties (the members once took 2^n NFA copies and failed past 11):
    random subsets, in schema order or shuffled, and with an extra key, against jsonschema."""
    schema = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(16)}, "additionalProperties": False, **bounds}
    rules = json_schema_rules(schema, whitespace="compact")
    dfa = rx.to_dfa(inline(rules, set())[rules.start])
    rng = random.Random(len(bounds))
    for _ in range(300):
        keys = [f"p{i}" for i in range(16) if rng.random() < rng.choice([0.1, 0.3, 0.7])]
        if rng.random() < 0.2:
            rng.shuffle(keys)
        if rng.random() < 0.1:
            keys.insert(rng.randrange(len(keys) + 1), "q")
        value = {k: rng.randrange(100) for k in keys}
        in_order = list(value) == sorted(value, key=lambda k: (k == "q", int(k[1:]) if k != "q" else 0))
        expected = jsonschema.Draft202012Validator(schema).is_valid(value) and in_order
        assert _accepts(dfa, json.dumps(value, separators=(",", ":"))) == expected, value


def test_grammar_text_is_accepted_by_lark_and_the_gbnf_front_end():
    slugs = {"type": "object", "properties": {"slug": {"type": "string", "pattern": "^[a-z-]+$", "maxLength": 4}, "next": {"$ref": "#"}}}
    cases = [
        (RECURSIVE["tree"], {"value": 1, "children": [{"value": 2, "children": []}]}, {"value": 1, "children": {}}),
        (REGULAR["with_defs"], VALUES["with_defs"][0], None),
        (slugs, {"slug": "ab-c", "next": {"slug": "x"}}, {"next": {"slug": "abcde"}}),  # class-bounded strings
    ]
    for schema, value, invalid in cases:
        text = json.dumps(value)
        Lark(aj.json_schema_to_lark(schema), start="root", parser="earley", lexer="dynamic").parse(text)
        ir = aj.gbnf_to_ir(aj.json_schema_to_gbnf(schema))
        assert EarleyRecogniser(ir).accepts(text.encode())
        for wrong in [text[:-1], *([json.dumps(invalid)] if invalid else [])]:
            assert not EarleyRecogniser(ir).accepts(wrong.encode()), wrong


def test_automata_too_large_to_print_are_refused_clearly():
    with pytest.raises(aj.SchemaError, match="too large to write as a regex"):
        aj.json_schema_to_lark(REGULAR["person"])  # email format with a length bound


@pytest.mark.parametrize("integer", [True, False])
def test_number_intervals_and_multiples_match_decimal_arithmetic(integer):
    rng = random.Random(0)
    spelling = re.compile(r"-?(0|[1-9][0-9]*)" + ("" if integer else r"(\.[0-9]+)?"))
    candidates = {
        f"{rng.choice(['', '-'])}{rng.choice([0, 1, 5, 9, 10, 19, 100, rng.randint(0, 3000)])}{'' if integer else rng.choice(['', '.0', '.5', '.05', '.25', '.999'])}"
        for _ in range(400)
    }
    bounds = [None, decimal.Decimal(0), decimal.Decimal("0.5"), decimal.Decimal(-3), decimal.Decimal("19.25"), decimal.Decimal(100)]
    for lo in bounds:
        for hi in bounds:
            for lo_open, hi_open in [(False, False), (True, True), (False, True)]:
                if (lo is None and lo_open) or (hi is None and hi_open):
                    continue
                dfa = rx.to_dfa(numbers.interval(lo, lo_open, hi, hi_open, integer=integer))
                for c in candidates:
                    ok = bool(spelling.fullmatch(c)) and c != "-0" and not re.fullmatch(r"-0(\.0+)?", c)
                    if ok and lo is not None:
                        ok = decimal.Decimal(c) > lo if lo_open else decimal.Decimal(c) >= lo
                    if ok and hi is not None:
                        ok = decimal.Decimal(c) < hi if hi_open else decimal.Decimal(c) <= hi
                    if lo is None and hi is None:
                        ok = bool(spelling.fullmatch(c))
                    assert _accepts(dfa, c) == ok, (lo, lo_open, hi, hi_open, c)
    for divisor in ["2", "7", "0.5", "0.25"]:
        dfa = rx.intersect(
            numbers.multiple_of(decimal.Decimal(divisor), integer=integer).dfa, rx.to_dfa(numbers.json_number(integer=integer))
        )
        for c in candidates:
            expected = bool(spelling.fullmatch(c)) and decimal.Decimal(c) % decimal.Decimal(divisor) == 0
            assert _accepts(dfa, c) == expected, (divisor, c)


@pytest.mark.parametrize("max_digits", [None, 3])
def test_enum_and_const_numbers_admit_exactly_their_equal_decimal_spellings(max_digits):
    """A listed number admits every spelling equal to it without exponent (trailing zeros in the
    fraction, as many as ``max_digits`` lets a fraction have, raised to one more than the value's
    own), and nothing else; -0 is 0, spelled "0" (as a bound or a value it raised a ValueError
    from the digit comparison)."""
    values = [0, -0.0, 2.5, -7, 19.25, 100, 0.125, -1234]
    spelling = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?")
    wholes, fractions = (
        ("0", "2", "7", "19", "100", "1234", "12"),
        ("", ".0", ".00", ".000", ".0000", ".5", ".50", ".500", ".25", ".2500", ".125", ".1250"),
    )
    candidates = [f"{sign}{whole}{fraction}" for sign in ("", "-") for whole in wholes for fraction in fractions]
    for listed in [values, *([v] for v in values)]:
        dfa = _dfa({"enum": listed} if len(listed) > 1 else {"type": "number", "const": listed[0]}, max_digits=max_digits)
        for c in candidates:
            equal = [v for v in map(decimal.Decimal, listed) if decimal.Decimal(c) == v]
            own = len(format(abs(equal[0]), "f").partition(".")[2].rstrip("0")) if equal else 0
            fits = max_digits is None or len(c.partition(".")[2]) <= max(max_digits, own + 1)
            expected = bool(equal) and fits and not c.startswith("-0") and bool(spelling.fullmatch(c))
            assert _accepts(dfa, c) == expected, (listed, c)
    assert _accepts(_dfa({"type": "number", "minimum": -0.0, "maximum": 1}), "0.5")


@pytest.mark.parametrize(
    "schema, keyword, pointer",
    [
        ({"type": "array", "uniqueItems": True}, "uniqueItems", "#"),
        ({"type": "array", "anyOf": [{"uniqueItems": True}, {"minItems": 3}]}, "uniqueItems", "#"),
        ({"properties": {"a": {"dependentRequired": {"x": ["y"]}}}}, "dependentRequired", "#/properties/a"),
        ({"$ref": "#/$defs/missing"}, "$ref", "#"),
        ({"$ref": "https://example.com/remote.json"}, "$ref", "#"),
        ({"type": "string", "pattern": "(a)\\1"}, "pattern", "#"),
        ({"type": "integer", "multipleOf": 0}, "multipleOf", "#"),
        ({"type": "integer", "multipleOf": 0.000123457}, "multipleOf", "#"),
        ({"type": "strange"}, "type", "#"),
        ({"type": "array", "minItems": -1}, "minItems", "#"),
        ({"properties": {"a": {"format": "no-such-format"}}}, "format", "#/properties/a"),
    ],
)
def test_unsupported_or_malformed_schemas_name_the_keyword_and_pointer(schema, keyword, pointer, sentencepiece_vocab):
    with pytest.raises(aj.SchemaError) as e:
        aj.compile_json_schema(schema, sentencepiece_vocab)
    assert e.value.keyword == keyword and e.value.pointer == pointer, str(e.value)
    assert keyword in str(e.value) and pointer in str(e.value)


def test_relaxed_mode_warns_and_ignores(sentencepiece_vocab):
    with pytest.warns(UserWarning, match="uniqueItems"):
        cg = aj.compile_json_schema({"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True}, sentencepiece_vocab, strict=False)
    assert isinstance(cg, aj.RegularGrammar)


def test_a_fragment_id_names_its_subschema_and_makes_no_document_of_it(sentencepiece_vocab, sentencepiece_encode):
    """Draft 7's ``"$id": "#name"`` names its subschema for ``$ref``; a fragment ``$id`` shaped like a
    pointer (setuptools' pyproject schema writes ``"$id": "#/definitions/x"``) names nothing and
    leaves the document's other pointers resolving from its root. Verdicts agree with the
    ``jsonschema`` package's draft 7 validator."""
    schema = {
        "$id": "https://example.com/config.json",
        "type": "object",
        "properties": {"a": {"$ref": "#/definitions/x"}, "b": {"$ref": "#y"}},
        "required": ["a", "b"],
        "additionalProperties": False,
        "definitions": {"x": {"$id": "#/definitions/x", "type": "integer"}, "y": {"$id": "#y", "type": "boolean"}},
    }
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, whitespace="compact")
    validator = jsonschema.Draft7Validator(schema)
    for text in ('{"a":1,"b":true}', '{"a":true,"b":1}', '{"a":1,"b":2}', '{"a":"x","b":false}'):
        assert _token_walk(cg, sentencepiece_encode(text)) == validator.is_valid(json.loads(text)), text
    assert _token_walk(cg, sentencepiece_encode('{"a":1,"b":true}'))
    # An empty fragment names nothing: "#" stays the document's root.
    nested = {
        "$id": "https://example.com/tree.json",
        "type": "object",
        "properties": {"n": {"$id": "#", "type": "integer"}, "child": {"$ref": "#"}},
    }
    cg = aj.compile_json_schema(nested, sentencepiece_vocab, whitespace="compact")
    assert _token_walk(cg, sentencepiece_encode('{"n":1,"child":{"n":2}}'))
    assert not _token_walk(cg, sentencepiece_encode('{"n":1,"child":3}'))


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "array", "items": [{"type": "integer"}, {"type": "string"}]},
        {"type": "array", "items": [{"type": "integer"}], "additionalItems": {"type": "boolean"}},
        {"type": "array", "items": [{"type": "integer"}, {"type": "string"}], "additionalItems": False},
        {"type": "array", "items": {"type": "integer"}, "additionalItems": False},
        {"type": "array", "additionalItems": False},
    ],
    ids=["tuple", "tuple-then-booleans", "closed-tuple", "additionalItems-beside-a-schema", "additionalItems-alone"],
)
def test_draft7_item_arrays_and_additional_items_validate_as_draft7_says(schema, sentencepiece_vocab, sentencepiece_encode):
    """Drafts 4 to 2019-09 write a tuple as ``items: [...]`` and what follows as
    ``additionalItems`` (which asserts nothing beside an ``items`` schema). Verdicts equal the
    ``jsonschema`` package's draft 7 validator on arrays of every shape (with
    ``allow_additional=True``, the specification's reading of an open tuple)."""
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, whitespace="compact", allow_additional=True)
    validator = jsonschema.Draft7Validator(schema)
    values = [[], [1], ["a"], [True], [1, "a"], [1, 2], [1, True], [1, "a", True], [1, "a", "b"], [1, True, False], [1, 2, 3]]
    for value in values:
        text = json.dumps(value, separators=(",", ":"))
        assert _token_walk(cg, sentencepiece_encode(text)) == validator.is_valid(value), text


def test_item_arrays_beside_prefix_items_are_refused(sentencepiece_vocab):
    with pytest.raises(aj.SchemaError, match=r"'items' as an array .* beside 'prefixItems' .* at #/properties/a \(keyword 'items'\)"):
        aj.compile_json_schema({"type": "object", "properties": {"a": {"prefixItems": [True], "items": [True]}}}, sentencepiece_vocab)


def test_bad_input_is_refused_clearly(sentencepiece_vocab):
    with pytest.raises(aj.SchemaError, match="line 1, column"):
        aj.compile_json_schema('{"type": ', sentencepiece_vocab)
    with pytest.raises(aj.SchemaError, match="accepts no JSON value"):
        aj.compile_json_schema({"allOf": [{"type": "string"}, {"type": "integer"}]}, sentencepiece_vocab)
    with pytest.raises(aj.SchemaError, match="cycle"):
        aj.compile_json_schema(
            {"$defs": {"a": {"$ref": "#/$defs/a", "type": "string"}}, "$ref": "#/$defs/a", "minLength": 1}, sentencepiece_vocab
        )
    for schema in (
        {"type": "object", "anyOf": [{"$ref": "#"}, {"required": ["a"]}]},
        {"type": "object", "properties": {"a": {}}, "anyOf": [{"$ref": "#"}]},
    ):
        with pytest.raises(aj.SchemaError, match="cycle"):  # once a RecursionError
            aj.compile_json_schema(schema, sentencepiece_vocab)
    recursive = {"type": "array", "items": {"$ref": "#/$defs/list"}}  # its exclusion nests inline forever
    with pytest.raises(aj.SchemaError, match="nested more than"):  # once a RecursionError
        aj.compile_json_schema({"oneOf": [recursive, {"not": {"$ref": "#/$defs/list"}}], "$defs": {"list": recursive}}, sentencepiece_vocab)
    with pytest.raises(aj.SchemaError, match="whitespace"):
        aj.compile_json_schema({"type": "string"}, sentencepiece_vocab, whitespace="wide")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "regular" in repr(aj.compile_json_schema('{"type": "boolean"}', sentencepiece_vocab))


# oneOf with overlapping branches, and not, where the difference must hold whatever the key order
# or the spelling of numbers and strings.
DIFFERENCES = {
    "numbers": {"oneOf": [{"type": "integer"}, {"minimum": 2}, {"exclusiveMinimum": 0, "maximum": 5}]},
    "strings": {"type": "string", "oneOf": [{"minLength": 2}, {"maxLength": 3}, {"pattern": "^a"}, {"enum": ["ab", "b", 1]}]},
    "objects": {
        "oneOf": [
            {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
            {"properties": {"b": {"type": "string"}, "a": {"minimum": 0}}, "required": ["b"]},
            {"type": "object", "maxProperties": 1, "properties": {"c": {"type": "boolean"}}},
        ]
    },
    "arrays": {
        "type": "array",
        "items": {"type": ["integer", "string", "null"]},
        "oneOf": [{"items": {"type": "integer"}}, {"maxItems": 2}, {"prefixItems": [{"const": 1}, {"type": "string"}], "minItems": 1}],
    },
    "nested": {
        "oneOf": [
            {"type": "object", "properties": {"x": {"oneOf": [{"type": "integer"}, {"minimum": 1}]}}, "required": ["x"]},
            {"type": "object", "properties": {"x": {"maximum": 3}, "y": {"type": "array", "maxItems": 1}}},
        ]
    },
    "discriminated": {
        "oneOf": [
            {"type": "object", "properties": {"kind": {"const": "a"}, "v": {"type": "integer"}}, "required": ["kind", "v"]},
            {"type": "object", "properties": {"kind": {"enum": ["b", "c"]}, "v": {"type": "string"}}, "required": ["kind"]},
            {"type": ["null", "integer"]},
            {"type": "number", "minimum": 3},
        ]
    },
    "not_object": {
        "properties": {"a": {"type": "integer"}, "b": {}},
        "not": {"properties": {"b": {"const": 1}, "a": {"minimum": 3}}, "required": ["b", "a"]},
    },
    "not_scalars": {
        "not": {"anyOf": [{"type": "integer", "maximum": 4}, {"enum": ["a", "b", 2.5]}, {"type": "array", "items": {"type": "integer"}}]}
    },
    "not_contains": {
        "type": "array",
        "items": {"type": ["integer", "string", "null"]},
        "not": {"contains": {"type": "string"}, "maxContains": 1},
    },
}


def _instance(rng: random.Random, depth: int = 2):
    """A random JSON value, small enough to meet the schemas above often."""
    kind = rng.randrange(7 if depth else 5)
    if kind == 0:
        return rng.choice([None, True, False])
    if kind == 1:
        return rng.randint(-2, 7)
    if kind == 2:
        return rng.choice([0.5, 2.5, 4.5, -1.5])
    if kind in (3, 4):
        return rng.choice(["", "a", "b", "c", "ab", "ba", "abc", "abcd", "x1"])
    if kind == 5:
        return [_instance(rng, depth - 1) for _ in range(rng.randrange(4))]
    return {k: _instance(rng, depth - 1) for k in rng.sample(["a", "b", "kind", "v", "x", "y"], rng.randrange(4))}


def _spelling(v, rng: random.Random) -> str:
    """A random JSON text of ``v``: any key order and whitespace, numbers with fractions or
    exponents, strings with escapes."""
    if isinstance(v, bool) or v is None:
        return json.dumps(v)
    if isinstance(v, int):
        return rng.choice([str(v), f"{v}.0", f"{v}e0", f"{v}.00"])
    if isinstance(v, float):
        return rng.choice([repr(v), f"{v}0", f"{v * 10}e-1"])
    if isinstance(v, str):
        return '"' + "".join(rng.choice([c, f"\\u{ord(c):04x}"]) for c in v) + '"'
    if isinstance(v, list):
        return "[" + rng.choice([",", ", "]).join(_spelling(x, rng) for x in v) + "]"
    return "{" + ",".join(f"{json.dumps(k)}: {_spelling(v[k], rng)}" for k in rng.sample(list(v), len(v))) + "}"


@pytest.mark.parametrize("name", sorted(DIFFERENCES))
def test_differences_match_jsonschema_on_random_values_and_spellings(name):
    """A value is accepted (in some key order) iff jsonschema says it is valid, and no spelling of
    an invalid value is accepted. Compiled with the specification's open objects, exactly: no
    oneOf falls back to anyOf."""
    schema = DIFFERENCES[name]
    valid = jsonschema.Draft202012Validator(schema).is_valid
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        walker = Walker(schema)
    rng = random.Random(name)
    checked = {False: 0, True: 0}  # values checked, by verdict
    while min(checked.values()) < 60:
        v = _instance(rng)
        verdict = valid(v)
        if checked[verdict] < 60:
            checked[verdict] += 1
            assert walker.accepts(v) == verdict, v
            for text in {_spelling(v, rng) for _ in range(3)}:
                assert not walker.complete(walker.feed(walker.initial(), text)) or valid(json.loads(text)), text


def test_one_of_is_any_of_where_the_difference_is_not_a_schema():
    """Two contains keywords cannot be combined: that oneOf is compiled as anyOf, with a warning."""

    def language(keyword):
        rules = json_schema_rules({"type": "array", "items": {"type": ["integer", "string"]}, keyword: branches})
        return rx.to_dfa(inline(rules, set())[rules.start])

    branches = [{"contains": {"type": "integer"}}, {"contains": {"type": "string"}}]
    with pytest.warns(UserWarning, match="'oneOf' at # is compiled as 'anyOf' for array values"):
        one_of = language("oneOf")
    any_of = language("anyOf")
    assert rx.difference(one_of, any_of).start == 0 and rx.difference(any_of, one_of).start == 0


@pytest.mark.parametrize("bounds", [(0, None), (0, 0), (1, 1), (0, 3), (2, 5), (3, None), (1, 20)])
def test_length_bounded_strings_built_directly_equal_their_regex(bounds):
    """The chained copies of one code point's automaton against the regex ``unit{lo,hi}``
    through the NFA builder: the same language (each difference empty)."""
    direct = strings._canonical_length_dfa(*bounds)
    regex = rx.to_dfa(rx.repeat(strings.CANONICAL_UNIT, *bounds))
    assert rx.difference(direct, regex).start == 0 and rx.difference(regex, direct).start == 0
    assert direct.num_states == regex.num_states


@pytest.mark.parametrize("pattern, least", [("^[\\s\\S]*$", 0), ("(?s).+", 1), ("^(?s).+$", 1), ("[\\s\\S]+", 1), ("^(.|\\s)+$", 1)])
def test_a_pattern_that_every_string_or_every_nonempty_string_matches_is_only_a_length(pattern, least):
    """A pattern that every string matches, or every one but the empty string (``(?s).+``, an
    idiom of CloudFormation's schemas), leaves the length bounds alone to bound the string: its
    characters are the placeholder units that the pushdown lexer loops over per vocabulary, not
    a set of code points of its own, and its language that of the bounds, at least ``least``."""
    assert strings.string_body(0, 7, [pattern_node(pattern)]) == rx.repeat(strings.ANY_UNIT, least, 7)
    bounded = _dfa({"type": "string", "pattern": pattern, "maxLength": 7})
    lengths = _dfa({"type": "string", "minLength": least, "maxLength": 7})
    assert rx.difference(bounded, lengths).start == 0 and rx.difference(lengths, bounded).start == 0
    assert _accepts(bounded, '"\\u00e9\\n"') and _accepts(bounded, '""') == (least == 0) and not _accepts(bounded, '"12345678"')


def test_strings_of_one_set_of_code_points_share_one_class_unit():
    """Patterns written differently over one set of code points give one `strings.ClassUnit`
    node (so that its token outcomes come once per vocabulary), another set another; the
    unit's language is one code point's canonical spellings, repeated."""

    def unit(pattern: str, bounds=(0, 12)) -> strings.ClassUnit:
        body = strings.string_body(*bounds, [pattern_node(pattern)])
        (leaf,) = [leaf for leaf in rx.leaves(body) if isinstance(leaf, strings.ClassUnit)]
        return leaf

    slug = unit("^[a-z0-9-]*$")
    assert unit("^([-0-9a-z])+$", (2, 20)) is slug and unit("^[a-z0-9]*$") is not slug
    no_space = unit("^[^\\s]+$").language.dfa
    assert no_space.accepts('é\\"\\\\A'.encode()) and not no_space.accepts(b" ") and not no_space.accepts(b'"')
    assert automaton.canonical_form(slug.language.dfa) != automaton.canonical_form(no_space)


def test_placeholder_bytes_are_distinct_and_never_utf8():
    """Each placeholder byte stands for one thing in one automaton (a string's character, a class's
    character, a whitespace gap, a lookaround marker): none may be another, nor occur in UTF-8."""
    placeholders = [strings.UNIT_BYTE, strings.CLASS_BYTE, GAP_BYTE, *MARKER_BYTES]
    assert len(set(placeholders)) == len(placeholders)
    for byte in placeholders:
        with pytest.raises(UnicodeDecodeError):
            bytes([byte]).decode()
        for lead in (b"\xc3", b"\xe2\x82", b"\xf0\x9f\x98"):  # nor a continuation byte
            with pytest.raises(UnicodeDecodeError):
                (lead + bytes([byte])).decode()


@pytest.mark.slow
def test_a_recursive_schema_s_grammar_is_the_same_in_every_process():
    """The rules kept as nonterminals come in the rules' own order, not a set's (ordered by
    string hashes): the grammar, and so its LR tables, do not depend on the process's hash seed."""
    import os
    import subprocess
    import sys

    schema = {
        "$defs": {
            "node": {
                "type": "object",
                "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}, "leaf": {"$ref": "#/$defs/leaf"}},
            },
            "leaf": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/node"}]},
        },
        "$ref": "#/$defs/node",
    }
    script = "import json, sys, ananke_jax as aj; print(aj.json_schema_to_gbnf({}) + aj.json_schema_to_gbnf(json.loads(sys.argv[1])))"
    texts = {
        subprocess.run(
            [sys.executable, "-c", script, json.dumps(schema)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "2", "3")
    }
    assert len(texts) == 1
