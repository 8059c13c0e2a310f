"""Every grammar in grammars/ through the pushdown engine, with both real vocabularies, against
the Earley oracle."""

import functools
import random

import numpy as np
import pytest

import ananke_jax as aj

from earley import EarleyRecogniser, SharedEarley
from test_frontends import GRAMMAR_COUNTEREXAMPLES, GRAMMAR_EXAMPLES, load_grammar_file
from test_pushdown import assert_walks_token_by_token, example_prefixes, is_refused, random_walk_check

# sql_select.lark is left out with the 131k vocabulary: without lexer priorities, runs of letters
# split into keywords and names in very many ways, and its compile takes minutes.
CASES = [
    (name, vocab)
    for name in sorted(GRAMMAR_EXAMPLES)
    for vocab in ("sentencepiece", "tekken")
    if not (name == "sql_select.lark" and vocab == "tekken")
]
# The fast tier compiles these with the 32k vocabulary; every other case is in the slow tier.
FAST_CASES = {("arithmetic.lark", "sentencepiece"), ("calculator.gbnf", "sentencepiece"), ("json.gbnf", "sentencepiece")}


@functools.cache
def _grammar(name):
    return load_grammar_file(name)


@pytest.fixture(
    scope="module",
    params=[pytest.param(c, marks=() if c in FAST_CASES else pytest.mark.slow, id="-".join(c)) for c in CASES],
)
def case(request):
    """One compile per (grammar, vocabulary): pytest groups the tests by this fixture."""
    name, vocab_name = request.param
    vocab = request.getfixturevalue(f"{vocab_name}_vocab")
    encode = request.getfixturevalue(f"{vocab_name}_encode")
    return name, vocab, encode, aj.compile_grammar(_grammar(name), vocab), SharedEarley(_grammar(name))


@pytest.mark.slow
def test_examples_are_accepted_token_by_token_and_complete_only_at_the_end(case):
    name, vocab, encode, cg, earley = case
    for text in GRAMMAR_EXAMPLES[name]:
        assert_walks_token_by_token(cg, vocab, encode(text), earley.accepts, (name, text))


def test_counterexamples_are_rejected(case):
    name, _vocab, encode, cg, _ = case
    for text in GRAMMAR_COUNTEREXAMPLES[name]:
        assert is_refused(cg, encode(text)), (name, text)


def test_full_masks_match_earley_on_random_reachable_states(case):
    """Sound and complete on whole masks (every token id, EOS, special and padding ids) along random
    walks of allowed tokens, from the start and from inside the examples."""
    name, vocab, encode, cg, earley = case
    rng = np.random.default_rng(7)
    prefixes = example_prefixes(GRAMMAR_EXAMPLES[name], encode, rng, 3)
    assert random_walk_check(cg, earley, vocab, rng, walks=4, steps=6, prefixes=prefixes)[0] >= 12


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(GRAMMAR_EXAMPLES))
def test_shared_earley_agrees_with_the_textbook_one(name):
    """The oracle of the full-mask tests against the plain one: SharedEarley's memoised, linked
    sets on every byte of the examples, counterexamples and mutated examples, and its trie walk
    on whole masks of a small vocabulary of pieces of them, token by token with EarleyRecogniser."""
    reference, shared = EarleyRecogniser(_grammar(name)), SharedEarley(_grammar(name))
    rng = random.Random(3)
    texts = [t.encode() for t in GRAMMAR_EXAMPLES[name] + GRAMMAR_COUNTEREXAMPLES[name]]
    for text in texts[: len(GRAMMAR_EXAMPLES[name])]:
        i = rng.randrange(len(text))
        texts.append(text[:i] + bytes([rng.randrange(256)]) + text[i + 1 :])
    pieces = {bytes([rng.randrange(256)]) for _ in range(30)}
    for text in filter(None, texts):
        for _ in range(20):
            i = rng.randrange(len(text))
            pieces.add(text[i : i + rng.randint(1, 6)])
    vocab = aj.Vocabulary.from_tokens([b"<eos>", *sorted(pieces)], eos_token_ids=[0])
    for text in texts:
        chart, linked = reference.initial(), shared.initial()
        for i in range(len(text) + 1):
            assert reference.is_viable(chart) == shared.is_viable(linked), (name, text[:i])
            assert reference.is_complete(chart) == shared.is_complete(linked), (name, text[:i])
            if i % 4 == 0 or i == len(text):
                expected = [reference.is_complete(chart)] + [reference.is_viable(reference.feed(chart, t)) for t in vocab.tokens[1:]]
                np.testing.assert_array_equal(shared.allowed_tokens(linked, vocab), expected, err_msg=f"{name} {text[:i]!r}")
            if i == len(text) or not reference.is_viable(chart):
                break
            chart, linked = reference.step(chart, text[i]), shared.step(linked, text[i])
