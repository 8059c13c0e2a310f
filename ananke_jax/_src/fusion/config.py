"""The vocabulary of domain fusion: domains, intensity levels, generation phases, `FusionConfig`.

Everything here is static configuration (hashable Python values) except the phase given to
`select_active_domains`, which may be a traced int32 scalar: the generation phase is tracked on
the device while the domain sets it selects between are fixed when the step is traced.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
from collections.abc import Mapping
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.errors import FusionError


class Domain(enum.IntEnum):
    """The five constraint domains of the CLaSH algebra, hard ones first."""

    SYNTAX = 0
    TYPES = 1
    IMPORTS = 2
    CONTROL_FLOW = 3
    SEMANTICS = 4

    @property
    def is_hard(self) -> bool:
        """Hard domains give masks (intersected); soft ones give scores (summed)."""
        return self < Domain.CONTROL_FLOW


HARD_DOMAINS = (Domain.SYNTAX, Domain.TYPES, Domain.IMPORTS)
SOFT_DOMAINS = (Domain.CONTROL_FLOW, Domain.SEMANTICS)


class DomainSet(NamedTuple):
    """Which domains are active: five flags in `Domain` order, Python bools or bool[] arrays."""

    syntax: bool | jax.Array = False
    types: bool | jax.Array = False
    imports: bool | jax.Array = False
    control_flow: bool | jax.Array = False
    semantics: bool | jax.Array = False

    @classmethod
    def of(cls, *domains: Domain) -> DomainSet:
        return cls(*(d in domains for d in Domain))


class IntensityLevel(enum.Enum):
    """How many domains are consulted; ``full`` and ``exhaustive`` differ only in latency budget,
    which the fusion itself does not use (a scheduler may)."""

    NONE = "none"
    SYNTAX_ONLY = "syntax_only"
    STANDARD = "standard"
    FULL_HARD = "full_hard"
    FULL = "full"
    EXHAUSTIVE = "exhaustive"

    @property
    def domains(self) -> DomainSet:
        return _INTENSITY_DOMAINS[self]

    @property
    def latency_budget_us(self) -> int:
        return _LATENCY_BUDGET_US[self]


ALL_HARD = DomainSet.of(*HARD_DOMAINS)
_INTENSITY_DOMAINS = {
    IntensityLevel.NONE: DomainSet.of(),
    IntensityLevel.SYNTAX_ONLY: DomainSet.of(Domain.SYNTAX),
    IntensityLevel.STANDARD: DomainSet.of(Domain.SYNTAX, Domain.TYPES),
    IntensityLevel.FULL_HARD: DomainSet.of(*HARD_DOMAINS),
    IntensityLevel.FULL: DomainSet.of(*Domain),
    IntensityLevel.EXHAUSTIVE: DomainSet.of(*Domain),
}
_LATENCY_BUDGET_US = {
    IntensityLevel.NONE: 0,
    IntensityLevel.SYNTAX_ONLY: 50,
    IntensityLevel.STANDARD: 200,
    IntensityLevel.FULL_HARD: 500,
    IntensityLevel.FULL: 2_000,
    IntensityLevel.EXHAUSTIVE: 5_000,
}


class GenerationPhase(enum.IntEnum):
    """What the model is writing (after CRANE); the int value is the phase's code on device."""

    REASONING = 0
    STRUCTURED_OUTPUT = 1
    TRANSITION = 2

    @property
    def label(self) -> str:
        """The name used in JSON: ``"reasoning"``, ``"structured_output"``, ``"transition"``."""
        return self.name.lower()


def parse_enum(cls, value, what: str):
    """A member of enum ``cls`` from itself or its lower-case name.

    Raises:
      FusionError: an unknown name or a value of another type, listing the valid names.
    """
    if isinstance(value, cls):
        return value
    names = {m.name.lower(): m for m in cls}
    if isinstance(value, str) and value in names:
        return names[value]
    raise FusionError(f"unknown {what} {value!r}; expected one of {sorted(names)}")


