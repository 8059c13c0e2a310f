"""ECMA-262 `pattern` languages against the JSON Schema test suite and Python's `re.search`."""

import functools
import itertools
import json
import re
import warnings

import jsonschema
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax import SchemaError
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.regex_ast import to_dfa
from ananke_jax._src.json_schema.ecma_regex import pattern_node

from schema_suite import Walker, parametrize_cases, require_suite, suite_cases

FILES = ["pattern.json", "patternProperties.json", "optional/ecmascript-regex.json"]
FORMAT_FILE = "optional/format/ecmascript-regex.json"

# (file, group description, test description) -> why our answer differs from the suite.
DEPARTURES = {
    (FORMAT_FILE, "ECMA 262 named groups and backreferences are valid", "an ECMA 262 named backreference \\k<name>"): (
        "backreferences are not regular: SchemaError"
    ),
    (FORMAT_FILE, "global inline flag groups are not valid ECMA 262", "a single global inline flag (?i)"): (
        "accepted, as PCRE reads it (the flag holds to the end of its group): patterns are often written for other engines"
    ),
}


def _values(case: tuple) -> tuple:
    return case[3:]


@functools.cache
def _dfa(pattern: str):
    return to_dfa(pattern_node(pattern))


def _matches(dfa, text: str) -> bool:
    return bool(dfa.accepting[dfa.walk(dfa.start, text.encode("utf-8", "surrogatepass"))])


def _search(pattern: str, text: str) -> bool:
    return _matches(_dfa(pattern), text)


def _applies(schema, data) -> bool:
    """Whether a pattern of ``schema`` looks at ``data`` (a string, or an object's keys)."""
    return (isinstance(data, str) and "pattern" in schema) or (isinstance(data, dict) and "patternProperties" in schema)


_TYPES = {
    "integer": lambda x: isinstance(x, int) and not isinstance(x, bool),
    "number": lambda x: isinstance(x, (int, float)) and not isinstance(x, bool),
    "string": lambda x: isinstance(x, str),
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "object": lambda x: isinstance(x, dict),
}


def _valid(schema, data) -> bool:
    """A validator for the few keywords of the suite's pattern files, matching with our DFAs."""
    if isinstance(schema, bool):
        return schema
    assert set(schema) <= {"$schema", "type", "maximum", "pattern", "patternProperties", "additionalProperties"}
    checks = [_TYPES[schema["type"]](data)] if "type" in schema else []
    if "maximum" in schema and _TYPES["number"](data):
        checks.append(data <= schema["maximum"])
    if "pattern" in schema and isinstance(data, str):
        checks.append(_search(schema["pattern"], data))
    if isinstance(data, dict):
        for key, value in data.items():
            subs = [s for p, s in schema.get("patternProperties", {}).items() if _search(p, key)]
            checks += [_valid(s, value) for s in subs or [schema.get("additionalProperties", True)]]
    return all(checks)


@parametrize_cases("schema, data, valid", [c for c in suite_cases("", FILES) if _applies(*c[3:5])], DEPARTURES, _values)
def test_pattern_matches_the_test_suite(schema, data, valid):
    require_suite()
    assert _valid(schema, data) == valid


@parametrize_cases("schema, data, valid", suite_cases("", [FORMAT_FILE]), DEPARTURES, _values)
def test_syntax_errors_match_the_format_regex_suite(schema, data, valid):
    require_suite()
    try:
        pattern_node(data)
        parsed = True
    except SchemaError:
        parsed = False
    assert parsed == valid


def test_departures_name_suite_cases():
    require_suite()
    assert set(DEPARTURES) <= {case[:3] for case in suite_cases("", [*FILES, FORMAT_FILE])}


# Patterns whose meaning is the same in ECMA-262 and Python `re` over the alphabet below (no line
# terminators, ASCII only), including anchors inside groups and repeats.
SHARED = [
    "", "a", "ab|ba", "^a", "a$", "^ab$", "^$", "^(a|b)*$", "a{2}", "a{1,2}b", "-{2,}", "[^a]", "[a-]",
    r"[\d_]+$", r"\s\w", r"\W\D", r"\S{3}", "(?:^|_)a", "a(?:$|-)", "(^a|b$)", "(?:a|^)b", "^a*?b+$",
    "x*", r"\x61\u0062", r"a\{", "^(?:ab)+", "1?$", "(a$|b)c", "^(?:^a)", "(?:$)a", "(^|a)+b",
    "(a|^){2}b", "(?:b$|a)*$", "(?:a|$)+", "^(?:a|b$)?1", "(a(b|$))+", "[a-b][^-]*1",
]  # fmt: skip
ALPHABET = "ab1_- "


