"""The pushdown engine against the byte-level Earley oracle."""

import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cfg_grammars import ARITHMETIC, ARITHMETIC_TOKENS, JSON, JSON_EXAMPLES, WORDS, WORDS_TOKENS
from earley import EarleyRecogniser
from oracles import unpack

import ananke_jax as aj
from ananke_jax._src.compile.cfg import compile_ir

_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)
_accepts = jax.jit(aj.accepts)


def _expected(earley, chart, vocab, tokens):
    """bool over ``tokens``: Earley says the prefix stays viable (EOS: the prefix is complete)."""
    out = np.zeros(len(tokens), bool)
    for j, t in enumerate(tokens):
        if t in vocab.eos_token_ids:
            out[j] = earley.is_complete(chart)
        elif t not in vocab.special_token_ids:
            out[j] = earley.is_viable(earley.feed(chart, vocab.token_bytes(t)))
    return out


def _random_walk_check(cg, g, vocab, rng, *, walks, steps, tokens_to_check=None):
    """Compare masks with Earley along random walks of allowed tokens; returns states checked."""
    earley = EarleyRecogniser(g)
    checked = 0
    for _ in range(walks):
        state, data = cg.init_state(), b""
        for _ in range(steps):
            chart = earley.feed(earley.initial(), data)
            tokens = np.arange(len(vocab)) if tokens_to_check is None else tokens_to_check(state)
            expected = _expected(earley, chart, vocab, tokens)
            got = unpack(_mask(cg, state))
            np.testing.assert_array_equal(got[tokens], expected, err_msg=f"after {data!r}")
            assert not got[len(vocab):].any()
            assert bool(_accepts(cg, state)) == earley.is_complete(chart)
            checked += 1
            allowed = tokens[expected & ~np.isin(tokens, vocab.eos_token_ids)]
            if not len(allowed):
                break
            token = int(rng.choice(allowed))
            state, data = _advance(cg, state, token), data + vocab.token_bytes(token)
            assert not bool(aj.is_error(cg, state))
    return checked


@pytest.mark.parametrize(
    "g, tokens", [(ARITHMETIC, ARITHMETIC_TOKENS), (WORDS, WORDS_TOKENS)], ids=["arithmetic", "ambiguous-lexing"]
)
def test_full_masks_match_earley_on_a_vocabulary_of_bridge_tokens(g, tokens):
    vocab = aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0], logits_width=40)
    cg = compile_ir(g, vocab)
    assert _random_walk_check(cg, g, vocab, np.random.default_rng(0), walks=40, steps=12) >= 200


@functools.lru_cache(maxsize=None)
def _json(vocab):
    return compile_ir(JSON, vocab)


def test_json_masks_match_earley_with_real_vocabularies(real_vocab):
    """Sound and complete on a sample of tokens: all structural tokens plus random others."""
    _, vocab, _ = real_vocab
    cg = _json(vocab)
    rng = np.random.default_rng(1)
    structural = np.array([i for i, t in enumerate(vocab.tokens) if i not in vocab.special_token_ids and any(c in t for c in b'{}[]",:\\')])
    allowed_sample = lambda state: np.flatnonzero(unpack(_mask(cg, state))[: len(vocab)])

    def tokens_to_check(state):
        pool = [rng.choice(structural, 400), rng.integers(0, len(vocab), 300), list(vocab.eos_token_ids)]
        allowed = allowed_sample(state)
        pool.append(rng.choice(allowed, min(200, len(allowed))) if len(allowed) else [])
        return np.unique(np.concatenate([np.asarray(p, np.int64) for p in pool]))

    assert _random_walk_check(cg, JSON, vocab, rng, walks=6, steps=6, tokens_to_check=tokens_to_check) >= 20


def test_json_examples_tokenized_by_the_real_tokenizers_are_accepted(real_vocab):
    _, vocab, encode = real_vocab
    cg = _json(vocab)
    for text in JSON_EXAMPLES:
        state = cg.init_state()
        for token in encode(text):
            assert bool(aj.is_allowed(_mask(cg, state), token)), (text, vocab.token_bytes(token))
            state = _advance(cg, state, token)
        assert bool(_accepts(cg, state)), text
        state = _advance(cg, state, vocab.eos_token_ids[0])
        assert bool(_accepts(cg, state)) and not bool(aj.is_error(cg, state))
        assert not bool(state.overflow)


