"""A fused constraint: up to five domains, a `FusionConfig` and phase tracking, as one pytree
with the four constraint functions, so `constrained_step` runs it like a compiled grammar."""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from ananke_jax._src.compile.token_trie import ordinary_token_ids
from ananke_jax._src.engines.masks import is_allowed
from ananke_jax._src.engines.protocol import Constraint
from ananke_jax._src.errors import FusionError
from ananke_jax._src.fusion.algebra import (
    FusionResult,
    Relaxation,
    fuse,
    is_empty,
    relax,
)
from ananke_jax._src.fusion.config import (
    DEFAULT_CONFIG,
    HARD_DOMAINS,
    SOFT_DOMAINS,
    Domain,
    DomainSet,
    FusionConfig,
    select_active_domains,
)
from ananke_jax._src.fusion.domains import SoftDomain, allowed_tokens
from ananke_jax._src.fusion.phases import PhaseTracker, phase_tracker
from ananke_jax._src.runtime.constraint import advance, init_state, token_mask
from ananke_jax._src.vocab import Vocabulary


class FusedState(NamedTuple):
    """The state of a fused constraint (a `lax.scan` carry).

    Attributes:
      domains: per `Domain`, in order, the state of the constraint filling it (None if empty).
      phase: the phase tracker's state (None without phase triggers).
      relaxation: int32[], the `RelaxationLevel` of the mask the last token was drawn from.
      parser_bug: bool[], some mask so far reached `RelaxationLevel.PARSER_BUG` (sticky).
    """

    domains: tuple
    phase: Any
    relaxation: jax.Array
    parser_bug: jax.Array


@dataclasses.dataclass(frozen=True)
class FusedConstraint(Constraint):
    """Hard domains intersected once, soft domains added to the logits once, the relaxation
    cascade when the intersection is empty, and the active domains chosen per phase.

    Domains that the intensity never activates are left out of the traced step; the others are
    switched by the tracked phase with `jnp.where`. Every domain's constraint advances with
    every token, active or not: a grammar meant only for structured output should be wrapped
    in `deferred` (otherwise free text makes it reject and relaxation drops it).

    Attributes:
      domains: five entries in `Domain` order: constraints for the hard domains, `SoftDomain`s
        for the soft ones, None where empty.
      phases: a `PhaseTracker`, or None (the phase is then ``config.initial_phase``).
      universe: uint32[W], the tokens that may ever be allowed: ordinary tokens and EOS.
      fallback_token: int32[], the first EOS id.
      config: static `FusionConfig`.
      vocab_size, logits_width: static vocabulary sizes.
    """

    domains: tuple
    phases: PhaseTracker | None
    universe: jax.Array
    fallback_token: jax.Array
    config: FusionConfig
    vocab_size: int
    logits_width: int

    def init_state(self) -> FusedState:
        domains = tuple(None if d is None else init_state(d) for d in self.domains)
        phase = None if self.phases is None else self.phases.init_state()
        return FusedState(domains, phase, jnp.int32(0), jnp.bool_(False))

    def phase(self, state: FusedState) -> jax.Array | int:
        """The `GenerationPhase` code: int32[] when tracked, else the static initial phase."""
        return self.config.initial_phase if self.phases is None else self.phases.phase(state.phase)

    def _opinions(self, state: FusedState, domains: tuple[Domain, ...]) -> dict[Domain, jax.Array]:
        """Masks (hard) or scores (soft) of the filled ``domains`` the intensity may activate."""
        possible = self.config.intensity.domains
        out = {}
        for d in domains:
            fill, sub = self.domains[d], state.domains[d]
            if fill is not None and possible[d]:
                out[d] = fill.scores(sub, self.logits_width) if d in SOFT_DOMAINS else token_mask(fill, sub)
        return out

    def result(self, state: FusedState) -> FusionResult:
        """The `FusionResult` at this position (before relaxation)."""
        weights = {d: self.domains[d].weight for d in SOFT_DOMAINS if self.domains[d] is not None}
        return fuse(
            self._opinions(state, HARD_DOMAINS),
            self._opinions(state, SOFT_DOMAINS),
            self.config,
            self.phase(state),
            weights=weights,
            universe=self.universe,
        )

    def active_domains(self, state: FusedState) -> DomainSet:
        """The domains consulted at this position (flags traced when the phase is tracked)."""
        return select_active_domains(self.config.intensity, self.phase(state), self.config.adaptive_switching)

    def relaxation(self, state: FusedState) -> Relaxation:
        """The relaxation cascade over the active hard domains at this position."""
        return relax(self._opinions(state, HARD_DOMAINS), self.active_domains(state), universe=self.universe)

    def token_mask(self, state: FusedState) -> jax.Array:
        """uint32[W]: the relaxed intersection of the active hard domains."""
        return self.relaxation(state).feasible_mask

    @property
    def adjusts_logits(self) -> bool:
        return True

    def logit_adjustment(self, state: FusedState) -> jax.Array:
        """float32[logits_width]: the weighted soft scores of the active soft domains."""
        return self.result(state).logit_adjustment

    def advance(self, state: FusedState, token: jax.Array) -> FusedState:
        """Advance every domain and the phase; record the relaxation the token was drawn under."""
        relaxed = self.relaxation(state)
        domains = tuple(None if d is None else advance(d, s, token) for d, s in zip(self.domains, state.domains))
        phase = None if self.phases is None else self.phases.advance(state.phase, token)
        return FusedState(domains, phase, relaxed.level, state.parser_bug | relaxed.parser_bug)

    def accepts(self, state: FusedState) -> jax.Array:
        """bool[]: EOS is in the relaxed mask."""
        return is_allowed(self.token_mask(state), self.fallback_token)

    def is_error(self, state: FusedState) -> jax.Array:
        """bool[]: nothing is allowed, even after relaxation (a parser bug, or an error state
        of Syntax)."""
        return is_empty(self.token_mask(state))


