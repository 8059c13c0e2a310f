"""Constrained generation: prefill, then a jitted decode loop with the constraint on device.

Any model exposed as a pure ``step_fn(params, cache, tokens, positions) -> (logits, cache)``
works (``tokens, positions: int32[B, T]``, ``logits: float[B, T, V]``; every leaf of the cache
has the batch and then the position as its leading axes). Prompts are right-padded; each row
decodes from its own length. Each step masks the logits with the row's constraint, samples,
advances the constraint and feeds the token to the model; the loop stops when every row is done
or the budget is spent. Nothing leaves the device between steps.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compiled import CompiledGrammar
from ananke_jax._src.compiled_cfg import CompiledCFG
from ananke_jax._src.runtime.constraint import (
    accepts,
    advance,
    masked_logits,
    token_mask,
)
from ananke_jax._src.runtime.masks import is_allowed
from ananke_jax._src.runtime.sampling import SamplingParams, sample

FINISH_REASONS = ("running", "eos", "grammar_complete", "length", "constraint_error")
RUNNING, EOS, GRAMMAR_COMPLETE, LENGTH, CONSTRAINT_ERROR = range(len(FINISH_REASONS))
PAD = -1  # fills the token rows after each row's end


class GenerationResult(NamedTuple):
    """What `generate` returns (device arrays).

    Attributes:
      tokens: int32[B, N], the generated tokens of each row, then `PAD` (-1); the EOS that ends
        a row is not included.
      lengths: int32[B], generated tokens per row.
      finish_reason: int32[B], an index into `FINISH_REASONS`: ``eos`` (the model chose EOS),
        ``grammar_complete`` (the output is complete and nothing but EOS may follow),
        ``length`` (the budget ran out), ``constraint_error`` (the constraint allowed nothing).
      interventions: int32[B], steps where the model's own argmax was masked by the constraint.
    """

    tokens: jax.Array
    lengths: jax.Array
    finish_reason: jax.Array
    interventions: jax.Array

    def finish_names(self) -> list[str]:
        """The finish reason of each row by name."""
        return [FINISH_REASONS[int(r)] for r in np.asarray(self.finish_reason)]


def cache_length(cache) -> int:
    """Positions the cache holds: the second axis of its leaves (batch, then position)."""
    leaves = jax.tree_util.tree_leaves(cache)
    lengths = {leaf.shape[1] for leaf in leaves if leaf.ndim >= 2}
    if len(lengths) != 1:
        raise ValueError(f"cannot read the cache length: leaves have second axes {sorted(lengths)}")
    return lengths.pop()


def generate(
    step_fn: Callable,
    params: Any,
    prompt_tokens,
    constraint: CompiledGrammar | CompiledCFG | None,
    *,
    cache: Any,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    key: jax.Array,
    prompt_lengths=None,
    sampling: SamplingParams | Sequence[SamplingParams] = SamplingParams(),  # noqa: B008 (frozen)
    grammar_index=None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens per row, each allowed by the row's constraint.

    Args:
      step_fn: the model, ``(params, cache, tokens, positions) -> (logits, cache)``.
      params: the model's parameters.
      prompt_tokens: int[B, P] prompts, right-padded.
      constraint: one constraint shared by all rows (compiled grammar or fused constraint, whose
        soft scores are added to the logits), a bank of grammars of one engine
        (`stack_grammars`) indexed by ``grammar_index``, or None (unconstrained).
      cache: the model's empty cache for B rows, at least ``P + max_new_tokens`` long.
      max_new_tokens: static budget N.
      eos_token_ids: the vocabulary's EOS ids (static).
      key: PRNG key.
      prompt_lengths: int[B] real prompt lengths (default: all P).
      sampling: static `SamplingParams`, shared or one per row.
      grammar_index: int[B], each row's grammar in the bank (required with a bank); -1 leaves
        the row unconstrained.

    Returns:
      A `GenerationResult`. The call jits once per shape and static configuration.

    Raises:
      ValueError: a prompt that does not fit the cache, logits wider than the constraint's
        vocabulary, a bank without ``grammar_index`` (or the reverse), an index outside the
        bank, bad lengths.
    """
    prompt_tokens = jnp.asarray(prompt_tokens, jnp.int32)
    if prompt_tokens.ndim != 2 or prompt_tokens.shape[1] == 0:
        raise ValueError(f"prompt_tokens must be int[B, P] with P >= 1, got shape {prompt_tokens.shape}")
    batch, width = prompt_tokens.shape
    lengths = np.full(batch, width) if prompt_lengths is None else np.asarray(prompt_lengths)
    if lengths.shape != (batch,) or (lengths < 1).any() or (lengths > width).any():
        raise ValueError(f"prompt_lengths must be {batch} ints in [1, {width}], got {lengths.tolist()}")
    room = cache_length(cache)
    if width + max_new_tokens > room:
        raise ValueError(
            f"the prompt ({width} positions) plus max_new_tokens={max_new_tokens} need {width + max_new_tokens} "
            f"cache positions, but the cache holds {room}: allocate a longer cache"
        )
    per_row = (sampling,) * batch if isinstance(sampling, SamplingParams) else tuple(sampling)
    if len(per_row) != batch:
        raise ValueError(f"got {len(per_row)} SamplingParams for {batch} rows")
    choices = tuple(dict.fromkeys(per_row))
    sampling_index = jnp.asarray([choices.index(s) for s in per_row], jnp.int32)
    is_bank = constraint is not None and jnp.ndim(constraint.fallback_token) == 1
    if is_bank != (grammar_index is not None):
        raise ValueError("a grammar bank needs grammar_index (one grammar per row), and grammar_index needs a bank")
    free = jnp.zeros(batch, jnp.bool_)
    if is_bank:
        index, size = np.asarray(grammar_index), constraint.fallback_token.shape[0]
        if index.shape != (batch,) or (index < -1).any() or (index >= size).any():
            raise ValueError(f"grammar_index must be {batch} ints in [-1, {size}) for a bank of {size}, got {index.tolist()}")
        free = jnp.asarray(index < 0)
        constraint = jax.tree_util.tree_map(lambda table: table[np.maximum(index, 0)], constraint)
    return _generate(
        step_fn, params, prompt_tokens, jnp.asarray(lengths, jnp.int32), constraint, free, cache, key, sampling_index,
        max_new_tokens=max_new_tokens, eos_token_ids=tuple(eos_token_ids), choices=choices, per_row=is_bank,
    )  # fmt: skip


