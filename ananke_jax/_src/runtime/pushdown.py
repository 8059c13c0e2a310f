"""The bounded-stack pushdown engine: mask and advance for context-free grammars, in pure jax.

Each parse configuration holds an LR stack and a lexer state. From a lexer state, every token
has a precomputed set of outcomes (terminals completed, lexer state after). Which outcomes the
stack allows is worked out once per configuration, when the configuration is made (in
`cfg_advance`, and for the initial state in `PushdownGrammar.init_state`), by the LR simulations
of `ananke_jax._src.compiled_cfg`: the terminals of all outcomes of the lexer state, shared
through a prefix tree, are fed to simulations on copies of the stack (one per trie node, the
node's parse continuing its parent's). The state keeps the verdicts, so `cfg_token_mask` only
gathers: a token is allowed when one of its outcomes is valid in some configuration. All loops
have static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled_cfg import LRActions, PushdownGrammar, PushdownState, feed, lr_actions, with_verdicts
from ananke_jax._src.runtime.masks import is_allowed


def _live_count(state: PushdownState) -> jax.Array:
    """int32[]: one past the last live configuration (live ones come first)."""
    k = state.live.shape[0]
    return jnp.where(state.live.any(), k - jnp.argmax(state.live[::-1]), 0).astype(jnp.int32)


def _set_valid(cg: PushdownGrammar, valid, sets):
    """bool[...]: outcome sets (global ids ``sets``) that hold a valid outcome."""
    members = cg.set_members[sets]
    return ((members >= 0) & valid[jnp.maximum(members, 0)]).any(axis=-1)


def _config_tokens(cg: PushdownGrammar, valid, lexer):
    """uint32[W]: the tokens one configuration allows (EOS excluded), from its verdicts."""
    set_on = _set_valid(cg, valid, cg.state_sets[lexer])
    rows = cg.mask_rows[cg.dense_row[lexer]]
    # The parts hold disjoint tokens, so adding them is OR-ing them.
    words = jnp.where(set_on[cg.dense_set[lexer]][:, None], rows, jnp.uint32(0)).sum(axis=0, dtype=jnp.uint32)
    token = cg.sparse_token[lexer]
    bits = jnp.where(set_on[cg.sparse_set[lexer]], jnp.left_shift(jnp.uint32(1), (token & 31).astype(jnp.uint32)), jnp.uint32(0))
    return words.at[token >> 5].add(bits)


def cfg_accepts(cg: PushdownGrammar, state: PushdownState) -> jax.Array:
    """bool[]: the output is complete (EOS allowed now)."""
    del cg
    return state.finished | (state.live & state.complete).any()


def cfg_token_mask(cg: PushdownGrammar, state: PushdownState) -> jax.Array:
    """uint32[W]: the allowed tokens, EOS included exactly when the output is complete.

    The first configuration is done outside the loop (a loop trip costs more than its work),
    then one trip per further configuration up to the last live one (usually none)."""

    def config_tokens(i):
        return _config_tokens(cg, state.outcome_ok[i] & state.live[i], state.lexer[i])

    body = lambda carry: (carry[0] + 1, carry[1] | config_tokens(carry[0]))
    tokens = jax.lax.while_loop(lambda c: c[0] < _live_count(state), body, (jnp.int32(1), config_tokens(0)))[1]
    eos = jnp.where(cfg_accepts(cg, state), cg.eos_mask, jnp.uint32(0))
    return jnp.where(state.finished, jnp.uint32(0), tokens) | eos


def _token_outcomes(cg: PushdownGrammar, state: PushdownState, token):
    """The outcomes of ``token`` from each configuration: int32[K, Z], local to its lexer state
    (-1 padding), and bool[K, Z], which of them the configuration's verdicts allow."""
    local = cg.set_members[cg.class_set[state.lexer, cg.token_class[jnp.clip(token, 0, cg.logits_width - 1)]]]
    return local, (local >= 0) & jnp.take_along_axis(state.outcome_ok, jnp.maximum(local, 0), axis=1)


def cfg_token_allowed(cg: PushdownGrammar, state: PushdownState, token) -> jax.Array:
    """bool[]: whether `cfg_token_mask` allows ``token`` (int32[]), without building the mask."""
    token = jnp.asarray(token, jnp.int32)
    safe = jnp.clip(token, 0, cg.logits_width - 1)
    _, valid = _token_outcomes(cg, state, token)
    taken = (valid.any(axis=1) & state.live).any() & ~state.finished
    in_range = (token >= 0) & (token < cg.logits_width)
    return in_range & jnp.where(is_allowed(cg.eos_mask, safe), cfg_accepts(cg, state), taken)


def cfg_is_error(cg: PushdownGrammar, state: PushdownState) -> jax.Array:
    """bool[]: a forbidden token was taken; nothing is allowed any more."""
    del cg
    return ~state.live.any()


