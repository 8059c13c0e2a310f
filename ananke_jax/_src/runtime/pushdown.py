"""The bounded-stack pushdown engine: mask and advance for context-free grammars, in pure jax.

Each parse configuration holds an LR stack and a lexer state. From a lexer state, every token
has a precomputed set of outcomes (terminals completed, lexer state after). Which outcomes the
stack allows is worked out once per configuration, when the configuration is made (in
`cfg_advance` and the initial state): the terminals of all outcomes of the lexer state, shared
through a prefix tree, are fed to an LR simulation on a small local overlay (the stack itself is
never copied or mutated). The state keeps the verdicts, so `cfg_token_mask` only gathers: a
token is allowed when one of its outcomes is valid in some configuration. All loops have
static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled_cfg import CFGState, CompiledCFG
from ananke_jax._src.runtime.masks import is_allowed

SHIFT, REDUCE, ACCEPT = 1, 2, 3
ACTIONS_PER_TRIP = 4  # LR actions unrolled in one loop trip (a shift and a few reductions)


class _Parse(NamedTuple):
    """An LR simulation on top of a read-only stack: ``stack[:base] ++ overlay[:height]``."""

    base: jax.Array  # int32[]
    overlay: jax.Array  # int32[H]
    height: jax.Array  # int32[]
    pos: jax.Array  # int32[], terminals consumed
    ok: jax.Array  # bool[], no error so far
    overflow: jax.Array  # bool[], the stack bounds were hit


def _fresh(cg: CompiledCFG, depth) -> _Parse:
    return _Parse(depth, jnp.zeros(cg.overlay, jnp.int32), jnp.int32(0), jnp.int32(0), jnp.bool_(True), jnp.bool_(False))


def _top(stack, base, overlay, height):
    """The LR state on top of ``stack[:base] ++ overlay[:height]``."""
    return jnp.where(height > 0, overlay[jnp.maximum(height - 1, 0)], stack[jnp.maximum(base - 1, 0)])


def _act(cg: CompiledCFG, stack, terminals, length, p: _Parse) -> _Parse:
    """One LR action on input ``terminals[:length]`` (a no-op once the input is used up or
    rejected): a shift or accept consumes a terminal, a reduction pops and pushes a goto."""
    h, d = cg.overlay, stack.shape[0]
    active = p.ok & (p.pos < length)
    column = terminals[jnp.minimum(p.pos, terminals.shape[0] - 1)]
    top = _top(stack, p.base, p.overlay, p.height)
    kind, arg = cg.action_kind[top, column], cg.action_arg[top, column]
    is_shift, is_reduce, is_accept = kind == SHIFT, kind == REDUCE, kind == ACCEPT
    popped = jnp.where(is_reduce, cg.rule_length[arg], 0)
    from_overlay = jnp.minimum(popped, p.height)
    height, base = p.height - from_overlay, p.base - (popped - from_overlay)
    pushed = jnp.where(is_shift, arg, cg.goto[_top(stack, base, p.overlay, height), cg.rule_lhs[arg]])
    push = is_shift | is_reduce
    full = push & ((height >= h) | (base + height >= d))
    write = active & push & ~full
    slot = jnp.minimum(height, h - 1)
    return _Parse(
        base=jnp.where(active, base, p.base),
        overlay=p.overlay.at[slot].set(jnp.where(write, pushed, p.overlay[slot])),
        height=jnp.where(active, height + write, p.height),
        pos=p.pos + (active & (is_shift | is_accept)),
        ok=p.ok & ~(active & (full | ~(push | is_accept))),
        overflow=p.overflow | (active & full),
    )


def _acts(cg: CompiledCFG, stack, terminals, length, p: _Parse) -> _Parse:
    for _ in range(ACTIONS_PER_TRIP):
        p = _act(cg, stack, terminals, length, p)
    return p


def _running(p: _Parse, length):
    return p.ok & (p.pos < length)


def _feed(cg: CompiledCFG, stack, depth, terminals, length) -> _Parse:
    """Feed LR columns ``terminals[:length]`` (int32[M]) to the parser of one configuration.

    Returns the simulation after the input: ``ok & (pos >= length)`` when it was accepted.
    """
    limit = terminals.shape[0] * (stack.shape[0] + 2)  # each terminal takes at most D + 2 actions

    def body(carry):
        p, trips = carry
        return _acts(cg, stack, terminals, length, p), trips + 1

    p, _ = jax.lax.while_loop(lambda c: _running(c[0], length) & (c[1] * ACTIONS_PER_TRIP < limit), body, (_fresh(cg, depth), jnp.int32(0)))
    return p._replace(overflow=p.overflow | _running(p, length))  # out of actions


def _walk_trie(cg: CompiledCFG, stack, depth, lexer) -> _Parse:
    """Feed the terminals of lexer state ``lexer``'s trie to one configuration, a chunk of
    ``cg.lanes`` nodes at a time, each node one terminal after its parent.

    Returns a `_Parse` per node (arrays with a leading node axis); a node's terminals are
    accepted when its ``ok & (pos == 1)``.
    """
    size, lanes = cg.node_parent.shape[1], cg.lanes
    parent_of, column_of = cg.node_parent[lexer], cg.node_column[lexer]
    act = jax.vmap(lambda col, p: _acts(cg, stack, col[None], jnp.int32(1), p))

    def load(c, nodes: _Parse) -> tuple[_Parse, jax.Array]:
        """The lanes of chunk ``c``, each starting from its parent's parse."""
        start = cg.chunk_start[lexer, c]
        parent = jax.lax.dynamic_slice(parent_of, (start,), (lanes,))
        root, p = parent < 0, jnp.maximum(parent, 0)
        fresh = _fresh(cg, depth)
        lane = jax.tree_util.tree_map(lambda n, f: jnp.where(root.reshape((-1,) + (1,) * f.ndim), jnp.broadcast_to(f, n[p].shape), n[p]), nodes, fresh)
        lane = lane._replace(pos=jnp.zeros(lanes, jnp.int32), ok=root | (nodes.ok[p] & (nodes.pos[p] == 1)))
        return lane, jax.lax.dynamic_slice(column_of, (start,), (lanes,))

    def body(carry):
        c, lane, column, nodes, trips = carry
        lane = act(column, lane)
        # Write every trip: a node is read only by later chunks, after its final write.
        nodes = jax.tree_util.tree_map(lambda n, x: jax.lax.dynamic_update_slice_in_dim(n, x, cg.chunk_start[lexer, c], 0), nodes, lane)
        done = ~_running(lane, 1).any()
        next_lane, next_column = load(c + done, nodes)
        lane = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), next_lane, lane)
        return c + done, lane, jnp.where(done, next_column, column), nodes, trips + 1

    nodes = jax.tree_util.tree_map(lambda x: jnp.zeros((size,) + x.shape, x.dtype), _fresh(cg, depth))
    lane, column = load(0, nodes)
    chunks = cg.num_chunks[lexer]
    limit = cg.chunk_start.shape[1] * (cg.stack_depth + 2)
    init = (jnp.int32(0), lane, column, nodes, jnp.int32(0))
    return jax.lax.while_loop(lambda c: (c[0] < chunks) & (c[4] < limit), body, init)[3]


