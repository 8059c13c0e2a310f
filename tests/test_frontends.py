"""GBNF and Lark front ends: the grammar files, syntax features and errors, against Earley oracles.

Oracles: the IR written back as a Lark grammar and parsed by lark's Earley parser; for ``.lark``
files also lark's Earley parser on the original text; and the byte-level Earley recogniser over
the IR (earley.py). Lark's dynamic lexer only tries prefixes of each regex's *preferred* match
(``<|<=`` never yields ``<=``), so the lark oracles use a matcher that tries every whole match.
"""

import itertools
import json
import pathlib
import random
import re
from unittest import mock

import lark.parser_frontends
import pytest
from lark import Lark
from lark.exceptions import LarkError

from ananke_jax import GrammarError
from ananke_jax._src.compile.lexer import without_empty_terminals
from ananke_jax._src.compile.lr import lr_tables
from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax._src.frontends import gbnf_to_ir, lark_to_ir
from ananke_jax._src.frontends.gbnf import MAX_INLINE_REGEX
from ananke_jax._src.grammar_text import lark_names, to_lark
from ananke_jax._src.ir import Grammar

from earley import EarleyRecogniser

GRAMMARS_DIR = pathlib.Path(__file__).resolve().parent.parent / "grammars"

# Per grammar file: example outputs in its language and counterexamples outside it (shared with bench/).
_EXAMPLES = json.loads((GRAMMARS_DIR / "examples.json").read_text(encoding="utf-8"))
GRAMMAR_EXAMPLES = {name: e["examples"] for name, e in _EXAMPLES.items()}
GRAMMAR_COUNTEREXAMPLES = {name: e["counterexamples"] for name, e in _EXAMPLES.items()}


def load_grammar_file(filename: str) -> Grammar:
    """The IR of a file in grammars/, read by the front end its extension names."""
    text = (GRAMMARS_DIR / filename).read_text(encoding="utf-8")
    return gbnf_to_ir(text) if filename.endswith(".gbnf") else lark_to_ir(text)


# ----------------------------------------------------------------------------------------------
# Oracles


class _WholeMatcher:
    """Stands in for lark's EarleyRegexpMatcher: the longest non-empty whole match at ``index``.

    Lark's dynamic_complete lexer then tries every shorter prefix too, so each terminal matches
    every substring its regex matches in full. Empty matches are left to the grammar (`_ir_to_lark`
    makes nullable terminals optional), as lark's Earley parser cannot scan zero-width tokens.
    """

    def __init__(self, lexer_conf):
        self.regexps = {t.name: re.compile(t.pattern.to_regexp()) for t in lexer_conf.terminals}

    def match(self, term, text, index=0):
        regex = self.regexps[term.name]
        if regex.match(text, index) is None:  # no prefix at all: skip the quadratic search
            return None
        return next(filter(None, (regex.fullmatch(text, index, end) for end in range(len(text), index, -1))), None)


def earley_parser(lark_text: str, start: str) -> Lark:
    with mock.patch.object(lark.parser_frontends, "EarleyRegexpMatcher", _WholeMatcher):
        return Lark(lark_text, parser="earley", lexer="dynamic_complete", ambiguity="forest", start=start)


def _ir_to_lark(grammar: Grammar) -> tuple[str, str]:
    """The IR as Lark text (the library's printer) and the start rule's name there."""
    return to_lark(grammar), lark_names(grammar)[grammar.start]


def _accepts(parser: Lark, text: str) -> bool:
    try:
        parser.parse(text)
    except LarkError:
        return False
    return True


class Oracles:
    """Every oracle's verdict on whole strings for one grammar file."""

    def __init__(self, filename: str):
        self.filename = filename
        self.grammar = load_grammar_file(filename)
        self.parsers = [earley_parser(*_ir_to_lark(self.grammar))]
        if filename.endswith(".lark"):
            self.parsers.append(earley_parser((GRAMMARS_DIR / filename).read_text(encoding="utf-8"), "start"))
        self.bytes_earley = EarleyRecogniser(self.grammar)

    def verdicts(self, text: str) -> list[bool]:
        return [_accepts(p, text) for p in self.parsers] + [self.bytes_earley.accepts(text.encode())]


