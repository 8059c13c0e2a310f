"""compile_structural_tag against an independent reference of the structural-tag languages
(tests/structural_oracle.py): the byte language on random strings, the token masks step by step
with the real vocabularies (the tokenizer's own segmentation and random ones that split triggers),
the same walks under jit, vmap, scan, a bank and the grammar pool, special tokens, bad input."""

import functools
import itertools
import json
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import structural_oracle as so

import ananke_jax as aj
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax._src.errors import GrammarError, SchemaError
from ananke_jax._src.json_schema.assemble import inline
from ananke_jax._src.json_schema.gaps import with_bounded_gaps
from ananke_jax._src.structural.formats import StructuralCompiler
from ananke_jax.serving import GrammarPool, PoolCapacity

from oracles import ReferenceMasks, random_member, unpack

ANY = {"type": "any_text"}


def const(value):
    return {"type": "const_string", "value": value}


def tag(begin, content, end):
    return {"type": "tag", "begin": begin, "content": content, "end": end}


def seq(*elements):
    return {"type": "sequence", "elements": list(elements)}


FUNCTIONS = {  # short literals for the byte-level tests: a tag of free text and one of a constant
    "type": "triggered_tags",
    "triggers": ["<f"],
    "tags": [tag("<f=a>", ANY, "</f>"), tag("<f=b>", const("ab"), "</f>")],
}
TOOL_SCHEMA = {
    "type": "object",
    "properties": {"x": {"type": "integer"}, "y": {"type": "string", "maxLength": 4}, "z": {"enum": ["<tool_call>", "ok"]}},
    "required": ["x"],
    "additionalProperties": False,
}
TOOL_CALL = {
    "type": "structural_tag",
    "format": {
        "type": "triggered_tags",
        "triggers": ["<tool_call>"],
        "tags": [
            tag(
                '<tool_call>\n{"name": "f", "arguments": ',
                {"type": "json_schema", "json_schema": TOOL_SCHEMA},
                "}\n</tool_call>",
            )
        ],
    },
}

# name -> format: every format of the reference, with short literals that overlap each other.
SPECS = {
    "tag_any_text": tag("<t>", ANY, "</t>"),
    "tag_end_list": tag("<t>", {"type": "any_text", "excludes": ["ab"], "max_chars": 6}, ["</t>", "</u>"]),
    "sequence_or_regex": seq(
        const("ab"),
        {"type": "or", "elements": [const("<t>"), {"type": "regex", "pattern": "[0-9]{1,3}"}]},
        {"type": "optional", "content": const(",")},
    ),
    "repeat_of_tags": {"type": "repeat", "min": 1, "max": 3, "content": tag("<t>", {"type": "any_text", "max_chars": 2}, "</t>")},
    "plus_in_tag": tag(
        "<t>", {"type": "plus", "content": {"type": "or", "elements": [const("x"), {"type": "any_text", "max_chars": 2}]}}, "</t>"
    ),
    "star_of_regex": {"type": "star", "content": {"type": "regex", "pattern": "(ab|é)[0-9]?"}},
    "nested_tags": tag("<a>", seq(tag("<b>", ANY, "</b>"), ANY), "</a>"),
    "any_text_mid_content": tag("<t>", seq(ANY, const("x")), "</t>"),
    "triggered": FUNCTIONS,
    "triggered_at_least_one": {**FUNCTIONS, "at_least_one": True},
    "triggered_stop_after_first": {**FUNCTIONS, "stop_after_first": True, "excludes": ["xx"]},
    "triggered_exactly_one": {**FUNCTIONS, "at_least_one": True, "stop_after_first": True},
    "triggered_overlapping": {
        "type": "triggered_tags",
        "triggers": ["aa", "<b"],
        "tags": [tag("aa<", const("x"), ">"), tag("<b>", ANY, "</b>"), tag("aab", {"type": "star", "content": const("a")}, "/")],
    },
    "triggered_in_a_tag": tag("<r>", seq(const("q"), FUNCTIONS), "</r>"),
    "separated": {"type": "tags_with_separator", "tags": [tag("<t>", const("ab"), "</t>"), tag("<u>", ANY, "</u>")], "separator": ","},
    "separated_at_least_one": {
        "type": "tags_with_separator",
        "tags": [tag("<t>", const("ab"), "</t>")],
        "separator": ", ",
        "at_least_one": True,
    },
    "separated_stop_after_first": {
        "type": "tags_with_separator",
        "tags": [tag("<t>", const("ab"), "</t>")],
        "separator": ",",
        "stop_after_first": True,
    },
    "dispatch": {"type": "dispatch", "rules": [["<t>", const("ab")], ["<u", {"type": "regex", "pattern": "[0-9]+>"}]], "excludes": ["zz"]},
    "dispatch_once": {"type": "dispatch", "rules": [["<t>", const("ab")]], "loop": False},
    "dispatch_once_ending_a_tag": tag("<r>", {"type": "dispatch", "rules": [["<t>", ANY]], "loop": False}, "</r>"),
    "dispatch_once_in_a_sequence": tag(
        "<r>",
        seq(
            {"type": "dispatch", "rules": [["<t>", {"type": "any_text", "excludes": ["a"]}]], "loop": False, "excludes": ["zz"]}, const("q")
        ),
        "</r>",
    ),
    "dispatch_looping_in_a_tag": tag("<r>", {"type": "dispatch", "rules": [["<t>", ANY], ["<u", const("b>")]], "excludes": ["zz"]}, "</r>"),
    "triggered_in_dispatch_in_a_tag": tag(
        "<r>", {"type": "dispatch", "rules": [["<t>", {**FUNCTIONS, "at_least_one": True}]], "loop": False}, "</r>"
    ),
    "dispatch_in_a_triggered_tag": {
        "type": "triggered_tags",
        "triggers": ["<f"],
        "tags": [tag("<f>", {"type": "dispatch", "rules": [["<t>", {"type": "any_text", "max_chars": 3}]]}, "</f>")],
    },
    "triggered_with_excludes_in_a_tag": tag(
        "<r>", {"type": "star", "content": {**FUNCTIONS, "excludes": ["zz"], "stop_after_first": True}}, "</r>"
    ),
    "or_of_triggered_and_text_in_a_tag": tag(
        "<r>",
        {"type": "or", "elements": [{**FUNCTIONS, "excludes": ["x"]}, seq({"type": "any_text", "max_chars": 2}, const("!"))]},
        ["</r>", "</q>"],
    ),
    "exclude_starting_a_trigger": {
        "type": "triggered_tags",
        "triggers": ["abc", "<f"],
        "tags": [tag("abc>", const("x"), "<"), tag("<f>", ANY, "</f>")],
        "excludes": ["ab"],
    },
    # An exclude or an end completed at the character that completes a trigger.
    "exclude_ending_a_trigger": {
        "type": "triggered_tags",
        "triggers": ["ab", "<f"],
        "tags": [tag("ab>", const("x"), "<"), tag("<f>", ANY, "</f>")],
        "excludes": ["b"],
    },
    "end_ending_a_trigger": tag(
        "<r>",
        {"type": "triggered_tags", "triggers": ["</r>", "<f"], "tags": [tag("</r>!", const("x"), ";"), tag("<f>", ANY, "</f>")]},
        "r>",
    ),
    "exclude_ending_a_pattern": {"type": "dispatch", "rules": [["ab", const("x")], ["<t>", const("y")]], "excludes": ["b"]},
}