def _verdicts(cg: CompiledCFG, stack, depth, lexer):
    """What one configuration allows: bool[P], its lexer state's outcomes that the stack takes
    (their terminals accepted, then one of their lookahead terminals, or none needed); bool[],
    whether the output is complete (EOS allowed); and bool[], whether an outcome was refused
    for lack of stack depth."""
    nodes = _walk_trie(cg, stack, depth, lexer)
    accepted = nodes.ok & (nodes.pos == 1)
    node, lookahead = cg.outcome_node[lexer], cg.outcome_lookahead[lexer]
    terminals_ok = (node < 0) | accepted[jnp.maximum(node, 0)]
    lookahead_ok = ((lookahead >= 0) & accepted[jnp.maximum(lookahead, 0)]).any(axis=1)
    used = cg.outcome_lexer[lexer] >= 0
    valid = used & terminals_ok & (cg.outcome_free[lexer] | lookahead_ok)
    node_overflow = (node >= 0) & nodes.overflow[jnp.maximum(node, 0)]
    lookahead_overflow = ((lookahead >= 0) & nodes.overflow[jnp.maximum(lookahead, 0)]).any(axis=1)
    blocked = (used & ~valid & (node_overflow | lookahead_overflow)).any()
    final = cg.complete_node[lexer]
    complete = ((final >= 0) & accepted[jnp.maximum(final, 0)]).any()
    return valid, complete, blocked


def _with_verdicts(cg: CompiledCFG, state: CFGState) -> CFGState:
    """Fill in the verdicts of the state's live configurations (dead ones cost nothing, outside
    vmap)."""

    def verdicts(config):
        stack, depth, lexer, live = config
        nothing = (jnp.zeros(cg.outcome_node.shape[1], jnp.bool_), jnp.bool_(False), jnp.bool_(False))
        return jax.lax.cond(live, lambda: _verdicts(cg, stack, depth, lexer), lambda: nothing)

    valid, complete, blocked = jax.lax.map(verdicts, (state.stacks, state.depth, state.lexer, state.live))
    return state._replace(outcome_ok=valid, complete=complete, overflow=state.overflow | blocked.any())


@jax.jit  # tables as arguments: traced eagerly, they would be baked into the program as constants
def cfg_init_state(cg: CompiledCFG) -> CFGState:
    """The state before any token: one configuration, the LR start state on the stack."""
    k, d = cg.max_configs, cg.stack_depth
    state = CFGState(
        stacks=jnp.zeros((k, d), jnp.int32).at[0, 0].set(cg.lr_start),
        depth=jnp.zeros(k, jnp.int32).at[0].set(1),
        lexer=jnp.zeros(k, jnp.int32).at[0].set(cg.lexer_start),
        live=jnp.zeros(k, jnp.bool_).at[0].set(True),
        outcome_ok=jnp.zeros((k, cg.outcome_node.shape[1]), jnp.bool_),
        complete=jnp.zeros(k, jnp.bool_),
        finished=jnp.bool_(False),
        overflow=jnp.bool_(False),
    )
    return _with_verdicts(cg, state)