jax.tree_util.register_dataclass(
    FusedConstraint,
    data_fields=["domains", "phases", "universe", "fallback_token"],
    meta_fields=["config", "vocab_size", "logits_width"],
)


def _check_domain(domain: Domain, fill, vocab: Vocabulary) -> None:
    soft = isinstance(fill, SoftDomain)
    if soft != (domain in SOFT_DOMAINS):
        want = "a SoftDomain (soft_scores, soft_grammar)" if domain in SOFT_DOMAINS else "a constraint, not a SoftDomain"
        raise FusionError(f"the {domain.name.lower()} domain needs {want}, got {type(fill).__name__}")
    if soft:
        if fill.inside.shape not in ((), (vocab.logits_width,)):
            raise FusionError(
                f"the {domain.name.lower()} scores have shape {list(fill.inside.shape)}; expected [{vocab.logits_width}] (the logits width)"
            )
        fill = fill.tracker
    sizes = (getattr(fill, "vocab_size", None), getattr(fill, "logits_width", None))
    if fill is not None and sizes != (len(vocab), vocab.logits_width):
        raise FusionError(
            f"the {domain.name.lower()} domain was built for (vocab_size, logits_width) = {sizes}, "
            f"not for this vocabulary ({len(vocab)}, {vocab.logits_width})"
        )


def fused(
    vocab: Vocabulary,
    *,
    syntax=None,
    types=None,
    imports=None,
    control_flow: SoftDomain | None = None,
    semantics: SoftDomain | None = None,
    config: FusionConfig = DEFAULT_CONFIG,
) -> FusedConstraint:
    """Fuse constraint domains into one constraint for `constrained_step`.

    Args:
      vocab: the `Vocabulary` every domain was built for.
      syntax, types, imports: hard domains: any constraint (a compiled grammar, `deferred`,
        `allowed_tokens`, ...), or None.
      control_flow, semantics: soft domains (`soft_scores`, `soft_grammar`), or None.
      config: static `FusionConfig`; its ``phase_triggers`` are compiled into a phase tracker.

    Raises:
      FusionError: a domain of the wrong kind or for another vocabulary, scores of the wrong
        length, or invalid phase triggers.
    """
    domains = (syntax, types, imports, control_flow, semantics)
    for domain, fill in zip(Domain, domains):
        if fill is not None:
            _check_domain(domain, fill, vocab)
    phases = phase_tracker(config.phase_triggers, vocab, config.initial_phase) if config.phase_triggers else None
    universe = allowed_tokens(ordinary_token_ids(vocab), vocab)
    return FusedConstraint(domains, phases, universe.mask, universe.fallback_token, config, len(vocab), vocab.logits_width)