class _Configs(NamedTuple):
    """Parse configurations under construction (the fields of `PushdownState` that make one)."""

    stacks: jax.Array  # int32[N, D]
    depth: jax.Array  # int32[N]
    lexer: jax.Array  # int32[N]


def _same(a: _Configs, b: _Configs) -> jax.Array:
    """bool[A, B]: which configurations of ``a`` equal which of ``b`` (stack entries at and above
    the depth are junk)."""
    below = jnp.arange(a.stacks.shape[1])[None, :] < a.depth[:, None]
    equal_stacks = ((a.stacks[:, None, :] == b.stacks[None, :, :]) | ~below[:, None, :]).all(axis=2)
    return (a.lexer[:, None] == b.lexer[None, :]) & (a.depth[:, None] == b.depth[None, :]) & equal_stacks


def _follow(cg: PushdownGrammar, lr: LRActions, state: PushdownState, config, local) -> _Configs:
    """The configuration that configuration ``config`` makes by following its outcome ``local``."""
    stack, depth, lexer = state.stacks[config], state.depth[config], state.lexer[config]
    outcome = cg.state_outcomes[lexer, local]
    p = feed(lr, stack, depth, cg.outcome_terminals[outcome], cg.outcome_length[outcome])
    return _Configs(p.stack, p.height, cg.outcome_lexer[lexer, local])


def cfg_advance(cg: PushdownGrammar, state: PushdownState, token) -> PushdownState:
    """The state after ``token`` (int32[]): every configuration follows every valid outcome of the
    token; the survivors (deduplicated, at most K, in order) form the new state.

    The valid (configuration, outcome) pairs are gathered first and followed K at a time, so a
    step costs what its valid pairs cost, not K times the largest outcome set; the usual single
    pair skips the deduplication.
    """
    token = jnp.asarray(token, jnp.int32)
    is_eos = is_allowed(cg.eos_mask, token)
    in_range = (token >= 0) & (token < cg.logits_width)
    lr, k = lr_actions(cg), cg.max_configs
    local, valid = _token_outcomes(cg, state, token)
    z = local.shape[1]
    valid = (valid & state.live[:, None] & in_range & ~is_eos & ~state.finished).reshape(-1)
    pairs = jnp.argsort(~valid, stable=True)  # the valid pairs first, in (configuration, outcome) order
    count = valid.sum()

    follow = lambda pair: _follow(cg, lr, state, pair // z, jnp.maximum(local.reshape(-1)[pair], 0))
    empty = _Configs(jnp.zeros_like(state.stacks), jnp.zeros_like(state.depth), jnp.zeros_like(state.lexer))

    def one_pair():
        """The usual step: one valid pair makes the only configuration."""
        kept = jax.tree_util.tree_map(lambda e, x: e.at[0].set(x), empty, follow(pairs[0]))
        return kept, jnp.arange(k) == 0, state.overflow

    def round_(carry):
        r, kept, live, overflow = carry
        slot = jax.lax.dynamic_slice(pairs, (r * k,), (k,))
        real = r * k + jnp.arange(k) < count
        made = jax.vmap(follow)(slot)
        earlier = jnp.tril(jnp.ones((k, k), jnp.bool_), k=-1)
        fresh = real & ~(_same(made, kept) & live[None, :]).any(axis=1) & ~(_same(made, made) & earlier & real[None, :]).any(axis=1)
        position = jnp.where(fresh, live.sum() + jnp.cumsum(fresh) - 1, k)
        kept = jax.tree_util.tree_map(lambda a, b: a.at[position].set(b, mode="drop"), kept, made)
        return r + 1, kept, live.at[position].set(True, mode="drop"), overflow | (fresh & (position >= k)).any()

    def rounds():
        """Any other number of pairs (none for EOS or a forbidden token): K a round, deduplicated."""
        init = (jnp.int32(0), empty, jnp.zeros(k, jnp.bool_), state.overflow)
        return jax.lax.while_loop(lambda c: c[0] * k < count, round_, init)[1:]

    kept, live, overflow = jax.lax.cond(count == 1, one_pair, rounds)
    # A configuration the state already had keeps its verdicts: they depend on it alone.
    match = _same(kept, _Configs(state.stacks, state.depth, state.lexer)) & live[:, None] & state.live[None, :]
    known, source = match.any(axis=1), jnp.argmax(match, axis=1)
    stepped = state._replace(
        stacks=kept.stacks,
        depth=kept.depth,
        lexer=kept.lexer,
        live=live,
        outcome_ok=known[:, None] & state.outcome_ok[source],
        complete=known & state.complete[source],
        overflow=overflow,
    )
    # EOS: the configurations stay, marked finished when the output is complete, else they die.
    complete = cfg_accepts(cg, state)
    ended = state._replace(finished=complete, live=state.live & complete)
    # Only the new configurations of a step that is not EOS need verdicts.
    return jax.lax.cond(is_eos, lambda: ended, lambda: with_verdicts(cg, stepped, known))
