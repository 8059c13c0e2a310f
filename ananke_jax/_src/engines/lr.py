"""LR simulations on device: the verdicts of a pushdown parse configuration.

A configuration's verdicts (which outcomes of its lexer state its stack allows) come from feeding
the terminals of those outcomes, shared through a prefix tree, to simulations on copies of the
stack. ``cg`` below is a `PushdownGrammar` (`ananke_jax._src.engines.pushdown`). All loops have
static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

import contextlib
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.engines.small_ops import any_last, count_before, min_last, true_indices

MAX_RULE_LENGTH = 1023  # the symbols of one alternative: an LR action packs them in 10 bits
ERROR, SHIFT, REDUCE, ACCEPT = 0, 1, 2, 3  # the kinds of LR action in `PushdownGrammar.action_kind`
# A shift into a state whose only action is one reduction, fused with it (`lr.fused_reductions`):
# its argument is the rule; the state shifted to is never pushed.
SHIFT_REDUCE = 4


class LRActions(NamedTuple):
    """The LR tables in the form one parser action reads them (see `PushdownGrammar.lr_actions`)."""

    action: jax.Array  # int32[S, T, A]: argument << 12 | states popped << 2 | kind, see `pack_actions`
    goto: jax.Array  # int32[S, G]: the state pushed after reducing to each nonterminal
    forks: int  # F, the parses a simulation keeps: 1 where no cell conflicts (A = 1)


def pack_actions(action_kind, action_arg, rule_lhs, rule_length):
    """int32[S, T, A]: `LRActions.action` from the LR tables (a shift's argument is its state, a
    reduction's its rule), numpy or jax arrays alike: ``argument << 12 | states popped << 2 | kind``.
    A `SHIFT_REDUCE` packs as a `REDUCE` that consumes the terminal and pops one state fewer (the
    one it never pushed); a reduction's packed argument is its rule's lhs << 1 | whether it
    consumes."""
    kind = action_kind.astype(np.int32)
    fused = kind == SHIFT_REDUCE
    reduce = (kind == REDUCE) | fused
    rule = action_arg * reduce  # (a shift's argument is no rule; `reduce` is bool, so ~reduce is its complement)
    arg = reduce * (rule_lhs[rule] * 2 + fused) + ~reduce * action_arg
    popped = reduce * (rule_length[rule] - fused)
    return ((arg << 12) | (popped << 2) | (kind - fused * (SHIFT_REDUCE - REDUCE))).astype(np.int32)


def fork_width(action_columns: int, max_configs: int) -> int:
    """F for tables with ``action_columns`` actions a cell: a simulation forks where a cell
    holds several, into as many parses as the state keeps configurations."""
    return 1 if action_columns == 1 else max_configs


ACCELERATOR_ACTIONS = 4  # LR actions per loop trip on an accelerator (a terminal: its reductions, then a shift)

_OK, _OVERFLOW = 1, 2  # the flag bits of a packed `_Parse`


class _Parse(NamedTuple):
    """LR simulations on copies of a configuration's stack, packed in one array so that an
    action is one fused update (separate fields cost one operation each per loop trip).

    packed: int32[..., F, D + 4]: F forks of one simulation (dead ones: no `_OK`), each the
      stack (entries at and above the height are junk), then the height, the state on top, the
      terminals consumed, and flags (`_OK`: alive, no error so far; `_OVERFLOW`: the stack depth
      or the forks ran out). Tables that never fork (F = 1) leave the fork axis out, so that
      their simulations are the plain LR parser's.
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


def _fresh(lr: LRActions, stack, depth) -> _Parse:
    """A simulation from ``stack`` (int32[D]) of height ``depth``: one fork alive."""
    one = _parse(stack, depth, stack[jnp.maximum(depth - 1, 0)], 0, True, False).packed
    return _Parse(one if lr.forks == 1 else jnp.concatenate([one[None], jnp.zeros((lr.forks - 1,) + one.shape, one.dtype)]))


class _Move(NamedTuple):
    """What one action does to a parse, its stack write apart: ``pushed`` goes at index ``at``
    where ``write``; then the parse's fields (all int32/bool[...])."""

    at: jax.Array
    pushed: jax.Array
    write: jax.Array
    height: jax.Array
    top: jax.Array
    pos: jax.Array
    ok: jax.Array
    overflow: jax.Array


def _move(lr: LRActions, entry, length, p, below_of) -> _Move:
    """The action ``entry`` (packed) on a parse with fields ``p`` (a `_Parse` or anything with its
    fields, broadcast against ``entry``) while ``pos < length`` (a no-op once the input is used
    up or rejected): a shift or accept consumes a terminal, a reduction pops and pushes a goto
    (and consumes one where fused with the shift before it). ``below_of(i)`` reads the stack at
    indices ``i`` (shaped as ``entry``)."""
    active = p.ok & (p.pos < length)
    kind, popped, arg = entry & 3, jnp.right_shift(entry, 2) & MAX_RULE_LENGTH, jnp.right_shift(entry, 12)
    is_shift, is_accept, is_reduce = kind == SHIFT, kind == ACCEPT, kind == REDUCE
    push = is_shift | is_reduce
    at = p.height - popped
    pushed = jnp.where(is_shift, arg, lr.goto[below_of(jnp.maximum(at - 1, 0)), jnp.right_shift(arg, 1)])
    full = push & (at >= p.stack.shape[-1])
    write = active & push & ~full
    return _Move(
        at=at,
        pushed=pushed,
        write=write,
        height=jnp.where(active, at + write, p.height),
        top=jnp.where(write, pushed, p.top),
        pos=p.pos + (active & (is_shift | is_accept | (is_reduce & ((arg & 1) == 1)))),
        ok=p.ok & ~(active & (full | ~(push | is_accept))),
        overflow=p.overflow | (active & full),
    )


def _apply(lr: LRActions, entry, length, p: _Parse) -> _Parse:
    """The action ``entry`` (packed, int32[]) on one parse (int32[D + 4]): see `_move`."""
    m = _move(lr, entry, length, p, lambda i: p.stack[i])
    stack = jnp.where(m.write & (jnp.arange(p.stack.shape[0]) == m.at), m.pushed, p.stack)
    return _parse(stack, m.height, m.top, m.pos, m.ok, m.overflow)


def _fingerprints(p: _Parse, cut, weights) -> jax.Array:
    """int32[F, A, 2]: two random linear hashes (wrapping, ``weights`` int32[D + 1, 2]) of each
    fork's stack below each height ``cut`` (int32[F, A]): of ``stack[f, :cut[f, a]]``. A write
    at the cut adds its term."""
    depth = p.stack.shape[-1]
    terms = (p.stack + 1)[:, :, None] * weights[None, :-1]  # [F, D, 2]
    below = (jnp.arange(depth)[None, None, :] < cut[:, :, None]).astype(jnp.int32)  # [F, A, D]
    return jnp.einsum("fad,fdk->fak", below, terms)


def _fork_act(lr: LRActions, column, length, p: _Parse) -> _Parse:
    """`_act` where cells conflict: every action of each fork's cell (``p``: int32[F, D + 4]).

    Candidates are compared by height, top state, position and two 32-bit fingerprints of the
    stack (comparing whole stacks pairwise cost most of a step): distinct stacks pass for one
    with a chance near 2^-64, and then a fork is dropped, refusing a continuation, never
    allowing one. Only the F kept candidates get their stacks written."""
    forks = p.packed.shape[0]
    entries = lr.action[p.top, column]  # [F, A]
    fields = _Parse(p.packed[:, None, :])  # broadcast against [F, A]
    m = _move(lr, entries, length, fields, lambda i: jnp.take_along_axis(p.stack, i, axis=1))
    # Odd random weights, the same in every process (fixed at trace time).
    weights = jnp.asarray(np.random.default_rng(0).integers(1, 2**31, size=(p.stack.shape[-1] + 1, 2)) | 1, jnp.int32)
    prints = _fingerprints(p, jnp.where(m.write, m.at, m.height), weights)
    prints = prints + jnp.where(m.write[:, :, None], (m.pushed + 1)[:, :, None] * weights[m.at], 0)
    primary = (jnp.arange(entries.shape[1]) == 0)[None, :]
    taken = m.ok & (primary | (((entries & 3) != ERROR) & _running(p, length)[:, None]))
    # Primary actions first: candidate a * F + f is fork f's action a.
    flat = lambda x: jnp.swapaxes(x, 0, 1).reshape((-1,) + x.shape[2:])
    keys = flat(jnp.concatenate([prints, jnp.stack([m.height, m.top, m.pos], axis=-1)], axis=-1))
    taken = flat(taken)
    earlier = jnp.tril(jnp.ones((taken.shape[0],) * 2, jnp.bool_), k=-1)
    same = (keys[:, None, :] == keys[None, :, :]).all(axis=2)
    first = taken & ~(same & earlier & taken[None, :]).any(axis=1)
    # Fork j is the j-th first-seen candidate (gathered: a scatter is slow on CPUs).
    chosen = first[None, :] & (count_before(first)[None, :] == jnp.arange(forks)[:, None])  # [F, A * F]
    pick, kept = jnp.argmax(chosen, axis=1), chosen.any(axis=1)
    # The chosen candidates' fields, gathered at once (a gather per field costs a kernel each).
    picked = flat(jnp.stack([x.astype(jnp.int32) for x in m], axis=-1))[pick]  # [F, fields]
    move = _Move(*(picked[:, i].astype(x.dtype) for i, x in enumerate(m)))
    source = p.stack[pick % forks]
    stack = jnp.where(move.write[:, None] & (jnp.arange(p.stack.shape[-1])[None, :] == move.at[:, None]), move.pushed[:, None], source)
    dropped = (first.sum() > forks) | flat(m.overflow).any()
    return _parse(stack, move.height, move.top, move.pos, kept & move.ok, dropped)


def _act(lr: LRActions, column, length, p: _Parse) -> _Parse:
    """One LR action on each fork of a simulation (``p``: int32[F, D + 4]; ``column``: the LR
    column each reads, broadcast to [F]). Where a cell holds several actions the fork forks;
    the live forks, deduplicated, are kept in order (primary actions first), and forks past F
    are dropped with `_OVERFLOW` on the simulation."""
    if lr.forks == 1:  # static: tables without conflicts never fork (and have no fork axis)
        return _apply(lr, lr.action[p.top, column, 0], length, p)
    return _fork_act(lr, column, length, p)


def _any_fork(lr: LRActions, x):
    """bool[...]: ``x`` (bool[..., F], or bool[...] without forks) holds for some fork."""
    return x if lr.forks == 1 else x.any(axis=-1)


def _accepted(lr: LRActions, p: _Parse):
    """bool[...]: the single terminal fed to a trie node's simulation was taken (by some fork)."""
    return _any_fork(lr, p.ok & (p.pos == 1))


def _overflowed(lr: LRActions, p: _Parse):
    """bool[...]: some fork of a simulation ran out of stack depth or forks."""
    return _any_fork(lr, p.overflow)


def _running(p: _Parse, length):
    return p.ok & (p.pos < length)


_traced_paths: list[str] = []  # set by `paths_of`


def on_accelerator() -> bool:
    """Whether the program being traced takes the accelerator's paths: where jax's default
    backend is not a CPU, unless `paths_of` says otherwise. On a CPU a loop trip costs its work,
    on an accelerator a read back of its predicate to the host; both paths give equal results.
    (The choice is made once, when tracing: `lax.platform_dependent` would trace both paths at
    every nesting level.)"""
    if _traced_paths:
        return _traced_paths[-1] == "accelerator"
    return jax.default_backend() != "cpu"


@contextlib.contextmanager
def paths_of(platform: str):
    """Within it, programs traced take the paths of ``platform`` (``"cpu"`` or ``"accelerator"``)
    wherever they run: for tests of both paths, and counting an accelerator's loop trips on a CPU.
    A function jitted outside and traced before keeps its trace: jit a new one inside."""
    if platform not in ("cpu", "accelerator"):
        raise ValueError(f"platform must be 'cpu' or 'accelerator', got {platform!r}")
    _traced_paths.append(platform)
    try:
        yield
    finally:
        _traced_paths.pop()


def _actions(step, p: _Parse, count: int) -> _Parse:
    """``count`` applications of ``step`` (an action on a parse that is done is a no-op)."""
    return functools.reduce(lambda x, _: step(x), range(count), p)


def _ran_out(p: _Parse, length) -> _Parse:
    """``p`` with the forks still reading their ``length`` terminals flagged as overflow (they ran
    out of actions)."""
    return _parse(p.stack, p.height, p.top, p.pos, p.ok, p.overflow | _running(p, length))


def _run(step, p: _Parse, length, limit: int, forks: int) -> _Parse:
    """Apply ``step`` (parse -> parse, on simulations of any batch shape, with ``forks`` forks each)
    until no fork is still reading its ``length`` terminals, or for ``limit`` actions: forks then
    still reading ran out of actions, which counts as overflow.

    On an accelerator a trip takes `ACCELERATOR_ACTIONS` (an action on a parse that is done is a
    no-op). The first trip's actions run before the loop, so that most runs make no trip, on an
    accelerator and where an action is cheap (no forks); a forking action is large, and on a CPU,
    where a trip costs its work, its one copy in the loop compiles faster and runs no slower."""
    unroll = ACCELERATOR_ACTIONS if on_accelerator() else 1
    ahead = unroll if on_accelerator() or forks == 1 else 0

    def body(carry):
        return _actions(step, carry[0], unroll), carry[1] + unroll

    again = lambda carry: any_last(_running(carry[0], length).reshape(-1)) & (carry[1] < limit)
    p, _ = jax.lax.while_loop(again, body, (_actions(step, p, ahead), jnp.int32(ahead)))
    return _ran_out(p, length)


def feed(lr: LRActions, stack, depth, terminals, length) -> _Parse:
    """Feed LR columns ``terminals[:length]`` (int32[M]) to the parser of one configuration.

    Returns the simulation's F forks after the input (int32[F, D + 4], with F = 1 too): a fork
    with ``ok & (pos >= length)`` accepted it.
    """
    step = lambda p: _act(lr, terminals[jnp.minimum(p.pos, terminals.shape[0] - 1)], length, p)
    limit = terminals.shape[0] * (stack.shape[0] + 2)  # D + 2 actions a terminal
    p = _run(step, _fresh(lr, stack, depth), length, limit, lr.forks)
    return _Parse(p.packed.reshape(lr.forks, -1))


# The largest tries walked by paths: nodes, and chunks of the deepest (on the grammars of grammars/,
# paths cost more from about 55 nodes).
PATH_NODES, PATH_LEVELS = 48, 8


def walks_paths(cg, lr: LRActions) -> bool:
    """Whether the verdicts are walked by `_walk_paths` rather than `_walk_chunks` (static): for
    tables that never fork, with tries of at most `PATH_NODES` nodes and `PATH_LEVELS` chunks."""
    return lr.forks == 1 and cg.node_parent.shape[-1] - cg.lanes <= PATH_NODES and cg.chunk_start.shape[-1] <= PATH_LEVELS


def _walk_paths(cg, lr: LRActions, stack, depth, lexer, skip=False):
    """Feed every node of lexer state ``lexer``'s trie its whole path of terminals from the
    root, all nodes at once in one run: on a small trie, one loop whose trips are the actions of
    the longest path costs less than a loop over the chunks (shared prefixes are fed once per
    node: more work, fewer trips). A trie is at most as deep as its chunks are many. Tables that
    never fork only: forks that took a terminal in different numbers of actions would run on
    apart, where the chunk walk merges them at each node.

    Returns bool[N], the nodes whose terminal the configuration accepts (after their parents'),
    and bool[N], those whose path ran out of stack depth or of actions (D + 2 a terminal, over
    the whole path).
    """
    n, levels, row = cg.node_parent.shape[-1] - cg.lanes, cg.chunk_start.shape[-1], cg.lexer_row[lexer]
    parent_of, column_of = cg.node_parent[row, :n], cg.node_column[row, :n]
    real = cg.node_chunk[row, :n] < jnp.where(skip, 0, cg.num_chunks[row])  # the padding is no node
    # up[i, j]: the column of node i's ancestor j levels up (its own at j = 0), -1 past the root
    # (columns are >= 0, so a node's depth is its count of them; one fusion, where separate
    # reads of the ancestors would each be a kernel).
    node, up = jnp.arange(n), []
    for _ in range(levels):
        up.append(jnp.where(node >= 0, column_of[jnp.maximum(node, 0)], -1))
        node = jnp.where(node >= 0, parent_of[jnp.maximum(node, 0)], -1)
    up = jnp.stack(up, axis=1)
    length = jnp.where(real, (up >= 0).sum(axis=1, dtype=jnp.int32), 0)

    # (`feed` vmapped over the nodes computes the same, but its batched loop adds kernels: JSON 95 -> 100 a token)
    def step(p: _Parse) -> _Parse:
        column = jnp.take_along_axis(up, jnp.clip(length - 1 - p.pos, 0, levels - 1)[:, None], axis=1)[:, 0]
        return jax.vmap(lambda c, m, q: _act(lr, c, m, q))(column, length, p)

    fresh = _fresh(lr, stack, depth).packed
    p = _run(step, _Parse(jnp.broadcast_to(fresh, (n,) + fresh.shape)), length, levels * (cg.stack_depth + 2), lr.forks)
    return p.ok & (p.pos >= length) & real, p.overflow


def _walk_chunks(cg, lr: LRActions, stack, depth, lexer, skip=False):
    """Feed the terminals of lexer state ``lexer``'s trie to one configuration, a chunk of
    ``cg.lanes`` nodes at a time, each node one terminal after its parent. Chunks whose nodes'
    parents were all refused are skipped (their nodes stay refused).

    Returns bool[N + lanes], the nodes whose terminal the configuration accepts, and
    bool[N + lanes], those that ran out of stack depth, forks or actions (or whose parent did).
    """
    lanes, fresh, row = cg.lanes, _fresh(lr, stack, depth), cg.lexer_row[lexer]
    parent_of, column_of, chunk_of = cg.node_parent[row], cg.node_column[row], cg.node_chunk[row]
    chunks, starts = jnp.where(skip, 0, cg.num_chunks[row]), cg.chunk_start[row]
    act = jax.vmap(lambda col, p: _act(lr, col, 1, p))

    def next_chunk(c, nodes: _Parse):
        """The first chunk after ``c`` with a node whose parent was accepted, is the root or
        overflowed (which its descendants must inherit): the chunks in between have only
        refused nodes."""
        parent = jnp.maximum(parent_of, 0)
        reached = (parent_of < 0) | _accepted(lr, nodes)[parent] | _overflowed(lr, nodes)[parent]
        return min_last(jnp.where(reached & (chunk_of > c), chunk_of, chunks))

    def load(c, nodes: _Parse) -> tuple[_Parse, jax.Array]:
        """The lanes of chunk ``c``, each starting from its parent's forks that took its
        terminal (lanes past the chunk's end are refused, so that what they write is right if
        those nodes are skipped)."""
        start = starts[c]
        parent = jax.lax.dynamic_slice(parent_of, (start,), (lanes,))
        root = (parent < 0).reshape((lanes,) + (1,) * fresh.packed.ndim)
        lane = _Parse(jnp.where(root, fresh.packed, nodes.packed[jnp.maximum(parent, 0)]))
        inside = (jax.lax.dynamic_slice(chunk_of, (start,), (lanes,)) == c).reshape(root.shape[:-1])
        ok = inside & lane.ok & (root[..., 0] | (lane.pos == 1))
        return _parse(lane.stack, lane.height, lane.top, 0, ok, lane.overflow), jax.lax.dynamic_slice(column_of, (start,), (lanes,))

    def store(c, nodes: _Parse, lane: _Parse) -> _Parse:
        return _Parse(jax.lax.dynamic_update_slice_in_dim(nodes.packed, lane.packed, c, 0))

    def in_turn(nodes: _Parse) -> _Parse:
        """A loop over the chunks, each run to the end of its lanes' terminal (on a CPU, where a
        trip costs its work)."""

        def run_chunk(carry):
            c, nodes = carry
            lane, column = load(c, nodes)
            nodes = store(starts[c], nodes, _run(lambda x: act(column, x), lane, 1, limit, lr.forks))
            return next_chunk(c, nodes), nodes

        return jax.lax.while_loop(lambda c: c[0] < chunks, run_chunk, (jnp.int32(0), nodes))[1]

    def interleaved(nodes: _Parse) -> _Parse:
        """One loop (on an accelerator, where a trip costs a read back of its predicate): a trip
        takes `ACCELERATOR_ACTIONS` actions on the lanes of the chunk, and once they are done
        stores them and loads the next chunk (until then it stores them in the spare rows past
        the last node, which no node reads)."""
        spare = parent_of.shape[0] - lanes

        def trip(carry):
            c, nodes, lane, column, taken = carry
            lane, taken = _actions(lambda x: act(column, x), lane, ACCELERATOR_ACTIONS), taken + ACCELERATOR_ACTIONS
            done = ~_running(lane, 1).any() | (taken >= limit)
            nodes = store(jnp.where(done, starts[c], spare), nodes, _ran_out(lane, 1))
            c = jnp.where(done, next_chunk(c, nodes), c)
            lane, column = jax.tree_util.tree_map(lambda new, old: jnp.where(done, new, old), load(c, nodes), (lane, column))
            return c, nodes, lane, column, jnp.where(done, 0, taken)

        # The first trip runs outside the loop (without chunks, its lanes are all refused).
        first = trip((jnp.int32(0), nodes, *load(0, nodes), jnp.int32(0)))
        return jax.lax.while_loop(lambda c: c[0] < chunks, trip, first)[1]

    nodes = _Parse(jnp.zeros(parent_of.shape + fresh.packed.shape, jnp.int32))
    limit = cg.stack_depth + 2  # actions for one terminal: the reductions, then a shift
    nodes = (interleaved if on_accelerator() else in_turn)(nodes)
    return _accepted(lr, nodes), _overflowed(lr, nodes)


def verdicts(cg, lr: LRActions, stack, depth, lexer, skip=False):
    """What one configuration allows: bool[P], its lexer state's outcomes that the stack takes
    (their terminals accepted, then one of their lookahead terminals, or none needed); bool[],
    whether the output is complete (EOS allowed); and bool[], whether an outcome was refused
    for lack of stack depth. Where ``skip`` (bool[]), the trie walk walks nothing (by chunks:
    it stops after its first trip) and what it returns is to be ignored."""
    accepted, overflowed = (_walk_paths if walks_paths(cg, lr) else _walk_chunks)(cg, lr, stack, depth, lexer, skip)
    row = cg.lexer_row[lexer]
    node, lookahead = cg.outcome_node[row], cg.outcome_lookahead[row]
    terminals_ok = (node < 0) | accepted[jnp.maximum(node, 0)]
    lookahead_ok = ((lookahead >= 0) & accepted[jnp.maximum(lookahead, 0)]).any(axis=1)
    used = cg.outcomes_used(lexer)
    valid = used & terminals_ok & (cg.outcome_free[row] | lookahead_ok)
    node_overflow = (node >= 0) & overflowed[jnp.maximum(node, 0)]
    lookahead_overflow = ((lookahead >= 0) & overflowed[jnp.maximum(lookahead, 0)]).any(axis=1)
    blocked = (used & ~valid & (node_overflow | lookahead_overflow)).any()
    final = cg.complete_node[row]
    complete = ((final >= 0) & accepted[jnp.maximum(final, 0)]).any()
    return valid, complete, blocked


def with_verdicts(cg, state, known):
    """Fill in the verdicts of the live configurations not ``known`` (bool[K]: their verdicts
    are already in the state): on a CPU one loop trip each; on an accelerator all at once
    (vmapped, so that their trie walks share one loop's trips)."""
    lr, need = cg.lr_actions(), state.live & ~known

    if on_accelerator():
        v, c, b = jax.vmap(lambda *config: verdicts(cg, lr, *config))(state.stacks, state.depth, state.lexer, ~need)
        valid, complete, blocked = jnp.where(need[:, None], v, state.outcome_ok), jnp.where(need, c, state.complete), (need & b).any()
    else:
        order = true_indices(need)  # the configurations to compute first

        def body(carry):
            r, valid, complete, blocked = carry
            i = order[r]
            v, c, b = verdicts(cg, lr, state.stacks[i], state.depth[i], state.lexer[i])
            return r + 1, valid.at[i].set(v), complete.at[i].set(c), blocked | b

        init = (jnp.int32(0), state.outcome_ok, state.complete, jnp.bool_(False))
        valid, complete, blocked = jax.lax.while_loop(lambda c: c[0] < need.sum(), body, init)[1:]
    return state._replace(outcome_ok=valid, complete=complete, overflow=state.overflow | blocked)
