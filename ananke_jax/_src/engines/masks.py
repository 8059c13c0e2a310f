"""Packed token bitmasks: ``uint32[..., W]``, bit j of word i stands for token ``32 * i + j``."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def unpack_mask(mask: jax.Array, width: int) -> jax.Array:
    """bool[..., width] from a packed mask uint32[..., W] (requires ``width <= 32 * W``)."""
    shifts = jnp.arange(32, dtype=jnp.uint32).reshape((1,) * mask.ndim + (32,))
    bits = (mask[..., :, None] >> shifts) & jnp.uint32(1)
    return bits.reshape(*mask.shape[:-1], -1)[..., :width].astype(jnp.bool_)


def apply_mask(logits: jax.Array, mask: jax.Array) -> jax.Array:
    """Set the logits of forbidden tokens to -inf.

    Args:
      logits: float[..., V], any float dtype and leading batch shape.
      mask: uint32[..., W] with ``V <= 32 * W``, broadcastable against ``logits``' batch shape.

    Returns:
      float[..., V] of ``logits``' dtype. A row whose mask is empty comes back all -inf.

    Raises:
      ValueError: the mask covers fewer than ``V`` tokens.
    """
    width = logits.shape[-1]
    if width > 32 * mask.shape[-1]:
        raise ValueError(
            f"logits have {width} entries but the mask covers only {32 * mask.shape[-1]} tokens: "
            "the grammar was compiled for a narrower vocabulary"
        )
    allowed = unpack_mask(mask, width)
    shape = np.broadcast_shapes(allowed.shape, logits.shape)
    neg_inf = jnp.asarray(-jnp.inf, logits.dtype)
    return jnp.where(jnp.broadcast_to(allowed, shape), jnp.broadcast_to(logits, shape), neg_inf)


def check_logits_width(constraint, width: int) -> None:
    """Raise ValueError unless logits of ``width`` entries belong to ``constraint``'s vocabulary.

    The one rule `constrained_step`, `masked_logits` and `generate` share:
    ``constraint.vocab_size <= width <= constraint.logits_width``. Shapes are static, so this runs
    at trace time.
    """
    if not constraint.vocab_size <= width <= constraint.logits_width:
        raise ValueError(
            f"logits have {width} entries, but the constraint was compiled for a vocabulary of "
            f"{constraint.vocab_size} tokens and logits_width={constraint.logits_width}: build the "
            "Vocabulary with logits_width equal to the model's output width"
        )


def is_allowed(mask: jax.Array, token: jax.Array) -> jax.Array:
    """bool[]: bit ``token`` of a packed mask uint32[W]; False outside ``[0, 32 * W)``."""
    token = jnp.asarray(token, jnp.int32)
    in_range = (token >= 0) & (token < 32 * mask.shape[-1])
    word = mask[jnp.clip(token >> 5, 0, mask.shape[-1] - 1)]
    return in_range & (((word >> (token & 31).astype(jnp.uint32)) & 1) == 1)
