"""Deferred activation: free text until a trigger (e.g. ``</think>``), then a grammar.

The language is "any text in which the trigger first occurs at its end, then a string of the
grammar": the grammar reads from the first byte after the trigger. A token that ends the trigger
and carries more bytes (``>{"`` after ``</think``) is allowed exactly when those bytes, its tail,
begin a string of the grammar. The grammar state after each possible tail is computed once, when
the constraint is built, so the step only gathers.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.automaton import DEAD
from ananke_jax._src.engines.protocol import Wrapper
from ananke_jax._src.engines.regular import RegularGrammar, RegularState, from_numpy
from ananke_jax._src.errors import FusionError
from ananke_jax._src.fusion.triggers import (
    matcher_tables,
    spell,
    trigger_bytes,
    walk_to_trigger,
)
from ananke_jax._src.runtime.constraint import (
    accepts,
    advance,
    init_state,
    is_error,
    token_mask,
)
from ananke_jax._src.vocab import Vocabulary


class DeferredState(NamedTuple):
    """The state of a deferred constraint (a `lax.scan` carry).

    Attributes:
      matcher: int32[], the trigger matcher's state: 0 after a forbidden token, then waiting
        states, then active ones (the trigger has been generated).
      inner: the grammar's state; its start state while waiting.
    """

    matcher: jax.Array
    inner: Any


@dataclasses.dataclass(frozen=True)
class DeferredConstraint(Wrapper):
    """A grammar switched on by a trigger string (a pytree with the four constraint functions).

    While waiting, every ordinary token is allowed except those that end the trigger with a
    tail the grammar refuses; EOS and special tokens are not (the output is not complete before
    the grammar is). Once active, the mask, EOS and errors are the grammar's.

    Attributes:
      matcher: the token DFA of the waiting phase (see `triggers.matcher_tables`).
      grammar: the constraint enforced after the trigger (any constraint).
      tail_states: the grammar's state after each tail, stacked on a leading axis [T, ...].
      first_active: int32[], the first active matcher state; active state ``first_active + t``
        is entered by a token leaving tail ``t``.
    """

    matcher: RegularGrammar
    grammar: Any
    tail_states: Any
    first_active: jax.Array

    @property
    def wrapped(self) -> RegularGrammar:
        return self.matcher

    def init_state(self) -> DeferredState:
        return DeferredState(self.matcher.start_state, init_state(self.grammar))

    def is_active(self, state: DeferredState) -> jax.Array:
        """bool[]: the trigger has been generated; the grammar is enforced."""
        return state.matcher >= self.first_active

    def token_mask(self, state: DeferredState) -> jax.Array:
        """uint32[W]: the grammar's mask once active, the matcher's before."""
        waiting = token_mask(self.matcher, RegularState(state.matcher))
        return jnp.where(self.is_active(state), token_mask(self.grammar, state.inner), waiting)

    def advance(self, state: DeferredState, token: jax.Array) -> DeferredState:
        """The state after ``token`` (int32[]); the grammar moves only once active (`lax.cond`:
        an unbatched step skips its work while waiting)."""
        active = self.is_active(state)
        node = advance(self.matcher, RegularState(state.matcher), token).node
        num_tails = jax.tree_util.tree_leaves(self.tail_states)[0].shape[0]
        tail = jnp.clip(node - self.first_active, 0, num_tails - 1)
        entered = jax.tree_util.tree_map(lambda x: x[tail], self.tail_states)
        moved = jax.lax.cond(active, lambda s: advance(self.grammar, s, token), lambda s: s, state.inner)
        inner = jax.tree_util.tree_map(
            lambda m, e, s: jnp.where(active, m, jnp.where(node >= self.first_active, e, s)), moved, entered, state.inner
        )
        return DeferredState(node, inner)

    @property
    def adjusts_logits(self) -> bool:
        return self.grammar.adjusts_logits

    def logit_adjustment(self, state: DeferredState) -> jax.Array | None:
        """The grammar's logit adjustment once active (none while waiting), or None."""
        inner = self.grammar.logit_adjustment(state.inner)
        return None if inner is None else jnp.where(self.is_active(state), inner, jnp.zeros_like(inner))

    def accepts(self, state: DeferredState) -> jax.Array:
        return self.is_active(state) & accepts(self.grammar, state.inner)

    def is_error(self, state: DeferredState) -> jax.Array:
        return (state.matcher == DEAD) | (self.is_active(state) & is_error(self.grammar, state.inner))


jax.tree_util.register_dataclass(DeferredConstraint, data_fields=["matcher", "grammar", "tail_states", "first_active"], meta_fields=[])


_advance = jax.jit(advance)
_is_error = jax.jit(is_error)


def _after_tails(grammar, tails: list[list[int]]) -> tuple[Any, np.ndarray]:
    """The grammar's states after each tail (a token list) from its start, stacked on a leading
    axis, and bool[T]: which tails it does not refuse.

    One jitted step called from a Python loop: the tails are few (tens to hundreds) and short,
    and jitting a batched loop would cost far more compile time for context-free grammars.
    """
    states, ok = [], []
    for tokens in tails:
        state = init_state(grammar)
        for token in tokens:
            state = _advance(grammar, state, token)
        states.append(state)
        ok.append(not bool(_is_error(grammar, state)))
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states), np.asarray(ok)


def deferred(grammar, triggers: Sequence[str | bytes] | str | bytes, vocab: Vocabulary) -> DeferredConstraint:
    """Defer ``grammar`` until one of ``triggers`` has been generated.

    Args:
      grammar: any constraint compiled for ``vocab`` (regular, context-free, fused, ...).
      triggers: one trigger or several (text is UTF-8); the first occurrence of any switches.
      vocab: the `Vocabulary`.

    Returns:
      A `DeferredConstraint`, usable wherever a compiled grammar is (`constrained_step`, a
      fusion domain).

    Raises:
      FusionError: empty triggers, or a grammar compiled for another vocabulary size.
    """
    if (grammar.vocab_size, grammar.logits_width) != (len(vocab), vocab.logits_width):
        raise FusionError(
            f"the grammar was compiled for vocab_size={grammar.vocab_size}, logits_width={grammar.logits_width}, "
            f"not for this vocabulary ({len(vocab)}, {vocab.logits_width})"
        )
    walk = walk_to_trigger(trigger_bytes(triggers), vocab)
    tail_states, tail_ok = _after_tails(grammar, [spell(tail, vocab) for tail in walk.tails])
    matcher = from_numpy(
        matcher_tables(walk, tail_ok, vocab),
        vocab_size=len(vocab),
        logits_width=vocab.logits_width,
        fallback_token=vocab.eos_token_ids[0],
    )
    return DeferredConstraint(matcher, grammar, tail_states, jnp.int32(walk.num_waiting + 1))
