"""A negative lookahead of one character class at the end of a Lark terminal (lark's own
``OP: /[+*]|[?](?![a-z])/``) reads the text after the terminal: whole masks against lark's own
Earley parser, whose regexes see the text that follows, and lark's grammar files walked through
lark.lark with a real vocabulary."""

import functools
import itertools
import pathlib
import re

import lark
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile.regex import split_trailing_exclusion

from oracles import unpack
from test_pushdown import _accepts, _advance, _mask

NESTED = r"""
start: item*
item: "(" item* ")" | OP | NAME | " "
OP: /[+*]|[?](?![a-z])/
NAME: /[a-z]+|_[a-z]*/
"""
NESTED_IGNORING_SPACES = r"""
start: item*
item: "(" item* ")" | OP | NAME
OP: /[+*]|[?](?![a-z])/
NAME: /[a-z]+/
%ignore " "
"""
ALPHABET = "()+?ab _"
TOKENS = [b"<eos>"] + ["".join(p).encode() for n in (1, 2) for p in itertools.product(ALPHABET, repeat=n)]


@functools.cache
def _earley(grammar: str):
    return lark.Lark(grammar, parser="earley", lexer="dynamic")


@functools.cache
def _accepted(grammar: str, text: str) -> bool:
    try:
        _earley(grammar).parse(text)
    except lark.exceptions.LarkError:
        return False
    return True


def _viable(grammar: str, text: str) -> bool:
    """Some text completes it: here, closing its open parentheses does if anything does (a
    ``?`` that a letter follows is never mended)."""
    depth = text.count("(") - text.count(")")
    return depth >= 0 and _accepted(grammar, text + ")" * depth)


@pytest.mark.parametrize("grammar", [NESTED, NESTED_IGNORING_SPACES], ids=["spaces-as-items", "spaces-ignored"])
def test_masks_match_lark_earley_along_random_walks(grammar):
    vocab = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
    cg = aj.compile_lark(grammar, vocab)
    rng = np.random.default_rng(5)
    checked = 0
    for _ in range(8):
        state, text = cg.init_state(), ""
        for _ in range(10):
            expected = np.array([_accepted(grammar, text)] + [_viable(grammar, text + t.decode()) for t in TOKENS[1:]])
            got = unpack(_mask(cg, state))[: len(TOKENS)]
            assert np.array_equal(got, expected), (text, [TOKENS[i] for i in np.flatnonzero(got != expected)])
            assert bool(_accepts(cg, state)) == expected[0]
            checked += 1
            choices = np.flatnonzero(got[1:]) + 1
            if not choices.size:
                break
            token = int(rng.choice(choices))
            state, text = _advance(cg, state, token), text + TOKENS[token].decode()
    assert checked >= 60
    # The lookahead decides: a '?' before a letter is refused, before anything else taken.
    assert not _viable(grammar, "(?a") and _viable(grammar, "(?)") and _viable(grammar, "a?+b")
    assert _viable(grammar, "(? a")  # a space between, item or ignored
    assert _viable(grammar, "?_a") == (grammar == NESTED)  # a name may begin with '_' there


def test_the_terminal_splits_into_matches_with_and_without_the_lookahead():
    without, with_, excluded = split_trailing_exclusion(r"[+*]|[?](?![a-z])")
    ir = aj.lark_to_ir(NESTED)
    parts = {t.name: t for t in ir.terminals if t.name.startswith("OP")}
    assert set(parts) == {"OP__1", "OP__2"} and {r.expansion for r in ir.rules_of("OP")} == {("OP__1",), ("OP__2",)}
    assert parts["OP__2"].not_followed_by == excluded == ((ord("a"), ord("z")),) and not parts["OP__1"].not_followed_by
    assert without.num_states == with_.num_states == 3
    assert split_trailing_exclusion("[a-z]+") is None
    clash = aj.lark_to_ir('start: OP OP__1\nOP: /[+*]|[?](?![a-z])/\nOP__1: "x"')  # a terminal of that name already
    assert {r.expansion for r in clash.rules_of("OP")} == {("OP__2",), ("OP__3",)}


@pytest.mark.parametrize(
    "grammar, message",
    [
        ("start: A\nA: /a(?!bc)/", "lookahead that reads past the end of the match"),  # two characters
        ("start: A\nA: /a(?=b)/", "lookahead that reads past the end of the match"),  # positive
        ("start: A\nA: /a(?![b])c/", None),  # decided inside the match: taken as before
    ],
)
def test_other_lookaheads_past_the_end_are_refused_naming_the_terminal(grammar, message):
    if message is None:
        aj.lark_to_ir(grammar)
        return
    with pytest.raises(aj.GrammarError, match=f"Lark terminal A: .*{message}"):
        aj.lark_to_ir(grammar)