@functools.partial(jax.jit, static_argnums=0, static_argnames=("max_new_tokens", "eos_token_ids", "choices", "per_row"))
def _generate(step_fn, params, prompt, lengths, constraint, free, cache, key, sampling_index, *, max_new_tokens, eos_token_ids, choices, per_row):
    batch, width = prompt.shape
    logits, cache = step_fn(params, cache, prompt, jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), prompt.shape))
    logits = logits[jnp.arange(batch), lengths - 1]
    eos = jnp.asarray(eos_token_ids, jnp.int32)
    tables = 0 if per_row else None
    if constraint is None:
        states = jnp.zeros(batch, jnp.int32)  # a placeholder carry
    else:
        _check_width(constraint, logits.shape[-1])
        start = constraint.init_state() if not per_row else jax.vmap(type(constraint).init_state)(constraint)
        states = start if per_row else jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), start)

    def pick(logits, state, cg, free, key, choice):
        """One row: (token, new state, finish reason or RUNNING, whether the argmax was masked).
        A ``free`` row ignores its constraint."""
        if cg is None:
            masked, allowed_argmax, only_eos, empty = logits, jnp.bool_(True), jnp.bool_(False), jnp.bool_(False)
        else:
            mask = token_mask(cg, state)
            masked = jnp.where(free, logits, masked_logits(cg, state, logits))  # a fused constraint adds its soft scores
            allowed_argmax = free | is_allowed(mask, jnp.argmax(logits))
            eos_bits = jnp.zeros_like(mask).at[eos >> 5].add(jnp.left_shift(jnp.uint32(1), (eos & 31).astype(jnp.uint32)))
            empty = ~free & ~mask.any()
            only_eos = ~free & ~empty & ~(mask & ~eos_bits).any() & accepts(cg, state)
        drawn = [sample(masked, key, params, fallback_token=eos[0]) for params in choices]
        token = jnp.stack(drawn)[choice]
        new_state = state if cg is None else advance(cg, state, token)
        is_eos = (token == eos).any()
        reason = jnp.select([empty, only_eos, is_eos], [CONSTRAINT_ERROR, GRAMMAR_COMPLETE, EOS], RUNNING)
        return token, new_state, reason, ~allowed_argmax

    row_step = jax.vmap(pick, in_axes=(0, 0, tables, 0, 0, 0))

    def body(carry):
        step, logits, cache, states, out, finish, interventions = carry
        keys = jax.random.split(jax.random.fold_in(key, step), batch)
        token, new_states, reason, intervened = row_step(logits, states, constraint, free, keys, sampling_index)
        running = finish == RUNNING
        emits = running & (reason == RUNNING)
        out = out.at[:, step].set(jnp.where(emits, token, PAD))
        finish = jnp.where(running, jnp.where(emits & (step + 1 == max_new_tokens), LENGTH, reason), finish)
        interventions = interventions + (running & intervened)
        states = jax.tree_util.tree_map(lambda new, old: jnp.where(_rows(emits, new), new, old), new_states, states)
        positions = jnp.minimum(lengths + step, cache_positions - 1)[:, None]
        next_logits, cache = step_fn(params, cache, jnp.where(emits, token, eos[0])[:, None], positions)
        return step + 1, next_logits[:, 0], cache, states, out, finish, interventions

    cache_positions = cache_length(cache)
    out = jnp.full((batch, max_new_tokens), PAD, jnp.int32)
    zeros = jnp.zeros(batch, jnp.int32)
    carry = (jnp.int32(0), logits, cache, states, out, zeros + RUNNING, zeros)
    carry = jax.lax.while_loop(lambda c: (c[0] < max_new_tokens) & (c[5] == RUNNING).any(), body, carry)
    _, _, _, _, out, finish, interventions = carry
    return GenerationResult(out, (out != PAD).sum(axis=1, dtype=jnp.int32), finish, interventions)


def _rows(flags, x):
    """``flags`` (bool[B]) shaped to broadcast against ``x`` (batch leading)."""
    return flags.reshape(flags.shape + (1,) * (x.ndim - 1))


def _check_width(constraint, width: int) -> None:
    if width < constraint.vocab_size or width > constraint.logits_width:
        raise ValueError(
            f"the model's logits have {width} entries but the constraint was compiled for a vocabulary of "
            f"{constraint.vocab_size} tokens and logits_width={constraint.logits_width}"
        )

