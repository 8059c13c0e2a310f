"""The constrained decode step: mask, sample, advance, as one pure function."""

from __future__ import annotations

import jax

from ananke_jax._src.runtime.constraint import Constraint, State, advance, masked_logits
from ananke_jax._src.runtime.sampling import SamplingParams, sample


def constrained_step(
    cg: Constraint,
    state: State,
    logits: jax.Array,
    key: jax.Array,
    params: SamplingParams = SamplingParams(),
    *,
    history: jax.Array | None = None,
) -> tuple[jax.Array, State]:
    """Sample one token that the constraint allows and advance the state.

    EOS is allowed exactly when the output is complete. Pure and shape-static: use it under
    `jit` (``params`` static), `vmap` (batch of states, shared or stacked tables) and `lax.scan`.

    Args:
      cg: a compiled grammar (`RegularGrammar`, `PushdownGrammar`) or a composite constraint of
        `ananke_jax.fusion` (a fused one, whose soft adjustment is added to the logits once, or
        a deferred one).
      state: the current state (`RegularState`, `PushdownState`, or the composite's state).
      logits: float[V] with ``vocab_size <= V <= logits_width``.
      key: PRNG key.
      params: static `SamplingParams`.
      history: optional int32[T] previous tokens, for the repetition penalty.

    Returns:
      ``(token int32[], new_state)``. If nothing is allowed (the state is already an error), the
      token is the first EOS id and the state stays in error.
    """
    if logits.ndim != 1:
        raise ValueError(f"expected one row of logits float[V], got shape {logits.shape}; use jax.vmap for a batch")
    masked = masked_logits(cg, state, logits)
    token = sample(masked, key, params, fallback_token=cg.fallback_token, history=history)
    return token, advance(cg, state, token)