# The tiny vocabulary of host-side compiles: the plain language does not depend on tokens.
TINY = aj.Vocabulary.from_tokens([b"<eos>", b"a"], eos_token_ids=[0])


@functools.cache
def _byte_dfa_of(text: str):
    rules = StructuralCompiler(TINY).rules(json.loads(text))
    return rx.to_dfa(with_bounded_gaps(inline(rules, set())[rules.start]))


def byte_dfa(spec):
    """The spec's plain language before token alignment (a ByteDFA; state 0 dead)."""
    return _byte_dfa_of(json.dumps(spec, sort_keys=True))


def dfa_accepts(dfa, text: str) -> bool:
    return bool(dfa.accepting[dfa.walk(dfa.start, text.encode("utf-8"))])


@functools.cache
def _regex_dfa(pattern):
    return regex_to_dfa(pattern)


def near_members(spec, rng, n):
    sampler = lambda pattern: random_member(_regex_dfa(pattern), rng).decode("utf-8")
    return [so.NearMembers(spec, rng, sampler)() for _ in range(n)]


# --- the reference itself ------------------------------------------------------------------------

# Verdicts of XGrammar 0.2.8 (Grammar.from_structural_tag, then testing._is_grammar_accept_string),
# recorded by hand so that the suite does not need it: they check the reference (and the compiler)
# on the corners of each format.
XGRAMMAR_VERDICTS = [
    (tag("<t>", ANY, "</t>"), {"<t></t>": True, "<t>a</t</t>": True, "<t></t></t>": False, "<t>a": False}),
    (tag("<t>", ANY, ["</t>", "</u>"]), {"<t>a</u>": True, "<t>a</u></t>": False, "<t>a</t></u>": False}),
    (tag("<t>", ANY, ["</t>", ""]), {"<t>abc": True, "<t>a</t>": True, "<t>a</t>b": False}),
    (tag("<t>", {"type": "star", "content": ANY}, "</t>"), {"<t>a</t>b</t>": True, "<t>ab</t>": True}),
    (tag("<t>", {"type": "or", "elements": [ANY, const("q")]}, "</t>"), {"<t>a</t>b</t>": False, "<t>q</t>": True}),
    (tag("<a>", tag("<b>", ANY, "</b>"), "</a>"), {"<a><b>x</a></b></a>": True, "<a><b>x</b></a>": True}),
    (
        tag("<a>", seq(tag("<b>", ANY, "</b>"), ANY), "</a>"),
        {"<a><b>x</a></b>y</a>": True, "<a><b>x</b>y</b></a>": True, "<a><b>x</b>y</a>z</a>": False},
    ),
    ({"type": "any_text", "max_chars": 2}, {"é": True, "éé": True, "ééé": False, "ab": True, "abc": False}),
    ({"type": "any_text", "excludes": ["ab"]}, {"a": True, "ab": False, "xaby": False, "aab": False}),
    ({"type": "repeat", "min": 1, "max": 2, "content": const("ab")}, {"": False, "ab": True, "abab": True, "ababab": False}),
    (seq(ANY, const("x")), {"x": True, "axx": True, "axbx": True}),
    (
        FUNCTIONS,
        {"": True, "x<f=b>ab</f>y": True, "<f": False, "x<fx": False, "a<": True, "<f=a>a</f><f=b>ab</f>": True, "<f=b>ab</f</f>": False},
    ),
    ({**FUNCTIONS, "stop_after_first": True}, {"x<f=b>ab</f>y": False, "x<f=b>ab</f>": True, "x": True, "<f=b>ab</f><f=b>ab</f>": False}),
    ({**FUNCTIONS, "at_least_one": True}, {"x<f=b>ab</f>": False, "<f=b>ab</f>y": True, "<f=b>ab</f>y<f=a></f>": True, "": False}),
    ({**FUNCTIONS, "at_least_one": True, "stop_after_first": True}, {"x<f=b>ab</f>": False, "<f=b>ab</f>y": False, "<f=b>ab</f>": True}),
    ({**FUNCTIONS, "excludes": ["zz"]}, {"zz": False, "<f=b>ab</f>zz": False, "<f=a>zz</f>": True}),
    (SPECS["separated"], {"": True, "<t>ab</t>": True, "<t>ab</t>,<u>,</u>": True, "<t>ab</t>,": False}),
    ({**SPECS["separated_stop_after_first"]}, {"": True, "<t>ab</t>": True, "<t>ab</t>,<t>ab</t>": False}),
    ({**SPECS["separated_stop_after_first"], "at_least_one": True}, {"": False, "<t>ab</t>": True, "<t>ab</t>,<t>ab</t>": False}),
    (SPECS["dispatch_once"], {"x<t>ab": True, "x<t>aby": False, "x": True, "x<t>ab<t>ab": False}),
    ({**SPECS["dispatch_once"], "loop": True}, {"x<t>ab": True, "x<t>aby": True, "x<t>ab<t>ab": True, "<t>": False}),
    (tag("<r>", {"type": "dispatch", "rules": [["<t>", const("ab")]]}, "</r>"), {"<r>a</r>": True, "<r>a</r>b</r>": True}),
    (tag("<r>", {"type": "dispatch", "rules": [["<t>", ANY]]}, "</r>"), {"<r><t>a</r>": True, "<r><t>a</r>b</r>": True}),
    (SPECS["dispatch_once_ending_a_tag"], {"<r><t>a</r>": True, "<r><t>a</r>b</r>": False, "<r>x</r>y</r>": True}),
    # A tag's ends reach an any_text anywhere in its content, and the free text of triggered_tags.
    (SPECS["any_text_mid_content"], {"<t></t>x</t>": False, "<t>a</tx</t>": True}),
    (tag("<r>", FUNCTIONS, "</r>"), {"<r>a</r>b</r>": False, "<r>a</</r>": True}),
    # Free text runs to the first trigger completed: a trigger there goes on as its tag.
    (SPECS["triggered_overlapping"], {"/aaa<x>": False, "aa<x>": True, "/aa<x>": True, "aab/": True, "aaab/": False}),
    (
        {"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f>", const("x"), ";")], "at_least_one": True},
        {"<f>x;": True, "<f>x;a<f>x;b": True, "a<f>x;": False},
    ),
    (SPECS["exclude_starting_a_trigger"], {"abc>x<": False, "": True, "a": True, "ab": False, "zabc>x<": False, "<f></f>": True}),
    (  # of triggers completed together, the longest counts
        {"type": "triggered_tags", "triggers": ["ab", "b"], "tags": [tag("ab>", const("x"), "<"), tag("b]", const("y"), "<")]},
        {"ab>x<": True, "ab]y<": False, "b]y<": True, "zb]y<": True, "zab>x<": True},
    ),
    (
        {"type": "dispatch", "rules": [["ab", const("x")], ["b", const("y")]]},
        {"abx": True, "aby": False, "by": True, "zaby": False, "zabx": True},
    ),
    (  # a longer exclude completed with a trigger
        {"type": "triggered_tags", "triggers": ["b"], "tags": [tag("b>", const("x"), "<")], "excludes": ["ab"]},
        {"ab>x<": False, "b>x<": True, "zb>x<": True, "a": True},
    ),
    ({"type": "dispatch", "rules": [["b", const("y")]], "excludes": ["ab"]}, {"by": True, "aby": False, "cby": True}),
    (  # a longer end completed with a trigger closes the tag
        tag("<r>", {"type": "triggered_tags", "triggers": ["r>"], "tags": [tag("r>!", const("x"), ";")]}, "</r>"),
        {"<r>a</r>!x;</r>": False, "<r>a</r>": True, "<r>a</r>b": False, "<r></r>!x;</r>": False, "<r>ar>!x;</r>": True},
    ),
    # The free text before an end may hold the end's start: a trigger or an exclude straddling
    # into the end does not count.
    (
        tag("<r>", {"type": "triggered_tags", "triggers": ["/r"], "tags": [tag("/r!", const("x"), ";")]}, "</r>"),
        {"<r>a</r>": True, "<r></r>": True, "<r>/r!x;</r>": True, "<r>a/r!x;</r>": True},
    ),
    (tag("<r>", {"type": "any_text", "excludes": ["/r"]}, "</r>"), {"<r>a</r>": True, "<r></r>": True, "<r>/r</r>": False}),
    (tag("<r>", {"type": "any_text", "excludes": ["ab"]}, "b>"), {"<r>ab>": True, "<r>b>": True, "<r>cb>": True}),
    (
        tag("<r>", {"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f>", const("x"), ";")], "excludes": ["</r>"]}, "r>"),
        {"<r>a</r>": True, "<r>ar>": True, "<r>a<fr>": False},
    ),
    (tag("<r>", {"type": "dispatch", "rules": [["/r", const("x")]], "loop": False}, "</r>"), {"<r>a</r>": True, "<r>/rx</r>": True}),
]