def test_random_logit_generation_under_jit_and_scan_parses_as_json(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    cg = _json(vocab)
    params = aj.SamplingParams(temperature=1.0)
    # A "model" that favours short structural tokens and EOS, so documents close.
    bias = np.zeros(vocab.logits_width, np.float32)
    for i, t in enumerate(vocab.tokens):
        if t in (b"{", b"}", b"[", b"]", b'"', b",", b":", b"1", b"0", b'":', b'",', b"}}", b"]]"):
            bias[i] = 4.0
    bias[list(vocab.eos_token_ids)] = 8.0

    @jax.jit
    def generate(key):
        def step(carry, key):
            state, done = carry
            k1, k2 = jax.random.split(key)
            logits = jax.random.normal(k1, (vocab.logits_width,)) + bias
            token, new_state = aj.constrained_step(cg, state, logits, k2, params)
            new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new_state)
            return (new_state, done | (token == cg.fallback_token)), jnp.where(done, -1, token)

        return jax.lax.scan(step, (cg.init_state(), jnp.bool_(False)), jax.random.split(key, 40))

    finished = 0
    for seed in range(4):
        (state, done), tokens = generate(jax.random.key(seed))
        ids = [int(t) for t in tokens if t >= 0 and t not in vocab.eos_token_ids]
        text = b"".join(vocab.token_bytes(t) for t in ids).decode("utf-8")
        assert not bool(aj.is_error(cg, state))
        if bool(done):
            json.loads(text)
            finished += 1
        else:
            assert EarleyRecogniser(JSON).viable(text.encode())
    assert finished >= 1


def test_vmap_over_configurations_matches_single_states():
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS, eos_token_ids=[0])
    cg = compile_ir(ARITHMETIC, vocab)
    texts = [[b"(1", b"+"], [b"2+3", b"*"], [b"(", b"(", b"1"]]
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    states = []
    for text in texts:
        s = cg.init_state()
        for piece in text:
            s = _advance(cg, s, ids[piece])
        states.append(s)
    batch = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
    masks = jax.jit(jax.vmap(aj.token_mask, in_axes=(None, 0)))(cg, batch)
    for i, s in enumerate(states):
        np.testing.assert_array_equal(masks[i], _mask(cg, s))


def test_nesting_beyond_the_stack_depth_is_masked():
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS, eos_token_ids=[0])
    shallow, deep = compile_ir(ARITHMETIC, vocab, stack_depth=6), compile_ir(ARITHMETIC, vocab)
    open_paren = vocab.tokens.index(b"(")
    state, opened = shallow.init_state(), 0
    while bool(aj.is_allowed(_mask(shallow, state), open_paren)):
        state, opened = _advance(shallow, state, open_paren), opened + 1
        assert opened < 10, "the stack bound must stop nesting"
    assert opened >= 3 and not bool(aj.is_error(shallow, state))
    assert bool(state.overflow), "the state says that a token was masked for lack of depth"
    deep_state = deep.init_state()
    for _ in range(opened):
        deep_state = _advance(deep, deep_state, open_paren)
    assert bool(aj.is_allowed(_mask(deep, deep_state), open_paren)), "only the bound stops it"
    assert not bool(deep_state.overflow)


def test_forbidden_and_special_tokens_lead_to_the_error_state():
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS + [b"<pad>"], eos_token_ids=[0], special_token_ids=[len(ARITHMETIC_TOKENS)])
    cg = compile_ir(ARITHMETIC, vocab)
    for token in (vocab.tokens.index(b")"), len(ARITHMETIC_TOKENS), 0, -1, 10**6):
        state = _advance(cg, cg.init_state(), token)
        assert bool(aj.is_error(cg, state))
        assert not unpack(_mask(cg, state)).any()
