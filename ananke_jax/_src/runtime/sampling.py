"""Sampling a token from (masked) logits: greedy, temperature, top-k, top-p, min-p, repetition.

`SamplingParams` is a frozen, hashable dataclass: it is static configuration (pass it to `jit`
as a static argument or close over it), so disabled filters cost nothing in the compiled step.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How a token is drawn from logits.

    Attributes:
      temperature: 0 means greedy (argmax); otherwise logits are divided by it.
      top_k: keep the k largest logits (0: off). Ties with the k-th value are kept.
      top_p: keep the smallest set of most likely tokens whose probability reaches top_p (1: off).
      min_p: keep tokens whose probability is at least min_p times the largest one (0: off).
      repetition_penalty: > 1 discourages tokens in the history (CTRL rule: positive logits are
        divided by it, negative ones multiplied); 1 is off.

    Filters apply after the temperature, in the order top-k, top-p, min-p.
    """

    @property
    def filters(self) -> bool:
        """Whether a filter (top-k, top-p, min-p) is on: then the drawn token depends on which
        tokens a mask removed, not only on their order."""
        return self.temperature > 0 and (self.top_k > 0 or self.top_p < 1.0 or self.min_p > 0.0)

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    repetition_penalty: float = 1.0

    def __post_init__(self):
        checks = (
            (self.temperature >= 0 and math.isfinite(self.temperature), "temperature must be finite and >= 0"),
            (isinstance(self.top_k, int) and self.top_k >= 0, "top_k must be an int >= 0"),
            (0 < self.top_p <= 1, "top_p must be in (0, 1]"),
            (0 <= self.min_p <= 1, "min_p must be in [0, 1]"),
            (self.repetition_penalty > 0, "repetition_penalty must be > 0"),
        )
        for ok, message in checks:
            if not ok:
                raise ValueError(f"SamplingParams: {message}, got {self}")


def sample(
    logits: jax.Array,
    key: jax.Array,
    params: SamplingParams = SamplingParams(),
    *,
    fallback_token: jax.Array | int = 0,
    history: jax.Array | None = None,
) -> jax.Array:
    """Draw one token (Gumbel-max) from one row of logits.

    Args:
      logits: float[V]; -inf entries are never drawn. Use `jax.vmap` for a batch.
      key: a PRNG key (unused when greedy).
      params: static `SamplingParams`.
      fallback_token: int32[], returned when every logit is -inf (an all-masked row), so the
        result is never NaN or an arbitrary id; `constrained_step` passes the EOS id.
      history: optional int32[T] of previous tokens for the repetition penalty; ids < 0 are
        padding.

    Returns:
      int32[], the token id.
    """
    logits = filter_logits(logits, params, history=history)
    if params.temperature == 0.0:
        token = jnp.argmax(logits)
    else:
        token = jnp.argmax(logits + jax.random.gumbel(key, logits.shape, jnp.float32))
    any_allowed = jnp.max(logits) > -jnp.inf
    return jnp.where(any_allowed, token, fallback_token).astype(jnp.int32)


def filter_logits(logits: jax.Array, params: SamplingParams, *, history: jax.Array | None = None) -> jax.Array:
    """float32[V]: the logits `sample` draws from: repetition penalty, then (unless greedy) the
    temperature and the filters, dropped tokens at -inf. Their softmax is the sampling
    distribution (when not greedy)."""
    logits = logits.astype(jnp.float32)
    if history is not None and params.repetition_penalty != 1.0:
        logits = apply_repetition_penalty(logits, history, params.repetition_penalty)
    if params.temperature == 0.0:
        return logits
    neg_inf = jnp.float32(-jnp.inf)
    logits = logits / jnp.float32(params.temperature)
    if params.top_k:
        kth = jax.lax.top_k(logits, min(params.top_k, logits.shape[-1]))[0][-1]
        logits = jnp.where(logits >= kth, logits, neg_inf)
    if params.top_p < 1.0:
        logits = jnp.where(logits >= _top_p_threshold(logits, params.top_p), logits, neg_inf)
    if params.min_p > 0.0:
        floor = jnp.max(logits) + jnp.log(jnp.float32(params.min_p))
        logits = jnp.where(logits >= floor, logits, neg_inf)
    return logits


