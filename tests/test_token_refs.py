"""GBNF token references (``<[10]>``, ``<think>``, ``!<[11]>*``) with real vocabularies: token
sequences in the spirit of llama.cpp's own cases walked token by token, whole masks against the
Earley oracle over the grammar with its tokens spelled, and the errors that name a reference."""

import codecs

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile.lexer import terminal_dfa
from ananke_jax._src.compile.token_refs import spell_token_refs

from earley import SharedEarley
from test_pushdown import _accepts, _advance, _mask, is_refused, random_walk_check

# Four tokens the grammars name (a, b, c, d) and a special token none of them names, per
# vocabulary: Tekken's special tokens, and for SentencePiece byte-fallback tokens of control
# characters (ordinary tokens: naming one keeps its bytes for itself) and its BOS.
NAMED = {"sentencepiece": (10, 11, 12, 14), "tekken": (3, 4, 9, 5)}
UNNAMED_SPECIAL = {"sentencepiece": 1, "tekken": 7}

DELIMITED = """
root ::= <[{a}]> body <[{b}]>
body ::= !<[{b}]>*
"""
DELIMITED_CASES = {
    "pass": [("a", "hello world", "b"), ("a", "b"), ("a", "text", "a", " more", "b"), ("a", "line one\nline two", "b")],
    "fail": [("a", "no end"), ("a",), ("no start", "b"), ("a", "b", "b"), ("b", "wrong order", "a"), ("a", "x", "unnamed", "b")],
}

AGENTIC = """
root ::= think+ answer call*
think ::= <[{a}]> !<[{b}]>* <[{b}]>
answer ::= "Answer: " [a-z ]+
call ::= <[{c}]> name <[{d}]>
name ::= !<[{d}]>+
"""
AGENTIC_CASES = {
    "pass": [
        ("a", "planning", "b", "Answer: ok"),
        ("a", "b", "a", "two", "b", "Answer: yes", "c", "search", "d"),
        ("a", "call ", "c", " inside", "b", "Answer: x", "c", "f", "d", "c", "g", "d"),
    ],
    "fail": [
        ("Answer: ok",),
        ("a", "x", "b"),
        ("a", "x", "b", "Answer: ok", "c", "d"),  # a name holds at least one token
        ("a", "x", "b", "Answer: ok", "c", "f"),
        ("a", "x", "b", "b", "Answer: ok"),
        ("a", "x", "b", "Answer: OK"),
    ],
}


def _grammar(template: str, name: str) -> str:
    return template.format(**dict(zip("abcd", NAMED[name])))


def _tokens(case: tuple[str, ...], name: str, encode) -> list[int]:
    """Token ids: the letters a-d are the named tokens, "unnamed" the unnamed special one, any
    other item is text encoded by the real tokenizer."""
    ids = {**dict(zip("abcd", NAMED[name])), "unnamed": UNNAMED_SPECIAL[name]}
    return [t for item in case for t in ([ids[item]] if item in ids else encode(item))]


def _accepted(cg, tokens) -> bool:
    """Every token allowed in turn and the end complete (EOS allowed), or refused somewhere."""
    if is_refused(cg, tokens):
        return False
    state = cg.init_state()
    for token in tokens:
        state = _advance(cg, state, token)
    return bool(aj.is_allowed(_mask(cg, state), 2))


@pytest.mark.parametrize("template, cases", [(DELIMITED, DELIMITED_CASES), (AGENTIC, AGENTIC_CASES)], ids=["delimited", "agentic"])
def test_token_sequences_are_accepted_and_refused_as_the_grammar_says(real_vocab, template, cases):
    name, vocab, encode = real_vocab
    cg = aj.compile_gbnf(_grammar(template, name), vocab)
    for case in cases["pass"]:
        assert _accepted(cg, _tokens(case, name, encode)), case
    for case in cases["fail"]:
        assert not _accepted(cg, _tokens(case, name, encode)), case


def test_full_masks_match_earley_over_the_spelled_grammar(real_vocab):
    """Sound and complete on whole masks along random walks, inside runs of text and at the
    named tokens: the oracle reads the grammar and vocabulary with the named tokens spelled."""
    name, vocab, encode = real_vocab
    ir = aj.gbnf_to_ir(_grammar(AGENTIC, name))
    spelled_ir, spelled_vocab = spell_token_refs(ir, vocab)
    cg = aj.compile_grammar(ir, vocab)
    rng = np.random.default_rng(3)
    prefixes = [_tokens(c, name, encode) for c in AGENTIC_CASES["pass"]]
    prefixes = [p[: rng.integers(1, len(p))] for p in prefixes]
    assert random_walk_check(cg, SharedEarley(spelled_ir), spelled_vocab, rng, walks=5, steps=6, prefixes=prefixes)[0] >= 20


def _begins_utf8(data: bytes) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(data, final=False)
    except UnicodeDecodeError:
        return False
    return True


