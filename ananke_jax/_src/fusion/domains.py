"""What can fill a domain besides a compiled grammar: an allow-list of token ids (hard) and
graded scores (soft), fixed or read from a tracked constraint's state."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.arrays import pack_bits
from ananke_jax._src.engines.masks import unpack_mask
from ananke_jax._src.engines.protocol import Constraint
from ananke_jax._src.errors import FusionError
from ananke_jax._src.fusion.config import finite_float
from ananke_jax._src.runtime.constraint import advance, init_state, is_error, token_mask
from ananke_jax._src.vocab import Vocabulary


class AllowListState(NamedTuple):
    """An allow-list has no state: it allows the same tokens at every position."""


@dataclasses.dataclass(frozen=True)
class AllowList(Constraint):
    """A hard domain that allows a fixed set of token ids, and EOS (a pytree with the four
    constraint functions). It restricts what may be written, not when the output ends, and it
    has no error state: a token outside the list (taken after a relaxation) changes nothing.

    Attributes:
      mask: uint32[W], the packed allowed ids.
      fallback_token: int32[], the first EOS id.
      vocab_size, logits_width: static vocabulary sizes.
    """

    mask: jax.Array
    fallback_token: jax.Array
    vocab_size: int
    logits_width: int

    def init_state(self) -> AllowListState:
        return AllowListState()

    def token_mask(self, state: AllowListState) -> jax.Array:
        return self.mask

    def advance(self, state: AllowListState, token: jax.Array) -> AllowListState:
        return state

    def accepts(self, state: AllowListState) -> jax.Array:
        return jnp.bool_(True)

    def is_error(self, state: AllowListState) -> jax.Array:
        return jnp.bool_(False)


jax.tree_util.register_dataclass(AllowList, data_fields=["mask", "fallback_token"], meta_fields=["vocab_size", "logits_width"])


def allowed_tokens(ids: Iterable[int] | np.ndarray, vocab: Vocabulary) -> AllowList:
    """An `AllowList` of token ids (the EOS ids are always added), e.g. the tokens that spell
    the symbols in scope, for the Types or Imports domain.

    Raises:
      FusionError: ids that are not integers, outside ``[0, len(vocab))``, or special tokens
        other than EOS (special tokens are never allowed).
    """
    ids = np.asarray(list(ids) if not isinstance(ids, np.ndarray) else ids)
    if ids.size and (ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer)):
        raise FusionError(f"token ids must be a 1-D sequence of integers, got {ids.dtype}{list(ids.shape)}")
    bad = sorted({int(i) for i in ids if not 0 <= i < len(vocab)})
    if bad:
        raise FusionError(f"token ids {bad[:10]} are outside the vocabulary [0, {len(vocab)})")
    special = sorted({int(i) for i in ids} & (vocab.special_token_ids - set(vocab.eos_token_ids)))
    if special:
        raise FusionError(f"token ids {special[:10]} are special tokens, which are never allowed")
    bits = np.zeros(vocab.logits_width, bool)
    bits[ids.astype(np.int64)] = True
    bits[list(vocab.eos_token_ids)] = True
    return AllowList(jnp.asarray(pack_bits(bits)), jnp.int32(vocab.eos_token_ids[0]), len(vocab), vocab.logits_width)


@dataclasses.dataclass(frozen=True)
class SoftDomain:
    """A soft domain: per-token scores in [-1, 1] (0: no opinion), weighted by ``weight``.

    Without a tracker the scores are ``inside`` at every position. With one, a constraint
    advanced with every token, tokens it allows score ``inside`` and the others ``outside``;
    once the output has left its language (its error state) the domain has no opinion.

    Attributes:
      inside: float32[] or float32[V].
      outside: float32[].
      tracker: a constraint (any kind), or None.
      weight: static, finite: the domain weight (the seed's ``DomainScore.weight``).
    """

    inside: jax.Array
    outside: jax.Array
    tracker: Any
    weight: float

    def init_state(self) -> Any:
        return None if self.tracker is None else init_state(self.tracker)

    def advance(self, state: Any, token: jax.Array) -> Any:
        return None if self.tracker is None else advance(self.tracker, state, token)

    def scores(self, state: Any, width: int) -> jax.Array:
        """float32[width], the scores after the tokens so far (NaN entries: no opinion)."""
        if self.tracker is None:
            return jnp.broadcast_to(self.inside, (width,))
        allowed = unpack_mask(token_mask(self.tracker, state), width)
        graded = jnp.where(allowed, self.inside, self.outside)
        return jnp.where(is_error(self.tracker, state), jnp.float32(0.0), graded)


jax.tree_util.register_dataclass(SoftDomain, data_fields=["inside", "outside", "tracker"], meta_fields=["weight"])


def soft_scores(scores: jax.Array | np.ndarray, *, weight: float = 1.0) -> SoftDomain:
    """A soft domain with a fixed opinion: float[V] scores in [-1, 1] (NaN: no opinion).

    Raises:
      FusionError: scores that are not a 1-D float vector, or a non-finite weight.
    """
    scores = jnp.asarray(scores)
    if scores.ndim != 1 or not jnp.issubdtype(scores.dtype, jnp.floating):
        raise FusionError(f"soft scores must be float[V], got {scores.dtype}{list(scores.shape)}")
    return SoftDomain(scores.astype(jnp.float32), jnp.float32(0.0), None, finite_float(weight, "weight"))


def soft_grammar(grammar, *, inside: float = 1.0, outside: float = 0.0, weight: float = 1.0) -> SoftDomain:
    """A soft domain that prefers the language of ``grammar`` (any constraint, e.g. a JSON
    Schema of the preferred values): tokens it allows score ``inside``, others ``outside``.

    Raises:
      FusionError: a non-finite score or weight.
    """
    return SoftDomain(
        jnp.float32(finite_float(inside, "inside")),
        jnp.float32(finite_float(outside, "outside")),
        grammar,
        finite_float(weight, "weight"),
    )