def _top_p_threshold(logits: jax.Array, top_p: float) -> jax.Array:
    """The smallest logit kept by nucleus filtering."""
    ordered = jnp.sort(logits)[::-1]
    probs = jax.nn.softmax(ordered)
    before = jnp.cumsum(probs) - probs  # probability mass strictly above each entry
    keep = jnp.sum(before < top_p)
    return ordered[jnp.maximum(keep - 1, 0)]


def apply_repetition_penalty(logits: jax.Array, history: jax.Array, penalty: float) -> jax.Array:
    """Penalise tokens that occur in ``history`` (int32[T], ids < 0 ignored) in logits float[V]."""
    valid = (history >= 0) & (history < logits.shape[-1])
    seen = jnp.zeros(logits.shape, jnp.bool_).at[jnp.where(valid, history, logits.shape[-1])].set(True, mode="drop")
    penalised = jnp.where(logits > 0, logits / penalty, logits * penalty)
    return jnp.where(seen, penalised, logits)


class SamplingRows(NamedTuple):
    """`SamplingParams` of a batch of rows as arrays (per-row, traced: one program for every
    mix), for `sample_rows`: temperature, top_p, min_p float32[B]; top_k int32[B]."""

    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array
    min_p: jax.Array

    @classmethod
    def of(cls, params: Sequence[SamplingParams]) -> SamplingRows:
        """The rows of ``params`` (the repetition penalty is not taken per row)."""
        if any(p.repetition_penalty != 1.0 for p in params):
            raise ValueError("per-row sampling takes temperature, top_k, top_p and min_p; repetition_penalty must be 1")
        column = lambda name, dtype: jnp.asarray([getattr(p, name) for p in params], dtype)
        return cls(
            column("temperature", jnp.float32), column("top_k", jnp.int32), column("top_p", jnp.float32), column("min_p", jnp.float32)
        )


def sample_rows(logits: jax.Array, keys: jax.Array, rows: SamplingRows, fallback_token: jax.Array | int = 0) -> jax.Array:
    """int32[B]: one token per row of ``logits`` (float[B, V], -inf never drawn), each with its
    own `SamplingRows` entry and key (``keys``: B PRNG keys). As `sample` with the same
    parameters; the sort that top-k and top-p need runs only when some row asks for one."""
    logits = logits.astype(jnp.float32)
    greedy = rows.temperature == 0
    scaled = logits / jnp.where(greedy, 1.0, rows.temperature)[:, None]

    def threshold():
        """float32[B]: the smallest logit top-k and top-p keep in each row."""
        ordered = -jnp.sort(-scaled, axis=-1)
        rank = jnp.arange(ordered.shape[-1])[None, :]
        in_top_k = (rows.top_k[:, None] == 0) | (rank < rows.top_k[:, None])
        probs = jax.nn.softmax(jnp.where(in_top_k, ordered, -jnp.inf), axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # top-p over what top-k keeps, as in `sample`
        keep = jnp.sum(in_top_k & (before < rows.top_p[:, None]), axis=-1)
        return jnp.take_along_axis(ordered, jnp.maximum(keep - 1, 0)[:, None], axis=-1)[:, 0]

    filtered = (rows.top_k > 0) | (rows.top_p < 1.0)
    floor = jax.lax.cond((filtered & ~greedy).any(), threshold, lambda: jnp.full(logits.shape[0], -jnp.inf))
    floor = jnp.where(filtered, floor, -jnp.inf)
    floor = jnp.maximum(floor, jnp.where(rows.min_p > 0, scaled.max(axis=-1) + jnp.log(jnp.maximum(rows.min_p, 1e-30)), -jnp.inf))
    kept = jnp.where(greedy[:, None] | (scaled >= floor[:, None]), scaled, -jnp.inf)
    noise = jax.vmap(lambda key: jax.random.gumbel(key, logits.shape[-1:], jnp.float32))(keys)
    token = jnp.argmax(jnp.where(greedy[:, None], kept, kept + noise), axis=-1)
    return jnp.where(kept.max(axis=-1) > -jnp.inf, token, fallback_token).astype(jnp.int32)