def accepts(grammar: Grammar, text: str) -> bool:
    """Whether the IR's language holds ``text``, by lark's Earley parser and the byte-level one."""
    verdicts = {_accepts(earley_parser(*_ir_to_lark(grammar)), text), EarleyRecogniser(grammar).accepts(text.encode())}
    assert len(verdicts) == 1, f"the oracles disagree on {text!r}"
    return verdicts.pop()


@pytest.fixture(scope="module", params=sorted(GRAMMAR_EXAMPLES))
def oracles(request) -> Oracles:
    return Oracles(request.param)


def test_every_grammar_file_has_examples():
    files = sorted(p.name for p in GRAMMARS_DIR.iterdir() if p.suffix in (".gbnf", ".lark"))
    assert files == sorted(GRAMMAR_EXAMPLES) == sorted(GRAMMAR_COUNTEREXAMPLES)
    assert all(len(examples) >= 4 for examples in GRAMMAR_EXAMPLES.values())


def test_grammar_file_builds(oracles):
    grammar = oracles.grammar
    assert grammar.validate() is grammar
    assert all(regex_to_dfa(t.regex).num_states > 1 for t in grammar.terminals)
    assert str(grammar).startswith(f"{grammar.start} ::= ")


# Grammar files whose LR tables conflict, so that their parses fork: calculator.gbnf's optional
# spaces, the dangling "else" of dangling_else.gbnf and verilog_module.lark, and the scope of
# prover9.lark's quantifiers (how far "all x" reaches to the right).
FORKING = {"calculator.gbnf", "dangling_else.gbnf", "verilog_module.lark", "prover9.lark"}


def test_grammar_file_is_lalr1_unless_it_is_meant_to_fork(oracles):
    grammar, _ = without_empty_terminals(oracles.grammar)  # as the compiler sees it: `ws` nullable
    if oracles.filename in FORKING:
        with pytest.raises(GrammarError, match=r"shift/reduce conflict before terminal"):
            lr_tables(grammar)
        assert lr_tables(grammar, max_actions=4).action_kind.shape[2] == 2
    else:
        lr_tables(grammar)  # raises, naming the rules, on a conflict


def test_examples_accepted(oracles):
    for text in GRAMMAR_EXAMPLES[oracles.filename]:
        assert all(oracles.verdicts(text)), (text, oracles.verdicts(text))


def test_counterexamples_rejected(oracles):
    for text in GRAMMAR_COUNTEREXAMPLES[oracles.filename]:
        assert not any(oracles.verdicts(text)), (text, oracles.verdicts(text))


# ----------------------------------------------------------------------------------------------
# GBNF syntax, one feature at a time: (grammar, strings in the language, strings not in it).