def finite_float(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise FusionError(f"{what} must be a number, got {value!r}")
    if not math.isfinite(value):
        raise FusionError(f"{what} must be finite, got {value!r}")
    return float(value)


@dataclasses.dataclass(frozen=True)
class FusionConfig:
    """Static fusion parameters (hashable: a `jit` static argument or a static pytree field).

    Attributes:
      intensity: the `IntensityLevel` (or its name) choosing the active domains.
      control_flow_weight, semantics_weight: finite config weights of the two soft domains.
      adaptive_switching: in the reasoning phase only Syntax stays active (CRANE).
      soft_temperature: finite, > 0; the summed soft adjustment is divided by it.
      phase_triggers: ``(trigger text, GenerationPhase)`` pairs (a mapping is accepted): after a
        trigger is generated the phase becomes its phase (an extension of the seed's config, so
        that serving stacks can set up phase tracking from JSON).
      initial_phase: the phase before any trigger; structured output by default, the
        conservative choice when the phase is unknown.

    Raises:
      FusionError: an unknown intensity or phase, a weight that is NaN or infinite, a
        temperature <= 0, or an empty trigger.
    """

    intensity: IntensityLevel = IntensityLevel.STANDARD
    control_flow_weight: float = 1.0
    semantics_weight: float = 1.0
    adaptive_switching: bool = True
    soft_temperature: float = 1.0
    phase_triggers: tuple[tuple[str, GenerationPhase], ...] = ()
    initial_phase: GenerationPhase = GenerationPhase.STRUCTURED_OUTPUT

    def __post_init__(self):
        fix = lambda name, value: object.__setattr__(self, name, value)  # frozen: set through object
        fix("intensity", parse_enum(IntensityLevel, self.intensity, "intensity"))
        fix("initial_phase", parse_enum(GenerationPhase, self.initial_phase, "phase"))
        for name in ("control_flow_weight", "semantics_weight", "soft_temperature"):
            fix(name, finite_float(getattr(self, name), name))
        if self.soft_temperature <= 0:
            raise FusionError(f"soft_temperature must be > 0, got {self.soft_temperature}")
        if not isinstance(self.adaptive_switching, bool):
            raise FusionError(f"adaptive_switching must be a bool, got {self.adaptive_switching!r}")
        pairs = self.phase_triggers.items() if isinstance(self.phase_triggers, Mapping) else self.phase_triggers
        triggers = []
        for pair in pairs:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str) and pair[0]):
                raise FusionError(f"phase_triggers must be (non-empty text, phase) pairs, got {pair!r}")
            triggers.append((pair[0], parse_enum(GenerationPhase, pair[1], "phase")))
        fix("phase_triggers", tuple(triggers))

    def soft_weight(self, domain: Domain) -> float:
        """The config weight of a soft domain."""
        return self.control_flow_weight if domain == Domain.CONTROL_FLOW else self.semantics_weight

    def to_json(self) -> str:
        """The stable JSON form (sorted keys, enum names), e.g. for a serving stack's
        constraint spec; `from_json` reads it back to an equal config."""
        return json.dumps(
            {
                "adaptive_switching": self.adaptive_switching,
                "control_flow_weight": self.control_flow_weight,
                "initial_phase": self.initial_phase.label,
                "intensity": self.intensity.value,
                "phase_triggers": [[text, phase.label] for text, phase in self.phase_triggers],
                "semantics_weight": self.semantics_weight,
                "soft_temperature": self.soft_temperature,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> FusionConfig:
        """Read the JSON form; absent keys take their defaults.

        Raises:
          FusionError: invalid JSON, not an object, an unknown key, or an invalid value
            (unknown intensity or phase name, non-finite weight, ...).
        """
        try:
            data = json.loads(text)
        except (TypeError, ValueError) as e:
            raise FusionError(f"fusion config is not valid JSON: {e}") from None
        if not isinstance(data, dict):
            raise FusionError(f"fusion config JSON must be an object, got {type(data).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise FusionError(f"unknown fusion config keys {unknown}; expected some of {sorted(known)}")
        return cls(**data)


DEFAULT_CONFIG = FusionConfig()


def serialize_config_json(config: FusionConfig) -> str:
    """``config.to_json()``: the stable JSON form of a `FusionConfig`."""
    return config.to_json()


def active_table(intensity: IntensityLevel, adaptive: bool) -> np.ndarray:
    """bool[3, 5]: the active domains of each phase (rows in `GenerationPhase` order)."""
    full = np.asarray(intensity.domains, bool)
    reasoning = DomainSet(syntax=intensity != IntensityLevel.NONE) if adaptive else intensity.domains
    return np.stack([np.asarray(reasoning, bool), full, full])


def select_active_domains(
    intensity: IntensityLevel | str,
    phase: GenerationPhase | str | int | jax.Array | None = GenerationPhase.STRUCTURED_OUTPUT,
    adaptive: bool = True,
) -> DomainSet:
    """The domains consulted at a token position (CRANE-style switching).

    With ``adaptive``, the reasoning phase keeps Syntax alone (nothing at intensity ``none``);
    structured output and transition use the intensity's set. An uncertain phase (``None``, or
    a code outside [0, 3)) counts as structured output.

    Args:
      intensity: an `IntensityLevel` or its name.
      phase: a `GenerationPhase`, its name, or its code as an int or int32[] array (traced ok).
      adaptive: static.

    Returns:
      A `DomainSet` of Python bools, or of bool[] arrays when ``phase`` is an array.

    Raises:
      FusionError: an unknown intensity or phase name.
    """
    table = active_table(parse_enum(IntensityLevel, intensity, "intensity"), adaptive)
    if phase is None or isinstance(phase, str):
        phase = parse_enum(GenerationPhase, phase or GenerationPhase.STRUCTURED_OUTPUT, "phase")
    if isinstance(phase, int):
        code = phase if 0 <= phase < len(GenerationPhase) else GenerationPhase.STRUCTURED_OUTPUT
        return DomainSet(*map(bool, table[code]))
    code = jnp.asarray(phase)
    if code.shape != () or not jnp.issubdtype(code.dtype, jnp.integer):
        raise FusionError(f"phase must be an int32[] code, got {code.dtype}{list(code.shape)}")
    code = jnp.where((code >= 0) & (code < len(GenerationPhase)), code, GenerationPhase.STRUCTURED_OUTPUT)
    return DomainSet(*jnp.asarray(table)[code])
