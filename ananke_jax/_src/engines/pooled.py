"""Pooled tables: many compiled grammars of both engines in device buffers of fixed capacity.

A grammar admitted to the pool (`ananke_jax.serving.GrammarPool`) is a *member*: its states,
transitions, mask rows, lexer states, LR states, outcomes and sets are copied into ranges of the
pool's buffers, their ids shifted by the range's start. Every id the step reads is then global,
so one step function serves every member and the shapes never change: admitting a grammar is
a write, never an XLA compilation. A request names its member by a *handle*, an int32: below
``regular_members`` a token-DFA member, above it a pushdown member (``handle -
regular_members``), and -1 for no constraint.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.engines.lr import LRActions, fork_width
from ananke_jax._src.engines.masks import is_allowed
from ananke_jax._src.engines.protocol import Constraint
from ananke_jax._src.engines.pushdown import (
    PushdownState,
    pushdown_accepts,
    pushdown_advance,
    pushdown_allowed,
    pushdown_init,
    pushdown_mask,
)
from ananke_jax._src.engines.regular import DEAD

FREE, REGULAR, PUSHDOWN = 0, 1, 2  # what a handle names


@dataclasses.dataclass(frozen=True)
class RegularPool:
    """The token-DFA members' tables. State 0 is the shared error state; a member's state ``s``
    reads transitions ``state_base[s] + class``.

    Attributes:
      mask_rows: uint32[R, W], row 0 empty; rows are shared between members that have them.
      row_of_state, state_base: int32[S]; accepting: bool[S].
      transitions: int32[T], each member's ``next_state`` table, flattened.
      class_of_token: int32[M, logits_width]; start: int32[M], each member's start state.
    """

    mask_rows: jax.Array
    row_of_state: jax.Array
    state_base: jax.Array
    accepting: jax.Array
    transitions: jax.Array
    class_of_token: jax.Array
    start: jax.Array


jax.tree_util.register_dataclass(RegularPool, data_fields=[f.name for f in dataclasses.fields(RegularPool)], meta_fields=[])


@dataclasses.dataclass(frozen=True)
class PushdownPool:
    """The pushdown members' tables, in the layout of `PushdownGrammar` (global lexer states,
    LR states, outcomes, sets and mask rows; per lexer state, rows padded to the pool's widths:
    each state its own row, ``lexer_row`` the identity, and ``state_outcomes``, ``outcome_lexer``
    int32[Q, P], ``sparse_token``, ``sparse_set`` int32[Q, Z] rows rather than runs),
    with the LR actions packed once at admission (`LRActions.action`) and per member:
    ``token_class`` int32[M, logits_width], ``lr_start``, ``lexer_start`` int32[M]; and
    ``lexer_member`` int32[Q], the member of each lexer state.

    ``rows_in_turn`` (static): a batch's advance runs its rows one after another (`jax.lax.map`)
    instead of together (`jax.vmap`). A vmapped loop runs every row for the trips of the row that
    needs most, and rows on distinct grammars rarely need the same; on a CPU, where a trip costs
    its work, rows in turn cost the sum of their own trips (4-6x less for 8 rows on distinct
    grammars). On an accelerator a trip costs a launch and a read-back, so rows go together."""

    packed_action: jax.Array
    goto: jax.Array
    lexer_row: jax.Array
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
    class_set: jax.Array
    state_sets: jax.Array
    mask_rows: jax.Array
    dense_row: jax.Array
    dense_set: jax.Array
    sparse_token: jax.Array
    sparse_set: jax.Array
    eos_mask: jax.Array
    token_class: jax.Array
    lexer_member: jax.Array
    lr_start: jax.Array
    lexer_start: jax.Array
    logits_width: int
    stack_depth: int
    max_configs: int
    lanes: int
    rows_in_turn: bool

    def lr_actions(self) -> LRActions:
        return LRActions(self.packed_action, self.goto, fork_width(self.packed_action.shape[-1], self.max_configs))

    def token_classes(self, lexer: jax.Array, token: jax.Array) -> jax.Array:
        """int32[...]: the class of ``token`` in the member of each lexer state ``lexer``."""
        return self.token_class[self.lexer_member[lexer], jnp.clip(token, 0, self.logits_width - 1)]

    def outcome_of(self, lexer: jax.Array, local: jax.Array) -> tuple[jax.Array, jax.Array]:
        """`PushdownGrammar.outcome_of`, from rows of the pool's width per lexer state."""
        return self.state_outcomes[lexer, local], self.outcome_lexer[lexer, local]

    def outcomes_used(self, lexer: jax.Array) -> jax.Array:
        """`PushdownGrammar.outcomes_used`, from the rows."""
        return self.outcome_lexer[lexer] >= 0

    def sparse_entries(self, row: jax.Array) -> tuple[jax.Array, jax.Array]:
        """`PushdownGrammar.sparse_entries`, from the rows."""
        return self.sparse_token[row], self.sparse_set[row]


