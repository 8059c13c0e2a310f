"""Domain fusion (the CLaSH algebra), generation phases and deferred activation, on device.

Hard domains (Syntax, Types, Imports) give packed masks that are intersected once; soft domains
(ControlFlow, Semantics) give scores in [-1, 1] that are weighted, summed and added to the
logits once; an empty intersection goes down the relaxation cascade; the generation phase,
tracked from trigger strings, chooses the active domains. `fuse` is the pure function.
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

__all__ = [
    "Domain",
    "DomainSet",
    "FusionConfig",
    "FusionError",
    "FusionResult",
    "GenerationPhase",
    "IntensityLevel",
    "Relaxation",
    "RelaxationLevel",
    "apply_soft_scores",
    "fuse",
    "intersect_hard_masks",
    "relax",
    "select_active_domains",
    "serialize_config_json",
]