def _texts() -> list[str]:
    short = ["".join(t) for n in range(5) for t in itertools.product(ALPHABET, repeat=n)]
    rng = np.random.default_rng(0)
    return short + ["".join(rng.choice(list(ALPHABET), int(rng.integers(5, 12)))) for _ in range(300)]


@pytest.mark.parametrize("pattern", SHARED)
def test_pattern_agrees_with_python_search(pattern):
    for text in _texts():
        assert _search(pattern, text) == (re.search(pattern, text) is not None), text


@pytest.mark.parametrize("pattern", [r"\Aa[b1]{1,3}\Z", r"^A\Z|a", r"(?:\Aa|b)-\Z", r"\Z|^ab", "A+Z$"])
def test_python_anchors_are_read_as_python_reads_them_where_asked(pattern):
    """``\\A`` and ``\\Z`` are no ECMA-262 escapes (refused by default, and under strict=True);
    with ``python_anchors`` (strict=False) they agree with Python's ``re.search``, with a
    warning, and a literal ``A`` or ``Z`` stays a letter."""
    texts = [*_texts(), "A", "AZ", "AAZ", "Aa", "a1Z"]
    if "\\" in pattern:
        with pytest.raises(SchemaError, match=r"invalid escape \\[AZ]"):
            pattern_node(pattern)
        with pytest.warns(UserWarning, match=r"\\A and \\Z are read as \^ and \$"):
            node = pattern_node(pattern, python_anchors=True)
    else:
        node = pattern_node(pattern, python_anchors=True)
    dfa = to_dfa(node)
    for text in texts:
        assert _matches(dfa, text) == (re.search(pattern, text) is not None), text


def test_python_anchors_are_read_only_under_strict_false(sentencepiece_vocab):
    schema = {
        "type": "object",
        "properties": {"id": {"type": "string", "pattern": r"^[a-z]{1,3}\Z"}},
        "patternProperties": {r"\Ax": {"type": "integer"}},
    }
    with pytest.raises(SchemaError, match=r"invalid escape \\A .* at #/patternProperties/\\Ax \(keyword 'patternProperties'\)"):
        aj.compile_json_schema(schema, sentencepiece_vocab)
    with pytest.raises(SchemaError, match=r"invalid escape \\Z .* at #/properties/id \(keyword 'pattern'\)"):
        aj.compile_json_schema({"type": "object", "properties": schema["properties"]}, sentencepiece_vocab)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cg = aj.compile_json_schema(schema, sentencepiece_vocab, strict=False)
    messages = {str(w.message) for w in caught}
    read = r"\A and \Z are read as ^ and $, as Python's re reads them"
    pattern, key = schema["properties"]["id"]["pattern"], next(iter(schema["patternProperties"]))
    assert f"'pattern' {pattern!r} at #/properties/id: {read}" in messages
    assert f"'patternProperties' {key!r} at #/patternProperties/{key}: {read}" in messages
    assert isinstance(cg, aj.RegularGrammar)


def _random_pattern(rng: np.random.Generator, depth: int = 0, lookarounds: bool = False) -> str:
    """A random pattern over ``a``, ``b`` and anchors, with groups, alternation and quantifiers,
    and with ``lookarounds``, lookaheads of any such body and the lookbehinds Python's `re` takes
    (fixed width), anywhere but inside another."""
    r = rng.random()
    if lookarounds and depth <= 3 and r < 0.2:
        if rng.random() < 0.5:
            return f"(?{rng.choice(['=', '!'])}{_random_pattern(rng, depth + 1)})"
        return f"(?<{rng.choice(['=', '!'])}{rng.choice(['a', 'b', '[ab]', 'ab', '^', '$', 'b$', '^a'])})"
    if depth > 3 or r < 0.35:
        return str(rng.choice(["a", "b", "^", "$", "[ab]", "."]))
    go = lambda: _random_pattern(rng, depth + 1, lookarounds)
    if r < 0.55:
        return go() + go()
    if r < 0.7:
        return f"(?:{go()}|{go()})"
    body = go()
    body = body if len(body) == 1 and body not in "^$" else f"(?:{body})"
    return body + str(rng.choice(["*", "+", "?", "{2}", "{1,3}", "{0,2}", "*?"]))


