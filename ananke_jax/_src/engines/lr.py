"""LR simulations on device: the verdicts of a pushdown parse configuration.

A configuration's verdicts (which outcomes of its lexer state its stack allows) come from feeding
the terminals of those outcomes, shared through a prefix tree, to simulations on copies of the
stack. ``cg`` below is a `PushdownGrammar` (`ananke_jax._src.engines.pushdown`). All loops have
static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

MAX_RULE_LENGTH = 1023  # the symbols of one alternative: an LR action packs them in 10 bits
ERROR, SHIFT, REDUCE, ACCEPT = 0, 1, 2, 3  # the kinds of LR action in `PushdownGrammar.action_kind`


class LRActions(NamedTuple):
    """The LR tables in the form one parser action reads them (see `PushdownGrammar.lr_actions`)."""

    action: jax.Array  # int32[S, T]: argument << 12 | states popped << 2 | kind (a reduction's argument: its rule's lhs)
    goto: jax.Array  # int32[S, G]: the state pushed after reducing to each nonterminal


def pack_actions(action_kind, action_arg, rule_lhs, rule_length) -> jax.Array:
    """int32[S, T]: `LRActions.action` from the LR tables (a shift's argument is its state, a
    reduction's its rule)."""
    kind = action_kind.astype(jnp.int32)
    reduce = kind == REDUCE
    arg = jnp.where(reduce, rule_lhs[action_arg], action_arg)
    popped = jnp.where(reduce, rule_length[action_arg], 0)
    return jnp.left_shift(arg, 12) | jnp.left_shift(popped, 2) | kind


_OK, _OVERFLOW = 1, 2  # the flag bits of a packed `_Parse`


class _Parse(NamedTuple):
    """An LR simulation on a copy of a configuration's stack, packed in one array so that an
    action is one fused update (separate fields cost one operation each per loop trip).

    packed: int32[..., D + 4]: the stack (entries at and above the height are junk), then the
      height, the state on top, the terminals consumed, and flags (`_OK`: no error so far,
      `_OVERFLOW`: the stack depth was hit).
    """

    packed: jax.Array

    stack = property(lambda self: self.packed[..., :-4])
    height = property(lambda self: self.packed[..., -4])
    top = property(lambda self: self.packed[..., -3])
    pos = property(lambda self: self.packed[..., -2])
    ok = property(lambda self: (self.packed[..., -1] & _OK) != 0)
    overflow = property(lambda self: (self.packed[..., -1] & _OVERFLOW) != 0)


def _parse(stack, height, top, pos, ok, overflow) -> _Parse:
    """Pack the fields of a `_Parse` (``stack`` int32[..., D], the others broadcastable to [...])."""
    flags = jnp.where(ok, _OK, 0) | jnp.where(overflow, _OVERFLOW, 0)
    fields = jnp.stack(jnp.broadcast_arrays(height, top, pos, flags), axis=-1).astype(jnp.int32)
    return _Parse(jnp.concatenate([stack, fields], axis=-1))


def _fresh(stack, depth) -> _Parse:
    return _parse(stack, depth, stack[jnp.maximum(depth - 1, 0)], 0, True, False)


def _act(lr: LRActions, column, length, p: _Parse) -> _Parse:
    """One LR action on terminal ``column`` while ``pos < length`` (a no-op once the input is
    used up or rejected): a shift or accept consumes it, a reduction pops and pushes a goto."""
    active = p.ok & (p.pos < length)
    entry = lr.action[p.top, column]
    kind, popped, arg = entry & 3, jnp.right_shift(entry, 2) & MAX_RULE_LENGTH, jnp.right_shift(entry, 12)
    is_shift, is_accept = kind == SHIFT, kind == ACCEPT
    push = is_shift | (kind == REDUCE)
    height = p.height - popped
    pushed = jnp.where(is_shift, arg, lr.goto[p.stack[jnp.maximum(height - 1, 0)], arg])
    full = push & (height >= p.stack.shape[0])
    write = active & push & ~full
    return _parse(
        stack=jnp.where(write & (jnp.arange(p.stack.shape[0]) == height), pushed, p.stack),
        height=jnp.where(active, height + write, p.height),
        top=jnp.where(write, pushed, p.top),
        pos=p.pos + (active & (is_shift | is_accept)),
        ok=p.ok & ~(active & (full | ~(push | is_accept))),
        overflow=p.overflow | (active & full),
    )


def _accepted(p: _Parse):
    """bool[...]: the single terminal fed to a trie node's parse was taken."""
    return p.ok & (p.pos == 1)


def _running(p: _Parse, length):
    return p.ok & (p.pos < length)


def _run(step, p: _Parse, length, limit: int) -> _Parse:
    """Apply ``step`` (parse -> parse, on one parse or a vector of them) until no parse is still
    reading its ``length`` terminals, or for ``limit`` trips: parses then still reading ran out
    of actions, which counts as overflow."""
    p, _ = jax.lax.while_loop(lambda x: _running(x[0], length).any() & (x[1] < limit), lambda x: (step(x[0]), x[1] + 1), (p, jnp.int32(0)))
    return _parse(p.stack, p.height, p.top, p.pos, p.ok, p.overflow | _running(p, length))


def feed(lr: LRActions, stack, depth, terminals, length) -> _Parse:
    """Feed LR columns ``terminals[:length]`` (int32[M]) to the parser of one configuration.

    Returns the simulation after the input: ``ok & (pos >= length)`` when it was accepted.
    """
    step = lambda p: _act(lr, terminals[jnp.minimum(p.pos, terminals.shape[0] - 1)], length, p)
    return _run(step, _fresh(stack, depth), length, terminals.shape[0] * (stack.shape[0] + 2))  # D + 2 actions a terminal


def _walk_trie(cg, lr: LRActions, stack, depth, lexer) -> _Parse:
    """Feed the terminals of lexer state ``lexer``'s trie to one configuration, a chunk of
    ``cg.lanes`` nodes at a time, each node one terminal after its parent. Chunks whose nodes'
    parents were all refused are skipped (their nodes stay refused).

    Returns a `_Parse` per node (arrays with a leading node axis); a node's terminal is
    accepted when `_accepted` holds for it.
    """
    lanes, fresh = cg.lanes, _fresh(stack, depth)
    parent_of, column_of, chunk_of = cg.node_parent[lexer], cg.node_column[lexer], cg.node_chunk[lexer]
    chunks, starts = cg.num_chunks[lexer], cg.chunk_start[lexer]
    act = jax.vmap(lambda col, p: _act(lr, col, 1, p))

    def next_chunk(c, nodes: _Parse):
        """The first chunk after ``c`` with a node whose parent was accepted, is the root or
        overflowed (which its descendants must inherit): the chunks in between have only
        refused nodes."""
        parent = jnp.maximum(parent_of, 0)
        reached = (parent_of < 0) | _accepted(nodes)[parent] | nodes.overflow[parent]
        return jnp.where(reached & (chunk_of > c), chunk_of, chunks).min()

    def load(c, nodes: _Parse) -> tuple[_Parse, jax.Array]:
        """The lanes of chunk ``c``, each starting from its parent's parse (lanes past the
        chunk's end are refused, so that what they write is right if those nodes are skipped)."""
        start = starts[c]
        parent = jax.lax.dynamic_slice(parent_of, (start,), (lanes,))
        root, p = parent < 0, jnp.maximum(parent, 0)
        lane = jax.tree_util.tree_map(
            lambda n, f: jnp.where(root.reshape((-1,) + (1,) * f.ndim), jnp.broadcast_to(f, n[p].shape), n[p]), nodes, fresh
        )
        inside = jax.lax.dynamic_slice(chunk_of, (start,), (lanes,)) == c
        lane = _parse(lane.stack, lane.height, lane.top, 0, inside & (root | _accepted(nodes)[p]), lane.overflow)
        return lane, jax.lax.dynamic_slice(column_of, (start,), (lanes,))

    def run_chunk(carry):
        """Load chunk ``c``, run its lanes to the end of their terminal, store them, move on."""
        c, nodes = carry
        lane, column = load(c, nodes)
        lane = _run(lambda x: act(column, x), lane, 1, limit)
        nodes = jax.tree_util.tree_map(lambda n, x: jax.lax.dynamic_update_slice_in_dim(n, x, starts[c], 0), nodes, lane)
        return next_chunk(c, nodes), nodes

    nodes = jax.tree_util.tree_map(lambda x: jnp.zeros(parent_of.shape + x.shape, x.dtype), fresh)
    limit = cg.stack_depth + 2  # actions for one terminal: the reductions, then a shift
    return jax.lax.while_loop(lambda c: c[0] < chunks, run_chunk, (jnp.int32(0), nodes))[1]


def _verdicts(cg, lr: LRActions, stack, depth, lexer):
    """What one configuration allows: bool[P], its lexer state's outcomes that the stack takes
    (their terminals accepted, then one of their lookahead terminals, or none needed); bool[],
    whether the output is complete (EOS allowed); and bool[], whether an outcome was refused
    for lack of stack depth."""
    nodes = _walk_trie(cg, lr, stack, depth, lexer)
    accepted = _accepted(nodes)
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


def with_verdicts(cg, state, known):
    """Fill in the verdicts of the live configurations not ``known`` (bool[K]: their verdicts
    are already in the state), one loop trip each."""
    lr, need = cg.lr_actions(), state.live & ~known
    order = jnp.argsort(~need, stable=True)  # the configurations to compute first

    def body(carry):
        r, valid, complete, blocked = carry
        i = order[r]
        v, c, b = _verdicts(cg, lr, state.stacks[i], state.depth[i], state.lexer[i])
        return r + 1, valid.at[i].set(v), complete.at[i].set(c), blocked | b

    init = (jnp.int32(0), state.outcome_ok, state.complete, jnp.bool_(False))
    _, valid, complete, blocked = jax.lax.while_loop(lambda c: c[0] < need.sum(), body, init)
    return state._replace(outcome_ok=valid, complete=complete, overflow=state.overflow | blocked)
