"""Generation phases on device: a token-level trigger matcher whose state yields the phase."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.automaton import DEAD
from ananke_jax._src.compile.regular import compile_dfa
from ananke_jax._src.engines.regular import RegularGrammar, RegularState
from ananke_jax._src.errors import FusionError
from ananke_jax._src.fusion.config import GenerationPhase, parse_enum
from ananke_jax._src.fusion.triggers import phase_dfa, trigger_bytes
from ananke_jax._src.runtime.constraint import advance
from ananke_jax._src.vocab import Vocabulary


@dataclasses.dataclass(frozen=True)
class PhaseTracker:
    """The current `GenerationPhase`, tracked from the generated tokens (a pytree).

    The phase is the one of the last trigger generated (the longest, where several end at the
    same byte), found exactly wherever tokens split a trigger or share a token with other text.

    Attributes:
      matcher: an all-accepting token DFA over (trigger automaton state, phase); it allows every
        ordinary token and EOS, so it never constrains anything itself.
      phase_of_state: int32[S], the phase code of each matcher state (structured output for
        the dead state, entered by special tokens, and the finished state after EOS).
    """

    matcher: RegularGrammar
    phase_of_state: jax.Array

    def init_state(self) -> RegularState:
        return self.matcher.init_state()

    def advance(self, state: RegularState, token: jax.Array) -> RegularState:
        """The state after ``token`` (int32[])."""
        return advance(self.matcher, state, token)

    def phase(self, state: RegularState) -> jax.Array:
        """int32[], the `GenerationPhase` code after the tokens so far."""
        return self.phase_of_state[state.node]


jax.tree_util.register_dataclass(PhaseTracker, data_fields=["matcher", "phase_of_state"], meta_fields=[])


def phase_tracker(
    triggers: Mapping[str | bytes, GenerationPhase | str] | Sequence[tuple[str | bytes, GenerationPhase | str]],
    vocab: Vocabulary,
    initial: GenerationPhase | str = GenerationPhase.STRUCTURED_OUTPUT,
) -> PhaseTracker:
    """Compile a phase tracker, e.g. ``{"<think>": "reasoning", "</think>": "structured_output"}``.

    Args:
      triggers: trigger text (or bytes) -> the phase it starts.
      vocab: the `Vocabulary` the tokens come from.
      initial: the phase before any trigger.

    Raises:
      FusionError: no triggers, an empty one, one given two phases, or an unknown phase name.
    """
    pairs = list(triggers.items() if isinstance(triggers, Mapping) else triggers)
    phases: dict[bytes, GenerationPhase] = {}
    for text, phase in pairs:
        (key,) = trigger_bytes(text)
        phase = parse_enum(GenerationPhase, phase, "phase")
        if phases.setdefault(key, phase) != phase:
            raise FusionError(f"trigger {key!r} is given two phases: {phases[key].label} and {phase.label}")
    if not phases:
        raise FusionError("a phase tracker needs at least one trigger")
    initial = parse_enum(GenerationPhase, initial, "phase")
    dfa, phase_of_state = phase_dfa(list(phases.items()), initial, len(GenerationPhase))
    matcher = compile_dfa(dfa, vocab)
    # The token tables add one state, entered by EOS, after the DFA's.
    phase_of_state = np.append(phase_of_state, GenerationPhase.STRUCTURED_OUTPUT)
    phase_of_state[DEAD] = GenerationPhase.STRUCTURED_OUTPUT
    return PhaseTracker(matcher, jnp.asarray(phase_of_state, jnp.int32))