def test_random_anchored_patterns_agree_with_python_search():
    rng = np.random.default_rng(1)
    texts = ["".join(t) for n in range(6) for t in itertools.product("ab", repeat=n)]
    for _ in range(300):
        pattern = _random_pattern(rng)
        compiled = re.compile(pattern)
        for text in texts:
            assert _search(pattern, text) == (compiled.search(text) is not None), (pattern, text)


def test_random_lookarounds_and_flags_agree_with_python_search():
    """Lookarounds in repeats, alternations and beside anchors, some under ``(?i)``: their
    markers' differences and erasure give Python's matches."""
    rng = np.random.default_rng(2)
    texts = ["".join(t) for n in range(6) for t in itertools.product("abA", repeat=n)]
    checked = 0
    while checked < 150:
        pattern = ("(?i)" if rng.random() < 0.3 else "") + _random_pattern(rng, lookarounds=True)
        if "(?=" in pattern or "(?!" in pattern or "(?<" in pattern:
            checked += 1
            compiled = re.compile(pattern)
            for text in texts:
                assert _search(pattern, text) == (compiled.search(text) is not None), (pattern, text)


# Real-world patterns with lookarounds and flags, in values and keys.
LOOKAROUND_SCHEMAS = [
    {"type": "string", "pattern": "^(?!aws:).+$"},
    {"type": "string", "pattern": r"^(?=.*[a-z])(?=.*[A-Z])(?=.*\d)[^\x00-\x20\x22]{3,6}$"},
    {"type": "string", "pattern": r'(?i)^(?!\s*$)"?[a:]+(?<!\\a)$'},
    {"type": "object", "patternProperties": {"^(?!x)": {"type": "integer"}}, "additionalProperties": False},
    # After AWS::Budgets's (whose (?i) inside is not Python's): a lookahead at the start alone,
    # of texts that hold a word anywhere.
    {"type": "string", "pattern": r"^(?![^:\\]*/action/|.*<[sS]cript>.*</script>.*)[^:\\]+$"},
]


@pytest.mark.parametrize("schema", LOOKAROUND_SCHEMAS, ids=lambda s: json.dumps(s)[:60])
def test_lookaround_schemas_match_jsonschema_on_random_strings(schema):
    """The spelled automata (quotes, backslashes and control characters escaped) accept a value
    exactly when jsonschema, searching with Python's `re`, says it is valid."""
    walker, valid = Walker(schema), jsonschema.Draft202012Validator(schema).is_valid
    rng = np.random.default_rng(3)
    alphabet = list('aAw:sx1 "\\\t\x01')  # no line ends: Python's $ matches before a final one
    strings = ["".join(t) for n in range(4) for t in itertools.product("aA1:", repeat=n)]
    strings += ["".join(rng.choice(alphabet, int(rng.integers(0, 9)))) for _ in range(300)] + ["aws:", "aws", "xA1"]
    strings += ["a/action/b", "a:/action/", "x<ScRiPt>1</script>", "<script></scrip>", "</script><script>"]
    verdicts = set()
    for text in strings:
        value = {text: 1} if schema["type"] == "object" else text
        verdicts.add(valid(value))
        assert walker.accepts(value) == valid(value), value
    assert verdicts == {True, False}


