"""The bounded-stack pushdown engine: mask and advance for context-free grammars, in pure jax.

Each parse configuration holds an LR stack and a lexer state. From a lexer state, every token
has a precomputed set of outcomes (terminals completed, lexer state after); the device checks
each outcome against the stack with an LR simulation on a small local overlay (the stack is
never copied or mutated), then a token is allowed when one of its outcomes is valid in some
configuration. All loops have static bounds; nothing branches on traced values in Python.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled_cfg import CFGState, CompiledCFG
from ananke_jax._src.runtime.masks import is_allowed

SHIFT, REDUCE, ACCEPT = 1, 2, 3


def _top(stack, base, overlay, height):
    """The LR state on top of ``stack[:base] ++ overlay[:height]``."""
    return jnp.where(height > 0, overlay[jnp.maximum(height - 1, 0)], stack[jnp.maximum(base - 1, 0)])


def _simulate(cg: CompiledCFG, stack, base, overlay, height, terminals, length):
    """Feed LR columns ``terminals[:length]`` to the parser, pushing onto the overlay only.

    Args:
      stack: int32[D], the configuration's stack (read only); base: int32[] how much of it is
        kept under the overlay; overlay: int32[H]; height: int32[] entries in use.
      terminals: int32[M] LR columns (the end-of-input column accepts), length: int32[].

    Returns:
      ok bool[], base, overlay, height after the input, and overflow bool[] (the stack
      bounds were hit: the input may be valid but cannot be followed).
    """
    h, d = overlay.shape[0], stack.shape[0]
    max_steps = terminals.shape[0] * (d + 2)

    def running(c):
        pos, _, _, _, ok, steps, _ = c
        return ok & (pos < length) & (steps < max_steps)

    def step(c):
        pos, base, overlay, height, ok, steps, overflow = c
        column = terminals[jnp.minimum(pos, terminals.shape[0] - 1)]
        state = _top(stack, base, overlay, height)
        kind, arg = cg.action_kind[state, column], cg.action_arg[state, column]
        is_shift, is_reduce, is_accept = kind == SHIFT, kind == REDUCE, kind == ACCEPT
        popped = jnp.where(is_reduce, cg.rule_length[arg], 0)
        from_overlay = jnp.minimum(popped, height)
        new_height, new_base = height - from_overlay, base - (popped - from_overlay)
        pushed = jnp.where(is_shift, arg, cg.goto[_top(stack, new_base, overlay, new_height), cg.rule_lhs[arg]])
        push = is_shift | is_reduce
        full = push & ((new_height >= h) | (new_base + new_height >= d))
        slot = jnp.minimum(new_height, h - 1)
        overlay = overlay.at[slot].set(jnp.where(push & ~full, pushed, overlay[slot]))
        new_height = new_height + (push & ~full)
        return (
            pos + (is_shift | is_accept),
            new_base,
            overlay,
            new_height,
            ok & ((push & ~full) | is_accept),
            steps + 1,
            overflow | full,
        )

    init = (jnp.int32(0), base, overlay, height, jnp.bool_(True), jnp.int32(0), jnp.bool_(False))
    pos, base, overlay, height, ok, steps, overflow = jax.lax.while_loop(running, step, init)
    overflow = overflow | (ok & (pos < length))  # out of steps
    return ok & (pos >= length), base, overlay, height, overflow


def _outcome_checks(cg: CompiledCFG, stack, depth, outcomes):
    """Validity of outcomes (int32[P], -1 padding) from one configuration.

    An outcome is valid when the parser takes its terminals and then still accepts one of the
    terminals its final lexer state may complete (or needs nothing more).

    Returns:
      valid bool[P], and per outcome the overlay after its terminals (base int32[P], overlay
      int32[P, H], height int32[P]) and overflow bool[P].
    """
    h = cg.overlay
    safe = jnp.maximum(outcomes, 0)
    empty = jnp.zeros(h, jnp.int32)
    feed = jax.vmap(lambda terms, n: _simulate(cg, stack, depth, empty, jnp.int32(0), terms, n))
    ok, base, overlay, height, overflow = feed(cg.outcome_terminals[safe], cg.outcome_length[safe])

    lexer_after = cg.outcome_lexer[safe]
    pending = cg.pending_columns[lexer_after][:, :, None]  # [P, L, 1]: columns to try next
    lookahead = jax.vmap(  # [P, L]: does the parser shift that terminal next?
        lambda b, o, ht, cols: jax.vmap(lambda t: _simulate(cg, stack, b, o, ht, t, (t[0] >= 0).astype(jnp.int32))[0])(cols)
    )(base, overlay, height, pending)
    pending_ok = cg.pending_free[lexer_after] | (lookahead & (pending[:, :, 0] >= 0)).any(axis=1)
    return (outcomes >= 0) & ok & pending_ok, base, overlay, height, overflow & (outcomes >= 0)


def _config_tokens(cg: CompiledCFG, stack, depth, lexer):
    """bool[logits_width]: the tokens one configuration allows (EOS excluded)."""
    outcomes = cg.state_outcomes[lexer]
    valid = _outcome_checks(cg, stack, depth, outcomes)[0]
    num_outcomes = cg.outcome_length.shape[0]
    outcome_valid = jnp.zeros(num_outcomes + 1, jnp.bool_).at[jnp.where(outcomes >= 0, outcomes, num_outcomes)].max(valid)
    members = cg.set_outcomes
    set_valid = (outcome_valid[jnp.where(members >= 0, members, num_outcomes)] & (members >= 0)).any(axis=1)
    return set_valid[cg.token_set[lexer]]


def _config_complete(cg: CompiledCFG, stack, depth, lexer):
    """bool[]: the output is complete in this configuration (EOS allowed)."""
    empty = jnp.zeros(cg.overlay, jnp.int32)
    finish = jax.vmap(lambda terms, n: _simulate(cg, stack, depth, empty, jnp.int32(0), terms, n)[0])
    return (finish(cg.eos_terminals, cg.eos_length) & cg.eos_lexer_ends[lexer]).any()


def _pack(bits):
    """uint32[ceil(V / 32)] from bool[V] (bit j of word i = token 32 * i + j)."""
    words = -(-bits.shape[0] // 32)
    packed = jnp.packbits(jnp.pad(bits, (0, 32 * words - bits.shape[0])), bitorder="little")
    return jax.lax.bitcast_convert_type(packed.reshape(words, 4), jnp.uint32)


def cfg_accepts(cg: CompiledCFG, state: CFGState) -> jax.Array:
    """bool[]: the output is complete (EOS allowed now)."""

    def complete(config):  # configurations not in use cost nothing (outside vmap)
        stack, depth, lexer, live = config
        return jax.lax.cond(live, lambda: _config_complete(cg, stack, depth, lexer), lambda: jnp.bool_(False))

    return state.finished | jax.lax.map(complete, (state.stacks, state.depth, state.lexer, state.live)).any()


def cfg_token_mask(cg: CompiledCFG, state: CFGState) -> jax.Array:
    """uint32[W]: the allowed tokens, EOS included exactly when the output is complete."""

    def config_tokens(config):  # configurations not in use cost nothing (outside vmap)
        stack, depth, lexer, live = config
        return jax.lax.cond(live, lambda: _config_tokens(cg, stack, depth, lexer), lambda: jnp.zeros(cg.logits_width, jnp.bool_))

    per_config = jax.lax.map(config_tokens, (state.stacks, state.depth, state.lexer, state.live))
    tokens = per_config.any(axis=0) & ~state.finished
    eos = jnp.where(cfg_accepts(cg, state), cg.eos_mask, jnp.uint32(0))
    return _pack(tokens) | eos


def cfg_is_error(cg: CompiledCFG, state: CFGState) -> jax.Array:
    """bool[]: a forbidden token was taken; nothing is allowed any more."""
    del cg
    return ~state.live.any()


def cfg_advance(cg: CompiledCFG, state: CFGState, token) -> CFGState:
    """The state after ``token`` (int32[]): every configuration follows every valid outcome of the
    token; the survivors (deduplicated, at most K) form the new state."""
    token = jnp.asarray(token, jnp.int32)
    is_eos = is_allowed(cg.eos_mask, token)
    in_range = (token >= 0) & (token < cg.logits_width)

    def follow(stack, depth, lexer):
        outcomes = cg.set_outcomes[cg.token_set[lexer, jnp.clip(token, 0, cg.logits_width - 1)]]
        valid, base, overlay, height, overflow = _outcome_checks(cg, stack, depth, outcomes)
        index = base[:, None] + jnp.arange(cg.overlay)[None, :]
        written = jnp.where(jnp.arange(cg.overlay)[None, :] < height[:, None], overlay, stack[jnp.minimum(index, cg.stack_depth - 1)])
        stacks = jax.vmap(lambda ix, w: stack.at[ix].set(w, mode="drop"))(index, written)
        return valid, stacks, base + height, cg.outcome_lexer[jnp.maximum(outcomes, 0)], overflow

    valid, stacks, depth, lexer, overflow = jax.vmap(follow)(state.stacks, state.depth, state.lexer)
    k, z = valid.shape
    valid = (valid & state.live[:, None] & in_range & ~is_eos & ~state.finished).reshape(-1)
    stacks, depth, lexer = stacks.reshape(k * z, -1), depth.reshape(-1), lexer.reshape(-1)
    below = jnp.arange(cg.stack_depth)[None, :] < depth[:, None]
    same = (
        (lexer[:, None] == lexer[None, :])
        & (depth[:, None] == depth[None, :])
        & ((stacks[:, None, :] == stacks[None, :, :]) | ~below[:, None, :]).all(axis=2)
    )
    earlier = jnp.tril(jnp.ones((k * z, k * z), jnp.bool_), k=-1)
    keep = valid & ~(same & earlier & valid[None, :]).any(axis=1)
    order = jnp.argsort(~keep, stable=True)[: cg.max_configs]
    chosen_live = keep[order]
    stepped = CFGState(
        stacks=stacks[order],
        depth=depth[order],
        lexer=lexer[order],
        live=chosen_live,
        finished=state.finished,
        overflow=state.overflow | (keep.sum() > cg.max_configs) | (overflow.reshape(-1) & state.live.repeat(z)).any(),
    )
    # EOS: the state stays, marked finished when the output is complete, else it dies.
    complete = cfg_accepts(cg, state)
    ended = state._replace(finished=complete, live=state.live & complete)
    return jax.tree_util.tree_map(lambda a, b: jnp.where(is_eos, a, b), ended, stepped)