GBNF_FEATURES = {
    "unicode escapes are code points": (r'root ::= "\u00e9" "\x41" "\U0001F600"', ["éA😀"], ["\\u00e9A😀", "\xe9A"]),
    "literal escapes": (r'root ::= "\n\t\r\\\"\[\]"', ['\n\t\r\\"[]'], ["\\n\\t"]),
    "raw unicode": ('root ::= "ü" [ぁ-ゟ]+', ["üぁゟ"], ["u", "ü"]),
    "class escapes": (r"root ::= [\]\-\\\^\x41\u00e9\n]+", ["]-\\^Aé\n"], ["a", "B"]),
    "class ranges and literal dashes": ("root ::= [a-c] [-x] [y-] [0-9a-fA-F]", ["b-yF", "axyf", "cx-0"], ["d-y0", "b-z0"]),
    "negated class": ("root ::= [^a-c\\n] [^]", ["dé", "\t\n"], ["a!", "\nx", "d"]),
    "dot is any code point": ('root ::= "<" . ">"', ["<\n>", "<😀>", "<.>"], ["<>", "<ab>"]),
    "empty alternatives": ('root ::= "x" | list\nlist ::= "a" list |', ["x", "", "aa"], ["xx", "xa"]),
    "empty alternative in a rule": ('root ::= "[" items "]"\nitems ::= "a" items |', ["[]", "[aaa]"], ["[", "[b]"]),
    "empty literal": ('root ::= "" "a" ""', ["a"], [""]),
    "repetition bounds": (
        'root ::= "a"{2} "b"{2,} "c"{1,3} "d"{0,2} "e"{0}',
        ["aabbc", "aabbbcccdd"],
        ["abbc", "aabb", "aabbccccc", "aabbcddd", "aabbce"],
    ),
    "repetition of rules": (
        'root ::= p{2,3} ";" p{1,} ";" p{0,2}\np ::= "(" p* ")"',
        ["()();(());", "()(())();();()()"],
        ["();();", "()()()();();"],
    ),
    "stacked quantifiers": ('root ::= ("a" "b"?)+*', ["", "aab", "abab"], ["b"]),
    "comments and multi-line rules": (
        'root ::= # the root\n  "a" # first\n  ( "b"\n    | "c" ) # second\n   x-y_1\n\n# a comment line\nx-y_1 ::= "z"\n',
        ["abz", "acz"],
        ["az", "ab"],
    ),
    "names with dashes, underscores, digits": (
        'root ::= my-rule_2 x9\nmy-rule_2 ::= "a" x9 | "b"\nx9 ::= "!" my-rule_2?',
        ["b!", "a!b!", "a!!"],
        ["a!", "a!!!"],
    ),
    "ambiguous grammar": ('root ::= a a\na ::= "x"* | "x" "x"', ["", "xxx", "xx"], ["y"]),
    "nested groups": ('root ::= ( "a" ( "b" | ( "c" "d" )+ ) )?', ["", "ab", "acdcd"], ["a", "acdc"]),
    "left recursion": ('root ::= root "+" n | n\nn ::= [0-9]+', ["1", "1+22+3"], ["+1", "1+"]),
}


@pytest.mark.parametrize("feature", sorted(GBNF_FEATURES))
def test_gbnf_feature(feature):
    text, members, non_members = GBNF_FEATURES[feature]
    grammar = gbnf_to_ir(text)
    assert [accepts(grammar, s) for s in members] == [True] * len(members)
    assert [accepts(grammar, s) for s in non_members] == [False] * len(non_members)


def test_code_points_are_utf8():
    (terminal,) = gbnf_to_ir(r'root ::= "\u00e9" [\U0001F600-\U0001F64F]').terminals
    dfa = regex_to_dfa(terminal.regex)
    assert dfa.accepting[dfa.walk(dfa.start, "é🙂".encode())]
    assert not dfa.accepting[dfa.walk(dfa.start, b"\xe9\xf0\x9f\x99\x82")]


def test_regular_rules_become_one_terminal():
    grammar = gbnf_to_ir('root ::= "{" ws item ws "}"\nitem ::= [a-z]+ | "\\"" [^"]* "\\""\nws ::= [ \\t]*')
    assert [(r.origin, r.expansion) for r in grammar.rules] == [("root", ("ROOT_1",))]
    assert grammar.terminals[0].regex == r'\{[ \t]*(?:[a-z]+|"[^"]*")[ \t]*\}'


def test_repetitions_of_rules_become_left_recursive_rules():
    grammar = gbnf_to_ir('root ::= ( "(" root ")" )* "." item+ item? \nitem ::= "[" root? "]"')
    assert str(grammar) == "\n".join(
        [
            "root ::= root__1 ROOT_3 root__2 root__3",
            "root__1 ::= ε | root__1 ROOT_1 root ROOT_2",
            "root__2 ::= item | root__2 item",
            "root__3 ::= ε | item",
            "item ::= ITEM_1 item__1 ITEM_2",
            "item__1 ::= ε | root",
            r"ROOT_1 : /\(/",
            r"ROOT_2 : /\)/",
            r"ROOT_3 : /\./",
            r"ITEM_1 : /\[/",
            r"ITEM_2 : /\]/",
        ]
    )