# ECMA-only syntax and semantics: (pattern, strings it finds a match in, strings it does not).
ECMA = [
    (".", ["x", "\t", "😀", "\u0085"], ["", "\n", "\r", "\u2028", "\u2029"]),
    ("^[^]$", ["\n", "😀"], ["", "ab"]),
    ("^[]$", [], ["", "a"]),
    (r"^\s$", [" ", "\u00a0", "\ufeff", "\u1680", "\u200a", "\u202f", "\u205f", "\u3000", "\v"], ["\u200b", "\x1c"]),
    (r"^\S+$", ["a\u200b"], ["a\u3000"]),
    (r"^\w+$", ["az_09"], ["é", "-"]),
    (r"^\u{1F600}\uD83D\uDE00$", ["😀😀"], ["😀"]),
    (r"^\x41\0\cJ\/$", ["A\x00\n/"], ["A0\n/"]),
    (r"^[\b][\cA-\cC]$", ["\x08\x02"], ["b\x02", "\x08\x04"]),
    (r"^[\w-.]+$", ["a-.b"], ["a,b"]),
    (r"^[\d-z]$", ["5", "-", "z"], ["y"]),
    ("^a{$", ["a{"], ["a"]),
    ("^a{1,$", ["a{1,"], ["a"]),
    ("^x{2,}y}]$", ["xxy}]", "xxxy}]"], ["xy}]"]),
    (r"^\p{Lu}\P{L}\p{gc=Nd}\p{General_Category=Letter}$", ["É٣٣π"], ["éé3π", "É33_"]),
    (r"^\p{Any}\p{ASCII}\p{Assigned}$", ["😀aé"], ["😀éa"]),
    (r"^[\p{Zs}\p{Zl}]$", ["\u2028", "\u3000"], ["\u2029"]),
    ("^(?<year>[0-9]{4})-(?<month>[0-9]{2})$", ["2024-01"], ["24-01"]),
    ("^a+?b??$", ["aab", "a"], ["b"]),
    ("(?<=^a+)b$", ["aaab"], ["bab"]),  # variable-width lookbehind (Python's re has none)
    (r"^(?<!\d+)x", ["x"], []),
    ("(?s)^.$", ["\n", "\u2028"], [""]),
    ("^(?i)k(?-i:k)$", ["Kk", "\u212ak"], ["kK"]),  # K, and the Kelvin sign by simple case folding
    ("^(?i:[^a])$", ["b"], ["A", "a"]),
    ("^(?i:ſ)$", ["s", "S"], ["t"]),
]


@pytest.mark.parametrize("pattern, matching, other", ECMA)
def test_ecma_syntax_and_semantics(pattern, matching, other):
    for text in matching:
        assert _search(pattern, text), text
    for text in other:
        assert not _search(pattern, text), text


UNSUPPORTED = [
    ("a(?=b(?=c))", "lookahead inside a lookaround"),
    ("(?<!a(?<=b))", "lookbehind inside a lookaround"),
    ("(?=a)" * 9, "more than 8 lookarounds"),
    ("(?=a)*", "quantified assertion"),
    ("(?m)^a", "the m flag"),
    ("(?ix:a)", "the x flag"),
    ("(?i-i:a)", "malformed flags"),
    ("(?-:a)", "malformed flags"),
    ("(?'a)", "invalid group"),
    (r"(a)\1", "backreference"),
    (r"(?<n>a)\k<n>", "backreference"),
    (r"\bword", "word boundary"),
    (r"a\Bb", "word boundary"),
    (r"\p{Script=Greek}", "unsupported Unicode property"),
    (r"\p{Foo}", "unsupported Unicode property"),
    (r"\01", "octal escape"),
    (r"\a", "invalid escape"),
    (r"\cé", "invalid control escape"),
    ("*a", "nothing to repeat"),
    ("a**", "nothing to repeat"),
    ("{2}", "nothing to repeat"),
    ("^*", "quantified assertion"),
    ("a{3,2}", "out of order"),
    ("[z-a]", "out of order"),
    ("(a", "missing ')'"),
    ("a)", "unmatched ')'"),
    ("[ab", "unterminated character class"),
    (r"\x4", "invalid hexadecimal escape"),
    (r"\u{110000}", r"invalid \u{...} escape"),
    ("a\\", "unexpected end of pattern"),
]


@pytest.mark.parametrize("pattern, feature", UNSUPPORTED)
def test_unsupported_or_invalid_patterns_raise_schema_errors(pattern, feature):
    with pytest.raises(SchemaError, match=re.escape(feature)) as info:
        pattern_node(pattern, pointer="/properties/x", keyword="patternProperties")
    assert (info.value.keyword, info.value.pointer) == ("patternProperties", "/properties/x")
    assert repr(pattern) in str(info.value)


@pytest.mark.parametrize(
    ("pattern", "runs"),
    [
        (r"^[^\s]+$", True),
        (r"^[a-z0-9_-]*$", True),
        (r"^(?:[\p{L}\p{N}]|\.)+$", True),
        (r"^\S+$", True),
        (r"^[a-z]+[0-9]$", False),
        (r"^a[a-z]*$", False),
        (r"^(ab)+$", False),
        (r"[a-z]", False),
    ],
)
def test_runs_of_code_points_under_length_bounds_chain_copies_of_one(pattern, runs):
    """A pattern that is any run of code points from one set, under length bounds, is built as
    chained copies of that set's automaton instead of a product with the length automaton; either
    way the language is that product's (the strings of the pattern of the lengths allowed)."""
    from ananke_jax._src.compile.automaton import DEAD
    from ananke_jax._src.json_schema import strings

    value = pattern_node(pattern)
    for lo, hi in [(0, 20), (1, 16), (3, 40), (5, 5), (2, None)]:
        body = strings.string_body(lo, hi, [value])
        reference = rx.intersect(strings.spelled_dfa(value), strings._canonical_length_dfa(lo, hi))
        built = to_dfa(body)
        assert rx.difference(built, reference).start == DEAD and rx.difference(reference, built).start == DEAD, (pattern, lo, hi)
        assert (isinstance(body, rx.Repeat) and isinstance(body.body, strings.ClassUnit)) == runs, (pattern, lo, hi)