# Recorded XGrammar 0.2.8 verdicts that the compiled language gets wrong (the reference agrees
# with XGrammar): (why, spec, verdicts), each spec with at least one string the compiler gets wrong.
# Where a stop (an exclude, an end) completes with a trigger, and a looping dispatch in a tag.
XGRAMMAR_VERDICTS += [
    (
        {"type": "triggered_tags", "triggers": ["ab"], "tags": [tag("ab>", const("x"), "<")], "excludes": ["b"]},
        {"ab>x<": False, "zab>x<": False, "b": False, "": True, "c": True, "cb": False},
    ),
    (
        {"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f>", const("x"), ";")], "excludes": ["<f"]},
        {"<f>x;": False, "a": True},
    ),
    (
        tag("<r>", {"type": "triggered_tags", "triggers": ["</r>"], "tags": [tag("</r>!", const("x"), ";")]}, "r>"),
        {"<r></r>!x;r>": False, "<r>r>": True, "<r>a</r>!x;r>": False, "<r></r>": True},
    ),
    ({"type": "dispatch", "rules": [["ab", const("x")]], "excludes": ["b"]}, {"abx": False, "zabx": False, "": True, "b": False}),
    (
        SPECS["dispatch_looping_in_a_tag"],
        {"<r><t>zz</r>": True, "<r><t>a</r>": True, "<r><t>a</r>b</r>": True, "<r><t>a<ub></r>": True, "<r><t>a</r>zz</r>": False},
    ),
]


