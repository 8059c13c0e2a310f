"""``lexer="lark"``: the pushdown engine reading text as Lark's contextual lexer does (longest
match, the parser's state choosing the terminals, priorities, keywords before names), against
Lark's own LALR parser driven by the reference lexer of `lark_reference`."""

import functools

import jax
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile.cfg import compile_ir

from lark_reference import LarkLexing
from oracles import unpack
from test_frontends import GRAMMAR_COUNTEREXAMPLES, GRAMMAR_EXAMPLES, GRAMMARS_DIR
from test_pushdown import _accepts, _advance, _assert_same, _mask, assert_walks_token_by_token, example_prefixes, is_refused

# Small grammars over a few characters, where Lark's lexer and ours pick the same lexemes: the
# grammar, its characters, and how many characters at most complete a viable text.
SMALL = {
    # Keywords are string literals, so they win over NAME; the parser's state chooses between them.
    "keywords": (
        """
        start: stmt+
        stmt: "if" NAME | NAME "=" NUM | "in" NUM
        NAME: /[a-z]+/
        NUM: /[0-9]+/
        %ignore " "
        """,
        "ifn=1 ",
        3,
    ),
    # A has the priority where both match the same text; after "#" only B is in context.
    "priorities": (
        """
        start: pair+
        pair: A "!" | B "?" | "#" B "?"
        A.2: /a+/
        B: /a+|b+/
        %ignore " "
        """,
        "ab!?# ",
        3,
    ),
    # A space may begin a comment: where no second "/" comes, the lexeme is the space alone.
    "comments": (
        r"""
        start: item+
        item: NAME | "/" NAME "/"
        NAME: /[a-z]+/
        WS: / +/
        COMMENT: / *\/\/[a ]*;/
        %ignore WS
        %ignore COMMENT
        """,
        "a/ ;",
        4,
    ),
    # The longest operator wins; nothing is ignored, so lexemes touch.
    "operators": (
        """
        start: stmt+
        stmt: NAME ("=" | "==" | "=>" | ">") NAME ";"
        NAME: /[a-z]+/
        """,
        "ab=>;",
        3,
    ),
}


@functools.cache
def _reference(name: str) -> LarkLexing:
    return LarkLexing(SMALL[name][0])


@pytest.mark.parametrize("name", SMALL)
def test_the_reference_decides_whole_texts_as_lark_does(name):
    """The oracle itself: on every text of up to five characters, complete exactly where Lark's
    LALR parser (its contextual lexer) parses the text."""
    reference = _reference(name)
    complete, _ = reference.viable_texts(SMALL[name][1], 5)
    for text in _texts(SMALL[name][1], 5):
        try:
            reference.lark.parse(text)
            parsed = True
        except Exception:
            parsed = False
        assert parsed == (text in complete), text


def _texts(alphabet: str, length: int) -> list[str]:
    texts = [""]
    for _ in range(length):
        texts += [t + c for t in texts if len(t) == len(texts[-1]) for c in alphabet]
    return texts


@pytest.mark.parametrize("length", [9, pytest.param(10, marks=pytest.mark.slow)])
@pytest.mark.parametrize("name", SMALL)
def test_masks_match_the_reference_at_every_viable_prefix(name, length):
    """Whole masks over a vocabulary of every character and every pair of them (tokens that
    bridge lexemes) at every prefix of up to ``depth`` characters that some complete text of up
    to ``length`` extends: a token is allowed iff the prefix and the token begin such a text,
    EOS iff the prefix is complete. A viable text completes within ``completes_within`` more
    characters, so the bounded search sees every continuation of these prefixes."""
    text, alphabet, completes_within = SMALL[name]
    depth = length - 2 - completes_within  # a prefix, a token of two characters, the rest
    complete, viable = _reference(name).viable_texts(alphabet, length)
    tokens = [b"<eos>", *(c.encode() for c in alphabet), *((a + b).encode() for a in alphabet for b in alphabet)]
    vocab = aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0])
    cg = aj.compile_lark(text, vocab, lexer="lark")
    single = {c: tokens.index(c.encode()) for c in alphabet}
    checked, stack = 0, [("", cg.init_state())]
    while stack:
        prefix, state = stack.pop()
        expected = np.array([prefix in complete] + [prefix + t.decode() in viable for t in tokens[1:]])
        _assert_same(unpack(_mask(cg, state))[: len(vocab)], expected, vocab, f"{name}, after {prefix!r}")
        assert bool(_accepts(cg, state)) == (prefix in complete)
        checked += 1
        if len(prefix) < depth:
            stack += [(prefix + c, _advance(cg, state, single[c])) for c in alphabet if prefix + c in viable]
    assert checked >= 20


