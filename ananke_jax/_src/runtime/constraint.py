"""The pure run-time functions of a compiled constraint: init, mask, advance, accepts.

Compiled grammars are plain tables, dispatched here. Composite constraints (`ananke_jax.fusion`:
fused domains, deferred activation, allow-lists) carry the same four functions as methods
(``token_mask``, ``advance``, ``accepts``, ``is_error``, and optionally ``masked_logits``), so
this module never imports them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled import RegularGrammar, RegularState
from ananke_jax._src.compiled_cfg import PushdownGrammar, PushdownState
from ananke_jax._src.runtime import pushdown
from ananke_jax._src.runtime.masks import apply_mask, check_logits_width, is_allowed

Constraint = RegularGrammar | PushdownGrammar
State = RegularState | PushdownState

DEAD = 0


def init_state(cg: Constraint) -> State:
    """The state before any token (the same as ``cg.init_state()``)."""
    return cg.init_state()


def token_mask(cg: Constraint, state: State) -> jax.Array:
    """Allowed tokens as a packed bitmask.

    Returns:
      uint32[W], ``W = ceil(logits_width / 32)``; bit j of word i allows token ``32 * i + j``.
      EOS bits are set exactly when `accepts` holds; the error state's mask is empty.
    """
    if isinstance(cg, PushdownGrammar):
        return pushdown.cfg_token_mask(cg, state)
    if isinstance(cg, RegularGrammar):
        return cg.mask_rows[cg.row_of_state[state.node]]
    return cg.token_mask(state)


def token_allowed(cg: Constraint, state: State, token: jax.Array) -> jax.Array:
    """bool[]: ``token`` (int32[]) is allowed, as in `token_mask`; cheaper than the whole mask
    for compiled grammars (one word of a row, or one outcome set per parse configuration)."""
    token = jnp.asarray(token, jnp.int32)
    if isinstance(cg, PushdownGrammar):
        return pushdown.cfg_token_allowed(cg, state, token)
    if not isinstance(cg, RegularGrammar):
        return is_allowed(token_mask(cg, state), token)
    safe = jnp.clip(token, 0, 32 * cg.mask_words - 1)
    word = cg.mask_rows[cg.row_of_state[state.node], safe >> 5]
    in_range = (token >= 0) & (token < cg.logits_width)
    return in_range & ((word >> (safe & 31).astype(jnp.uint32)) & 1).astype(jnp.bool_)


def advance(cg: Constraint, state: State, token: jax.Array) -> State:
    """The state after ``token`` (int32[]). A token the mask forbids, or an id outside
    ``[0, logits_width)``, leads to the error state, which is absorbing."""
    if isinstance(cg, PushdownGrammar):
        return pushdown.cfg_advance(cg, state, token)
    if not isinstance(cg, RegularGrammar):
        return cg.advance(state, token)
    token = jnp.asarray(token, jnp.int32)
    in_range = (token >= 0) & (token < cg.logits_width)
    token_class = cg.class_of_token[jnp.clip(token, 0, cg.logits_width - 1)]
    node = jnp.where(in_range, cg.next_state[state.node, token_class], DEAD)
    return RegularState(node=node)


def accepts(cg: Constraint, state: State) -> jax.Array:
    """bool[]: the output so far is complete, so EOS is allowed now."""
    if isinstance(cg, PushdownGrammar):
        return pushdown.cfg_accepts(cg, state)
    if isinstance(cg, RegularGrammar):
        return cg.accepting[state.node]
    return cg.accepts(state)


def is_error(cg: Constraint, state: State) -> jax.Array:
    """bool[]: a forbidden token was taken; nothing is allowed any more."""
    if isinstance(cg, PushdownGrammar):
        return pushdown.cfg_is_error(cg, state)
    if isinstance(cg, RegularGrammar):
        return state.node == DEAD
    return cg.is_error(state)


def masked_logits(cg: Constraint, state: State, logits: jax.Array) -> jax.Array:
    """float[V] logits with the forbidden tokens at -inf; a constraint with soft domains (a fused
    one) also adds its logit adjustment, once, before masking.

    Raises:
      ValueError: ``V`` is outside ``[vocab_size, logits_width]`` (see `check_logits_width`).
    """
    check_logits_width(cg, logits.shape[-1])
    method = getattr(cg, "masked_logits", None)
    if method is not None:
        return method(state, logits)
    return apply_mask(logits, token_mask(cg, state))
