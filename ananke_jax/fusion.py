"""Domain fusion (the CLaSH algebra), generation phases and deferred activation, on device.

Hard domains (Syntax, Types, Imports) give packed masks that are intersected once; soft domains
(ControlFlow, Semantics) give scores in [-1, 1] that are weighted, summed and added to the
logits once; an empty intersection goes down the relaxation cascade; the generation phase,
tracked from trigger strings, chooses the active domains. See `fused` for the constraint that
`ananke_jax.constrained_step` runs, and `fuse` for the pure function underneath.
"""

from ananke_jax._src.errors import FusionError
from ananke_jax._src.fusion.algebra import (
    FusionResult,
    Relaxation,
    RelaxationLevel,
    apply_soft_scores,
    fuse,
    intersect_hard_masks,
    relax,
)
from ananke_jax._src.fusion.config import (
    Domain,
    DomainSet,
    FusionConfig,
    GenerationPhase,
    IntensityLevel,
    select_active_domains,
    serialize_config_json,
)
from ananke_jax._src.fusion.deferred import DeferredConstraint, DeferredState, deferred
from ananke_jax._src.fusion.domains import (
    AllowList,
    SoftDomain,
    allowed_tokens,
    soft_grammar,
    soft_scores,
)
from ananke_jax._src.fusion.fused import FusedConstraint, FusedState, fused
from ananke_jax._src.fusion.phases import PhaseTracker, phase_tracker

__all__ = [
    "AllowList",
    "DeferredConstraint",
    "DeferredState",
    "Domain",
    "DomainSet",
    "FusedConstraint",
    "FusedState",
    "FusionConfig",
    "FusionError",
    "FusionResult",
    "GenerationPhase",
    "IntensityLevel",
    "PhaseTracker",
    "Relaxation",
    "RelaxationLevel",
    "SoftDomain",
    "allowed_tokens",
    "apply_soft_scores",
    "deferred",
    "fuse",
    "fused",
    "intersect_hard_masks",
    "phase_tracker",
    "relax",
    "select_active_domains",
    "serialize_config_json",
    "soft_grammar",
    "soft_scores",
]