_PUSHDOWN_META = ["logits_width", "stack_depth", "max_configs", "lanes", "rows_in_turn"]
jax.tree_util.register_dataclass(
    PushdownPool,
    data_fields=[f.name for f in dataclasses.fields(PushdownPool) if f.name not in _PUSHDOWN_META],
    meta_fields=_PUSHDOWN_META,
)


class PooledState(NamedTuple):
    """The state of one request on the pool (a `lax.scan` carry).

    Attributes:
      handle: int32[], the member (-1: unconstrained).
      node: int32[], the token-DFA state (a regular member; else unused).
      pushdown: `PushdownState` (a pushdown member; else no configuration is live).
    """

    handle: jax.Array
    node: jax.Array
    pushdown: PushdownState


@dataclasses.dataclass(frozen=True)
class PoolTables:
    """Everything the pool holds on the device: both engines' members.

    Per request (``state`` a `PooledState`) the methods follow the `Constraint` protocol; the
    ``batch_`` methods take a batch of states and run the pushdown engine only when some row
    needs it, so a batch of regular rows costs a gather or two. Their ``pushdown`` argument
    (static) says whether it runs: None decides on the device (one `lax.cond` for the batch,
    whose predicate an accelerator reads back each step); a caller that knows its rows' handles
    (`ananke_jax.serving.Engine` does) passes True or False and no predicate is read.

    Attributes:
      regular: `RegularPool`; pushdown: `PushdownPool`.
      free_mask: uint32[W], every token id below ``vocab_size`` (an unconstrained row).
      fallback_token: int32[], the first EOS id.
      vocab_size, logits_width: static vocabulary sizes.
      regular_members: static, handles below it are token-DFA members.
    """

    regular: RegularPool
    pushdown: PushdownPool
    free_mask: jax.Array
    fallback_token: jax.Array
    vocab_size: int
    logits_width: int
    regular_members: int

    def __repr__(self) -> str:
        return f"PoolTables(regular_members={self.regular_members}, vocab_size={self.vocab_size}, logits_width={self.logits_width})"

    def kind(self, handle: jax.Array) -> jax.Array:
        """int32[...]: `FREE`, `REGULAR` or `PUSHDOWN`, what each handle names."""
        return jnp.where(handle < 0, FREE, jnp.where(handle < self.regular_members, REGULAR, PUSHDOWN))

    def _member(self, handle):
        return jnp.clip(handle, 0, self.regular_members - 1), jnp.maximum(handle - self.regular_members, 0)

    def start(self, handle: jax.Array) -> PooledState:
        """The state before any token of a request on ``handle`` (int32[])."""
        handle = jnp.asarray(handle, jnp.int32)
        regular, pushdown = self._member(handle)
        kind = self.kind(handle)
        node = jnp.where(kind == REGULAR, self.regular.start[regular], DEAD)
        pd = pushdown_init(self.pushdown, self.pushdown.lr_start[pushdown], self.pushdown.lexer_start[pushdown])
        return PooledState(handle, node, _inert(pd, kind == PUSHDOWN))

    # --- one request ---------------------------------------------------------------------------

    def _regular_mask(self, state: PooledState) -> jax.Array:
        return self.regular.mask_rows[self.regular.row_of_state[state.node]]

    def _regular_advance(self, state: PooledState, token) -> jax.Array:
        token = jnp.asarray(token, jnp.int32)
        member, _ = self._member(state.handle)
        token_class = self.regular.class_of_token[member, jnp.clip(token, 0, self.logits_width - 1)]
        after = self.regular.transitions[self.regular.state_base[state.node] + token_class]
        in_range = (token >= 0) & (token < self.logits_width)
        return jnp.where(in_range & (state.node != DEAD), after, DEAD)

    def _select(self, state: PooledState, free, regular, pushdown):
        kind = self.kind(state.handle)
        return jnp.where(kind == FREE, free, jnp.where(kind == REGULAR, regular, pushdown))

    def token_mask(self, state: PooledState) -> jax.Array:
        return self._select(state, self.free_mask, self._regular_mask(state), pushdown_mask(self.pushdown, state.pushdown))

    def token_allowed(self, state: PooledState, token: jax.Array) -> jax.Array:
        token = jnp.asarray(token, jnp.int32)
        free = (token >= 0) & (token < self.vocab_size)
        regular = (token < self.logits_width) & is_allowed(self._regular_mask(state), token)
        return self._select(state, free, regular, pushdown_allowed(self.pushdown, state.pushdown, token))

    def advance(self, state: PooledState, token: jax.Array) -> PooledState:
        pushdown = pushdown_advance(self.pushdown, state.pushdown, token)
        return PooledState(state.handle, self._regular_advance(state, token), pushdown)

    def accepts(self, state: PooledState) -> jax.Array:
        return self._select(state, True, self.regular.accepting[state.node], pushdown_accepts(state.pushdown))

    def is_error(self, state: PooledState) -> jax.Array:
        return self._select(state, False, state.node == DEAD, ~state.pushdown.live.any())

    # --- a batch of requests -------------------------------------------------------------------

    def _if_pushdown(self, states: PooledState, pushdown: bool | None, run, otherwise):
        """``run()`` if some row of ``states`` is on a pushdown member, else ``otherwise()``;
        ``pushdown`` (static) says which, or None: decide on the device."""
        if pushdown is None:
            return jax.lax.cond((self.kind(states.handle) == PUSHDOWN).any(), run, otherwise)
        return run() if pushdown else otherwise()

    def batch_token_mask(self, states: PooledState, pushdown: bool | None = None) -> jax.Array:
        """uint32[B, W]: `token_mask` of each row; the pushdown engine runs only if a row needs
        it (``pushdown``: see the class)."""
        words = self.free_mask.shape[-1]
        pushdown = self._if_pushdown(
            states,
            pushdown,
            lambda: jax.vmap(pushdown_mask, in_axes=(None, 0))(self.pushdown, states.pushdown),
            lambda: jnp.zeros((states.handle.shape[0], words), jnp.uint32),
        )
        return jax.vmap(self._select)(
            states, jnp.broadcast_to(self.free_mask, pushdown.shape), jax.vmap(self._regular_mask)(states), pushdown
        )

    def batch_advance(self, states: PooledState, tokens: jax.Array, pushdown: bool | None = None) -> PooledState:
        """`advance` of each row by its token (int32[B]); the pushdown engine runs only if a row
        needs it (``pushdown``: see the class)."""
        if self.pushdown.rows_in_turn:
            each = lambda: jax.lax.map(lambda row: pushdown_advance(self.pushdown, *row), (states.pushdown, tokens))
        else:
            each = lambda: jax.vmap(pushdown_advance, in_axes=(None, 0, 0))(self.pushdown, states.pushdown, tokens)
        pushdown = self._if_pushdown(states, pushdown, each, lambda: states.pushdown)
        return PooledState(states.handle, jax.vmap(self._regular_advance)(states, tokens), pushdown)

    def batch_start(self, handles: jax.Array) -> PooledState:
        """`start` of each handle (int32[B]); the pushdown engine runs only if a row needs it."""
        handles = jnp.asarray(handles, jnp.int32)
        empty = jax.vmap(lambda h: PooledState(h, self.regular.start[self._member(h)[0]], _empty(self.pushdown)))(handles)
        return self._if_pushdown(
            empty,
            None,
            lambda: jax.vmap(self.start)(handles),
            lambda: empty._replace(node=jnp.where(self.kind(handles) == REGULAR, empty.node, DEAD)),
        )


