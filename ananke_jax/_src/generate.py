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

from ananke_jax._src.drafts import NUM_TABLES, DraftTables, draft_tables, propose, record
from ananke_jax._src.engines.masks import check_logits_width, is_allowed
from ananke_jax._src.engines.protocol import Constraint
from ananke_jax._src.runtime.constraint import (
    accepts,
    advance,
    masked_logits,
    token_allowed,
    token_mask,
)
from ananke_jax._src.runtime.sampling import SamplingParams, filter_logits, sample

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
      stats: int32 counters of the accelerations: ``model_calls`` (int32[], decode forward
        passes), ``full_masks`` (int32[B], tokens whose whole mask the row needed: with
        ``opportunistic`` only those whose sampled token the constraint refused or that ended
        the row), ``drafted`` and ``accepted`` (int32[B], draft tokens proposed and accepted).
      drafts: the draft tables after the call (``speculative``), to pass to the next call.
    """

    tokens: jax.Array
    lengths: jax.Array
    finish_reason: jax.Array
    interventions: jax.Array
    stats: dict
    drafts: DraftTables | None = None

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


ACCELERATIONS = ("none", "opportunistic", "speculative", "jump_forward")


def generate(
    step_fn: Callable,
    params: Any,
    prompt_tokens,
    constraint: Constraint | None,
    *,
    cache: Any,
    max_new_tokens: int,
    eos_token_ids: Sequence[int],
    key: jax.Array,
    prompt_lengths=None,
    sampling: SamplingParams | Sequence[SamplingParams] = SamplingParams(),
    grammar_index=None,
    acceleration: str = "none",
    draft_length: int = 4,
    drafts: DraftTables | None = None,
) -> GenerationResult:
    """Generate up to ``max_new_tokens`` tokens per row, each allowed by the row's constraint.

    Args:
      step_fn: the model, ``(params, cache, tokens, positions) -> (logits, cache)``.
      params: the model's parameters.
      prompt_tokens: int[B, P] prompts, right-padded.
      constraint: one constraint shared by all rows (compiled grammar or fused constraint, whose
        soft scores are added to the logits), a bank of grammars of one engine
        (`stack_grammars`) indexed by ``grammar_index``, or None (unconstrained).
      cache: the model's empty cache for B rows, at least ``P + max_new_tokens`` long (plus
        ``draft_length`` with ``speculative``).
      max_new_tokens: static budget N.
      eos_token_ids: the vocabulary's EOS ids (static).
      key: PRNG key.
      prompt_lengths: int[B] real prompt lengths (default: all P).
      sampling: static `SamplingParams`, shared or one per row.
      grammar_index: int[B], each row's grammar in the bank (required with a bank); -1 leaves
        the row unconstrained.
      acceleration: ``"none"``; ``"opportunistic"``: draw from the unconstrained logits and
        build the whole mask only when the drawn token is refused (the same tokens as
        ``"none"``; it falls back to whole masks with top-k/top-p/min-p filters or soft
        scores, where the drawn token depends on the mask); ``"speculative"``: each model call
        verifies up to ``draft_length`` draft tokens (forced and often-taken tokens, see
        `draft_tables`) and keeps the longest prefix the model's own choices agree with (greedy:
        the same tokens as ``"none"``; sampled: the same distribution); ``"jump_forward"``:
        as ``"speculative"``, but a draft that is the token the grammar forces (`draft_tables`
        with a vocabulary; regular grammars only) is emitted without the model's agreement.
        Invasive: the forced text keeps every continuation the grammar allows, but not always
        the model's own tokenization of it, so the output may differ from ``"none"``.
      draft_length: static k for ``speculative`` and ``jump_forward``: the model runs over k + 1
        tokens per call.
      drafts: `DraftTables` for ``speculative`` (default: `draft_tables(constraint)`, no forced
        tokens) and ``jump_forward`` (required); a result's ``drafts`` carry the vote counts on to
        the next call.

    Returns:
      A `GenerationResult`. The call jits once per shape and static configuration.

    Raises:
      ValueError: a prompt (plus drafts) that does not fit the cache, logits wider than the
        constraint's vocabulary, a bank without ``grammar_index`` (or the reverse), an index
        outside the bank, bad lengths, an unknown acceleration or draft length, ``jump_forward``
        without ``drafts``.
    """
    if acceleration not in ACCELERATIONS:
        raise ValueError(f"acceleration must be one of {ACCELERATIONS}, got {acceleration!r}")
    jump_forward = acceleration == "jump_forward"
    if jump_forward and drafts is None:
        raise ValueError("jump_forward emits forced tokens: pass drafts=aj.draft_tables(constraint, vocab)")
    speculative = acceleration == "speculative" or jump_forward
    if speculative and (not isinstance(draft_length, int) or draft_length < 1):
        raise ValueError(f"draft_length must be an int >= 1, got {draft_length!r}")
    prompt_tokens = jnp.asarray(prompt_tokens, jnp.int32)
    if prompt_tokens.ndim != 2 or prompt_tokens.shape[1] == 0:
        raise ValueError(f"prompt_tokens must be int[B, P] with P >= 1, got shape {prompt_tokens.shape}")
    batch, width = prompt_tokens.shape
    lengths = np.full(batch, width) if prompt_lengths is None else np.asarray(prompt_lengths)
    if lengths.shape != (batch,) or (lengths < 1).any() or (lengths > width).any():
        raise ValueError(f"prompt_lengths must be {batch} ints in [1, {width}], got {lengths.tolist()}")
    room, lookahead = cache_length(cache), draft_length if speculative else 0
    if width + max_new_tokens + lookahead > room:
        drafts_part = f" + draft_length={draft_length}" if speculative else ""
        raise ValueError(
            f"the prompt ({width} positions) plus max_new_tokens={max_new_tokens}{drafts_part} need "
            f"{width + max_new_tokens + lookahead} cache positions, but the cache holds {room}: allocate a longer cache"
        )
    per_row = (sampling,) * batch if isinstance(sampling, SamplingParams) else tuple(sampling)
    if len(per_row) != batch:
        raise ValueError(f"got {len(per_row)} SamplingParams for {batch} rows")
    choices = tuple(dict.fromkeys(per_row))
    sampling_index = jnp.asarray([choices.index(s) for s in per_row], jnp.int32)
    is_bank = constraint is not None and jnp.ndim(constraint.fallback_token) == 1
    if is_bank != (grammar_index is not None):
        raise ValueError("a grammar bank needs grammar_index (one grammar per row), and grammar_index needs a bank")
    index = np.zeros(batch, np.int32)
    if is_bank:
        index, size = np.asarray(grammar_index), constraint.fallback_token.shape[0]
        if index.shape != (batch,) or (index < -1).any() or (index >= size).any():
            raise ValueError(f"grammar_index must be {batch} ints in [-1, {size}) for a bank of {size}, got {index.tolist()}")
        constraint = jax.tree_util.tree_map(lambda table: table[np.maximum(index, 0)], constraint)
    rows = _Rows(prompt_tokens, jnp.asarray(lengths, jnp.int32), jnp.asarray(index, jnp.int32), sampling_index)
    static = {"max_new_tokens": max_new_tokens, "eos_token_ids": tuple(eos_token_ids), "choices": choices, "per_row": is_bank}
    if speculative:
        tables = drafts if drafts is not None else draft_tables(None if is_bank else constraint)
        return _generate_speculative(
            step_fn, params, rows, constraint, cache, key, tables, draft_length=draft_length, jump_forward=jump_forward, **static
        )
    opportunistic = acceleration == "opportunistic" and _draws_without_mask(constraint, choices)
    return _generate(step_fn, params, rows, constraint, cache, key, opportunistic=opportunistic, **static)


class _Rows(NamedTuple):
    """Per-row inputs: prompts int32[B, P], their lengths int32[B], grammar index int32[B]
    (-1: free), sampling choice int32[B]."""

    prompt: jax.Array
    lengths: jax.Array
    grammar: jax.Array
    choice: jax.Array


def _draws_without_mask(constraint, choices) -> bool:
    """Whether drawing from the unconstrained logits, then keeping an allowed token, gives the
    token that drawing from the masked logits gives (same noise): a plain grammar (no soft
    scores) and no filter that depends on the mask."""
    return constraint is not None and not constraint.adjusts_logits and not any(c.filters for c in choices)


def _start(step_fn, params, rows: _Rows, constraint, cache, *, per_row):
    """Prefill: the logits after each prompt (float[B, V]), the cache, and the constraint's
    start states (batched)."""
    batch, width = rows.prompt.shape
    logits, cache = step_fn(params, cache, rows.prompt, jnp.broadcast_to(jnp.arange(width, dtype=jnp.int32), rows.prompt.shape))
    if constraint is None:
        return logits[jnp.arange(batch), rows.lengths - 1], cache, jnp.zeros(batch, jnp.int32)  # a placeholder state
    check_logits_width(constraint, logits.shape[-1])
    start = jax.vmap(type(constraint).init_state)(constraint) if per_row else constraint.init_state()
    states = start if per_row else jax.tree_util.tree_map(lambda x: jnp.broadcast_to(x, (batch,) + x.shape), start)
    return logits[jnp.arange(batch), rows.lengths - 1], cache, states


def _ending(cg, state, free, mask, token, eos):
    """The finish reason of a row about to take ``token`` (or RUNNING): ``mask`` empty, only EOS
    allowed with the output complete, or ``token`` an EOS. A ``free`` row only ends at EOS."""
    is_eos = (token == eos).any()
    if cg is None:
        return jnp.where(is_eos, EOS, RUNNING)
    eos_bits = jnp.zeros_like(mask).at[eos >> 5].add(jnp.left_shift(jnp.uint32(1), (eos & 31).astype(jnp.uint32)))
    empty = ~free & ~mask.any()
    only_eos = ~free & ~empty & ~(mask & ~eos_bits).any() & accepts(cg, state)
    return jnp.select([empty, only_eos, is_eos], [CONSTRAINT_ERROR, GRAMMAR_COMPLETE, EOS], RUNNING)


def _masked(cg, state, free, logits):
    """The logits a row draws from: its constraint's masked logits (with a fused constraint's
    soft scores), or the logits themselves for a free row or no constraint."""
    return logits if cg is None else jnp.where(free, logits, masked_logits(cg, state, logits))


def _argmax_refused(mask, free, logits):
    """bool[]: the row's constraint (its whole ``mask``; None: no constraint) refuses the
    model's own argmax."""
    return jnp.bool_(False) if mask is None else ~free & ~is_allowed(mask, jnp.argmax(logits))


