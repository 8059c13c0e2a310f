"""Every grammar in grammars/ through the pushdown engine, with both real vocabularies, against
the Earley oracle."""

import functools

import jax
import numpy as np
import pytest
from earley import EarleyRecogniser
from oracles import unpack
from test_frontends import GRAMMAR_COUNTEREXAMPLES, GRAMMAR_EXAMPLES, load_grammar_file

import ananke_jax as aj

_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)
_accepts = jax.jit(aj.accepts)

# sql_select.lark is left out with the 131k vocabulary: without lexer priorities, runs of letters
# split into keywords and names in very many ways, and its compile takes minutes (see README).
CASES = [
    (name, vocab)
    for name in sorted(GRAMMAR_EXAMPLES)
    for vocab in ("sentencepiece", "tekken")
    if not (name == "sql_select.lark" and vocab == "tekken")
]


@functools.lru_cache(maxsize=None)
def _grammar(name):
    return load_grammar_file(name)


@pytest.fixture(scope="module", params=CASES, ids=[f"{n}-{v}" for n, v in CASES])
def case(request):
    """One compile per (grammar, vocabulary): pytest groups the tests by this fixture."""
    name, vocab_name = request.param
    vocab = request.getfixturevalue(f"{vocab_name}_vocab")
    encode = request.getfixturevalue(f"{vocab_name}_encode")
    return name, vocab, encode, aj.compile_grammar(_grammar(name), vocab), EarleyRecogniser(_grammar(name))


def test_examples_are_accepted_token_by_token_and_complete_only_at_the_end(case):
    name, vocab, encode, cg, earley = case
    for text in GRAMMAR_EXAMPLES[name]:
        state, data = cg.init_state(), b""
        for token in encode(text):
            assert bool(aj.is_allowed(_mask(cg, state), token)), (name, text, data, vocab.token_bytes(token))
            state, data = _advance(cg, state, token), data + vocab.token_bytes(token)
            assert bool(_accepts(cg, state)) == earley.accepts(data), (name, data)
        assert bool(_accepts(cg, state)), (name, text)
        assert bool(aj.is_allowed(_mask(cg, state), vocab.eos_token_ids[0]))


def test_counterexamples_are_rejected(case):
    name, vocab, encode, cg, _ = case
    for text in GRAMMAR_COUNTEREXAMPLES[name]:
        state, rejected = cg.init_state(), False
        for token in encode(text):
            if not bool(aj.is_allowed(_mask(cg, state), token)):
                rejected = True
                break
            state = _advance(cg, state, token)
        assert rejected or not bool(_accepts(cg, state)), (name, text)


def test_masks_match_earley_on_random_reachable_states(case):
    """Sound and complete on a sample of tokens per state: random ones, ones the engine allows,
    and the EOS id."""
    name, vocab, _, cg, earley = case
    rng = np.random.default_rng(7)
    for _ in range(3):
        state, data = cg.init_state(), b""
        for _ in range(5):
            allowed = np.flatnonzero(unpack(_mask(cg, state))[: len(vocab)])
            tokens = np.unique(np.concatenate([rng.integers(0, len(vocab), 250), rng.choice(allowed, min(150, len(allowed))) if len(allowed) else [], list(vocab.eos_token_ids)]).astype(np.int64))
            chart = earley.feed(earley.initial(), data)
            got = unpack(_mask(cg, state))[tokens]
            for token, bit in zip(tokens.tolist(), got):
                if token in vocab.eos_token_ids:
                    expected = earley.is_complete(chart)
                elif token in vocab.special_token_ids:
                    expected = False
                else:
                    expected = earley.is_viable(earley.feed(chart, vocab.token_bytes(token)))
                assert bit == expected, (name, data, vocab.token_bytes(token))
            choices = [t for t in allowed.tolist() if t not in vocab.eos_token_ids]
            if not choices:
                break
            token = int(rng.choice(choices))
            state, data = _advance(cg, state, token), data + vocab.token_bytes(token)
