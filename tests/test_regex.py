"""The byte automaton of a regex against Python's `re` (full match) and `regex` (partial match)."""

import itertools
import re
import zlib

import numpy as np
import pytest
import regex as regex_module
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke_jax import GrammarError
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.regex import choices_to_dfa, regex_to_dfa
from ananke_jax._src.compile.utf8 import utf8_sequences

from oracles import REGEXES, random_member


def _mutations(text: str, rng: np.random.Generator, alphabet: str) -> list[str]:
    out = []
    for _ in range(6):
        chars = list(text)
        op = rng.integers(3)
        pos = int(rng.integers(len(chars) + 1))
        if op == 0 or not chars:
            chars.insert(pos, str(rng.choice(list(alphabet))))
        elif op == 1:
            del chars[min(pos, len(chars) - 1)]
        else:
            chars[min(pos, len(chars) - 1)] = str(rng.choice(list(alphabet)))
        out.append("".join(chars))
    return out


@pytest.mark.parametrize("pattern", REGEXES)
def test_dfa_agrees_with_re_and_regex_partial_matching(pattern):
    dfa = regex_to_dfa(pattern)
    rng = np.random.default_rng(zlib.crc32(pattern.encode()))
    alphabet = "".join(sorted(set(pattern))) + 'a0 \n"é日😀-'
    members = [random_member(dfa, rng).decode("utf-8") for _ in range(40)]
    texts = set(members)
    for m in members:
        texts.update(_mutations(m, rng, alphabet))
        texts.update(m[:k] for k in range(len(m)))
    for text in sorted(texts):
        state = dfa.walk(dfa.start, text.encode("utf-8"))
        full = re.fullmatch(pattern, text, re.ASCII) is not None
        partial = regex_module.fullmatch(pattern, text, flags=regex_module.ASCII, partial=True) is not None
        assert bool(dfa.accepting[state]) == full, (pattern, text)
        assert (state != 0) == partial, (pattern, text)
    for m in members:
        assert re.fullmatch(pattern, m, re.ASCII), (pattern, m)


def test_lazy_quantifiers_match_the_same_language_as_greedy_ones():
    lazy, greedy = regex_to_dfa(r"(ab)*?x{2,3}?y+?"), regex_to_dfa(r"(ab)*x{2,3}y+")
    assert np.array_equal(lazy.transitions, greedy.transitions)
    assert np.array_equal(lazy.accepting, greedy.accepting)


def test_dfa_is_minimal_for_a_fixed_length_pattern():
    # \d{4}-\d{2}-\d{2}: 11 live positions (0..10 bytes read) plus the dead state.
    assert regex_to_dfa(r"\d{4}-\d{2}-\d{2}").num_states == 12


def test_choices_match_exactly_the_listed_strings():
    dfa = choices_to_dfa(["red", "green", "gr", b"\xff\x00", "日本"])
    for text, expected in [(b"red", True), (b"gr", True), (b"gre", False), (b"\xff\x00", True), ("日本".encode(), True), (b"", False)]:
        assert bool(dfa.accepting[dfa.walk(dfa.start, text)]) == expected


def test_utf8_sequences_cover_exactly_the_code_point_range():
    rng = np.random.default_rng(0)
    for _ in range(300):
        lo = int(rng.integers(0, 0x10FFFF))
        hi = min(0x10FFFF, lo + int(rng.choice([0, 1, 60, 3000, 70000])))
        seqs = list(utf8_sequences(lo, hi))
        probes = rng.integers(max(0, lo - 100), min(0x10FFFF, hi + 100) + 1, size=100)
        for cp in map(int, probes):
            if 0xD800 <= cp <= 0xDFFF:
                continue
            data = chr(cp).encode("utf-8")
            inside = any(len(s) == len(data) and all(a <= x <= b for x, (a, b) in zip(data, s)) for s in seqs)
            assert inside == (lo <= cp <= hi), (hex(lo), hex(hi), hex(cp))


@pytest.mark.parametrize(
    "pattern, message",
    [
        (r"(a)\1", "backreference at position 3"),
        (r"a(?=b)", "lookahead that reads past the end of the match at position 1"),
        (r"ab(?<!b)|(?<!b)a", "lookbehind that reads before its start at position 9"),
        (r"(?=a(?<=a))a", "lookbehind inside a lookaround at position 4"),
        ("(?=a)" * 9 + "a", "more than 8 lookarounds at position 40"),
        (r"(a)?(?(1)b|c)", "conditional group at position 4"),
        (r"a^b", "anchor away from the ends"),
        (r"\bfoo", "word boundary at position 0"),
        (r"a{2,1}", "at position 2"),
        (r"(ab", "missing ), unterminated subpattern at position 0"),
        (r"[^\x00-\U0010FFFF]", "language is empty"),
    ],
)
def test_bad_patterns_raise_grammar_error_naming_the_problem(pattern, message):
    with pytest.raises(GrammarError, match=re.escape(message)):
        regex_to_dfa(pattern)


