"""Prefix counts, compactions and reductions of small arrays, written so that XLA fuses them.

A step of the pushdown engine works on arrays of a few to a few dozen elements, where what
costs is the number of kernels a step runs, not their work. XLA runs some operations as a kernel
of their own whatever their size: a sort, a cumulative sum (a reduce-window) and a scatter, which
take from a third of a microsecond to two on a CPU even on four elements; and on a CPU it
rewrites a reduction over more than `FUSED_REDUCTION` elements as a reduce-window and then a
reduction. Below those sizes the functions here are comparisons of index matrices and reductions
of slices, which fuse with their neighbours; above them they fall back to the plain operations,
whose cost is then their work.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

FUSED_REDUCTION = 32  # the most elements a CPU reduction takes without a reduce-window
_MAX_SLICES = 4  # the most slices a reduction is split into


def count_before(flags: jax.Array) -> jax.Array:
    """int32[..., N]: how many of ``flags`` (bool[..., N]) before each position are True."""
    n = flags.shape[-1]
    if n > FUSED_REDUCTION:
        return jnp.cumsum(flags, axis=-1, dtype=jnp.int32) - flags
    earlier = jnp.arange(n)[None, :] < jnp.arange(n)[:, None]  # [i, j]: j comes before i
    earlier = earlier.reshape((1,) * (flags.ndim - 1) + (n, n))
    return (earlier & flags[..., None, :]).sum(axis=-1, dtype=jnp.int32)


def true_indices(flags: jax.Array) -> jax.Array:
    """int32[N]: the positions of ``flags``' (bool[N]) True entries in order, then zeros (the
    first ``flags.sum()`` entries of a stable ``argsort(~flags)``)."""
    n = flags.shape[0]
    rank, position = count_before(flags), jnp.arange(n, dtype=jnp.int32)
    if n > FUSED_REDUCTION:
        return jnp.zeros(n, jnp.int32).at[jnp.where(flags, rank, n)].set(position, mode="drop")
    at = flags[None, :] & (rank[None, :] == position[:, None])  # [r, i]: entry i is the r-th True
    return jnp.where(at, position[None, :], 0).sum(axis=1, dtype=jnp.int32)


def _sliced(reduce, combine, x: jax.Array) -> jax.Array:
    """``reduce`` (a `jnp` reduction) of ``x`` over its last axis, in slices that a CPU reduction
    takes without a reduce-window, combined elementwise by ``combine``."""
    n = x.shape[-1]
    if n <= FUSED_REDUCTION or n > FUSED_REDUCTION * _MAX_SLICES:
        return reduce(x, axis=-1)
    parts = [reduce(x[..., i : i + FUSED_REDUCTION], axis=-1) for i in range(0, n, FUSED_REDUCTION)]
    return functools.reduce(combine, parts)


def all_last(x: jax.Array) -> jax.Array:
    """bool[...]: ``x.all(axis=-1)``, fused where it is small."""
    return _sliced(jnp.all, jnp.logical_and, x)


def any_last(x: jax.Array) -> jax.Array:
    """bool[...]: ``x.any(axis=-1)``, fused where it is small."""
    return _sliced(jnp.any, jnp.logical_or, x)


def min_last(x: jax.Array) -> jax.Array:
    """``x.min(axis=-1)``, fused where it is small."""
    return _sliced(jnp.min, jnp.minimum, x)