@pytest.mark.parametrize("spec, verdicts", XGRAMMAR_VERDICTS, ids=range(len(XGRAMMAR_VERDICTS)))
def test_reference_agrees_with_recorded_xgrammar_verdicts(spec, verdicts):
    for text, verdict in verdicts.items():
        assert so.accepts(spec, text) == verdict, (spec, text)


# --- the byte language -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec, verdicts",
    XGRAMMAR_VERDICTS,
    ids=range(len(XGRAMMAR_VERDICTS)),
)
def test_compiled_language_agrees_with_recorded_xgrammar_verdicts(spec, verdicts):
    dfa = byte_dfa(spec)
    wrong = {t: v for t, v in verdicts.items() if dfa_accepts(dfa, t) != v}
    assert not wrong, (spec, wrong)


@pytest.mark.parametrize("name", list(SPECS))
def test_compiled_language_equals_the_reference_on_random_strings(name):
    """Near-members of the spec (both verdicts common) and random members of the compiled DFA:
    the DFA and the reference accept the same ones."""
    spec = SPECS[name]
    dfa = byte_dfa(spec)
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    texts = near_members(spec, rng, 250) + [random_member(dfa, rng).decode("utf-8") for _ in range(100)]
    verdicts = [so.accepts(spec, t) for t in texts]
    assert 0.1 < np.mean(verdicts) < 0.95, "the strings test both directions"
    wrong = [(t, v) for t, v in zip(texts, verdicts) if dfa_accepts(dfa, t) != v]
    assert not wrong, f"{len(wrong)} of {len(texts)} disagree, e.g. (text, reference verdict) {wrong[:4]}"
    # Wrapped the structural_tag way, the spec means the same.
    assert byte_dfa({"type": "structural_tag", "format": spec}).num_states == dfa.num_states


def test_legacy_structures_and_triggers_mean_triggered_tags_of_json_schemas():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    legacy = {"type": "structural_tag", "structures": [{"begin": "<f=a>", "schema": schema, "end": "</f>"}], "triggers": ["<f"]}
    modern = {"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f=a>", {"type": "json_schema", "json_schema": schema}, "</f>")]}
    old, new = byte_dfa(legacy), byte_dfa(modern)
    for text in ['x<f=a>{"a": 1}</f>y', '<f=a>{"a":-2}</f>', '<f=a>{"b": 1}</f>', "<f=a>{}</f>", "<f", "plain"]:
        assert dfa_accepts(old, text) == dfa_accepts(new, text) == so.accepts(modern, text), text


# --- token level, real vocabularies ------------------------------------------------------------

FUNCTION_CALLS = {  # a trigger whose tokens ("<", "fun", "unction", " <") straddle it in both vocabularies
    "type": "triggered_tags",
    "triggers": ["<fun"],
    "tags": [tag("<function=a>", ANY, "</function>"), tag("<function=b>", {"type": "regex", "pattern": "[0-9]{1,4}"}, "</function>")],
}
TOKEN_SPECS = {  # name -> (spec, the triggers whose token splits are checked)
    "triggered": (FUNCTION_CALLS, ["<fun"]),
    "dispatch": (SPECS["dispatch"], ["<t>", "<u"]),
    "separated": (SPECS["separated"], []),
    "tag_end_list": (SPECS["tag_end_list"], []),
    "tool_call": (TOOL_CALL, ["<tool_call>"]),
}

_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)
_accepts = jax.jit(aj.accepts)
_is_error = jax.jit(aj.is_error)


@functools.cache
def _compiled(name, vocab):
    spec = TOKEN_SPECS[name][0]
    dfa = byte_dfa(spec)
    return aj.compile_structural_tag(spec, vocab), dfa, ReferenceMasks(dfa, vocab)