def test_a_negated_run_takes_text_and_the_other_named_tokens_only(sentencepiece_vocab):
    """The whole mask inside ``!<[b]>*``: every token that begins UTF-8 text, the named tokens
    (a inside the run, b ending it), and no special token the grammar does not name."""
    vocab = sentencepiece_vocab
    a, b, _, _ = NAMED["sentencepiece"]
    cg = aj.compile_gbnf(_grammar(DELIMITED, "sentencepiece"), vocab)
    state = _advance(cg, cg.init_state(), a)
    allowed = np.unpackbits(np.asarray(_mask(cg, state)).view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
    expected = np.array([_begins_utf8(t) for t in vocab.tokens])
    expected[[a, b]] = True  # (c and d, not named here, are ordinary text tokens)
    expected[list(vocab.special_token_ids)] = False
    assert np.array_equal(allowed, expected), np.flatnonzero(allowed != expected)[:10]


def test_a_run_of_anything_but_eos_masks_as_any_text(sentencepiece_vocab, sentencepiece_encode):
    """``!</s>+`` names EOS, which no run holds: the same language as ``.+``, EOS at its end."""
    with_eos = aj.compile_gbnf('root ::= "Note: " !</s>+', sentencepiece_vocab)
    plain = aj.compile_gbnf('root ::= "Note: " .+', sentencepiece_vocab)
    states = [with_eos.init_state(), plain.init_state()]
    for token in [None, *sentencepiece_encode("Note: all is well")]:
        if token is not None:
            states = [_advance(with_eos, states[0], token), _advance(plain, states[1], token)]
        assert np.array_equal(np.asarray(_mask(with_eos, states[0])), np.asarray(_mask(plain, states[1])))
    assert bool(_accepts(with_eos, states[0]))


def test_tokens_named_by_text_are_those_named_by_id(tekken_vocab):
    by_text = aj.gbnf_to_ir("root ::= <[INST]> !<[/INST]>* <[/INST]>")
    by_id = aj.gbnf_to_ir("root ::= <[3]> !<[4]>* <[4]>")
    (g1, v1), (g2, v2) = spell_token_refs(by_text, tekken_vocab), spell_token_refs(by_id, tekken_vocab)
    assert v1 is v2 and v1.tokens[3] != tekken_vocab.tokens[3]
    for t1, t2 in zip(g1.terminals, g2.terminals):
        assert np.array_equal(terminal_dfa(t1).transitions, terminal_dfa(t2).transitions)


def test_a_scanned_walk_steps_as_the_host_loop(sentencepiece_vocab, sentencepiece_encode):
    cg = aj.compile_gbnf(_grammar(AGENTIC, "sentencepiece"), sentencepiece_vocab)
    tokens = jnp.asarray(_tokens(AGENTIC_CASES["pass"][2], "sentencepiece", sentencepiece_encode), jnp.int32)

    def step(state, token):
        return aj.advance(cg, state, token), aj.is_allowed(aj.token_mask(cg, state), token)

    final, allowed = jax.jit(lambda s, t: jax.lax.scan(step, s, t))(cg.init_state(), tokens)
    assert bool(allowed.all()) and bool(_accepts(cg, final))
    host = cg.init_state()
    for token in tokens:
        host = _advance(cg, host, token)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(final), jax.tree.leaves(host)))


@pytest.mark.parametrize(
    "grammar, message",
    [
        ("root ::= <[99999999]>", "GBNF line 1, column 10: token reference <[99999999]>: the vocabulary has no token 99999999"),
        ("root ::= <nowhere-a-token>", "token reference <nowhere-a-token>: no token of the vocabulary is written"),
        ("root ::= <[2]>", "token reference <[2]>: names the end-of-sequence token"),
        ("root ::= <s> </s>", "GBNF line 1, column 14: token reference </s>: names the end-of-sequence token"),
        ("root ::= <[1]> !<[1]> <[1]>", "GBNF line 1, column 16: !<[1]> must itself be followed by * or +, as !<[1]>* or !<[1]>+"),
        ('root ::= (!<[1]> | "x")*', "!<[1]> must itself be followed by * or +"),
    ],
)
def test_bad_references_name_themselves(sentencepiece_vocab, grammar, message):
    with pytest.raises(aj.GrammarError) as e:
        aj.compile_gbnf(grammar, sentencepiece_vocab)
    assert message in str(e.value)


def test_references_need_a_vocabulary_and_a_tag_names_its_tokens_itself(sentencepiece_vocab):
    ir = aj.gbnf_to_ir("root ::= <[10]> [a-z]+")
    with pytest.raises(aj.GrammarError, match="token reference <\\[10\\]> is read only against a vocabulary"):
        terminal_dfa(next(t for t in ir.terminals if t.token is not None))
    tag = {"type": "grammar", "grammar": "root ::= <[10]> [a-z]+"}
    with pytest.raises(aj.GrammarError, match="names no tokens") as e:
        aj.compile_structural_tag(tag, sentencepiece_vocab)
    assert e.value.pointer == "#/grammar"
