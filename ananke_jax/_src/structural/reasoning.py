"""A token budget on a reasoning block: once ``budget`` tokens have been spent inside the block,
only its end tag may follow (then the structured part, as before). The forced tokens continue
the part of the end tag the text already ends with (for an end tag that overlaps itself, a
token that would restart the match is refused: a narrower, never a wider, language).

The block and what follows are one token DFA (`reasoning_structural_tag` compiled); the budget
adds a counter to the state. Each state inside the block knows how many bytes of the end tag its
text already ends with (`block_depths`), so the forced mask is the state's own mask less every
token that does not continue the end tag from there (`closing_masks`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.arrays import pack_bits
from ananke_jax._src.compile.automaton import ByteDFA
from ananke_jax._src.compile.token_trie import ordinary_token_ids
from ananke_jax._src.engines.masks import is_allowed
from ananke_jax._src.engines.protocol import Wrapper
from ananke_jax._src.engines.regular import DEAD, RegularGrammar, RegularState
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.fusion.triggers import ROOT, aho_corasick
from ananke_jax._src.json_schema.layout import is_count
from ananke_jax._src.vocab import Vocabulary


class BudgetState(NamedTuple):
    """The state of a budgeted reasoning constraint (a `lax.scan` carry).

    Attributes:
      inner: the token DFA's state.
      spent: int32[], the tokens taken inside the reasoning block so far.
    """

    inner: RegularState
    spent: jax.Array


@dataclasses.dataclass(frozen=True)
class ReasoningBudget(Wrapper):
    """A token DFA whose reasoning block closes after ``budget`` tokens (a pytree).

    Attributes:
      grammar: the token DFA of the reasoning block and what follows it.
      depth_of_state: int32[S], bytes of the end tag the text of a state inside the block ends
        with; -1 outside the block.
      closing: uint32[D, W], the tokens that continue the end tag from each depth ``d < D``
        (a prefix of its rest, or its rest and more).
      budget: int32[], the tokens the block may take before its end tag is forced.
    """

    grammar: RegularGrammar
    depth_of_state: jax.Array
    closing: jax.Array
    budget: jax.Array

    @property
    def wrapped(self) -> RegularGrammar:
        return self.grammar

    def init_state(self) -> BudgetState:
        return BudgetState(self.grammar.init_state(), jnp.int32(0))

    def _block(self, state: BudgetState) -> tuple[jax.Array, jax.Array, jax.Array]:
        """bool[]: the state is inside the block; bool[]: only the end tag may follow; uint32[W]:
        the tokens that continue it."""
        depth = self.depth_of_state[state.inner.node]
        inside = depth >= 0
        return inside, inside & (state.spent >= self.budget), self.closing[jnp.maximum(depth, 0)]

    def token_mask(self, state: BudgetState) -> jax.Array:
        _, forced, closing = self._block(state)
        mask = self.grammar.token_mask(state.inner)
        return jnp.where(forced, mask & closing, mask)

    def advance(self, state: BudgetState, token: jax.Array) -> BudgetState:
        inside, forced, closing = self._block(state)
        inner = self.grammar.advance(state.inner, token)  # ids outside the vocabulary: DEAD
        refused = forced & ~is_allowed(closing, token)
        return BudgetState(RegularState(jnp.where(refused, DEAD, inner.node)), state.spent + inside.astype(jnp.int32))

    def accepts(self, state: BudgetState) -> jax.Array:
        return self.grammar.accepts(state.inner)

    def is_error(self, state: BudgetState) -> jax.Array:
        return self.grammar.is_error(state.inner)


jax.tree_util.register_dataclass(ReasoningBudget, data_fields=["grammar", "depth_of_state", "closing", "budget"], meta_fields=[])


def reasoning_budget(grammar: RegularGrammar, dfa: ByteDFA, vocab: Vocabulary, *, entry: bytes, end: bytes, budget: int) -> ReasoningBudget:
    """The budgeted constraint of ``grammar`` (compiled from ``dfa``, whose state numbers it
    keeps), whose block starts after the bytes ``entry`` and ends with ``end``."""
    if not is_count(budget):
        raise GrammarError(f"the reasoning token budget must be a non-negative integer, got {budget!r}")
    depths = np.full(grammar.num_states, -1, np.int32)
    depths[: dfa.num_states] = block_depths(dfa, entry, end)
    host = {"depth_of_state": depths, "closing": closing_masks(vocab, end), "budget": np.int32(budget)}
    return ReasoningBudget(grammar, **jax.device_put(host))


def block_depths(dfa: ByteDFA, entry: bytes, end: bytes) -> np.ndarray:
    """int32[S]: for the states inside the block (reached from the start by ``entry``, then text
    without ``end``), how many bytes of ``end`` their text ends with; -1 for the others.

    Raises:
      GrammarError: ``entry`` leaves the language, or a state is inside the block at two depths.
    """
    q = dfa.start
    for b in entry:
        q = int(dfa.transitions[q, b])
    if q == DEAD:
        raise GrammarError(f"the language does not begin with {entry!r}")
    transitions, _ = aho_corasick((end,))
    matched = transitions[ROOT:] - ROOT  # [depth, byte]: the bytes of ``end`` the text ends with
    depths = np.full(dfa.num_states, -1, np.int32)
    depths[q] = 0
    todo = [q]
    while todo:
        q = todo.pop()
        for b in np.flatnonzero(dfa.transitions[q] != DEAD).tolist():
            d = int(matched[depths[q], b])
            if d == len(end):  # the block is over
                continue
            t = int(dfa.transitions[q, b])
            if depths[t] < 0:
                depths[t] = d
                todo.append(t)
            elif depths[t] != d:
                raise GrammarError("the reasoning block's states cannot be told from the rest of the language")
    return depths


@functools.lru_cache(maxsize=16)
def closing_masks(vocab: Vocabulary, end: bytes) -> np.ndarray:
    """uint32[len(end), W]: row d allows the ordinary tokens that are a prefix of ``end[d:]`` or
    begin with it."""
    ids = ordinary_token_ids(vocab)
    rows = np.zeros((len(end), vocab.logits_width), bool)
    for d in range(len(end)):
        rest = end[d:]
        rows[d, ids] = [rest.startswith(t) or t.startswith(rest) for t in (vocab.tokens[i] for i in ids)]
    return pack_bits(rows)