@functools.cache
def _spellings(vocab):
    """bytes -> an ordinary token spelling them, and the longest spelling."""
    table = {}
    for i, t in enumerate(vocab.tokens):
        if t and i not in vocab.special_token_ids:
            table.setdefault(t, i)
    return table, max(map(len, table))


def random_segmentation(vocab, data: bytes, rng) -> list[int]:
    """Tokens spelling ``data``, cut at random: each step the longest or a random spelling."""
    table, longest = _spellings(vocab)
    out, p = [], 0
    while p < len(data):
        lengths = [n for n in range(1, min(longest, len(data) - p) + 1) if data[p : p + n] in table]
        n = lengths[-1] if rng.random() < 0.3 else int(rng.choice(lengths))
        out.append(table[data[p : p + n]])
        p += n
    return out


def trigger_cuts(vocab, data: bytes, tokens, triggers) -> set[str]:
    """How the segmentation cuts each trigger occurrence: "split" (a boundary inside it),
    "shares_before" (a token starts before it and ends inside or after its start), "shares_after"
    (a token ends after it and starts before its end)."""
    starts = np.cumsum([0] + [len(vocab.token_bytes(t)) for t in tokens])
    spans = list(itertools.pairwise(starts))
    cases = set()
    for trigger in triggers:
        at = data.find(trigger.encode())
        while at >= 0:
            end = at + len(trigger.encode())
            if any(at < s < end for s, _ in spans):
                cases.add("split")
            if any(s < at < e for s, e in spans):
                cases.add("shares_before")
            if any(s < end < e for s, e in spans):
                cases.add("shares_after")
            at = data.find(trigger.encode(), at + 1)
    return cases


def walk_checking_masks(cg, dfa, ref, vocab, tokens, *, complete=True):
    """Advance token by token; at every step the mask is the reference's for the byte DFA's
    state and ``accepts`` its acceptance; the end accepts (``complete``)."""
    state, data = cg.init_state(), b""
    for k, tok in enumerate(tokens):
        node = dfa.walk(dfa.start, data)
        got = unpack(_mask(cg, state))
        np.testing.assert_array_equal(got[: vocab.logits_width], ref.allowed(node), err_msg=f"after {data!r}")
        assert not got[vocab.logits_width :].any()
        assert bool(_accepts(cg, state)) == bool(dfa.accepting[node])
        assert got[tok], f"token {k} {vocab.token_bytes(tok)!r} refused after {data!r}"
        state, data = _advance(cg, state, tok), data + vocab.token_bytes(tok)
    node = dfa.walk(dfa.start, data)
    np.testing.assert_array_equal(unpack(_mask(cg, state))[: vocab.logits_width], ref.allowed(node))
    if complete:
        assert bool(_accepts(cg, state)) and bool(dfa.accepting[node])
        finished = _advance(cg, state, vocab.eos_token_ids[0])
        assert bool(_accepts(cg, finished)) and not bool(_is_error(cg, finished))
    return state


TOOL_CALL_TEXTS = [
    'Let me call <tool_call>\n{"name": "f", "arguments": {"x": -12, "z": "<tool_call>"}}\n</tool_call> done',
    'a <tool_call>\n{"name": "f", "arguments": {"x":3,"y":"é"}}\n</tool_call><tool_call>\n{"name": "f", "arguments": {"x": 0}}\n</tool_call>',
    'Two:<tool_call>\n{"name": "f", "arguments": {"x": 10, "z": "ok"}}\n</tool_call>\n',
]


MEMBER_TEXTS = {  # written as a model writes: a space before each trigger ("shares_before" in both vocabularies)
    "tool_call": TOOL_CALL_TEXTS,
    "triggered": ["Call <function=b>12</function> then <function=a>x y</function>."],
    "dispatch": ["So <t>ab and <u12> ok"],
}