def test_a_rule_that_is_a_repetition_is_itself_the_recursive_rule():
    assert str(gbnf_to_ir('root ::= x+\nx ::= "(" root? ")"')).startswith("root ::= x | root x\n")
    assert str(gbnf_to_ir('root ::= x*\nx ::= "(" root ")"')).startswith("root ::= ε | root x\n")


def test_identical_terminals_are_shared():
    grammar = gbnf_to_ir('root ::= "(" a ")" a\na ::= "x" a | "("')
    assert sorted(t.regex for t in grammar.terminals) == [r"\(", r"\)", "x"]


def test_regular_alternatives_merge_and_root_stays_a_rule():
    grammar = gbnf_to_ir('root ::= "a" | "b" | "(" root ")"')
    assert [r.expansion for r in grammar.rules] == [("ROOT_1",), ("ROOT_2", "root", "ROOT_3")]
    assert grammar.terminals[0].regex == "a|b"
    assert [r.expansion for r in gbnf_to_ir('root ::= "a"').rules] == [("ROOT_1",)]


def test_huge_regular_rules_are_not_inlined():
    words = " | ".join(f'"word{i:04d}"' for i in range(MAX_INLINE_REGEX // 8))
    grammar = gbnf_to_ir(f"root ::= big big\nbig ::= {words}")
    assert [r.expansion for r in grammar.rules] == [("big", "big"), ("BIG_1",)]


def test_generated_names_avoid_user_names():
    grammar = gbnf_to_ir('root ::= ROOT_1 root__1 ("x" root)?\nROOT_1 ::= "a" ROOT_1 | "b"\nroot__1 ::= "c" root__1 | "d"')
    assert len(set(grammar.nonterminals) | grammar.terminal_names) == len(grammar.nonterminals) + len(grammar.terminals)


def test_custom_root():
    assert gbnf_to_ir('start ::= "a"', root="start").start == "start"


class _RandomGrammar:
    """A random GBNF grammar over rules root, r1, r2, written also directly in Lark's EBNF."""

    ATOMS = (('"a"', '"a"'), ('"ab"', '"ab"'), ('"("', '"("'), ("[ab]", "/[ab]/"), ("[^a]", "/[^a]/"), (".", "/(?s:.)/"))
    QUANTIFIERS = (("*", "*"), ("+", "+"), ("?", "?"), ("{2}", " ~ 2"), ("{0,2}", " ~ 0..2"), ("{1,2}", " ~ 1..2"))

    def __init__(self, rng):
        self.rng = rng
        rules = [(name, self.expression(3)) for name in ("root", "r1", "r2")]
        self.gbnf = "\n".join(f"{name} ::= {gbnf}" for name, (gbnf, _) in rules)
        self.lark = "\n".join(f"{name}: {lark_text}" for name, (_, lark_text) in rules)

    def expression(self, depth: int) -> tuple[str, str]:
        kind = self.rng.choice(["atom", "ref"] + ["sequence", "alternation", "optional", "quantified", "at-least-2"] * (depth > 0))
        if kind == "atom":
            return self.rng.choice(self.ATOMS)
        if kind == "ref":
            return (self.rng.choice(["root", "r1", "r2"]),) * 2
        a, b = self.expression(depth - 1), self.expression(depth - 1)
        if kind == "sequence":
            return f"{a[0]} {b[0]}", f"{a[1]} {b[1]}"
        if kind == "alternation":
            return f"( {a[0]} | {b[0]} )", f"( {a[1]} | {b[1]} )"
        if kind == "optional":
            return f"( {a[0]} | )", f"[{a[1]}]"
        if kind == "quantified":
            gbnf_op, lark_op = self.rng.choice(self.QUANTIFIERS)
            return f"( {a[0]} ){gbnf_op}", f"( {a[1]} ){lark_op}"
        return f"( {a[0]} ){{2,}}", f"( {a[1]} ) ( {a[1]} ) ( {a[1]} )*"


def test_random_grammars_match_a_direct_translation():
    """Inlining, terminal extraction and repetition rules keep the language of the rules."""
    rng, checked = random.Random(1), 0
    strings = ["".join(chars) for n in range(4) for chars in itertools.product("ab(", repeat=n)]
    while checked < 10:
        random_grammar = _RandomGrammar(rng)
        try:
            grammar = gbnf_to_ir(random_grammar.gbnf)
            direct = earley_parser(random_grammar.lark, "root")
        except (GrammarError, LarkError):  # empty languages, rules lark finds twice
            continue
        ours = earley_parser(*_ir_to_lark(grammar))
        for text in strings:
            assert _accepts(ours, text) == _accepts(direct, text), (random_grammar.gbnf, str(grammar), text)
        checked += 1


def test_unreachable_rules_are_dropped_with_a_warning():
    """As llama.cpp ignores them: the language is the root's, and the warning names them."""
    with pytest.warns(UserWarning, match=r"not reachable from 'root' are ignored: extra, more"):
        grammar = gbnf_to_ir('root ::= "a" x\nx ::= "b"*\nextra ::= "(" more\nmore ::= extra | "c"')
    assert {r.origin for r in grammar.rules} <= {"root", "x", *(n for n in grammar.nonterminals if n.startswith("x"))}
    assert accepts(grammar, "abb") and not accepts(grammar, "a(c")


GBNF_ERRORS = {
    "syntax error": ('root ::= "a" )', r"line 1, column 14.*'\)'"),
    "syntax error on a later line": ('root ::= "a"\nb ::= "c" ::= "d"', r"line 2, column 11"),
    "unterminated string": ('root ::= "a\nb ::= "c"', r"line 1, column 10"),
    "unclosed group": ('root ::= ( "a"\n', r"line \d+, column \d+: unexpected end"),
    "undefined rule": ('root ::= "a" thing\n', r"undefined rules referenced: 'thing' \(line 1, column 14\)"),
    "missing root": ('start ::= "a"', r"root rule 'root' is not defined"),
    "undefined rule inside an unused one": ('root ::= "a"\nextra ::= thing', r"undefined rules referenced: 'thing' \(line 2, column 11\)"),
    "rule defined twice": ('root ::= "a"\nroot ::= "b"', r"line 2, column 1: rule 'root' is defined twice"),
    "unknown escape": (r'root ::= "\q"', r"unknown escape \\q"),
    "short hex escape": (r'root ::= "\x4"', r"\\x needs 2 hex digits"),
    "surrogate": (r'root ::= "\ud800"', r"not a Unicode scalar value"),
    "empty class": ("root ::= []", r"empty character class"),
    "reversed range": ("root ::= [z-a]", r"reversed range"),
    "reversed bounds": ('root ::= "a"{3,2}', r"maximum below its minimum"),
    "empty language": ('root ::= "a" root', r"language is empty"),
    "rule deriving nothing": ('root ::= "a" | x\nx ::= "b" x', r"derive no string.*: x"),
    "absurd repetition of rules": ('root ::= p{5000}\np ::= "(" p? ")"', r"more than 1000 times"),
}


@pytest.mark.parametrize("case", sorted(GBNF_ERRORS))
def test_gbnf_errors(case):
    text, message = GBNF_ERRORS[case]
    with pytest.raises(GrammarError, match=message):
        gbnf_to_ir(text)


# ----------------------------------------------------------------------------------------------
# Lark


def _terminal(grammar: Grammar, name: str) -> str:
    return next(t.regex for t in grammar.terminals if t.name == name)


def _lexer_matches(lark_regex: str, text: str) -> bool:
    """Whether lark's lexer, at the start of ``text``, takes exactly ``text``."""
    match = re.match(lark_regex, text)
    return match is not None and match.end() == len(text)


@pytest.mark.parametrize(("name", "alphabet"), [("ESCAPED_STRING", '"a\\\n'), ("C_COMMENT", "/*a\n")])
def test_common_terminals_match_what_lark_lexes(name, alphabet):
    grammar = lark_to_ir(f"start: {name}\n%import common.{name}")
    lark_regex = next(t.pattern.to_regexp() for t in Lark(f"start: {name}\n%import common.{name}").terminals if t.name == name)
    ours = re.compile(_terminal(grammar, name))
    for length in range(8):
        for chars in itertools.product(alphabet, repeat=length):
            text = "".join(chars)
            assert bool(ours.fullmatch(text)) == _lexer_matches(lark_regex, text), text


def test_common_terminals_compile():
    names = "NUMBER SIGNED_NUMBER INT SIGNED_INT FLOAT SIGNED_FLOAT DECIMAL HEXDIGIT WS WS_INLINE CNAME WORD LETTER DIGIT"
    names += " NEWLINE CR LF ESCAPED_STRING SH_COMMENT CPP_COMMENT C_COMMENT SQL_COMMENT"
    grammar = lark_to_ir(f"start: {' '.join(names.split())}\n%import common ({', '.join(names.split())})")
    assert sorted(grammar.terminal_names) == sorted(names.split())
    assert all("\n" not in t.regex and "\t" not in t.regex for t in grammar.terminals)
    assert accepts(grammar, '1.5e3+742-31.5E+2-.53.f  \n \tname_1Wordx7\r\n\n\r\n"a\\"b"#c//d/* e */-- f')


def test_lark_rules_templates_and_ignore():
    grammar = lark_to_ir(
        'start: _sep{item, ","}\n_sep{x, s}: x (s x)*\nitem: NAME | "[" start? "]"\n'
        "%import common.CNAME -> NAME\n%import common.WS\n%ignore WS"
    )
    assert grammar.ignore == ("WS",)
    assert any(name.startswith("_sep{") for name in grammar.nonterminals)
    assert accepts(grammar, "a , [ b,[]] ,c") and not accepts(grammar, "a,,b")


def test_case_insensitive_strings_and_regexes():
    """The ``i`` flag, on strings, inside larger terminals and on regexes, matches as Python's
    re.IGNORECASE: ``ſ`` is an ``s``, the Kelvin sign a ``k``."""
    grammar = lark_to_ir('start: KEY NAME WORD\nKEY: "select"i\nNAME: "ab"i "-" /[0-9]+/\nWORD: /[k-l]+/i\n%ignore " "')
    assert _terminal(grammar, "KEY") == "(?i:select)"
    assert accepts(grammar, "SeLeCt aB-12 kL") and accepts(grammar, "ſelect ab-1 \u212a")
    assert not accepts(grammar, "selec ab-1 k") and not accepts(grammar, "select ab-1 m")


def test_regex_flags():
    grammar = lark_to_ir("start: A B\nA: /a.b/s\nB: /c d/x")
    assert accepts(grammar, "a\nbcd") and not accepts(grammar, "a\nbc d")


def test_string_delimiters_other_than_double_quotes():
    grammar = lark_to_ir('start: STRING\nSTRING: "\'" _STRING_ESC_INNER "\'"\n%import common._STRING_ESC_INNER')
    assert _terminal(grammar, "STRING") == r"'(?:[^'\\\n]|\\.)*'"


LARK_ERRORS = {
    "syntax error": ("start: A\nA: (", r"line 2 column 5"),
    "undefined rule": ("start: thing", r"thing"),
    "missing start": ('other: "a"', r"start"),
    "lookbehind before the terminal": ("start: A\nA: /(?<!x)a/", r"terminal A: .*lookbehind that reads before its start at position 0"),
    "lookahead after an anonymous terminal": ('start: /b(?!ab)/ "a"', r"terminal /b\(\?!ab\)/: .*lookahead that reads past the end"),
    "backreference": ("start: A\nA: /(a)\\1/", r"terminal A: .*backreference"),
    "empty language": ('start: "a" start', r"language is empty"),
}


@pytest.mark.parametrize("case", sorted(LARK_ERRORS))
def test_lark_errors(case):
    text, message = LARK_ERRORS[case]
    with pytest.raises(GrammarError, match=message):
        lark_to_ir(text)
