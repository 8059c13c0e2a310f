"""`PushdownGrammar`: the device tables of the bounded-stack pushdown engine, and its state."""

from __future__ import annotations

import dataclasses
from typing import NamedTuple

import jax

from ananke_jax._src.compiled import table_bytes

MAX_RULE_LENGTH = 1023  # the symbols of one alternative: the runtime packs them in 10 bits of an LR action


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
        from ananke_jax._src.runtime.pushdown import (
            cfg_init_state,  # the runtime imports this module
        )

        return cfg_init_state(self)

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
