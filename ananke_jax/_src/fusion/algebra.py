"""The CLaSH algebra as pure jax functions: hard masks intersect once, soft scores add once.

Hard masks are packed ``uint32[..., W]`` (the format of `token_mask`); soft scores are dense
``float32[..., V]``. Activity flags are Python bools (the domain is left out when the step is
traced) or bool[] arrays (the domain is switched with `jnp.where`), so phase switching and the
relaxation cascade never branch in Python on traced values.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.errors import FusionError
from ananke_jax._src.fusion.config import (
    ALL_HARD,
    DEFAULT_CONFIG,
    HARD_DOMAINS,
    Domain,
    DomainSet,
    FusionConfig,
    GenerationPhase,
    finite_float,
    parse_enum,
    select_active_domains,
)

ALL_ONES = np.uint32(0xFFFFFFFF)
Flag = bool | jax.Array


def _static(flag: Flag) -> bool | None:
    """The value of a flag known when tracing, else None."""
    return bool(flag) if isinstance(flag, (bool, np.bool_)) else None


def _masks(masks: Sequence) -> list[jax.Array]:
    """Masks as uint32 arrays of one shape.

    Raises:
      FusionError: a mask that is not a uint32 array, or masks of different widths.
    """
    out = [jnp.asarray(m) for m in masks]
    for m in out:
        if m.dtype != jnp.uint32 or m.ndim < 1:
            raise FusionError(f"hard masks must be packed uint32[..., W] arrays, got {m.dtype}{list(m.shape)}")
    if len({m.shape for m in out}) > 1:
        raise FusionError(f"hard masks of different widths (packed shapes {sorted({m.shape for m in out})})")
    return out


def intersect_hard_masks(masks: Sequence[jax.Array], active: Sequence[Flag] | None = None) -> jax.Array:
    """One bitwise AND over the active masks.

    Args:
      masks: non-empty, packed uint32[..., W] masks of one shape.
      active: one flag per mask (default: all active); an inactive mask counts as all ones.

    Returns:
      uint32[..., W]; all ones when no mask is active (the caller's universe then decides).

    Raises:
      FusionError: no masks, masks of different widths or dtypes, or a flag count that differs.
    """
    masks = _masks(masks)
    if not masks:
        raise FusionError("intersect_hard_masks needs at least one mask (for its width)")
    active = [True] * len(masks) if active is None else list(active)
    if len(active) != len(masks):
        raise FusionError(f"{len(masks)} masks but {len(active)} activity flags")
    out = jnp.full(masks[0].shape, ALL_ONES)
    for mask, flag in zip(masks, active):
        out = _and_if(out, mask, flag)
    return out


def _and_if(out: jax.Array, mask: jax.Array, flag: Flag) -> jax.Array:
    """``out & mask`` where ``flag`` holds; a static False leaves the mask out of the trace."""
    known = _static(flag)
    if known is None:
        return out & jnp.where(flag, mask, ALL_ONES)
    return out & mask if known else out


def is_empty(mask: jax.Array) -> jax.Array:
    """bool[...]: no bit of a packed mask uint32[..., W] is set."""
    return ~jnp.any(mask != 0, axis=-1)


def _domain_items(mapping: Mapping, hard: bool, what: str) -> dict[Domain, object]:
    """Keys (domains or their names) checked to be hard, or soft, domains."""
    out = {}
    for key, value in mapping.items():
        domain = parse_enum(Domain, key, "domain")
        if domain.is_hard != hard:
            raise FusionError(f"{domain.name.lower()} is a {'hard' if domain.is_hard else 'soft'} domain, not a {what}")
        out[domain] = value
    return out


def apply_soft_scores(
    scores: Mapping[Domain | str, jax.Array],
    weights: Mapping[Domain | str, float] | None = None,
    config: FusionConfig = DEFAULT_CONFIG,
    *,
    active: DomainSet | None = None,
    width: int | None = None,
) -> jax.Array:
    """The soft logit adjustment, computed once:
    ``sum_d(config_weight_d * domain_weight_d * score_d) / soft_temperature``.

    A NaN score means no opinion (0) and scores are clipped to [-1, 1], so no input can put NaN
    or an infinity into the logits.

    Args:
      scores: soft domain (`Domain.CONTROL_FLOW`, `Domain.SEMANTICS` or a name) -> float[..., V].
      weights: static per-domain weights (finite Python numbers), default 1.
      config: static `FusionConfig`: config weights and the soft temperature.
      active: which domains count (default: all); bool[] flags switch with `jnp.where`.
      width: V when ``scores`` is empty.

    Returns:
      float32[..., V]; zeros when no soft domain is active.

    Raises:
      FusionError: a hard domain among the keys, score vectors of different lengths, a
        non-finite or traced weight, or no scores and no width.
    """
    scores = {d: jnp.asarray(s, jnp.float32) for d, s in _domain_items(scores, False, "soft score").items()}
    weights = {d: finite_float(w, f"{d.name.lower()} weight") for d, w in _domain_items(weights or {}, False, "soft weight").items()}
    shapes = {s.shape for s in scores.values()}
    if len(shapes) > 1 or any(len(s) == 0 for s in shapes):
        raise FusionError(f"soft score vectors must be float[..., V] of one length, got shapes {sorted(shapes)}")
    if not scores and width is None:
        raise FusionError("apply_soft_scores needs scores or a width")
    shape = shapes.pop() if shapes else (width,)
    total = jnp.zeros(shape, jnp.float32)
    for domain, score in scores.items():
        flag = True if active is None else active[domain]
        if _static(flag) is False:
            continue
        weight = np.float32(config.soft_weight(domain) * weights.get(domain, 1.0))
        term = weight * jnp.where(jnp.isnan(score), 0.0, jnp.clip(score, -1.0, 1.0))
        total = total + (term if _static(flag) else jnp.where(flag, term, 0.0))
    return total / np.float32(config.soft_temperature)


class FusionResult(NamedTuple):
    """The fused opinion of all domains at one token position.

    Attributes:
      feasible_mask: uint32[..., W], the intersection of the active hard masks (all ones when
        none is active); empty when the domains disagree (see `required_relaxation`).
      logit_adjustment: float32[..., V], added once to the logits; zeros when no soft domain
        is active. Tokens outside the feasible set are masked to -inf whatever it holds.
      active_domains: the `DomainSet` consulted.
      required_relaxation: bool[...], the intersection is empty: apply `relax`.
    """

    feasible_mask: jax.Array
    logit_adjustment: jax.Array
    active_domains: DomainSet
    required_relaxation: jax.Array


def _hard_masks(hard_masks: Mapping, universe: jax.Array | None) -> tuple[dict[Domain, jax.Array], jax.Array]:
    """The masks by domain, and what an intersection starts from: the universe, or all ones."""
    masks = _domain_items(hard_masks, True, "hard mask")
    checked = _masks(list(masks.values()) + ([] if universe is None else [universe]))
    if not checked:
        raise FusionError("fusion needs a hard mask or a universe (for the mask width)")
    base = checked.pop() if universe is not None else jnp.full(checked[0].shape, ALL_ONES)
    return dict(zip(masks, checked)), base


def _meet(masks: dict[Domain, jax.Array], base: jax.Array, domains: Sequence[Domain], active: DomainSet) -> jax.Array:
    """``base`` intersected with the masks of ``domains``; absent domains have no opinion."""
    out = base
    for domain in domains:
        if domain in masks:
            out = _and_if(out, masks[domain], active[domain])
    return out


def fuse(
    hard_masks: Mapping[Domain | str, jax.Array],
    soft_scores: Mapping[Domain | str, jax.Array],
    config: FusionConfig = DEFAULT_CONFIG,
    phase: GenerationPhase | str | jax.Array | None = GenerationPhase.STRUCTURED_OUTPUT,
    *,
    weights: Mapping[Domain | str, float] | None = None,
    universe: jax.Array | None = None,
) -> FusionResult:
    """Select the active domains, intersect their masks once and sum their scores once.

    Args:
      hard_masks: hard domain -> packed uint32[..., W] mask (absent: no opinion).
      soft_scores: soft domain -> float[..., V] scores in [-1, 1] (NaN: no opinion).
      config: static `FusionConfig`.
      phase: the `GenerationPhase` (a name, or an int32[] code, traced ok).
      weights: static per-soft-domain weights (default 1).
      universe: optional uint32[..., W], the tokens that may ever be allowed (e.g. no padding
        ids); every intersection starts from it instead of all ones. Needed without masks.

    Returns:
      A `FusionResult`; the adjustment has the scores' length, or ``32 * W`` without scores.

    Raises:
      FusionError: see `intersect_hard_masks`, `apply_soft_scores` and `select_active_domains`.
    """
    active = select_active_domains(config.intensity, phase, config.adaptive_switching)
    masks, base = _hard_masks(hard_masks, universe)
    feasible = _meet(masks, base, HARD_DOMAINS, active)
    width = 32 * feasible.shape[-1]
    adjustment = apply_soft_scores(soft_scores, weights, config, active=active, width=width)
    return FusionResult(feasible, adjustment, active, is_empty(feasible))


class RelaxationLevel(enum.IntEnum):
    """How far the relaxation cascade went: each level drops the least essential domain left."""

    NONE = 0  # every active hard domain holds
    WITHOUT_IMPORTS = 1  # Imports dropped: Syntax and Types
    SYNTAX_ONLY = 2  # Types dropped too
    PARSER_BUG = 3  # Syntax alone allows nothing: a bug upstream of the fusion


class Relaxation(NamedTuple):
    """The outcome of `relax`.

    Attributes:
      feasible_mask: uint32[..., W], the first non-empty intersection of the cascade (Syntax's
        own mask, empty, at `RelaxationLevel.PARSER_BUG`).
      level: int32[...], the `RelaxationLevel` reached.
    """

    feasible_mask: jax.Array
    level: jax.Array

    @property
    def required_relaxation(self) -> jax.Array:
        return self.level > RelaxationLevel.NONE

    @property
    def parser_bug(self) -> jax.Array:
        return self.level == RelaxationLevel.PARSER_BUG


def relax(hard_masks: Mapping[Domain | str, jax.Array], active: DomainSet = ALL_HARD, *, universe: jax.Array | None = None) -> Relaxation:
    """The relaxation cascade: the active hard masks intersected; if that is empty, without
    Imports; if still empty, Syntax alone, whose emptiness flags a parser bug.

    The three intersections are built one from another (Syntax, then Types, then Imports) and
    the first non-empty one of the cascade is selected by index (`jnp.where`, `take_along_axis`):
    no Python branch on traced values. Inactive or absent domains count as all ones throughout.

    Args:
      hard_masks: hard domain -> packed uint32[..., W] mask.
      active: the `DomainSet` (flags may be traced).
      universe: optional uint32[..., W], as in `fuse`.

    Returns:
      A `Relaxation`.
    """
    masks, base = _hard_masks(hard_masks, universe)
    syntax = _meet(masks, base, (Domain.SYNTAX,), active)
    without_imports = _meet(masks, syntax, (Domain.TYPES,), active)
    levels = jnp.stack([_meet(masks, without_imports, (Domain.IMPORTS,), active), without_imports, syntax], axis=-2)
    nonempty = ~is_empty(levels)  # bool[..., 3]
    level = jnp.where(nonempty.any(axis=-1), jnp.argmax(nonempty, axis=-1), RelaxationLevel.PARSER_BUG)
    chosen = jnp.take_along_axis(levels, jnp.minimum(level, 2)[..., None, None], axis=-2)[..., 0, :]
    return Relaxation(chosen, level.astype(jnp.int32))