@pytest.mark.parametrize(
    "grammar, refused",
    [
        ("start: OP NAME", True),  # '?' could be written, then no name
        ('start: OP NAME\n%ignore " "', False),  # a space may come between
        ('start: OP (NAME | "1")', True),  # conservative: '1' would do, still refused
        ('start: OP "+" NAME', False),
    ],
)
def test_a_lookahead_that_every_follower_fails_is_refused(grammar, refused):
    """Where the rules let a terminal that only begins with the class follow, the parser could
    take text after which nothing may come: refused, naming both terminals."""
    text = grammar + "\nOP: /[+*]|[?](?![a-z])/\nNAME: /[a-z]+/\n"
    vocab = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
    if refused:
        with pytest.raises(aj.GrammarError, match=r"terminal OP__2 may not be followed by .* every string of NAME begins"):
            aj.compile_lark(text, vocab)
    else:
        cg = aj.compile_lark(text, vocab)
        state = _advance(cg, cg.init_state(), TOKENS.index(b"?"))
        allowed = unpack(_mask(cg, state))[: len(TOKENS)]
        assert not allowed[TOKENS.index(b"a")] and allowed[TOKENS.index(b" " if "ignore" in grammar else b"+")]


@pytest.mark.parametrize(
    "grammar, message",
    [
        # An ignored space begins outside OP's class but inside B's: it does not excuse B.
        (
            'start: OP NAME | B S\nOP: /[?](?![a-z])/\nNAME: /[a-z]+/\nB: /b(?![ ])/\nS: / x/\n%ignore " "',
            "terminal B__1 may not be followed",
        ),
        ("start: A\nA: /a?(?![a-z])/", "lookahead that reads past the end"),  # the empty match would lose it
        ("start: A\nA: /a(?![x])(?:(?=b)b)?/", "lookahead that reads past the end"),  # text after it, past a marker
    ],
)
def test_lookaheads_that_cannot_be_kept_exact_are_refused(grammar, message):
    vocab = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
    with pytest.raises(aj.GrammarError, match=re.escape(message)):
        aj.compile_lark(grammar, vocab)
    ignored = aj.Grammar(
        rules=(aj.Rule("start", ("A",)),),
        terminals=(aj.TerminalDef("A", "a"), aj.TerminalDef("W", " ", not_followed_by=((97, 97),))),
        start="start",
        ignore=("W",),
    )
    with pytest.raises(aj.GrammarError, match="ignored terminal W has a not_followed_by"):
        aj.compile_grammar(ignored, vocab)


def test_lark_mode_and_structural_tags_keep_refusing_it(sentencepiece_vocab):
    with pytest.raises(aj.GrammarError, match=r"Lark terminal OP: .*lookahead that reads past the end"):
        aj.lark_to_ir(NESTED, lexer="lark")
    with pytest.raises(aj.GrammarError, match="terminal OP__2 reads the text after it") as e:
        aj.compile_structural_tag({"type": "grammar", "grammar": NESTED}, sentencepiece_vocab)
    assert e.value.pointer == "#/grammar"


@pytest.mark.slow
def test_lark_grammar_files_walk_through_lark_lark(sentencepiece_vocab, sentencepiece_encode):
    """lark.lark (which lark ships) compiles; lark's own grammar files are sentences of it,
    accepted token by token, and complete exactly where lark's Earley parser, reading every
    tokenisation (``lexer="dynamic_complete"``), says. (Its LALR parser lexes one way only:
    there ``/\n_NL: /`` cannot close a regex opened on the line before.)"""
    folder = pathlib.Path(lark.__file__).parent / "grammars"
    text = (folder / "lark.lark").read_text()
    cg = aj.compile_lark(text, sentencepiece_vocab)
    reference = lark.Lark(text, parser="earley", lexer="dynamic_complete")

    def is_complete(data: bytes) -> bool:
        try:
            reference.parse(data.decode())
        except (lark.exceptions.LarkError, UnicodeDecodeError):
            return False
        return True

    for name, lines in (("lark.lark", slice(32, 60)), ("common.lark", slice(0, 30))):
        # Without comment lines: a comment may end at any space, and then its words begin items,
        # which keeps more readings alive than the configurations hold.
        kept = [line for line in (folder / name).read_text().splitlines() if not line.lstrip().startswith(("#", "//"))]
        example = "\n".join(kept[lines]) + "\n"
        assert "?" in example or name != "lark.lark"
        state, data = cg.init_state(), b""
        for token in sentencepiece_encode(example):  # every token allowed; complete as Earley says at line ends
            assert bool(aj.is_allowed(_mask(cg, state), token)), (name, data)
            state, data = _advance(cg, state, token), data + sentencepiece_vocab.token_bytes(token)
            if data.endswith(b"\n"):
                assert bool(_accepts(cg, state)) == is_complete(data), (name, data)
        assert bool(_accepts(cg, state)), name
