"""Sampling, mask application and the logits checks, against numpy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.runtime.sampling import apply_repetition_penalty

from oracles import unpack


def _vocab(n=40, width=None):
    tokens = [b"<eos>"] + [bytes([ord("a") + i % 26]) * (1 + i // 26) for i in range(n - 1)]
    return aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0], logits_width=width)


def test_unpack_and_apply_mask_follow_the_bit_layout():
    rng = np.random.default_rng(0)
    mask = rng.integers(0, 2**32, size=(3, 5), dtype=np.uint64).astype(np.uint32)
    expected = np.stack([unpack(m) for m in mask])
    np.testing.assert_array_equal(aj.unpack_mask(jnp.asarray(mask), 160), expected)
    for dtype in (jnp.float32, jnp.bfloat16, jnp.float16):
        logits = jnp.asarray(rng.normal(size=(3, 150)), dtype)
        out = aj.apply_mask(logits, jnp.asarray(mask))
        assert out.dtype == dtype and out.shape == (3, 150)
        np.testing.assert_array_equal(np.isneginf(np.asarray(out, np.float32)), ~expected[:, :150])
    shared = aj.apply_mask(jnp.zeros((2, 4, 150)), jnp.asarray(mask[0]))  # one mask, batch of logits
    assert shared.shape == (2, 4, 150)
    np.testing.assert_array_equal(np.isneginf(shared[1, 2]), ~expected[0, :150])
    for token in [0, 31, 32, 100, 159]:
        assert bool(aj.is_allowed(jnp.asarray(mask[1]), token)) == expected[1, token]
    assert not bool(aj.is_allowed(jnp.asarray(mask[1]), 160)) and not bool(aj.is_allowed(jnp.asarray(mask[1]), -1))


def test_apply_mask_refuses_a_mask_narrower_than_the_logits():
    with pytest.raises(ValueError, match="mask covers only 32 tokens"):
        aj.apply_mask(jnp.zeros(33), jnp.zeros(1, jnp.uint32))


def test_constrained_step_refuses_logits_that_do_not_fit_the_vocabulary():
    vocab = _vocab(40, width=64)
    cg = aj.compile_regex("a+", vocab)
    key = jax.random.key(0)
    with pytest.raises(ValueError, match="logits have 39 entries, but the constraint was compiled for a vocabulary of 40 tokens"):
        aj.constrained_step(cg, cg.init_state(), jnp.zeros(39), key)
    with pytest.raises(ValueError, match="logits_width=64"):
        aj.constrained_step(cg, cg.init_state(), jnp.zeros(65), key)
    with pytest.raises(ValueError, match=r"use jax\.vmap"):
        aj.constrained_step(cg, cg.init_state(), jnp.zeros((2, 64)), key)
    for width in (40, 64):  # the tokenizer's size or the model's padded width both work
        token, _ = aj.constrained_step(cg, cg.init_state(), jnp.zeros(width), key)
        assert vocab.token_bytes(int(token)).strip(b"a") == b""


@pytest.mark.parametrize("width, fits", [(39, False), (40, True), (64, True), (65, False)])
def test_step_masked_logits_and_generate_share_one_logits_width_rule(width, fits):
    vocab = _vocab(40, width=64)
    constraints = [aj.compile_regex("a+", vocab), aj.fusion.fused(vocab, syntax=aj.compile_regex("a+", vocab))]
    model = lambda params, cache, tokens, positions: (jnp.zeros((*tokens.shape, width)), cache)
    calls = [
        lambda cg: aj.constrained_step(cg, cg.init_state(), jnp.zeros(width), jax.random.key(0)),
        lambda cg: aj.masked_logits(cg, cg.init_state(), jnp.zeros(width)),
        lambda cg: aj.generate(
            model,
            None,
            jnp.zeros((1, 1), jnp.int32),
            cg,
            cache=jnp.zeros((1, 4)),
            max_new_tokens=1,
            eos_token_ids=[0],
            key=jax.random.key(0),
        ),
    ]
    for cg in constraints:
        for call in calls:
            if fits:
                call(cg)
            else:
                with pytest.raises(ValueError, match=f"logits have {width} entries, but .* 40 tokens and logits_width=64"):
                    call(cg)


def test_greedy_is_the_argmax_of_the_allowed_tokens():
    vocab = _vocab()
    cg = aj.compile_regex("b+", vocab)
    logits = jnp.arange(40, dtype=jnp.float32)  # the longest tokens have the largest logits
    token, state = aj.constrained_step(cg, cg.init_state(), logits, jax.random.key(0), aj.SamplingParams(temperature=0.0))
    assert vocab.token_bytes(int(token)) == b"bb"  # "b" * 2 is the largest id spelling only b's
    assert bool(aj.accepts(cg, state))


def test_all_masked_row_returns_the_fallback_token_without_nan():
    logits = jnp.full(10, -jnp.inf)
    for params in (aj.SamplingParams(), aj.SamplingParams(temperature=0.0), aj.SamplingParams(top_p=0.5, top_k=3, min_p=0.1)):
        assert int(aj.sample(logits, jax.random.key(0), params, fallback_token=7)) == 7
    vocab = _vocab()
    cg = aj.compile_regex("a", vocab)
    dead = aj.advance(cg, cg.init_state(), 1 + 1)  # "b" is forbidden
    token, state = aj.constrained_step(cg, dead, jnp.zeros(40), jax.random.key(0))
    assert int(token) == vocab.eos_token_ids[0] and bool(aj.is_error(cg, state))


def _frequencies(logits, params, n=20000):
    keys = jax.random.split(jax.random.key(1), n)
    draws = jax.jit(jax.vmap(lambda k: aj.sample(logits, k, params)))(keys)
    return np.bincount(np.asarray(draws), minlength=logits.shape[0]) / n


def test_temperature_sampling_follows_the_softmax():
    logits = jnp.array([0.0, 1.0, 2.0, -jnp.inf, 0.5])
    for temperature in (1.0, 0.5):
        expected = np.asarray(jax.nn.softmax(logits / temperature))
        np.testing.assert_allclose(_frequencies(logits, aj.SamplingParams(temperature=temperature)), expected, atol=0.015)


@pytest.mark.slow
def test_top_k_top_p_and_min_p_keep_the_documented_sets():
    logits = jnp.log(jnp.array([0.4, 0.3, 0.15, 0.1, 0.05]))
    cases = [
        (aj.SamplingParams(top_k=2), [0, 1]),
        (aj.SamplingParams(top_p=0.7), [0, 1]),  # 0.4 + 0.3 reaches 0.7
        (aj.SamplingParams(top_p=0.71), [0, 1, 2]),
        (aj.SamplingParams(min_p=0.3), [0, 1, 2]),  # p >= 0.3 * 0.4
        (aj.SamplingParams(top_k=4, min_p=0.5), [0, 1]),
    ]
    for params, kept in cases:
        freq = _frequencies(logits, params, n=5000)
        assert set(np.flatnonzero(freq)) == set(kept), params
        p = np.exp(np.asarray(logits))[kept]
        np.testing.assert_allclose(freq[kept], p / p.sum(), atol=0.03)


def test_repetition_penalty_follows_the_ctrl_rule():
    logits = jnp.array([2.0, -1.0, 0.5, 3.0])
    history = jnp.array([0, 1, -1, 0])
    penalised = jax.jit(apply_repetition_penalty, static_argnums=2)(logits, history, 2.0)
    np.testing.assert_allclose(penalised, [1.0, -2.0, 0.5, 3.0])
    params = aj.SamplingParams(temperature=0.0, repetition_penalty=10.0)
    assert int(aj.sample(jnp.array([3.0, 2.0]), jax.random.key(0), params, history=jnp.array([0]))) == 1


@pytest.mark.parametrize(
    "kwargs",
    [{"temperature": -1.0}, {"temperature": float("inf")}, {"top_k": -1}, {"top_p": 0.0}, {"min_p": 1.5}, {"repetition_penalty": 0.0}],
)
def test_invalid_sampling_params_raise(kwargs):
    with pytest.raises(ValueError, match="SamplingParams"):
        aj.SamplingParams(**kwargs)


def test_sampling_params_are_hashable_static_configuration():
    assert hash(aj.SamplingParams(top_k=5)) == hash(aj.SamplingParams(top_k=5))
    step = jax.jit(aj.sample, static_argnums=2)
    assert int(step(jnp.array([0.0, 5.0]), jax.random.key(0), aj.SamplingParams(temperature=0.0))) == 1