def _choose(values, choice):
    """Per-choice results (a list of pytrees) -> the one at ``choice`` (int32[])."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs)[choice], *values)


@functools.partial(jax.jit, static_argnums=0, static_argnames=("max_new_tokens", "eos_token_ids", "choices", "per_row", "opportunistic"))
def _generate(step_fn, params, rows: _Rows, constraint, cache, key, *, max_new_tokens, eos_token_ids, choices, per_row, opportunistic):
    batch = rows.prompt.shape[0]
    logits, cache, states = _start(step_fn, params, rows, constraint, cache, per_row=per_row)
    eos = jnp.asarray(eos_token_ids, jnp.int32)
    tables = 0 if per_row else None
    free = rows.grammar < 0

    def draw(logits, key, choice):
        return _choose([sample(logits, key, params, fallback_token=eos[0]) for params in choices], choice)

    def full_pick(logits, state, cg, free, key, choice):
        """One row with its whole mask: (token, finish reason or RUNNING, argmax refused)."""
        mask = None if cg is None else token_mask(cg, state)
        token = draw(_masked(cg, state, free, logits), key, choice)
        return token, _ending(cg, state, free, mask, token, eos), _argmax_refused(mask, free, logits)

    def quick_pick(logits, state, cg, free, key, choice):
        """One row drawn from its unconstrained logits: (token, whether it is final: allowed and
        not EOS, argmax refused)."""
        token = draw(logits, key, choice)
        fine = free | (token_allowed(cg, state, token) & ~(token == eos).any())
        return token, fine, ~free & ~token_allowed(cg, state, jnp.argmax(logits))

    in_axes = (0, 0, tables, 0, 0, 0)

    def body(carry):
        step, logits, cache, states, out, finish, interventions, full_masks = carry
        keys = jax.random.split(jax.random.fold_in(key, step), batch)
        running = finish == RUNNING
        args = (logits, states, constraint, free, keys, rows.choice)
        if opportunistic:
            token, fine, refused = jax.vmap(quick_pick, in_axes)(*args)
            needed = running & ~fine
            token, reason, refused = jax.lax.cond(
                needed.any(), lambda: jax.vmap(full_pick, in_axes)(*args), lambda: (token, jnp.full(batch, RUNNING), refused)
            )
        else:
            token, reason, refused = jax.vmap(full_pick, in_axes)(*args)
            needed = running
        emits = running & (reason == RUNNING)
        out = out.at[:, step].set(jnp.where(emits, token, PAD))
        finish = jnp.where(running, jnp.where(emits & (step + 1 == max_new_tokens), LENGTH, reason), finish)
        interventions = interventions + (running & refused)
        if constraint is not None:
            new_states = jax.vmap(advance, in_axes=(tables, 0, 0))(constraint, states, token)
            states = jax.tree_util.tree_map(lambda new, old: jnp.where(_rows(emits, new), new, old), new_states, states)
        positions = jnp.minimum(rows.lengths + step, cache_positions - 1)[:, None]
        next_logits, cache = step_fn(params, cache, jnp.where(emits, token, eos[0])[:, None], positions)
        return step + 1, next_logits[:, 0], cache, states, out, finish, interventions, full_masks + needed

    cache_positions = cache_length(cache)
    out = jnp.full((batch, max_new_tokens), PAD, jnp.int32)
    zeros = jnp.zeros(batch, jnp.int32)
    carry = (jnp.int32(0), logits, cache, states, out, zeros + RUNNING, zeros, zeros)
    carry = jax.lax.while_loop(lambda c: (c[0] < max_new_tokens) & (c[5] == RUNNING).any(), body, carry)
    steps, _, _, _, out, finish, interventions, full_masks = carry
    stats = {"model_calls": steps, "full_masks": full_masks, "drafted": zeros, "accepted": zeros}
    return GenerationResult(out, (out != PAD).sum(axis=1, dtype=jnp.int32), finish, interventions, stats)


@functools.partial(
    jax.jit, static_argnums=0, static_argnames=("max_new_tokens", "eos_token_ids", "choices", "per_row", "draft_length", "jump_forward")
)
def _generate_speculative(
    step_fn,
    params,
    rows: _Rows,
    constraint,
    cache,
    key,
    drafts,
    *,
    max_new_tokens,
    eos_token_ids,
    choices,
    per_row,
    draft_length,
    jump_forward,
):
    """Each loop trip drafts k tokens per row, runs the model once over the row's last token and
    its drafts (k + 1 positions), keeps the drafts up to the first one the model's own choice
    rejects (``jump_forward``: that is not forced), and appends that choice (or, all accepted,
    one more drawn token)."""
    batch, k = rows.prompt.shape[0], draft_length
    _, cache, states = _start(step_fn, params, rows, constraint, cache, per_row=per_row)
    eos = jnp.asarray(eos_token_ids, jnp.int32)
    tables = 0 if per_row else None
    free = rows.grammar < 0

    def propose_row(cg, state, previous, drafts, grammar):
        if cg is None:  # unconstrained: no grammar state to key drafts on
            none = jnp.zeros(k, jnp.int32)
            return (
                none,
                jnp.int32(0),
                none.astype(bool),
                jax.tree_util.tree_map(lambda x: jnp.stack([x] * (k + 1)), state),
                jnp.zeros((k + 1, NUM_TABLES), jnp.int32),
            )
        return propose(cg, state, previous, drafts, grammar, eos, k, forced_first=jump_forward)

    def verify_row(cg, states, free, draft, usable, forced, logits, key, choice):
        """One row: the tokens it emits (int32[k + 1], PAD after), the position j of the first
        rejected draft, the finish reason at j, and the model's argmax refusals up to each
        position (int32[k + 1], cumulative)."""
        position = jnp.arange(k + 1)
        masks = None if cg is None else jax.vmap(token_mask, in_axes=(None, 0))(cg, states)
        masked = jax.vmap(lambda s, x: _masked(cg, s, free, x))(states, logits)
        draft = jnp.append(draft, PAD)
        proposed = position < usable
        accept_key, draw_key = jax.random.split(key)

        def judge(params):
            """Acceptance of each draft and the token to emit after each prefix."""
            filtered = jax.vmap(lambda x: filter_logits(x, params))(masked)
            if params.temperature == 0.0:
                choice_at = jnp.argmax(filtered, axis=-1)
                return draft == choice_at, choice_at
            # Standard speculative acceptance with a point-mass draft: keep it with its
            # probability; on refusal draw from the rest (the draft removed, renormalised).
            probs = jax.nn.softmax(filtered, axis=-1)
            chance = jnp.take_along_axis(probs, jnp.maximum(draft, 0)[:, None], axis=1)[:, 0]
            keep = jax.random.uniform(accept_key, (k + 1,)) < chance
            rest = jnp.where(proposed[:, None] & (jnp.arange(filtered.shape[-1])[None, :] == draft[:, None]), -jnp.inf, filtered)
            drawn = jnp.argmax(rest + jax.random.gumbel(draw_key, rest.shape, jnp.float32), axis=-1)
            return keep, jnp.where(jnp.isfinite(rest.max(axis=-1)), drawn, eos[0])

        keep, choice_at = _choose([judge(params) for params in choices], choice)
        keep = keep | jnp.append(forced, False)  # forced drafts are kept unasked (jump_forward only)
        j = jnp.cumprod(keep & proposed).sum(dtype=jnp.int32)
        token = choice_at[j]
        state_j = jax.tree_util.tree_map(lambda x: x[j], states)
        reason = _ending(cg, state_j, free, None if masks is None else masks[j], token, eos)
        emitted = jnp.where(position < j, draft, jnp.where(position == j, token, PAD))
        refused = jax.vmap(lambda m, x: _argmax_refused(m, free, x))(masks, logits) if cg is not None else jnp.zeros(k + 1, jnp.bool_)
        return emitted, j, reason, jnp.cumsum(refused, dtype=jnp.int32), state_j

    widths = sorted({1, 2, k + 1})  # model call widths compiled

    def run_model(width, cache, inputs, positions):
        """The model over the first ``width`` positions; logits padded to k + 1 positions (the
        padding is never read: no row has drafts there)."""
        logits, cache = step_fn(params, cache, inputs[:, :width], positions[:, :width])
        return jnp.pad(logits, ((0, 0), (0, k + 1 - width), (0, 0))), cache

    def body(carry):
        trip, pending, cache, states, drafts, out, done, finish, interventions, drafted, accepted, masks = carry
        draft, usable, forced, path, slots = jax.vmap(propose_row, in_axes=(tables, 0, 0, None, 0))(
            constraint, states, pending, drafts, rows.grammar
        )
        forced = forced & jump_forward
        usable = jnp.where(free, 0, usable)
        positions = (rows.lengths - 1 + done)[:, None] + jnp.arange(k + 1)[None, :]
        inputs = jnp.concatenate([pending[:, None], draft], axis=1)
        # The model runs over the fewest positions that hold every running row's drafts.
        need = jnp.max(jnp.where(finish == RUNNING, usable, 0)) + 1
        logits, cache = jax.lax.switch(
            (jnp.asarray(widths) < need).sum(), [functools.partial(run_model, width) for width in widths], cache, inputs, positions
        )
        keys = jax.random.split(jax.random.fold_in(key, trip), batch)
        emitted, j, reason, refused, state_j = jax.vmap(verify_row, in_axes=(tables, 0, 0, 0, 0, 0, 0, 0, 0))(
            constraint, path, free, draft, usable, forced, logits, keys, rows.choice
        )
        running = finish == RUNNING
        left = max_new_tokens - done
        # The budget ends first when it runs out at or before position j.
        cut = j >= left
        kept = jnp.where(running, jnp.where(cut, left, j + (reason == RUNNING)), 0)
        emitted = jnp.where(jnp.arange(k + 1)[None, :] < kept[:, None], emitted, PAD)
        out = jax.vmap(lambda row, x, at: jax.lax.dynamic_update_slice(row, x, (at,)))(out, emitted, done)
        ended = jnp.where(cut, LENGTH, jnp.where(reason != RUNNING, reason, jnp.where(done + kept >= max_new_tokens, LENGTH, RUNNING)))
        finish = jnp.where(running, ended, finish)
        decided = jnp.where(running, jnp.where(cut, left, j + 1), 0)  # steps of plain decoding this trip stands for
        interventions = interventions + jnp.where(decided > 0, refused[jnp.arange(batch), jnp.maximum(decided - 1, 0)], 0)
        drafted, accepted = drafted + jnp.where(running, usable, 0), accepted + jnp.where(running, jnp.minimum(j, kept), 0)
        if constraint is not None:
            new_states = jax.vmap(advance, in_axes=(tables, 0, 0))(constraint, state_j, jnp.maximum(emitted[jnp.arange(batch), j], 0))
            states = jax.tree_util.tree_map(lambda new, old: jnp.where(_rows(finish == RUNNING, new), new, old), new_states, states)
            drafts = record(drafts, slots, jnp.maximum(emitted, 0), (jnp.arange(k + 1)[None, :] < kept[:, None]) & ~free[:, None])
        pending = jnp.where(kept > 0, emitted[jnp.arange(batch), jnp.maximum(kept - 1, 0)], pending)
        return (
            trip + 1,
            pending,
            cache,
            states,
            drafts,
            out,
            done + kept,
            finish,
            interventions,
            drafted,
            accepted,
            masks + running * (k + 1),
        )

    out = jnp.full((batch, max_new_tokens + k + 1), PAD, jnp.int32)
    zeros = jnp.zeros(batch, jnp.int32)
    pending = rows.prompt[jnp.arange(batch), rows.lengths - 1]
    drafts = drafts if constraint is not None else draft_tables(slots=1)
    carry = (jnp.int32(0), pending, cache, states, drafts, out, zeros, zeros + RUNNING, zeros, zeros, zeros, zeros)
    carry = jax.lax.while_loop(lambda c: (c[7] == RUNNING).any() & (c[0] < max_new_tokens), body, carry)
    trips, _, _, _, drafts, out, _, finish, interventions, drafted, accepted, masks = carry
    out = out[:, :max_new_tokens]
    stats = {"model_calls": trips, "full_masks": masks, "drafted": drafted, "accepted": accepted}
    return GenerationResult(out, (out != PAD).sum(axis=1, dtype=jnp.int32), finish, interventions, stats, drafts)


def _rows(flags, x):
    """``flags`` (bool[B]) shaped to broadcast against ``x`` (batch leading)."""
    return flags.reshape(flags.shape + (1,) * (x.ndim - 1))
