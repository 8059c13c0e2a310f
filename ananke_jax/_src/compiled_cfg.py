"""`PushdownGrammar`: the device tables of the bounded-stack pushdown engine, its state, and the
LR simulations that give a parse configuration its verdicts.

A configuration's verdicts (which outcomes of its lexer state its stack allows) are part of the
state, so the state before any token needs them as much as every later one: the simulations live
beside the tables, and `ananke_jax._src.runtime.pushdown` builds the mask and the advance on them.
All loops have static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled import table_bytes

MAX_RULE_LENGTH = 1023  # the symbols of one alternative: an LR action packs them in 10 bits
ERROR, SHIFT, REDUCE, ACCEPT = 0, 1, 2, 3  # the kinds of LR action in `PushdownGrammar.action_kind`


class PushdownState(NamedTuple):
    """The constraint state of one sequence under a context-free grammar (a `lax.scan` carry).

    Up to K parse configurations are kept, one per way the output so far can be lexed.

    Attributes:
      stacks: int32[K, D], LR state stacks; entries at and above ``depth`` are junk.
      depth: int32[K], stack heights.
      lexer: int32[K], lexer states (the terminal being read).
      live: bool[K], which configurations are in use.
      outcome_ok: bool[K, P], which outcomes of its lexer state each configuration allows.
      complete: bool[K], the output is complete in that configuration (EOS allowed).
      finished: bool[], EOS was taken.
      overflow: bool[], some continuation was refused or dropped for lack of stack depth or
        configurations.
    """

    stacks: jax.Array
    depth: jax.Array
    lexer: jax.Array
    live: jax.Array
    outcome_ok: jax.Array
    complete: jax.Array
    finished: jax.Array
    overflow: jax.Array


@dataclasses.dataclass(frozen=True)
class PushdownGrammar:
    """Token-level tables of a context-free grammar, held as device arrays (a pytree).

    Attributes (Q lexer states, S LR states, T LR terminal columns with the end of
    input last; per lexer state: N trie nodes, P outcomes, B dense rows, Z sparse tokens):
      lexer_start: int32[], the lexer state right after a cut.
      action_kind: int8[S, T]; action_arg, goto, rule_lhs, rule_length, lr_start: LR tables.
      node_parent, node_column, node_chunk: int32[Q, N + lanes], chunk_start: int32[Q, CH],
        num_chunks: int32[Q]: the prefix tree of terminals to check from each lexer state
        (see `ananke_jax._src.compile.outcome_trie`).
      state_outcomes: int32[Q, P], the global id of each lexer state's outcomes;
        outcome_terminals: int32[O, M], outcome_length: int32[O], their LR columns.
      outcome_node: int32[Q, P], outcome_lookahead: int32[Q, P, L], outcome_free: bool[Q, P],
        outcome_lexer: int32[Q, P]: each outcome's trie nodes and final lexer state.
      complete_node: int32[Q, E], the trie nodes that complete the output at EOS.
      set_members: int32[NS, Z], the outcomes (local to a lexer state) of each outcome set.
      token_class: int32[logits_width]; class_set: int32[Q, C], each token's outcome set.
      state_sets: int32[Q, NSq], the sets that occur from a lexer state (local set 0: empty).
      mask_rows: uint32[R, W]; dense_row, dense_set: int32[Q, B]; sparse_token, sparse_set:
        int32[Q, Z]: a lexer state's mask is its rows and tokens whose (local) sets are valid.
      eos_mask: uint32[W], the EOS bits.
      fallback_token: int32[], the first EOS id.
      vocab_size, logits_width: static vocabulary sizes.
      stack_depth, max_configs, lanes: static bounds D, K and the trie nodes checked at once.
    """

    lexer_start: jax.Array
    action_kind: jax.Array
    action_arg: jax.Array
    goto: jax.Array
    rule_lhs: jax.Array
    rule_length: jax.Array
    lr_start: jax.Array
    node_parent: jax.Array
    node_column: jax.Array
    chunk_start: jax.Array
    num_chunks: jax.Array
    node_chunk: jax.Array
    state_outcomes: jax.Array
    outcome_terminals: jax.Array
    outcome_length: jax.Array
    outcome_node: jax.Array
    outcome_lookahead: jax.Array
    outcome_free: jax.Array
    outcome_lexer: jax.Array
    complete_node: jax.Array
    set_members: jax.Array
    token_class: jax.Array
    class_set: jax.Array
    state_sets: jax.Array
    mask_rows: jax.Array
    dense_row: jax.Array
    dense_set: jax.Array
    sparse_token: jax.Array
    sparse_set: jax.Array
    eos_mask: jax.Array
    fallback_token: jax.Array
    vocab_size: int
    logits_width: int
    stack_depth: int
    max_configs: int
    lanes: int

    @property
    def mask_words(self) -> int:
        return self.eos_mask.shape[0]

    @property
    def table_bytes(self) -> int:
        return table_bytes(self)

    def init_state(self) -> PushdownState:
        """The state before any token: one configuration, the LR start state on the stack."""
        return _init_state(self)

    def __repr__(self) -> str:
        return (
            f"PushdownGrammar(kind=pushdown, lexer_states={self.class_set.shape[0]}, "
            f"lr_states={self.goto.shape[0]}, trie_nodes={self.node_parent.shape[1] - self.lanes}, "
            f"outcome_sets={self.set_members.shape[0]}, stack_depth={self.stack_depth}, "
            f"max_configs={self.max_configs}, vocab_size={self.vocab_size}, "
            f"logits_width={self.logits_width}, table_bytes={self.table_bytes:,})"
        )


_META = ["vocab_size", "logits_width", "stack_depth", "max_configs", "lanes"]
jax.tree_util.register_dataclass(
    PushdownGrammar,
    data_fields=[f.name for f in dataclasses.fields(PushdownGrammar) if f.name not in _META],
    meta_fields=_META,
)


# --- LR simulations on device ---------------------------------------------------------------


class LRActions(NamedTuple):
    """The LR tables in the form one parser action reads them (derived once per step)."""

    action: jax.Array  # int32[S, T]: argument << 12 | states popped << 2 | kind
    goto: jax.Array  # int32[S, R]: the state pushed after reducing by each rule


def lr_actions(cg: PushdownGrammar) -> LRActions:
    """The LR tables of ``cg`` in the form `feed` reads them."""
    kind = cg.action_kind.astype(jnp.int32)
    popped = jnp.where(kind == REDUCE, cg.rule_length[cg.action_arg], 0)
    return LRActions(jnp.left_shift(cg.action_arg, 12) | jnp.left_shift(popped, 2) | kind, cg.goto[:, cg.rule_lhs])


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


def _walk_trie(cg: PushdownGrammar, lr: LRActions, stack, depth, lexer) -> _Parse:
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


def _verdicts(cg: PushdownGrammar, lr: LRActions, stack, depth, lexer):
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


def with_verdicts(cg: PushdownGrammar, state: PushdownState, known) -> PushdownState:
    """Fill in the verdicts of the live configurations not ``known`` (bool[K]: their verdicts
    are already in the state), one loop trip each."""
    lr, need = lr_actions(cg), state.live & ~known
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
def _init_state(cg: PushdownGrammar) -> PushdownState:
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
    return with_verdicts(cg, state, jnp.zeros(k, jnp.bool_))