def _set_valid(cg: CompiledCFG, valid, sets):
    """bool[...]: outcome sets (global ids ``sets``) that hold a valid outcome."""
    members = cg.set_members[sets]
    return ((members >= 0) & valid[jnp.maximum(members, 0)]).any(axis=-1)


def _config_tokens(cg: CompiledCFG, valid, lexer):
    """uint32[W]: the tokens one configuration allows (EOS excluded), from its verdicts."""
    set_on = _set_valid(cg, valid, cg.state_sets[lexer])
    rows = cg.mask_rows[cg.dense_row[lexer]]
    # The parts hold disjoint tokens, so adding them is OR-ing them.
    words = jnp.where(set_on[cg.dense_set[lexer]][:, None], rows, jnp.uint32(0)).sum(axis=0, dtype=jnp.uint32)
    token = cg.sparse_token[lexer]
    bits = jnp.where(set_on[cg.sparse_set[lexer]], jnp.left_shift(jnp.uint32(1), (token & 31).astype(jnp.uint32)), jnp.uint32(0))
    return words.at[token >> 5].add(bits)


def cfg_accepts(cg: CompiledCFG, state: CFGState) -> jax.Array:
    """bool[]: the output is complete (EOS allowed now)."""
    del cg
    return state.finished | (state.live & state.complete).any()


def cfg_token_mask(cg: CompiledCFG, state: CFGState) -> jax.Array:
    """uint32[W]: the allowed tokens, EOS included exactly when the output is complete."""
    per_config = jax.vmap(lambda valid, lexer: _config_tokens(cg, valid, lexer))(state.outcome_ok & state.live[:, None], state.lexer)
    tokens = jax.lax.reduce(per_config, jnp.uint32(0), jax.lax.bitwise_or, (0,))
    eos = jnp.where(cfg_accepts(cg, state), cg.eos_mask, jnp.uint32(0))
    return jnp.where(state.finished, jnp.uint32(0), tokens) | eos


def cfg_token_allowed(cg: CompiledCFG, state: CFGState, token) -> jax.Array:
    """bool[]: whether `cfg_token_mask` allows ``token`` (int32[]), without building the mask."""
    token = jnp.asarray(token, jnp.int32)
    safe = jnp.clip(token, 0, cg.logits_width - 1)
    members = cg.set_members[cg.class_set[state.lexer, cg.token_class[safe]]]  # [K, Z] per configuration
    valid = (members >= 0) & jnp.take_along_axis(state.outcome_ok, jnp.maximum(members, 0), axis=1)
    taken = (valid.any(axis=1) & state.live).any() & ~state.finished
    in_range = (token >= 0) & (token < cg.logits_width)
    return in_range & jnp.where(is_allowed(cg.eos_mask, safe), cfg_accepts(cg, state), taken)


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

    def follow(stack, depth, lexer, outcome_ok):
        local = cg.set_members[cg.class_set[lexer, cg.token_class[jnp.clip(token, 0, cg.logits_width - 1)]]]
        safe = jnp.maximum(local, 0)
        outcome = cg.state_outcomes[lexer, safe]
        p = jax.vmap(lambda o: _feed(cg, stack, depth, cg.outcome_terminals[o], cg.outcome_length[o]))(outcome)
        index = p.base[:, None] + jnp.arange(cg.overlay)[None, :]
        written = jnp.where(jnp.arange(cg.overlay)[None, :] < p.height[:, None], p.overlay, stack[jnp.minimum(index, cg.stack_depth - 1)])
        stacks = jax.vmap(lambda ix, w: stack.at[ix].set(w, mode="drop"))(index, written)
        return (local >= 0) & outcome_ok[safe], stacks, p.base + p.height, cg.outcome_lexer[lexer, safe]

    valid, stacks, depth, lexer = jax.vmap(follow)(state.stacks, state.depth, state.lexer, state.outcome_ok)
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
    stepped = state._replace(
        stacks=stacks[order],
        depth=depth[order],
        lexer=lexer[order],
        live=keep[order],
        overflow=state.overflow | (keep.sum() > cg.max_configs),
    )
    # EOS: the configurations stay, marked finished when the output is complete, else they die.
    complete = cfg_accepts(cg, state)
    ended = state._replace(finished=complete, live=state.live & complete)
    chosen = jax.tree_util.tree_map(lambda a, b: jnp.where(is_eos, a, b), ended, stepped)
    # Only a step that made new configurations needs their verdicts.
    return jax.lax.cond(is_eos, lambda s: s, lambda s: _with_verdicts(cg, s), chosen)