def members(name, dfa, rng, n):
    """Random members: half walks of the DFA, then the written ones, then accepted near-members
    (their free text holds spaces and punctuation next to the triggers, as a model writes it)."""
    spec = TOKEN_SPECS[name][0]
    out = [random_member(dfa, rng, soft_limit=60).decode("utf-8") for _ in range(n // 2)]
    out += MEMBER_TEXTS.get(name, [])[: n - len(out)]
    while len(out) < n:
        out += [t for t in near_members(spec, rng, n) if dfa_accepts(dfa, t)][: n - len(out)]
    return out


@pytest.mark.parametrize("name", sorted(TOKEN_SPECS))
def test_token_masks_equal_the_reference_along_tokenized_members(name, real_vocab):
    """Members walked through the tokenizer's encoding and through random segmentations (which
    split triggers across tokens, and put them in tokens with text before and content after):
    every mask equals the brute-force one, and each member is accepted."""
    _, vocab, encode = real_vocab
    cg, dfa, ref = _compiled(name, vocab)
    assert isinstance(cg, aj.RegularGrammar)
    rng = np.random.default_rng(len(name))
    cases = set()
    for text in members(name, dfa, rng, 6):
        assert so.accepts(TOKEN_SPECS[name][0], text), text  # the DFA's members are the reference's
        data = text.encode("utf-8")
        own = encode(text)
        assert b"".join(vocab.token_bytes(t) for t in own) == data
        for tokens in [own] + [random_segmentation(vocab, data, rng) for _ in range(3)]:
            cases |= trigger_cuts(vocab, data, tokens, TOKEN_SPECS[name][1])
            walk_checking_masks(cg, dfa, ref, vocab, tokens)
    if TOKEN_SPECS[name][1]:  # each vocabulary has a token that straddles the trigger's start ("<" after " ")
        assert {"split", "shares_before"} <= cases, cases
    if name == "triggered":  # and one that straddles its end ("unction")
        assert "shares_after" in cases, cases


@pytest.mark.parametrize(
    "name, text",
    [
        ("triggered", "I said <fun> twice"),
        ("triggered", "a <function=c></function>"),
        ("triggered", "<function=b>12345"),
        ("dispatch", "x <u7a"),
        ("tool_call", 'Go <tool_call>\n{"name": "g"'),
    ],
)
def test_a_trigger_not_followed_by_its_tag_dies_at_the_token_the_language_dies(name, text, real_vocab):
    _, vocab, encode = real_vocab
    cg, dfa, ref = _compiled(name, vocab)
    data = text.encode()
    rng = np.random.default_rng(7)
    for tokens in [encode(text)] + [random_segmentation(vocab, data, rng) for _ in range(3)]:
        spelled = [vocab.token_bytes(t) for t in tokens]
        dies = next(k for k in range(len(tokens)) if dfa.walk(dfa.start, b"".join(spelled[: k + 1])) == 0)
        state = walk_checking_masks(cg, dfa, ref, vocab, tokens[:dies], complete=False)
        assert not bool(aj.is_allowed(_mask(cg, state), tokens[dies])), (text, spelled[: dies + 1])
        dead = _advance(cg, state, tokens[dies])
        assert bool(_is_error(cg, dead)) and not unpack(_mask(cg, dead)).any()


@pytest.mark.slow  # the pushdown engine's steps take about 10 s to compile
def test_recursive_content_compiles_to_the_pushdown_engine(sentencepiece_vocab, sentencepiece_encode):
    """A recursive JSON Schema inside a tag: the pushdown engine, and nesting deeper than any
    fixed bound walks token by token."""
    vocab = sentencepiece_vocab
    tree = {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#"}}}, "additionalProperties": False}
    spec = {"type": "structural_tag", "format": {**FUNCTIONS, "tags": [tag("<f=t>", {"type": "json_schema", "json_schema": tree}, "</f>")]}}
    cg = aj.compile_structural_tag(spec, vocab)
    assert isinstance(cg, aj.PushdownGrammar)
    good, bad = 'ok <f=t>{"kids": [{"kids": [{}]}, {}]}</f> bye', 'ok <f=t>{"kids": [{"kids": [}]}</f>'
    for text, ok in ((good, True), (bad, False)):
        tokens = sentencepiece_encode(text)
        state, allowed = cg.init_state(), []
        for tok in tokens:
            allowed.append(bool(aj.is_allowed(_mask(cg, state), tok)))
            state = _advance(cg, state, tok)
        assert all(allowed) == ok and bool(_accepts(cg, state)) == ok, (text, allowed)
        if not ok:  # refused at the token that closes the array too early
            first = allowed.index(False)
            assert b"}" in vocab.token_bytes(tokens[first])


# --- jit, vmap, scan, banks, the pool --------------------------------------------------------------


def _walk_tokens(vocab, names):
    rng = np.random.default_rng(3)
    out = {}
    for name in names:
        _, dfa, _ = _compiled(name, vocab)
        text = members(name, dfa, rng, 2)[-1]
        out[name] = random_segmentation(vocab, text.encode(), rng)
    return out


def test_padded_specs_share_one_jitted_step_and_scan_equals_the_reference(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    names = ["triggered", "dispatch", "separated"]
    compiled = [_compiled(n, vocab) for n in names]
    grammars = [c[0] for c in compiled]
    states = max(g.num_states for g in grammars)
    classes = max(g.num_classes for g in grammars)
    rows = max(g.mask_rows.shape[0] for g in grammars)
    padded = [aj.pad_grammar(g, states=states, classes=classes, rows=rows) for g in grammars]
    walks = _walk_tokens(vocab, names)
    length = max(map(len, walks.values()))

    def walk(g, tokens):
        """Masks before each token, then the accepting flag; tokens past the end are -1 (kept)."""

        def step(state, tok):
            mask = aj.token_mask(g, state)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(tok < 0, a, b), state, aj.advance(g, state, tok)), mask

        final, masks = jax.lax.scan(step, g.init_state(), tokens)
        return masks, aj.accepts(g, final)

    run = jax.jit(walk)
    for name, g, (_, dfa, ref) in zip(names, padded, compiled):
        tokens = walks[name]
        masks, accepted = run(g, jnp.asarray(tokens + [-1] * (length - len(tokens)), jnp.int32))
        assert bool(accepted)
        data = b""
        for k, tok in enumerate(tokens):
            np.testing.assert_array_equal(unpack(masks[k])[: vocab.logits_width], ref.allowed(dfa.walk(dfa.start, data)))
            data += vocab.token_bytes(tok)
    assert run._cache_size() == 1, "grammars padded to the same shapes share one compiled walk"

    # A bank of the three under vmap: each row's masks are its own grammar's, step by step.
    bank = aj.stack_grammars(grammars)
    batch = jnp.asarray([walks[n] + [-1] * (length - len(walks[n])) for n in names], jnp.int32)
    banked, accepted = jax.jit(jax.vmap(walk))(bank, batch)
    assert np.asarray(accepted).all()
    for row, name in enumerate(names):
        n = len(walks[name])
        np.testing.assert_array_equal(np.asarray(banked[row, :n]), np.asarray(run(padded[row], batch[row])[0][:n]))


def test_vmap_over_a_batch_of_states_equals_each_state(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    cg, dfa, ref = _compiled("tool_call", vocab)
    tokens = _walk_tokens(vocab, ["tool_call"])["tool_call"]
    states, data, nodes = [cg.init_state()], b"", [dfa.start]
    for tok in tokens:
        states.append(_advance(cg, states[-1], tok))
        data += vocab.token_bytes(tok)
        nodes.append(dfa.walk(dfa.start, data))
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
    masks = jax.jit(jax.vmap(aj.token_mask, in_axes=(None, 0)))(cg, stacked)
    accepts = jax.jit(jax.vmap(aj.accepts, in_axes=(None, 0)))(cg, stacked)
    for k, node in enumerate(nodes):
        np.testing.assert_array_equal(unpack(masks[k])[: vocab.logits_width], ref.allowed(node))
        assert bool(accepts[k]) == bool(dfa.accepting[node])
    # vmap of advance over the batch equals one step of each.
    nxt = jax.vmap(aj.advance, in_axes=(None, 0, 0))(cg, jax.tree_util.tree_map(lambda x: x[:-1], stacked), jnp.asarray(tokens, jnp.int32))
    np.testing.assert_array_equal(np.asarray(nxt.node), np.asarray(stacked.node[1:]))


POOL = PoolCapacity(
    regular_grammars=4, regular_states=4096, regular_transitions=1 << 18, regular_rows=512, pushdown_grammars=1, lexer_states=64
)


@pytest.mark.slow  # building a pool and its steps takes about 10 s
def test_pooled_structural_tags_give_their_own_masks(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    pool = GrammarPool(len(vocab), vocab.logits_width, vocab.eos_token_ids, POOL)
    pool.add(aj.compile_regex("x", vocab))  # not the first member: offsets are exercised
    names = ["triggered", "tool_call"]
    walks = _walk_tokens(vocab, names)
    for name in names:
        cg, dfa, ref = _compiled(name, vocab)
        pooled = pool.constraint(pool.add(cg))
        ps, gs, data = pooled.init_state(), cg.init_state(), b""
        for tok in walks[name]:
            pm = np.asarray(_mask(pooled, ps))
            np.testing.assert_array_equal(pm, np.asarray(_mask(cg, gs)))
            np.testing.assert_array_equal(unpack(pm)[: vocab.logits_width], ref.allowed(dfa.walk(dfa.start, data)))
            assert bool(pooled.accepts(ps)) == bool(cg.accepts(gs))
            ps, gs, data = _advance(pooled, ps, tok), _advance(cg, gs, tok), data + vocab.token_bytes(tok)
        assert bool(pooled.accepts(ps)) and bool(cg.accepts(gs))


# --- special tokens ----------------------------------------------------------------------------


def _allowed(cg, state):
    return set(np.flatnonzero(unpack(_mask(cg, state))).tolist())


def _prefix_tokens(vocab, text: bytes):
    return {i for i, t in enumerate(vocab.tokens) if t and i not in vocab.special_token_ids and text.startswith(t)}


@pytest.mark.parametrize("vocab_name, token", [pytest.param("tekken", "[TOOL_CALLS]", marks=pytest.mark.slow), ("sentencepiece", "<s>")])
def test_a_special_token_is_allowed_exactly_where_the_spec_puts_it(vocab_name, token, request):
    vocab = request.getfixturevalue(f"{vocab_name}_vocab")
    encode = request.getfixturevalue(f"{vocab_name}_encode")
    special = next(i for i in sorted(vocab.special_token_ids) if vocab.tokens[i] == token.encode())
    spec = {"type": "sequence", "elements": [{"type": "token", "token": token}, const("[1]")]}
    cg = aj.compile_structural_tag(spec, vocab)
    by_id = aj.compile_structural_tag(seq({"type": "token", "token": special}, const("[1]")), vocab)
    np.testing.assert_array_equal(np.asarray(_mask(by_id, by_id.init_state())), np.asarray(_mask(cg, cg.init_state())))
    state = cg.init_state()
    assert _allowed(cg, state) == {special}, "only the special token itself, not the bytes of its private spelling"
    state = _advance(cg, state, special)
    assert _allowed(cg, state) == _prefix_tokens(vocab, b"[1]")
    assert bool(_is_error(cg, _advance(cg, state, special))), "the special token once"
    for tok in encode("[1]"):
        assert bool(aj.is_allowed(_mask(cg, state), tok))
        state = _advance(cg, state, tok)
    assert _allowed(cg, state) == set(vocab.eos_token_ids) and bool(_accepts(cg, state))
    # Without the special token first, "[1]" alone is refused at once.
    assert not bool(aj.is_allowed(_mask(cg, cg.init_state()), encode("[1]")[0]))


@pytest.mark.parametrize(
    "vocab_name, begin, end", [pytest.param("tekken", "[TOOL_CALLS]", "[INST]", marks=pytest.mark.slow), ("sentencepiece", "<s>", "<unk>")]
)
def test_special_tokens_as_a_tags_begin_and_end(vocab_name, begin, end, request):
    vocab = request.getfixturevalue(f"{vocab_name}_vocab")
    encode = request.getfixturevalue(f"{vocab_name}_encode")
    ids = {t: next(i for i in sorted(vocab.special_token_ids) if vocab.tokens[i] == t.encode()) for t in (begin, end)}
    call = tag({"type": "token", "token": begin}, ANY, {"type": "token", "token": end})
    cg = aj.compile_structural_tag(seq(call, {"type": "star", "content": seq(const(";"), call)}), vocab)
    tokens = [ids[begin], *encode("a;b"), ids[end], *encode(";"), ids[begin], ids[end]]
    state = cg.init_state()
    for tok in tokens:
        assert bool(aj.is_allowed(_mask(cg, state), tok)), tok
        state = _advance(cg, state, tok)
    assert bool(_accepts(cg, state))
    assert _allowed(cg, cg.init_state()) == {ids[begin]}
    inside = _advance(cg, cg.init_state(), ids[begin])  # free text, or the end token; not the begin token again
    allowed = _allowed(cg, inside)
    assert ids[end] in allowed and ids[begin] not in allowed and not set(vocab.eos_token_ids) & allowed


# --- bad input ---------------------------------------------------------------------------------


def _wrapped(fmt):
    return {"type": "structural_tag", "format": fmt}


BAD = [
    ("unknown type", _wrapped(seq(const("a"), {"type": "bogus"})), GrammarError, "#/format/elements/1"),
    ("not an object", _wrapped({"type": "or", "elements": [const("a"), "b"]}), GrammarError, "#/format/elements/1"),
    (
        "a tag whose begin starts with no trigger",
        _wrapped({"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f=a>", ANY, "</f>"), tag("<g>", ANY, "</g>")]}),
        GrammarError,
        "#/format/tags/1/begin",
    ),
    (
        "a begin that starts with two triggers",
        _wrapped({"type": "triggered_tags", "triggers": ["<f", "<f="], "tags": [tag("<f=a>", ANY, "</f>")]}),
        GrammarError,
        "#/format/tags/0/begin",
    ),
    (
        "ambiguous begins",
        _wrapped({"type": "triggered_tags", "triggers": ["<f"], "tags": [tag("<f=a", ANY, "</f>"), tag("<f=ab>", ANY, "</f>")]}),
        GrammarError,
        "#/format/tags/1/begin",
    ),
    (
        "ambiguous begins, separated",
        {"type": "tags_with_separator", "separator": ",", "tags": [tag("<t>", ANY, "</t>"), tag("<t>", const("x"), "</t>")]},
        GrammarError,
        "#/tags/1/begin",
    ),
    (
        "ambiguous dispatch patterns",
        _wrapped({"type": "dispatch", "rules": [["<t", ANY], ["<t>", ANY]]}),
        GrammarError,
        "#/format/rules/1/0",
    ),
    (
        "a schema that does not compile",
        _wrapped(
            {
                **TOOL_CALL["format"],
                "tags": [
                    tag("<tool_call>", {"type": "json_schema", "json_schema": {"properties": {"x": {"type": "bogus"}}}}, "</tool_call>")
                ],
            }
        ),
        SchemaError,
        "#/format/tags/0/content/json_schema/properties/x",
    ),
    ("token-level any_tokens", _wrapped(seq(const("a"), {"type": "any_tokens"})), GrammarError, "#/format/elements/1"),
    ("token dispatch without rules", _wrapped({"type": "token_dispatch", "rules": []}), GrammarError, "#/format"),
    ("a token that is not special", _wrapped(seq({"type": "token", "token": "hello"})), GrammarError, "#/format/elements/0"),
    ("EOS as a token", _wrapped(tag("<t>", ANY, {"type": "token", "token": 2})), GrammarError, "#/format/end"),
    ("repeat min > max", _wrapped({"type": "repeat", "min": 3, "max": 2, "content": const("a")}), GrammarError, "#/format"),
    ("repeat without content", _wrapped({"type": "repeat", "min": 0, "max": 2}), GrammarError, "#/format"),
    ("empty elements", _wrapped(tag("<t>", {"type": "sequence", "elements": []}, "</t>")), GrammarError, "#/format/content"),
    ("a tag without an end", _wrapped({"type": "tag", "begin": "<t>", "content": ANY}), GrammarError, "#/format"),
    ("negative max_chars", _wrapped({"type": "any_text", "max_chars": -1}), GrammarError, "#/format"),
    ("a bad regex", _wrapped(seq(const("a"), {"type": "regex", "pattern": "(ab"})), GrammarError, "#/format/elements/1"),
    ("a flag that is not a bool", _wrapped({**FUNCTIONS, "at_least_one": "yes"}), GrammarError, "#/format"),
    (
        "a trigger that begins no tag",
        _wrapped({"type": "triggered_tags", "triggers": ["<f", "<g"], "tags": [tag("<f=a>", ANY, "</f>")]}),
        GrammarError,
        "#/format/triggers/1",
    ),
    ("no format", {"type": "structural_tag"}, GrammarError, "#"),
]


@pytest.mark.parametrize("why, spec, error, pointer", BAD, ids=[b[0] for b in BAD])
def test_bad_input_names_the_json_pointer(why, spec, error, pointer, sentencepiece_vocab):
    for form in (spec, json.dumps(spec)):  # a dict, or JSON text
        with pytest.raises(error) as e:
            aj.compile_structural_tag(form, sentencepiece_vocab)
        assert e.value.pointer == pointer and pointer in str(e.value), (why, str(e.value))


def test_invalid_json_text_is_a_grammar_error(sentencepiece_vocab):
    with pytest.raises(GrammarError, match=r"invalid JSON.*line 1, column"):
        aj.compile_structural_tag('{"type": "structural_tag", "format": ', sentencepiece_vocab)
