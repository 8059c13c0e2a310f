"""The Constraint protocol: every kind of constraint goes through the same checks, eagerly,
under `jit`, `vmap` and `lax.scan` (token DFA, pushdown, fused, deferred, allow-list, pooled)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax import fusion, serving
from ananke_jax._src.engines.protocol import Constraint

TOKENS = [b"<eos>"] + [bytes([c]) for c in range(32, 127)] + [b'{"', b'":', b"ab", b"12", b"</t>"]
VOCAB = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
REGEX = r"(ab|c)[0-9]{1,3}"
GBNF = 'root ::= "[" (root ("," root)*)? "]" | [0-9]'


def _pool_member():
    pool = serving.GrammarPool(len(VOCAB), VOCAB.logits_width, VOCAB.eos_token_ids, "small")
    pool.add(aj.compile_regex("x", VOCAB))  # not the first member: offsets are exercised
    return pool.constraint(pool.add(aj.compile_gbnf(GBNF, VOCAB)))


KINDS = {
    "regular": lambda: aj.compile_regex(REGEX, VOCAB),
    "pushdown": lambda: aj.compile_gbnf(GBNF, VOCAB),
    "fused": lambda: fusion.fused(
        VOCAB, syntax=aj.compile_regex(REGEX, VOCAB), semantics=fusion.soft_scores(np.linspace(-1, 1, VOCAB.logits_width))
    ),
    "deferred": lambda: fusion.deferred(aj.compile_regex(REGEX, VOCAB), "</t>", VOCAB),
    "allow_list": lambda: aj.allowed_tokens([3, 4, 5, 40], VOCAB),
    "pooled": _pool_member,
}


@pytest.fixture(scope="module", params=sorted(KINDS))
def constraint(request):
    return KINDS[request.param]()


_mask = jax.jit(lambda cg, s: cg.token_mask(s))  # eager pushdown steps trace every call: slow
_advance = jax.jit(lambda cg, s, t: cg.advance(s, t))
_allowed = jax.jit(jax.vmap(lambda cg, s, t: cg.token_allowed(s, t), in_axes=(None, None, 0)))


def _bits(mask):
    return np.unpackbits(np.asarray(mask).view(np.uint8), bitorder="little")[: VOCAB.logits_width].astype(bool)


def _walk(cg, rng, steps=8):
    """A random walk over allowed ordinary tokens: the tokens and the eager states."""
    state, tokens, states = cg.init_state(), [], []
    for _ in range(steps):
        states.append(state)
        allowed = np.flatnonzero(_bits(_mask(cg, state)))
        ordinary = allowed[allowed != 0]
        if not len(ordinary):
            break
        tokens.append(int(rng.choice(ordinary)))
        state = _advance(cg, state, tokens[-1])
    return tokens, states


def test_is_a_constraint(constraint):
    assert isinstance(constraint, Constraint)
    assert constraint.mask_words == -(-VOCAB.logits_width // 32)


def test_mask_agrees_with_allowed_accepts_and_error(constraint):
    rng = np.random.default_rng(0)
    _, states = _walk(constraint, rng)
    for state in states:
        bits = _bits(_mask(constraint, state))
        allowed = np.asarray(_allowed(constraint, state, jnp.arange(VOCAB.logits_width)))
        np.testing.assert_array_equal(allowed, bits)
        assert bits[0] == bool(constraint.accepts(state))  # EOS exactly when complete
        assert not bool(constraint.is_error(state))
        assert not bool(constraint.token_allowed(state, -1)) and not bool(constraint.token_allowed(state, VOCAB.logits_width))


def test_jit_vmap_and_scan_equal_the_eager_walk(constraint):
    rng = np.random.default_rng(1)
    tokens, states = _walk(constraint, rng)
    assert tokens, "every kind here allows some ordinary token at the start"
    masks = np.stack([np.asarray(_mask(constraint, s)) for s in states])

    _, scanned = jax.jit(lambda cg, toks: jax.lax.scan(lambda s, t: (cg.advance(s, t), cg.token_mask(s)), cg.init_state(), toks))(
        constraint, jnp.asarray(tokens, jnp.int32)
    )
    np.testing.assert_array_equal(np.asarray(scanned), masks[: len(tokens)])
    stacked = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
    vmapped = jax.jit(jax.vmap(lambda cg, s: cg.token_mask(s), in_axes=(None, 0), axis_size=len(states)))(constraint, stacked)
    np.testing.assert_array_equal(np.asarray(vmapped), masks)
    advance_all = jax.jit(lambda cg, s, t: jax.vmap(cg.advance, in_axes=(0, 0), axis_size=len(tokens))(s, t))
    advanced = advance_all(constraint, jax.tree_util.tree_map(lambda x: x[: len(tokens)], stacked), jnp.asarray(tokens, jnp.int32))
    # an allow-list's state has no leaves, hence axis_size
    again = jax.jit(lambda cg, s: jax.vmap(cg.token_mask, axis_size=len(tokens))(s))(constraint, advanced)
    expected = [np.asarray(_mask(constraint, _advance(constraint, s, t))) for s, t in zip(states, tokens)]
    np.testing.assert_array_equal(np.asarray(again), np.stack(expected))


def test_constrained_step_samples_only_allowed_tokens(constraint):
    step = jax.jit(lambda cg, s, logits, key: aj.constrained_step(cg, s, logits, key))
    state = constraint.init_state()
    for i in range(6):
        logits = jax.random.normal(jax.random.key(i), (VOCAB.logits_width,))
        allowed = _bits(_mask(constraint, state))
        token, state = step(constraint, state, logits, jax.random.key(100 + i))
        assert allowed[int(token)] or not allowed.any()
        if int(token) == 0:
            break


def test_deferred_fused_keeps_the_soft_scores():
    scores = np.linspace(-1, 1, VOCAB.logits_width).astype(np.float32)
    full = fusion.FusionConfig(intensity="full")  # the soft domains are active
    inner = fusion.fused(VOCAB, syntax=aj.compile_regex(REGEX, VOCAB), semantics=fusion.soft_scores(scores, weight=2.0), config=full)
    cg = fusion.deferred(inner, "</t>", VOCAB)
    logits = jnp.zeros(VOCAB.logits_width)
    waiting = cg.init_state()
    np.testing.assert_array_equal(np.asarray(cg.masked_logits(waiting, logits)), np.asarray(aj.apply_mask(logits, cg.token_mask(waiting))))
    active = cg.advance(waiting, TOKENS.index(b"</t>"))
    assert bool(cg.is_active(active))
    adjusted = np.asarray(cg.masked_logits(active, logits))
    np.testing.assert_allclose(adjusted, np.asarray(inner.masked_logits(active.inner, logits)))
    assert len(set(adjusted[np.isfinite(adjusted)])) > 1  # the scores reached the logits
