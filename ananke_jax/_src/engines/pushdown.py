"""`PushdownGrammar`: the bounded-stack pushdown engine for context-free grammars, its device
tables, its state and its step, in pure jax.

Each parse configuration holds an LR stack and a lexer state. From a lexer state, every token
has a precomputed set of outcomes (terminals completed, lexer state after). Which outcomes the
stack allows is worked out once per configuration, when the configuration is made (in
`pushdown_advance`, and for the initial state in `PushdownGrammar.init_state`), by the LR
simulations of `ananke_jax._src.engines.lr`: the terminals of all outcomes of the lexer state,
shared through a prefix tree, are fed to simulations on copies of the stack (one per trie node,
the node's parse continuing its parent's). The state keeps the verdicts, so `pushdown_mask` only
gathers: a token is allowed when one of its outcomes is valid in some configuration. All loops
have static bounds or bounded trip counts; nothing branches on traced values in Python.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.engines.lr import LRActions, feed, fork_width, on_accelerator, pack_actions, verdicts, with_verdicts
from ananke_jax._src.engines.masks import is_allowed
from ananke_jax._src.engines.protocol import Constraint
from ananke_jax._src.engines.small_ops import all_last, count_before, true_indices


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
class PushdownGrammar(Constraint):
    """Token-level tables of a context-free grammar, held as device arrays (a pytree).

    Attributes (Q lexer states, S LR states, T LR terminal columns with the end of
    input last; per lexer state: N trie nodes, P outcomes, B dense rows, Z sparse tokens):
      lexer_start: int32[], the lexer state right after a cut.
      action_kind: int8[S, T, A]; action_arg, goto, rule_lhs, rule_length, lr_start: LR tables
        (A > 1: cells with conflicts, where the LR simulations fork).
      lexer_row: int32[Q], the row (of D) of each lexer state's tables below that are indexed
        by row: the states along a large terminal share a few rows.
      node_parent, node_column, node_chunk: int32[D, N + lanes], chunk_start: int32[D, CH],
        num_chunks: int32[D]: the prefix tree of terminals to check from each lexer state
        (see `ananke_jax._src.compile.outcome_trie`).
      outcome_start: int32[Q + 1]; state_outcomes: int32[F], the global id of each lexer
        state's outcomes, those of state q (local 0, 1, ...) from ``outcome_start[q]`` on;
        outcome_terminals: int32[O, M], outcome_length: int32[O], their LR columns.
      outcome_node: int[D, P], outcome_lookahead: int[D, P, L], outcome_free: bool[D, P]:
        each outcome's trie nodes; outcome_lexer: int32[F], its final lexer state.
      complete_node: int[D, E], the trie nodes that complete the output at EOS.
      set_members: int32[NS, Z], the outcomes (local to a lexer state) of each outcome set.
      token_class: int32[logits_width]; class_set: int[D, C], each token's outcome set.
      state_sets: int[D, NSq], the sets that occur from a lexer state (local set 0: empty).
      mask_rows: uint32[R, W]; dense_row: int32[D, B], dense_set: int[D, B]; sparse_start:
        int32[D + 1], sparse_token: int32[SF], sparse_set: int[SF], each row's tokens listed one
        by one from ``sparse_start[row]`` on (Z = ``sparse_width`` at most, then set 0 past the
        last row's): a lexer state's mask is its rows and tokens whose (local) sets are valid.
      (int: int16 where the ids fit, else int32; these tables are only indexed with.)
      eos_mask: uint32[W], the EOS bits.
      fallback_token: int32[], the first EOS id.
      vocab_size, logits_width: static vocabulary sizes.
      stack_depth, max_configs, lanes: static bounds D, K and the trie nodes checked at once.
      sparse_width: static Z.
    """

    lexer_start: jax.Array
    action_kind: jax.Array
    action_arg: jax.Array
    goto: jax.Array
    rule_lhs: jax.Array
    rule_length: jax.Array
    lr_start: jax.Array
    lexer_row: jax.Array
    node_parent: jax.Array
    node_column: jax.Array
    chunk_start: jax.Array
    num_chunks: jax.Array
    node_chunk: jax.Array
    outcome_start: jax.Array
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
    sparse_start: jax.Array
    sparse_token: jax.Array
    sparse_set: jax.Array
    eos_mask: jax.Array
    fallback_token: jax.Array
    vocab_size: int
    logits_width: int
    stack_depth: int
    max_configs: int
    lanes: int
    sparse_width: int

    def init_state(self) -> PushdownState:
        """The state before any token: one configuration, the LR start state on the stack."""
        return pushdown_init(self, self.lr_start, self.lexer_start)

    def lr_actions(self) -> LRActions:
        """The LR tables in the form the simulations read them (derived once per step)."""
        action = pack_actions(self.action_kind, self.action_arg, self.rule_lhs, self.rule_length)
        return LRActions(action, self.goto, fork_width(action.shape[-1], self.max_configs))

    def token_classes(self, lexer: jax.Array, token: jax.Array) -> jax.Array:
        """int32[...]: the class of ``token`` (int32[]) for `class_set` rows ``lexer`` (int32[...])."""
        return jnp.broadcast_to(self.token_class[jnp.clip(token, 0, self.logits_width - 1)], jnp.shape(lexer))

    def outcome_of(self, lexer: jax.Array, local: jax.Array) -> tuple[jax.Array, jax.Array]:
        """int32[...] each: the global id and the final lexer state of the local outcomes
        ``local`` of lexer states ``lexer``."""
        at = self.outcome_start[lexer] + local
        return self.state_outcomes[at], self.outcome_lexer[at]

    def outcomes_used(self, lexer: jax.Array) -> jax.Array:
        """bool[P]: the local outcomes that lexer state ``lexer`` (int32[]) has."""
        return jnp.arange(self.outcome_node.shape[-1]) < self.outcome_start[lexer + 1] - self.outcome_start[lexer]

    def sparse_entries(self, row: jax.Array) -> tuple[jax.Array, jax.Array]:
        """int32[Z], int[Z]: the tokens that row ``row`` (int32[]) lists one by one, and their
        local sets (0, never valid, past the row's run)."""
        start = self.sparse_start[row]
        token = jax.lax.dynamic_slice_in_dim(self.sparse_token, start, self.sparse_width)
        sets = jax.lax.dynamic_slice_in_dim(self.sparse_set, start, self.sparse_width)
        return token, jnp.where(jnp.arange(self.sparse_width) < self.sparse_start[row + 1] - start, sets, 0)

    def token_mask(self, state: PushdownState) -> jax.Array:
        return pushdown_mask(self, state)

    def token_allowed(self, state: PushdownState, token: jax.Array) -> jax.Array:
        """bool[]: whether the mask allows ``token``, from its outcomes alone."""
        return pushdown_allowed(self, state, token)

    def advance(self, state: PushdownState, token: jax.Array) -> PushdownState:
        return pushdown_advance(self, state, token)

    def accepts(self, state: PushdownState) -> jax.Array:
        return pushdown_accepts(state)

    def is_error(self, state: PushdownState) -> jax.Array:
        return ~state.live.any()

    def __repr__(self) -> str:
        return (
            f"PushdownGrammar(kind=pushdown, lexer_states={self.lexer_row.shape[0]}, "
            f"lr_states={self.goto.shape[0]}, trie_nodes={self.node_parent.shape[1] - self.lanes}, "
            f"outcome_sets={self.set_members.shape[0]}, stack_depth={self.stack_depth}, "
            f"max_configs={self.max_configs}, vocab_size={self.vocab_size}, "
            f"logits_width={self.logits_width}, table_bytes={self.table_bytes:,})"
        )


STATIC_FIELDS = ["vocab_size", "logits_width", "stack_depth", "max_configs", "lanes", "sparse_width"]
jax.tree_util.register_dataclass(
    PushdownGrammar,
    data_fields=[f.name for f in dataclasses.fields(PushdownGrammar) if f.name not in STATIC_FIELDS],
    meta_fields=STATIC_FIELDS,
)


def pushdown_init(cg: PushdownGrammar, lr_start, lexer_start) -> PushdownState:
    """The state before any token: one configuration, LR state ``lr_start`` (int32[]) on the
    stack and lexer state ``lexer_start`` (int32[])."""
    return _init(cg, lr_start, lexer_start, accelerator=on_accelerator())


# Jitted with the tables as arguments (traced eagerly, they would be baked into the program as
# constants), and the paths as a static argument, so that each set of paths has its own trace.
@functools.partial(jax.jit, static_argnames="accelerator")
def _init(cg: PushdownGrammar, lr_start, lexer_start, *, accelerator: bool) -> PushdownState:
    del accelerator  # the key of the trace: `on_accelerator()` gives the same inside
    k, d = cg.max_configs, cg.stack_depth
    stack = jnp.zeros(d, jnp.int32).at[0].set(lr_start)
    # The one configuration's verdicts, without `with_verdicts`' loop over the configurations.
    valid, complete, blocked = verdicts(cg, cg.lr_actions(), stack, jnp.int32(1), lexer_start)
    return PushdownState(
        stacks=jnp.zeros((k, d), jnp.int32).at[0].set(stack),
        depth=jnp.zeros(k, jnp.int32).at[0].set(1),
        lexer=jnp.zeros(k, jnp.int32).at[0].set(lexer_start),
        live=jnp.zeros(k, jnp.bool_).at[0].set(True),
        outcome_ok=jnp.zeros((k, cg.outcome_node.shape[1]), jnp.bool_).at[0].set(valid),
        complete=jnp.zeros(k, jnp.bool_).at[0].set(complete),
        finished=jnp.bool_(False),
        overflow=blocked,
    )


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
    row = cg.lexer_row[lexer]
    set_on = _set_valid(cg, valid, cg.state_sets[row])
    rows = cg.mask_rows[cg.dense_row[row]]
    # The parts hold disjoint tokens, so adding them is OR-ing them.
    words = jnp.where(set_on[cg.dense_set[row]][:, None], rows, jnp.uint32(0)).sum(axis=0, dtype=jnp.uint32)
    token, sets = cg.sparse_entries(row)
    bits = jnp.where(set_on[sets], jnp.left_shift(jnp.uint32(1), (token & 31).astype(jnp.uint32)), jnp.uint32(0))
    return words.at[token >> 5].add(bits)


def pushdown_accepts(state: PushdownState) -> jax.Array:
    """bool[]: the output is complete (EOS allowed now)."""
    return state.finished | (state.live & state.complete).any()


def pushdown_mask(cg: PushdownGrammar, state: PushdownState) -> jax.Array:
    """uint32[W]: the allowed tokens, EOS included exactly when the output is complete.

    On a CPU the first configuration is done outside a loop, then one trip per further
    configuration up to the last live one (usually none); on an accelerator, where a trip
    costs more than its work, every configuration at once."""

    def config_tokens(i):
        return _config_tokens(cg, state.outcome_ok[i] & state.live[i], state.lexer[i])

    if on_accelerator():
        tokens = functools.reduce(jnp.bitwise_or, [config_tokens(i) for i in range(cg.max_configs)])
    else:
        body = lambda carry: (carry[0] + 1, carry[1] | config_tokens(carry[0]))
        tokens = jax.lax.while_loop(lambda c: c[0] < _live_count(state), body, (jnp.int32(1), config_tokens(0)))[1]
    eos = jnp.where(pushdown_accepts(state), cg.eos_mask, jnp.uint32(0))
    return jnp.where(state.finished, jnp.uint32(0), tokens) | eos


def _token_outcomes(cg: PushdownGrammar, state: PushdownState, token):
    """The outcomes of ``token`` from each configuration: int32[K, Z], local to its lexer state
    (-1 padding), and bool[K, Z], which of them the configuration's verdicts allow."""
    local = cg.set_members[cg.class_set[cg.lexer_row[state.lexer], cg.token_classes(state.lexer, token)]]
    return local, (local >= 0) & jnp.take_along_axis(state.outcome_ok, jnp.maximum(local, 0), axis=1)


def pushdown_allowed(cg: PushdownGrammar, state: PushdownState, token) -> jax.Array:
    """bool[]: whether `_token_mask` allows ``token`` (int32[]), without building the mask."""
    token = jnp.asarray(token, jnp.int32)
    safe = jnp.clip(token, 0, cg.logits_width - 1)
    _, valid = _token_outcomes(cg, state, token)
    taken = (valid.any(axis=1) & state.live).any() & ~state.finished
    in_range = (token >= 0) & (token < cg.logits_width)
    return in_range & jnp.where(is_allowed(cg.eos_mask, safe), pushdown_accepts(state), taken)


class _Configs(NamedTuple):
    """Parse configurations under construction (the fields of `PushdownState` that make one)."""

    stacks: jax.Array  # int32[N, D]
    depth: jax.Array  # int32[N]
    lexer: jax.Array  # int32[N]


def _same(a: _Configs, b: _Configs) -> jax.Array:
    """bool[A, B]: which configurations of ``a`` equal which of ``b`` (stack entries at and above
    the depth are junk)."""
    below = jnp.arange(a.stacks.shape[1])[None, :] < a.depth[:, None]
    equal_stacks = all_last((a.stacks[:, None, :] == b.stacks[None, :, :]) | ~below[:, None, :])
    return (a.lexer[:, None] == b.lexer[None, :]) & (a.depth[:, None] == b.depth[None, :]) & equal_stacks


def _follow(cg: PushdownGrammar, lr: LRActions, stack, depth, lexer, local, real) -> tuple[_Configs, jax.Array]:
    """The configurations (one per fork, [F]) that the configuration ``stack``, ``depth``,
    ``lexer`` makes by following its outcome ``local`` (when ``real``, bool[]; otherwise no parser
    action runs), and bool[F], which forks took the outcome's terminals."""
    outcome, after = cg.outcome_of(lexer, local)
    length = jnp.where(real, cg.outcome_length[outcome], 0)
    p = feed(lr, stack, depth, cg.outcome_terminals[outcome], length)
    return _Configs(p.stack, p.height, jnp.broadcast_to(after, p.height.shape)), real & p.ok & (p.pos >= length)


def pushdown_advance(cg: PushdownGrammar, state: PushdownState, token) -> PushdownState:
    """The state after ``token`` (int32[]): every configuration follows every valid outcome of the
    token; the survivors (deduplicated, at most K, in order) form the new state.

    The valid (configuration, outcome) pairs are gathered first and followed K at a time, so a
    step costs what its valid pairs cost, not K times the largest outcome set (with one outcome
    a token, the pairs are the configurations, in order). The first round runs outside the
    loop: it holds every pair of the usual step (with one outcome a token, every pair: there is
    no loop), and on an accelerator a loop trip (or a `lax.cond`) costs a read back of its
    predicate, more than a round's work. Where the LR tables conflict, a pair makes a
    configuration per fork of its simulation. EOS keeps the configurations, live if the output is
    complete, and marks the state finished.
    """
    token = jnp.asarray(token, jnp.int32)
    is_eos = is_allowed(cg.eos_mask, token)
    in_range = (token >= 0) & (token < cg.logits_width)
    lr, k = cg.lr_actions(), cg.max_configs
    local, valid = _token_outcomes(cg, state, token)
    z = local.shape[1]
    valid = (valid & state.live[:, None] & in_range & ~is_eos & ~state.finished).reshape(-1)
    count = valid.sum()
    pairs = true_indices(valid) if z > 1 else None  # the valid pairs first, in (configuration, outcome) order
    follow = jax.vmap(lambda *args: _follow(cg, lr, *args))
    empty = _Configs(jnp.zeros_like(state.stacks), jnp.zeros_like(state.depth), jnp.zeros_like(state.lexer))

    def round_(carry):
        r, kept, live, overflow = carry
        if z == 1:  # static: the pairs are the configurations, in order, and one round takes them all
            made, real = follow(state.stacks, state.depth, state.lexer, jnp.maximum(local[:, 0], 0), valid)
        else:  # K pairs a round
            pair = jax.lax.dynamic_slice(pairs, (r * k,), (k,))
            config = pair // z
            fields = state.stacks[config], state.depth[config], state.lexer[config]
            made, real = follow(*fields, jnp.maximum(local.reshape(-1)[pair], 0), r * k + jnp.arange(k) < count)
        made, real = jax.tree_util.tree_map(lambda x: x.reshape((-1,) + x.shape[2:]), (made, real))  # [K * F]
        earlier = jnp.tril(jnp.ones((real.shape[0],) * 2, jnp.bool_), k=-1)
        fresh = real & ~(_same(made, kept) & live[None, :]).any(axis=1) & ~(_same(made, made) & earlier & real[None, :]).any(axis=1)
        position = jnp.where(fresh, live.sum() + count_before(fresh), k)
        # Slot s takes the configuration made for it (gathered: a scatter is a kernel of its own).
        fills = position[None, :] == jnp.arange(k)[:, None]  # [K, K * F]
        made_row, filled = jnp.where(fills, jnp.arange(real.shape[0])[None, :], 0).sum(axis=1), fills.any(axis=1)
        kept = jax.tree_util.tree_map(lambda a, b: jnp.where(filled.reshape((k,) + (1,) * (a.ndim - 1)), b[made_row], a), kept, made)
        return r + 1, kept, live | filled, overflow | (fresh & (position >= k)).any()

    rounds = round_((jnp.int32(0), empty, jnp.zeros(k, jnp.bool_), state.overflow))  # no pair for EOS or a forbidden token
    if z > 1:  # static: with one outcome a token, the K configurations make at most K pairs
        rounds = jax.lax.while_loop(lambda c: c[0] * k < count, round_, rounds)
    kept, live, overflow = rounds[1:]
    # EOS: the configurations stay, marked finished when the output is complete, else they die.
    complete, configs = pushdown_accepts(state), _Configs(state.stacks, state.depth, state.lexer)
    kept = jax.tree_util.tree_map(lambda before, after: jnp.where(is_eos, before, after), configs, kept)
    live = jnp.where(is_eos, state.live & complete, live)
    # A configuration the state already had keeps its verdicts: they depend on it alone. Only the
    # new configurations of a step need verdicts (after EOS: none).
    match = _same(kept, configs) & live[:, None] & state.live[None, :]
    known, source = match.any(axis=1), jnp.argmax(match, axis=1)
    stepped = state._replace(
        stacks=kept.stacks,
        depth=kept.depth,
        lexer=kept.lexer,
        live=live,
        outcome_ok=known[:, None] & state.outcome_ok[source],
        complete=known & state.complete[source],
        finished=jnp.where(is_eos, complete, state.finished),
        overflow=overflow,
    )
    stepped = with_verdicts(cg, stepped, known)
    if lr.forks > 1:  # a fork can take a token's terminals, then nothing: it goes if others go on
        going = stepped.live & (stepped.outcome_ok.any(axis=1) | stepped.complete)
        stepped = stepped._replace(live=jnp.where(going.any() & ~is_eos, going, stepped.live))
    return stepped