@pytest.mark.parametrize("pattern", [r"^\S{1,30}$", r"^[a-z]{2,5}$", r"^[0-9]{12}$", r"^(?:[\p{L}\p{N}]){0,7}$"])
def test_bounded_runs_of_code_points_fold_into_the_length_bounds(pattern):
    """A pattern that is one bounded run of code points, ``C{lo,hi}``, is ``C*`` under its bounds
    and the keywords' together: chained copies of one code point's automaton, of the language of
    the pattern's automaton and the length's product."""
    from ananke_jax._src.compile.automaton import DEAD
    from ananke_jax._src.json_schema import strings

    value = pattern_node(pattern)
    for lo, hi in [(0, None), (0, 20), (1, 3), (3, 40), (6, 6), (2, None)]:
        body = strings.string_body(lo, hi, [value])
        reference = rx.intersect(strings.spelled_dfa(value), strings._canonical_length_dfa(lo, hi))
        built = to_dfa(body)
        assert rx.difference(built, reference).start == DEAD and rx.difference(reference, built).start == DEAD, (pattern, lo, hi)
        assert body == rx.NOTHING or (isinstance(body, rx.Repeat) and isinstance(body.body, strings.ClassUnit)), (pattern, lo, hi)


def test_a_long_bounded_run_of_any_visible_character_compiles_within_the_default_budget(sentencepiece_vocab):
    r"""``^\S{1,1000}$`` spelled out as 1,000 copies of ``\S``'s JSON spellings is an NFA of some
    330,000 states, over the default ``max_states``; folded into length bounds it compiles, and
    its strings are those of 1 to 1,000 characters none of which is whitespace (`jsonschema`
    reads ``$`` as Python does, before a final newline too, so it is no oracle here)."""
    from ananke_jax._src.json_schema import strings

    schema = {"type": "string", "pattern": r"^\S{1,1000}$"}
    aj.compile_json_schema(schema, sentencepiece_vocab)  # within the default budget (a BudgetError if not)
    dfa = to_dfa(strings.string_body(0, None, [pattern_node(schema["pattern"])]))
    rng = np.random.default_rng(0)
    alphabet = ["a", "Z", "é", '"', "\\", "€", "😀", " ", "\n", "\u2003"]  # whitespace alike in ECMA-262 and Python
    for n in [0, 1, 2, 999, 1000, 1001]:
        for _ in range(4):
            text = "".join(rng.choice(alphabet[:7] if rng.random() < 0.6 else alphabet, n))
            spelling = json.dumps(text, ensure_ascii=False)[1:-1]
            assert _matches(dfa, spelling) == (1 <= n <= 1000 and not any(c.isspace() for c in text)), (n, text[:20])
        assert _matches(dfa, "a" * (n - 1) + "\\n") is False  # a final newline too


def test_length_keywords_beside_a_bounded_run_are_kept_under_strict_false(sentencepiece_vocab):
    """Under ``strict=False`` length keywords whose product with a pattern is large are dropped;
    beside a pattern that bounds the length itself (``^\\S{1,1000}$``) dropping them makes no
    automaton smaller, so they are kept: strings past ``maxLength`` stay refused."""
    from ananke_jax._src.json_schema import strings

    schema = {"type": "string", "allOf": [{"pattern": r"^\S{1,1000}$"}, {"pattern": "^a"}], "maxLength": 500}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no keyword is dropped
        aj.compile_json_schema(schema, sentencepiece_vocab, strict=False)
    values = [pattern_node(p["pattern"]) for p in schema["allOf"]]
    dfa = to_dfa(strings.string_body(0, 500, values))
    for n, valid in [(500, True), (501, False), (1000, False)]:
        assert _matches(dfa, "a" * n) == valid == jsonschema.Draft202012Validator(schema).is_valid("a" * n), n
