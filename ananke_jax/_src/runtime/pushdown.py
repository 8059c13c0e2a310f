"""The bounded-stack pushdown engine: mask and advance for context-free grammars, in pure jax.

Each parse configuration holds an LR stack and a lexer state. From a lexer state, every token
has a precomputed set of outcomes (terminals completed, lexer state after). Which outcomes the
stack allows is worked out once per configuration, when the configuration is made (in
`cfg_advance` and the initial state): the terminals of all outcomes of the lexer state, shared
through a prefix tree, are fed to LR simulations on copies of the stack (one per trie node, the
node's parse continuing its parent's). The state keeps the verdicts, so `cfg_token_mask` only gathers: a
token is allowed when one of its outcomes is valid in some configuration. All loops have
static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled_cfg import MAX_RULE_LENGTH, PushdownState, PushdownGrammar
from ananke_jax._src.runtime.masks import is_allowed

SHIFT, REDUCE, ACCEPT = 1, 2, 3


class _LR(NamedTuple):
    """The LR tables in the form one parser action reads them (derived once per step)."""

    action: jax.Array  # int32[S, T]: argument << 12 | states popped << 2 | kind
    goto: jax.Array  # int32[S, R]: the state pushed after reducing by each rule


def _lr(cg: PushdownGrammar) -> _LR:
    kind = cg.action_kind.astype(jnp.int32)
    popped = jnp.where(kind == REDUCE, cg.rule_length[cg.action_arg], 0)
    return _LR(jnp.left_shift(cg.action_arg, 12) | jnp.left_shift(popped, 2) | kind, cg.goto[:, cg.rule_lhs])


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


def _act(lr: _LR, column, length, p: _Parse) -> _Parse:
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


def _feed(lr: _LR, stack, depth, terminals, length) -> _Parse:
    """Feed LR columns ``terminals[:length]`` (int32[M]) to the parser of one configuration.

    Returns the simulation after the input: ``ok & (pos >= length)`` when it was accepted.
    """
    step = lambda p: _act(lr, terminals[jnp.minimum(p.pos, terminals.shape[0] - 1)], length, p)
    return _run(step, _fresh(stack, depth), length, terminals.shape[0] * (stack.shape[0] + 2))  # D + 2 actions a terminal


def _walk_trie(cg: PushdownGrammar, lr: _LR, stack, depth, lexer) -> _Parse:
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
        lane = jax.tree_util.tree_map(lambda n, f: jnp.where(root.reshape((-1,) + (1,) * f.ndim), jnp.broadcast_to(f, n[p].shape), n[p]), nodes, fresh)
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


def _verdicts(cg: PushdownGrammar, lr: _LR, stack, depth, lexer):
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


def _live_count(state: PushdownState) -> jax.Array:
    """int32[]: one past the last live configuration (live ones come first)."""
    k = state.live.shape[0]
    return jnp.where(state.live.any(), k - jnp.argmax(state.live[::-1]), 0).astype(jnp.int32)


def _with_verdicts(cg: PushdownGrammar, state: PushdownState, known) -> PushdownState:
    """Fill in the verdicts of the live configurations not ``known`` (bool[K]: their verdicts
    are already in the state), one loop trip each."""
    lr, need = _lr(cg), state.live & ~known
    order = jnp.argsort(~need, stable=True)  # the configurations to compute first

    def body(carry):
        r, valid, complete, blocked = carry
        i = order[r]
        v, c, b = _verdicts(cg, lr, state.stacks[i], state.depth[i], state.lexer[i])
        return r + 1, valid.at[i].set(v), complete.at[i].set(c), blocked | b

    init = (jnp.int32(0), state.outcome_ok, state.complete, jnp.bool_(False))
    _, valid, complete, blocked = jax.lax.while_loop(lambda c: c[0] < need.sum(), body, init)
    return state._replace(outcome_ok=valid, complete=complete, overflow=state.overflow | blocked)


@jax.jit  # tables as arguments: traced eagerly, they would be baked into the program as constants
def cfg_init_state(cg: PushdownGrammar) -> PushdownState:
    """The state before any token: one configuration, the LR start state on the stack."""
    k, d = cg.max_configs, cg.stack_depth
    state = PushdownState(
        stacks=jnp.zeros((k, d), jnp.int32).at[0, 0].set(cg.lr_start),
        depth=jnp.zeros(k, jnp.int32).at[0].set(1),
        lexer=jnp.zeros(k, jnp.int32).at[0].set(cg.lexer_start),
        live=jnp.zeros(k, jnp.bool_).at[0].set(True),
        outcome_ok=jnp.zeros((k, cg.outcome_node.shape[1]), jnp.bool_),
        complete=jnp.zeros(k, jnp.bool_),
        finished=jnp.bool_(False),
        overflow=jnp.bool_(False),
    )
    return _with_verdicts(cg, state, jnp.zeros(k, jnp.bool_))


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


def _follow(cg: PushdownGrammar, lr: _LR, state: PushdownState, config, local) -> _Configs:
    """The configuration that configuration ``config`` makes by following its outcome ``local``."""
    stack, depth, lexer = state.stacks[config], state.depth[config], state.lexer[config]
    outcome = cg.state_outcomes[lexer, local]
    p = _feed(lr, stack, depth, cg.outcome_terminals[outcome], cg.outcome_length[outcome])
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
    lr, k = _lr(cg), cg.max_configs
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
    return jax.lax.cond(is_eos, lambda: ended, lambda: _with_verdicts(cg, stepped, known))
