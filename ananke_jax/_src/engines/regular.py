"""`RegularGrammar`: the token DFA engine, its device tables and its step (a gather or two)."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.engines.protocol import Constraint

DEAD = 0  # the error state of every token DFA


class RegularState(NamedTuple):
    """The constraint state of one sequence: a `lax.scan` carry.

    Attributes:
      node: int32[], the automaton state; 0 is the error state (a forbidden token was taken).
    """

    node: jax.Array


@dataclasses.dataclass(frozen=True)
class RegularGrammar(Constraint):
    """Token-level tables of a regular constraint, held as device arrays (a pytree).

    Only the sizes of the vocabulary are static: two grammars over one vocabulary whose tables
    are padded to the same shapes share every compiled step function.

    Attributes:
      mask_rows: uint32[R, W], deduplicated packed masks, ``W = ceil(logits_width / 32)``; bit j
        of word i allows token ``32 * i + j``. EOS bits are set in the rows of accepting states.
      row_of_state: int32[S], the mask row of each state.
      class_of_token: int32[logits_width], tokens that act alike in every state share a class.
      next_state: int32[S, C], the state after a token of each class; state 0 is the dead
        (error) state, whose mask is empty.
      accepting: bool[S], states where the output is complete (EOS allowed).
      start_state: int32[], the state before any token.
      fallback_token: int32[], the first EOS id: what sampling returns when every token is masked.
      vocab_size: static, number of token ids the tokenizer defines.
      logits_width: static, width of the logits (>= vocab_size; the ids beyond are never allowed).
    """

    mask_rows: jax.Array
    row_of_state: jax.Array
    class_of_token: jax.Array
    next_state: jax.Array
    accepting: jax.Array
    start_state: jax.Array
    fallback_token: jax.Array
    vocab_size: int
    logits_width: int

    def init_state(self) -> RegularState:
        """The state before any token."""
        return RegularState(node=self.start_state)

    @property
    def num_states(self) -> int:
        return self.next_state.shape[0]

    @property
    def num_classes(self) -> int:
        return self.next_state.shape[1]

    def token_mask(self, state: RegularState) -> jax.Array:
        return self.mask_rows[self.row_of_state[state.node]]

    def token_allowed(self, state: RegularState, token: jax.Array) -> jax.Array:
        """bool[]: one word of the state's mask row."""
        token = jnp.asarray(token, jnp.int32)
        safe = jnp.clip(token, 0, 32 * self.mask_words - 1)
        word = self.mask_rows[self.row_of_state[state.node], safe >> 5]
        in_range = (token >= 0) & (token < self.logits_width)
        return in_range & ((word >> (safe & 31).astype(jnp.uint32)) & 1).astype(jnp.bool_)

    def advance(self, state: RegularState, token: jax.Array) -> RegularState:
        token = jnp.asarray(token, jnp.int32)
        in_range = (token >= 0) & (token < self.logits_width)
        token_class = self.class_of_token[jnp.clip(token, 0, self.logits_width - 1)]
        return RegularState(node=jnp.where(in_range, self.next_state[state.node, token_class], DEAD))

    def accepts(self, state: RegularState) -> jax.Array:
        return self.accepting[state.node]

    def is_error(self, state: RegularState) -> jax.Array:
        return state.node == DEAD

    def __repr__(self) -> str:
        return (
            f"RegularGrammar(kind=regular, states={self.num_states}, classes={self.num_classes}, "
            f"mask_rows={self.mask_rows.shape[0]}, vocab_size={self.vocab_size}, "
            f"logits_width={self.logits_width}, table_bytes={self.table_bytes:,})"
        )


jax.tree_util.register_dataclass(
    RegularGrammar,
    data_fields=[
        "mask_rows",
        "row_of_state",
        "class_of_token",
        "next_state",
        "accepting",
        "start_state",
        "fallback_token",
    ],
    meta_fields=["vocab_size", "logits_width"],
)


def from_numpy(tables, *, vocab_size: int, logits_width: int, fallback_token: int) -> RegularGrammar:
    """Move host tables (a `TokenTables`) to the device, in one transfer."""
    host = {
        "mask_rows": np.asarray(tables.mask_rows, np.uint32),
        "row_of_state": np.asarray(tables.row_of_state, np.int32),
        "class_of_token": np.asarray(tables.class_of_token, np.int32),
        "next_state": np.asarray(tables.next_state, np.int32),
        "accepting": np.asarray(tables.accepting, np.bool_),
        "start_state": np.asarray(tables.start, np.int32),
        "fallback_token": np.asarray(fallback_token, np.int32),
    }
    return RegularGrammar(**jax.device_put(host), vocab_size=vocab_size, logits_width=logits_width)
