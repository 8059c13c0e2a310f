"""`CompiledCFG`: the device tables of the bounded-stack pushdown engine, and its state."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled import table_bytes


class CFGState(NamedTuple):
    """The constraint state of one sequence under a context-free grammar (a `lax.scan` carry).

    Up to K parse configurations are kept, one per way the output so far can be lexed.

    Attributes:
      stacks: int32[K, D], LR state stacks; entries at and above ``depth`` are junk.
      depth: int32[K], stack heights.
      lexer: int32[K], lexer states (the terminal being read).
      live: bool[K], which configurations are in use.
      finished: bool[], EOS was taken.
      overflow: bool[], some continuation was dropped for lack of stack depth or configurations.
    """

    stacks: jax.Array
    depth: jax.Array
    lexer: jax.Array
    live: jax.Array
    finished: jax.Array
    overflow: jax.Array


@dataclasses.dataclass(frozen=True)
class CompiledCFG:
    """Token-level tables of a context-free grammar, held as device arrays (a pytree).

    Attributes (Q lexer states, n terminals, S LR states, T LR terminal columns with the end of
    input last, O outcomes, NS outcome sets):
      lexer_start: int32[], the lexer state right after a cut.
      pending_columns: int32[Q, L], LR columns of the terminals a lexer state may still
        complete (padded with -1).
      pending_free: bool[Q], lexer states that need nothing from the parser (nothing read, or an
        ignored terminal in progress).
      eos_terminals: int32[n + 1, 2], eos_length: int32[n + 1], eos_lexer_ends: bool[Q, n + 1]:
        the LR input that completes the output at EOS, for each terminal that may end in a lexer
        state (and a last entry for "nothing pending").
      action_kind: int8[S, T]; action_arg, goto, rule_lhs, rule_length, lr_start: LR tables.
      outcome_terminals: int32[O, M]; outcome_length: int32[O]; outcome_lexer: int32[O].
      set_outcomes: int32[NS, Z]; token_set: int32[Q, logits_width]; state_outcomes: int32[Q, P].
      eos_mask: uint32[W], the EOS bits.
      fallback_token: int32[], the first EOS id.
      vocab_size, logits_width: static vocabulary sizes.
      stack_depth, max_configs, overlay: static bounds D, K and the LR scratch size.
    """

    lexer_start: jax.Array
    pending_columns: jax.Array
    pending_free: jax.Array
    eos_terminals: jax.Array
    eos_length: jax.Array
    eos_lexer_ends: jax.Array
    action_kind: jax.Array
    action_arg: jax.Array
    goto: jax.Array
    rule_lhs: jax.Array
    rule_length: jax.Array
    lr_start: jax.Array
    outcome_terminals: jax.Array
    outcome_length: jax.Array
    outcome_lexer: jax.Array
    set_outcomes: jax.Array
    token_set: jax.Array
    state_outcomes: jax.Array
    eos_mask: jax.Array
    fallback_token: jax.Array
    vocab_size: int
    logits_width: int
    stack_depth: int
    max_configs: int
    overlay: int

    @property
    def mask_words(self) -> int:
        return self.eos_mask.shape[0]

    @property
    def table_bytes(self) -> int:
        return table_bytes(self)

    def init_state(self) -> CFGState:
        k, d = self.max_configs, self.stack_depth
        return CFGState(
            stacks=jnp.zeros((k, d), jnp.int32).at[0, 0].set(self.lr_start),
            depth=jnp.zeros(k, jnp.int32).at[0].set(1),
            lexer=jnp.zeros(k, jnp.int32).at[0].set(self.lexer_start),
            live=jnp.zeros(k, jnp.bool_).at[0].set(True),
            finished=jnp.bool_(False),
            overflow=jnp.bool_(False),
        )

    def __repr__(self) -> str:
        return (
            f"CompiledCFG(kind=pushdown, lexer_states={self.token_set.shape[0]}, "
            f"lr_states={self.goto.shape[0]}, outcomes={self.outcome_length.shape[0]}, "
            f"outcome_sets={self.set_outcomes.shape[0]}, stack_depth={self.stack_depth}, "
            f"max_configs={self.max_configs}, vocab_size={self.vocab_size}, "
            f"logits_width={self.logits_width}, table_bytes={self.table_bytes:,})"
        )


_META = ["vocab_size", "logits_width", "stack_depth", "max_configs", "overlay"]
jax.tree_util.register_dataclass(
    CompiledCFG,
    data_fields=[f.name for f in dataclasses.fields(CompiledCFG) if f.name not in _META],
    meta_fields=_META,
)
