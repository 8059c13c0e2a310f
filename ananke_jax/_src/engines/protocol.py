"""`Constraint`: the protocol every kind of constraint speaks.

A constraint is an immutable pytree of device arrays (its tables) with pure methods over an
explicit state pytree. The run-time layer (`constrained_step`, `generate`, the slot engine, the
host `Matcher`) only calls these methods, so a new engine is one new subclass.
"""

from __future__ import annotations

import abc
from typing import Any

import jax
import jax.numpy as jnp

from ananke_jax._src.engines.masks import apply_mask, check_logits_width, is_allowed


class Constraint(abc.ABC):
    """The constraint protocol.

    Subclasses are frozen dataclasses registered as pytrees, with the static ints
    ``vocab_size`` and ``logits_width`` and the array ``fallback_token`` (int32[], the first EOS
    id: what sampling returns when nothing is allowed). Every method is pure and shape-static,
    so it runs under `jax.jit`, `jax.vmap` and `lax.scan`.
    """

    vocab_size: int
    logits_width: int
    fallback_token: jax.Array

    @abc.abstractmethod
    def init_state(self) -> Any:
        """The state before any token (a pytree of arrays)."""

    @abc.abstractmethod
    def token_mask(self, state) -> jax.Array:
        """uint32[W], ``W = ceil(logits_width / 32)``: bit j of word i allows token ``32 i + j``.
        EOS bits are set exactly when `accepts` holds; an error state's mask is empty."""

    @abc.abstractmethod
    def advance(self, state, token: jax.Array) -> Any:
        """The state after ``token`` (int32[]). A forbidden token, or an id outside
        ``[0, logits_width)``, leads to the error state, which is absorbing."""

    @abc.abstractmethod
    def accepts(self, state) -> jax.Array:
        """bool[]: the output so far is complete, so EOS is allowed now."""

    @abc.abstractmethod
    def is_error(self, state) -> jax.Array:
        """bool[]: a forbidden token was taken; nothing is allowed any more."""

    @property
    def mask_words(self) -> int:
        """W, the uint32 words of a packed mask."""
        return -(-self.logits_width // 32)

    def token_allowed(self, state, token: jax.Array) -> jax.Array:
        """bool[]: ``token`` (int32[]) is allowed, as in `token_mask` (engines override this
        with something cheaper than the whole mask)."""
        token = jnp.asarray(token, jnp.int32)
        return (token < self.logits_width) & is_allowed(self.token_mask(state), token)

    @property
    def table_bytes(self) -> int:
        """Bytes of device memory the tables occupy (read from shapes only)."""
        return sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(self))

    @property
    def adjusts_logits(self) -> bool:
        """Static: `logit_adjustment` is not None (the constraint has soft domains)."""
        return False

    def logit_adjustment(self, state) -> jax.Array | None:
        """float32[logits_width] added to the logits before masking (soft domains), or None."""
        del state
        return None

    def masked_logits(self, state, logits: jax.Array) -> jax.Array:
        """float[V]: ``logits`` (``vocab_size <= V <= logits_width``) plus the logit adjustment,
        then -inf where the mask forbids.

        Raises:
          ValueError: ``V`` is outside ``[vocab_size, logits_width]``.
        """
        check_logits_width(self, logits.shape[-1])
        adjustment = self.logit_adjustment(state)
        if adjustment is not None:
            logits = logits + adjustment[: logits.shape[-1]].astype(logits.dtype)
        return apply_mask(logits, self.token_mask(state))


class Wrapper(Constraint):
    """A constraint built around another one (``self.wrapped``, a property in subclasses), whose
    vocabulary sizes and fallback token it shares."""

    @property
    @abc.abstractmethod
    def wrapped(self) -> Constraint:
        """The constraint whose sizes this one has."""

    @property
    def vocab_size(self) -> int:
        return self.wrapped.vocab_size

    @property
    def logits_width(self) -> int:
        return self.wrapped.logits_width

    @property
    def fallback_token(self) -> jax.Array:
        return self.wrapped.fallback_token
