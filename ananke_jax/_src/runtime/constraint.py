"""The run-time functions of a constraint: init, mask, advance, accepts, as free functions.

Each calls the `Constraint` protocol (`ananke_jax._src.engines.protocol`), which every kind of
constraint implements: the token DFA, the pushdown engine, the pooled tables and the composites
of `ananke_jax.fusion`.
"""

from __future__ import annotations

from typing import Any

import jax

from ananke_jax._src.engines.protocol import Constraint

State = Any  # a constraint's state: a pytree of arrays (`RegularState`, `PushdownState`, ...)


def init_state(cg: Constraint) -> State:
    """The state before any token (the same as ``cg.init_state()``)."""
    return cg.init_state()


def token_mask(cg: Constraint, state: State) -> jax.Array:
    """Allowed tokens as a packed bitmask.

    Returns:
      uint32[W], ``W = ceil(logits_width / 32)``; bit j of word i allows token ``32 * i + j``.
      EOS bits are set exactly when `accepts` holds; the error state's mask is empty.
    """
    return cg.token_mask(state)


def token_allowed(cg: Constraint, state: State, token: jax.Array) -> jax.Array:
    """bool[]: ``token`` (int32[]) is allowed, as in `token_mask`; cheaper than the whole mask
    for compiled grammars (one word of a row, or one outcome set per parse configuration)."""
    return cg.token_allowed(state, token)


def advance(cg: Constraint, state: State, token: jax.Array) -> State:
    """The state after ``token`` (int32[]). A token the mask forbids, or an id outside
    ``[0, logits_width)``, leads to the error state, which is absorbing."""
    return cg.advance(state, token)


def accepts(cg: Constraint, state: State) -> jax.Array:
    """bool[]: the output so far is complete, so EOS is allowed now."""
    return cg.accepts(state)


def is_error(cg: Constraint, state: State) -> jax.Array:
    """bool[]: a forbidden token was taken; nothing is allowed any more."""
    return cg.is_error(state)


def masked_logits(cg: Constraint, state: State, logits: jax.Array) -> jax.Array:
    """float[V] logits with the forbidden tokens at -inf; a constraint with soft domains (a fused
    one) also adds its logit adjustment, once, before masking.

    Raises:
      ValueError: ``V`` is outside ``[vocab_size, logits_width]`` (see `check_logits_width`).
    """
    return cg.masked_logits(state, logits)