@pytest.fixture(
    scope="module",
    params=[
        pytest.param((name, vocab), marks=() if vocab == "sentencepiece" else pytest.mark.slow, id=f"{name}-{vocab}")
        for name in ("csv.lark", "sql_select.lark")
        for vocab in ("sentencepiece", "tekken")
    ],
)
def grammar_file(request):
    """(file name, vocabulary, encode, compiled with lexer="lark", reference)."""
    name, vocab_name = request.param
    vocab = request.getfixturevalue(f"{vocab_name}_vocab")
    text = (GRAMMARS_DIR / name).read_text(encoding="utf-8")
    return name, vocab, request.getfixturevalue(f"{vocab_name}_encode"), aj.compile_lark(text, vocab, lexer="lark"), LarkLexing(text)


def test_grammar_file_examples_walk_token_by_token_and_counterexamples_fail(grammar_file):
    """Each example, tokenised by the real tokenizer, is allowed token by token and complete only
    where Lark's lexer and parser say so; each counterexample is refused or left incomplete."""
    name, vocab, encode, cg, reference = grammar_file

    def is_complete(data: bytes) -> bool:
        prefix = reference.read(data.decode("utf-8", "replace"))
        return prefix is not None and reference.is_complete(prefix)

    for text in GRAMMAR_EXAMPLES[name]:
        assert_walks_token_by_token(cg, vocab, encode(text), is_complete, (name, text))
    for text in GRAMMAR_COUNTEREXAMPLES[name]:
        assert is_refused(cg, encode(text)), (name, text)


def test_random_walks_stay_in_what_lark_reads(grammar_file):
    """Along random walks of allowed tokens (from the start and from inside the examples), the
    text so far is one that Lark's lexer reads without error, EOS is allowed exactly where Lark
    parses the text, and every text the walk may end with parses."""
    name, vocab, encode, cg, reference = grammar_file
    rng = np.random.default_rng(5)
    not_eos = ~np.isin(np.arange(len(vocab)), vocab.eos_token_ids)
    prefixes = [[], [], *example_prefixes(GRAMMAR_EXAMPLES[name], encode, rng, 4)]
    checked = 0
    for start in prefixes:
        state = cg.init_state()
        data = b""
        for token in start:
            state, data = _advance(cg, state, token), data + vocab.token_bytes(token)
        for _ in range(10):
            prefix = reference.read(data.decode())
            assert prefix is not None, (name, data)
            mask = unpack(_mask(cg, state))[: len(vocab)]
            complete = reference.is_complete(prefix)
            assert bool(mask[vocab.eos_token_ids[0]]) == complete, (name, data)
            if complete:
                reference.lark.parse(data.decode())
            checked += 1
            choices = np.flatnonzero(mask & not_eos)
            # Only whole UTF-8 characters: the reference reads text.
            choices = [t for t in choices if _is_text(data + vocab.token_bytes(int(t)))]
            if not choices:
                break
            token = int(rng.choice(choices))
            state, data = _advance(cg, state, token), data + vocab.token_bytes(token)
    assert checked >= 30


def _is_text(data: bytes) -> bool:
    try:
        data.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_json_reads_the_same_with_either_lexer(sentencepiece_vocab, sentencepiece_encode):
    """JSON's terminals never touch in a way that two lexings could tell apart, so both readings
    give the same masks along random walks (the context-free one is checked against Earley)."""
    text = (GRAMMARS_DIR / "json.lark").read_text(encoding="utf-8")
    lark_lexer = aj.compile_lark(text, sentencepiece_vocab, lexer="lark")
    context_free = aj.compile_lark(text, sentencepiece_vocab)
    rng = np.random.default_rng(2)
    for start in example_prefixes(GRAMMAR_EXAMPLES["json.lark"], sentencepiece_encode, rng, 4):
        states = [lark_lexer.init_state(), context_free.init_state()]
        for token in start:
            states = [_advance(cg, s, token) for cg, s in zip((lark_lexer, context_free), states)]
        for _ in range(8):
            masks = [unpack(_mask(cg, s)) for cg, s in zip((lark_lexer, context_free), states)]
            _assert_same(masks[0], masks[1], sentencepiece_vocab, "lexer='lark' against the context-free reading")
            choices = np.flatnonzero(masks[0][: len(sentencepiece_vocab)])
            token = int(rng.choice(choices))
            states = [_advance(cg, s, token) for cg, s in zip((lark_lexer, context_free), states)]