jax.tree_util.register_dataclass(
    PoolTables,
    data_fields=["regular", "pushdown", "free_mask", "fallback_token"],
    meta_fields=["vocab_size", "logits_width", "regular_members"],
)


def _empty(pool: PushdownPool) -> PushdownState:
    """A pushdown state with no live configuration (a row of another kind)."""
    k, d, p = pool.max_configs, pool.stack_depth, pool.outcome_node.shape[1]
    zeros = lambda *shape: jnp.zeros(shape, jnp.int32)
    return PushdownState(
        zeros(k, d),
        zeros(k),
        zeros(k),
        zeros(k).astype(bool),
        jnp.zeros((k, p), bool),
        zeros(k).astype(bool),
        jnp.bool_(False),
        jnp.bool_(False),
    )


def _inert(state: PushdownState, keep) -> PushdownState:
    """``state``, or no live configuration where ``keep`` (bool[]) is False."""
    return state._replace(live=state.live & keep)


@dataclasses.dataclass(frozen=True)
class Pooled(Constraint):
    """One member of a pool as a `Constraint`: the pool's tables and a handle (int32[]).

    ``jax.vmap`` over the handle (``in_axes=Pooled(None, 0)``) runs a batch of requests, each
    on its own member, in one program for every mix of grammars.
    """

    tables: PoolTables
    handle: jax.Array

    vocab_size = property(lambda self: self.tables.vocab_size)
    logits_width = property(lambda self: self.tables.logits_width)
    fallback_token = property(lambda self: self.tables.fallback_token)

    def __repr__(self) -> str:
        return (
            f"Pooled(handle={self.handle}, vocab_size={self.vocab_size}, logits_width={self.logits_width}, pool_bytes={self.table_bytes:,})"
        )

    def init_state(self) -> PooledState:
        return self.tables.start(self.handle)

    def token_mask(self, state: PooledState) -> jax.Array:
        return self.tables.token_mask(state)

    def token_allowed(self, state: PooledState, token: jax.Array) -> jax.Array:
        return self.tables.token_allowed(state, token)

    def advance(self, state: PooledState, token: jax.Array) -> PooledState:
        return self.tables.advance(state, token)

    def accepts(self, state: PooledState) -> jax.Array:
        return self.tables.accepts(state)

    def is_error(self, state: PooledState) -> jax.Array:
        return self.tables.is_error(state)


jax.tree_util.register_dataclass(Pooled, data_fields=["tables", "handle"], meta_fields=[])