@pytest.mark.skipif(
    not hasattr(re, "_constants") or not hasattr(re._constants, "POSSESSIVE_REPEAT"), reason="Python < 3.11 has no possessive quantifiers"
)
def test_possessive_quantifier_is_refused():
    with pytest.raises(GrammarError, match="possessive quantifier at position 1"):
        regex_to_dfa(r"a*+b")


@pytest.mark.parametrize("choices", [[], "abc", ["a", 3]])
def test_bad_choices_raise(choices):
    with pytest.raises(GrammarError):
        choices_to_dfa(choices)


_ATOMS = st.sampled_from(["a", "b", "[ab]", "[^a]", r"\d", ".", "1", "(?:)", "é"])


def _regexes():
    """Random regexes over a tiny alphabet: nested groups, alternation and every quantifier."""
    quantifiers = st.sampled_from(["", "*", "+", "?", "*?", "{2}", "{0,2}", "{1,3}", "{2,}", "??"])

    def extend(inner):
        group = st.builds(lambda r, q: f"({r}){q}", inner, quantifiers)
        concat = st.builds(lambda a, b: a + b, inner, inner)
        alternation = st.builds(lambda a, b: f"{a}|{b}", inner, inner)
        return st.one_of(group, concat, alternation)

    return st.recursive(st.builds(lambda a, q: a + q, _ATOMS, quantifiers), extend, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(_regexes())
def test_random_regexes_accept_exactly_what_re_fullmatch_accepts(pattern):
    dfa = regex_to_dfa(pattern)
    for n in range(5):
        for chars in itertools.product("ab1é\n", repeat=n):
            text = "".join(chars)
            expected = re.fullmatch(pattern, text, re.ASCII) is not None
            assert bool(dfa.accepting[dfa.walk(dfa.start, text.encode("utf-8"))]) == expected, (pattern, text)


def test_counted_repeats_of_a_star_collapse_instead_of_blowing_up():
    """(x*){m,n} is x* and (x+){m,n} is x{m,}: llama.cpp's "hang" grammar, six nested {0,99}
    around [^x]*, is that one loop (its expansion would be an NFA of 10^12 states)."""
    bomb = "(((((([^x]*){0,99}){0,99}){0,99}){0,99}){0,99}){0,99}"  # re itself backtracks for ages on it
    for pattern, same_as in ((bomb, "[^x]*"), ("(a+){2,3}b", "a{2,}b"), ("((ab)*){1,4}", "(ab)*"), ("(a+){0,2}", "a*")):
        dfa = regex_to_dfa(pattern)
        assert dfa.num_states == regex_to_dfa(same_as).num_states, pattern
        for n in range(7):
            for chars in itertools.product("abx", repeat=n):
                text = "".join(chars)
                assert bool(dfa.accepting[dfa.walk(dfa.start, text.encode())]) == (re.fullmatch(same_as, text) is not None), (pattern, text)


def _lookaround_regexes():
    """Random regexes with lookarounds (lookbehinds of fixed width, as `re` takes them) and
    case-insensitive groups, over a tiny alphabet."""
    atoms = st.sampled_from(["a", "b", "[ab]", "[^a]", ".", "é", "(?i:a)", "(?i:[^b])"])
    quantifiers = st.sampled_from(["", "*", "+", "?", "{0,2}"])
    look = st.sampled_from(["(?=", "(?!", "(?<=", "(?<!"])
    plain = st.recursive(
        st.builds(lambda a, q: a + q, atoms, quantifiers),
        lambda inner: st.one_of(st.builds(lambda a, b: a + b, inner, inner), st.builds(lambda a, b: f"(?:{a}|{b})", inner, inner)),
        max_leaves=4,
    )
    fixed = st.sampled_from(["a", "b", "[ab]", "ab", "é", "(?i:A)"])
    assertion = st.builds(lambda kind, body, inner: kind + (inner if "<" not in kind else body) + ")", look, fixed, plain)
    one = st.sampled_from(["a", "b", "[ab]", ".", "(?i:a)"])  # a character each side keeps most assertions decided
    inside = st.builds(
        lambda a, x, b: a + x + b, one, st.one_of(assertion, st.builds(lambda a, q: f"(?:{a}){q}", assertion, quantifiers)), one
    )
    return st.lists(st.one_of(plain, assertion, inside, inside), min_size=1, max_size=4).map("".join)


@settings(max_examples=300, deadline=None)
@given(_lookaround_regexes())
def test_lookarounds_and_case_folding_accept_what_re_fullmatch_accepts(pattern):
    """Where a pattern's text alone decides its lookarounds it compiles to exactly what
    re.fullmatch accepts (Unicode case folding: ``é`` is ``É``), and no text it has given up on
    begins a match; otherwise some assertion reads outside the text, and the refusal says which
    kind."""
    try:
        dfa = regex_to_dfa(pattern)
    except GrammarError as e:
        assert re.search(r"(lookahead that reads past the end|lookbehind that reads before its start|matches no string)", str(e)), e
        return
    texts = ["".join(chars) for n in range(5) for chars in itertools.product("abAéÉ", repeat=n)]
    matches = [t for t in texts if re.fullmatch(pattern, t)]
    for text in texts:
        state = dfa.walk(dfa.start, text.encode("utf-8"))
        assert bool(dfa.accepting[state]) == (text in matches), (pattern, text)
        assert state != 0 or not any(m.startswith(text) for m in matches), (pattern, text)


@pytest.mark.parametrize(
    "pattern, reads_outside",
    [
        (r"/(?!/)[^/]*/", False),  # lark's REGEXP: the text after the first slash decides
        (r'"(?:[^"\\]|\\.)*(?<!\\)"', False),  # a lookbehind inside the quotes
        (r"[?](?![a-z])", True),  # lark's OP: the next character is the next terminal's
        (r'"(?!"").*"', True),  # python.lark's STRING: "" then " is a long string
        (r"(?<=a)b", True),
    ],
)
def test_a_lookaround_is_refused_exactly_when_the_text_leaves_it_undecided(pattern, reads_outside):
    """Against `regex`: some match, extended by one character before or after, flips the
    assertion's verdict (found by brute force over short texts) iff the pattern is refused."""
    strip = re.sub(r"\(\?<?[=!](?:[^()]|\\.)*\)", "", pattern)  # the pattern without its assertions
    flips = False
    for n in range(5):
        for chars in itertools.product('a/?"b\\', repeat=n):
            text = "".join(chars)
            if re.fullmatch(strip, text) is None:
                continue
            for c in 'a/?"b\\':
                before = regex_module.search(f"(?<=^{re.escape(c)})(?:{pattern})$", c + text) is not None
                after = regex_module.search(f"^(?:{pattern})(?={re.escape(c)}$)", text + c) is not None
                flips |= before != (re.fullmatch(pattern, text) is not None) or after != (re.fullmatch(pattern, text) is not None)
    try:
        regex_to_dfa(pattern)
        refused = False
    except GrammarError:
        refused = True
    assert refused == reads_outside == flips


_RUNS = [rx.chars("ab"), rx.chars("a"), rx.chars("b"), rx.chars("az"), rx.Text("ab")]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(range(len(_RUNS))), st.integers(0, 2), st.sampled_from([0, 1, 2, 3, None])), min_size=1, max_size=5)
)
def test_runs_beside_unbounded_runs_of_a_wider_set_drop_only_copies_that_add_nothing(parts):
    """`rx.seq` shortens ``x{a,b}`` beside ``y{k,}`` (x within y) to ``x{a}``; the language is
    the concatenation's as given."""
    from ananke_jax._src.compile.automaton import DEAD

    nodes = [rx.repeat(_RUNS[i], lo, None if hi is None else lo + hi) for i, lo, hi in parts]
    simplified, given_ = rx.to_dfa(rx.seq(*nodes)), rx.to_dfa(rx.Seq(tuple(nodes)))
    assert rx.difference(simplified, given_).start == DEAD and rx.difference(given_, simplified).start == DEAD, nodes


def test_unanchored_bounded_runs_collapse_into_the_text_around_them():
    r"""``arn:...:[^/].{0,1023}`` unanchored is ``.*arn:...:[^/].*``: an NFA of hundreds of states
    instead of hundreds of thousands."""
    from ananke_jax._src.json_schema.ecma_regex import pattern_node

    node = pattern_node(r"arn:[a-z0-9-\.]{1,63}:[a-z0-9-\.]{0,63}:[^/].{0,1023}")
    assert rx.nfa_size(node) < 1_000
    assert rx.nfa_size(pattern_node(r"\d{1,3}")) == rx.nfa_size(pattern_node(r"\d"))