def test_keywords_and_names_split_few_ways_where_the_context_free_reading_splits_them_many(sentencepiece_vocab):
    """sql_select.lark's keywords are also names, and keywords and names may touch: read as
    context-free, a run of letters splits into keywords and names in many ways (a token has up
    to 188 outcomes from one lexer state). With lexer="lark" a token's outcomes differ only in
    the contexts lexing goes on in and in where a lexeme may still turn out longer."""
    from ananke_jax._src.compile.cfg import cfg_tables

    text = (GRAMMARS_DIR / "sql_select.lark").read_text(encoding="utf-8")
    lark_lexer = cfg_tables(aj.lark_to_ir(text, lexer="lark"), sentencepiece_vocab, max_actions=4)
    context_free = cfg_tables(aj.lark_to_ir(text), sentencepiece_vocab, max_actions=4)
    most = [(t.set_members >= 0).sum(axis=1).max() for t in (lark_lexer, context_free)]
    assert most[0] <= 16 and most[1] >= 10 * most[0], most
    assert lark_lexer.outcome_length.max() < context_free.outcome_length.max()


def test_a_lexeme_that_reads_on_and_dies_backs_up_to_the_longest_match(sentencepiece_vocab):
    """In sql_select.lark, after `a = 1 ` the text `or` then `d` reads on toward ORDER; if no
    `er` follows, the longest match was `or` and `dx` is the next lexeme (a name), as Lark reads
    `a = 1 ordx = 2`."""
    text = (GRAMMARS_DIR / "sql_select.lark").read_text(encoding="utf-8")
    tokens = [b"<eos>", *(bytes([c]) for c in range(32, 127))]
    vocab = aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0])
    cg = aj.compile_lark(text, vocab, lexer="lark")
    for sql in ("SELECT a FROM t WHERE a = 1 ordx = 2", "SELECT a FROM t WHERE a = 1 order by a"):
        LarkLexing(text).lark.parse(sql)
        state = cg.init_state()
        for c in sql.encode():
            assert bool(aj.is_allowed(_mask(cg, state), tokens.index(bytes([c])))), sql
            state = _advance(cg, state, tokens.index(bytes([c])))
        assert bool(_accepts(cg, state)), sql


def test_bad_lexer_options_are_refused_by_name(sentencepiece_vocab):
    with pytest.raises(aj.GrammarError, match="lexer must be one of 'context_free', 'lark', got 'longest'"):
        aj.compile_lark('start: "a"', sentencepiece_vocab, lexer="longest")
    with pytest.raises(aj.GrammarError, match=r"terminals MAYBE match the empty string, which lexer='lark' cannot cut"):
        aj.lark_to_ir('start: MAYBE "a"\nMAYBE: /b*/', lexer="lark")


def test_the_lark_lexer_runs_under_jit_vmap_and_scan(sentencepiece_vocab, sentencepiece_encode):
    """The tables of lexer="lark" run in the unchanged device step: a batch of examples fed by
    `lax.scan` under `vmap` ends in the states the step-by-step walk reaches."""
    text = (GRAMMARS_DIR / "csv.lark").read_text(encoding="utf-8")
    cg = compile_ir(aj.lark_to_ir(text, lexer="lark"), sentencepiece_vocab)
    examples = [sentencepiece_encode(t) for t in GRAMMAR_EXAMPLES["csv.lark"][:3]]
    width = min(map(len, examples))
    batch = jax.numpy.array([e[:width] for e in examples])

    @jax.jit
    @jax.vmap
    def run(tokens):
        return jax.lax.scan(lambda s, t: (aj.advance(cg, s, t), aj.accepts(cg, s)), cg.init_state(), tokens)

    finals, _ = run(batch)
    for i, example in enumerate(examples):
        state = cg.init_state()
        for token in example[:width]:
            state = _advance(cg, state, token)
        np.testing.assert_array_equal(unpack(aj.token_mask(cg, jax.tree.map(lambda x, i=i: x[i], finals))), unpack(_mask(cg, state)))
