"""The CLaSH algebra of seed 000 (`ananke_jax.fusion`): every behaviour of the seed, against
numpy references on random masks and scores, in float64 and on Python sets."""

import itertools
import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax.fusion import (
    Domain,
    DomainSet,
    FusionConfig,
    FusionError,
    GenerationPhase,
    IntensityLevel,
    RelaxationLevel,
    apply_soft_scores,
    fuse,
    intersect_hard_masks,
    relax,
    select_active_domains,
    serialize_config_json,
)

from oracles import unpack

V = 200  # tokens in these tests; W = 7 packed words
HARD = ("syntax", "types", "imports")
EVERY = DomainSet(True, True, True, True, True)


def pack(bits) -> np.ndarray:
    """uint32[ceil(V / 32)] from bool[V] by integer arithmetic (bit j of word i = entry 32i+j)."""
    bits = np.concatenate([np.asarray(bits, np.uint64), np.zeros(-len(bits) % 32, np.uint64)])
    return (bits.reshape(-1, 32) << np.arange(32, dtype=np.uint64)).sum(axis=1).astype(np.uint32)


def random_sets(rng, count, density=0.5):
    return [rng.random(V) < density for _ in range(count)]


def ids(bits) -> set:
    return set(np.flatnonzero(bits[:V]))


def test_intersection_is_set_intersection_of_the_active_masks():
    rng = np.random.default_rng(0)
    for _ in range(20):
        sets = random_sets(rng, 3, rng.uniform(0.2, 0.9))
        got = unpack(intersect_hard_masks([pack(s) for s in sets]))
        assert ids(got) == ids(sets[0]) & ids(sets[1]) & ids(sets[2])
        flags = [bool(f) for f in rng.random(3) < 0.5]
        got = unpack(intersect_hard_masks([pack(s) for s in sets], flags))
        expected = set(range(32 * 7))  # inactive masks count as all ones
        for s, f in zip(sets, flags):
            if f:
                expected &= ids(s)
        assert set(np.flatnonzero(got)) == expected


def test_single_intersection_and_single_soft_sum_are_order_independent_and_one_shot():
    rng = np.random.default_rng(1)
    sets = random_sets(rng, 3)
    masks = {d: pack(s) for d, s in zip(HARD, sets)}
    scores = {"control_flow": rng.uniform(-1, 1, V).astype(np.float32), "semantics": rng.uniform(-1, 1, V).astype(np.float32)}
    config = FusionConfig(intensity="full", control_flow_weight=0.7, semantics_weight=1.9, soft_temperature=0.6)
    weights = {"control_flow": 1.3, "semantics": 0.4}
    one_shot_mask = pack(sets[0] & sets[1] & sets[2])
    one_shot_adj = (0.7 * 1.3 * scores["control_flow"].astype(np.float64) + 1.9 * 0.4 * scores["semantics"]) / 0.6
    results = []
    for order in itertools.permutations(HARD):
        for soft_order in itertools.permutations(scores):
            result = fuse({d: masks[d] for d in order}, {d: scores[d] for d in soft_order}, config, weights=weights)
            results.append(result)
            np.testing.assert_array_equal(result.feasible_mask, one_shot_mask)
            np.testing.assert_allclose(result.logit_adjustment, one_shot_adj, rtol=1e-6, atol=1e-6)
    for r in results[1:]:  # bit for bit the same whatever the order
        np.testing.assert_array_equal(r.logit_adjustment, results[0].logit_adjustment)


def test_empty_intersection_flags_required_relaxation():
    syntax = np.zeros(V, bool)
    syntax[:10] = True
    types = np.zeros(V, bool)
    types[10:20] = True
    result = fuse({"syntax": pack(syntax), "types": pack(types)}, {}, FusionConfig())
    assert bool(result.required_relaxation) and not unpack(result.feasible_mask).any()
    result = fuse({"syntax": pack(syntax), "types": pack(syntax | types)}, {}, FusionConfig())
    assert not bool(result.required_relaxation)
    assert ids(unpack(result.feasible_mask)) == set(range(10))


def _cascade_case(syntax, types, imports):
    masks = {}
    for name, members in zip(HARD, (syntax, types, imports)):
        bits = np.zeros(V, bool)
        bits[list(members)] = True
        masks[name] = pack(bits)
    return relax(masks)


@pytest.mark.parametrize(
    "syntax, types, imports, level, kept",
    [
        ({1, 2, 3}, {2, 3}, {3, 4}, RelaxationLevel.NONE, {3}),
        ({1, 2, 3}, {2, 3}, {4}, RelaxationLevel.WITHOUT_IMPORTS, {2, 3}),  # Imports go first
        ({1, 2, 3}, {4}, {1}, RelaxationLevel.SYNTAX_ONLY, {1, 2, 3}),  # then Types, even if Imports would fit Syntax
        (set(), {4}, {4}, RelaxationLevel.PARSER_BUG, set()),  # Syntax is never dropped: its emptiness is a bug
    ],
)
def test_relaxation_cascade_drops_imports_then_types_and_keeps_syntax_last(syntax, types, imports, level, kept):
    relaxation = _cascade_case(syntax, types, imports)
    assert int(relaxation.level) == level
    assert ids(unpack(relaxation.feasible_mask)) == kept
    assert bool(relaxation.required_relaxation) == (level > 0)
    assert bool(relaxation.parser_bug) == (level == RelaxationLevel.PARSER_BUG)


def test_relaxation_cascade_is_jnp_where_under_jit_and_vmap():
    rng = np.random.default_rng(2)
    cases = [tuple(set(rng.choice(5, k)) for k in ks) for ks in rng.integers(0, 4, (64, 3))]  # few ids: all levels occur
    masks = {d: [] for d in HARD}
    for case in cases:
        for d, members in zip(HARD, case):
            bits = np.zeros(V, bool)
            bits[list(members)] = True
            masks[d].append(pack(bits))
    batched = jax.jit(jax.vmap(relax))({d: jnp.asarray(np.stack(m)) for d, m in masks.items()})
    for i, case in enumerate(cases):
        eager = _cascade_case(*case)
        assert int(batched.level[i]) == int(eager.level)
        np.testing.assert_array_equal(batched.feasible_mask[i], eager.feasible_mask)
    assert {int(x) for x in batched.level} == {0, 1, 2, 3}


def test_reasoning_keeps_syntax_only_and_none_keeps_nothing():
    for level in IntensityLevel:
        reasoning = select_active_domains(level, GenerationPhase.REASONING, True)
        assert reasoning == DomainSet(syntax=level != IntensityLevel.NONE)
        assert select_active_domains(level, "structured_output") == level.domains
        assert select_active_domains(level, "transition") == level.domains  # the current intensity
        assert select_active_domains(level, "reasoning", adaptive=False) == level.domains
        assert select_active_domains(level, None) == level.domains  # uncertain: structured output
    assert select_active_domains("none", "structured_output") == DomainSet()


def test_intensity_levels_domain_sets_and_budgets():
    sets = {level.value: {d.name.lower() for d in Domain if level.domains[d]} for level in IntensityLevel}
    assert sets == {
        "none": set(),
        "syntax_only": {"syntax"},
        "standard": {"syntax", "types"},
        "full_hard": {"syntax", "types", "imports"},
        "full": {"syntax", "types", "imports", "control_flow", "semantics"},
        "exhaustive": {"syntax", "types", "imports", "control_flow", "semantics"},
    }
    assert IntensityLevel.FULL.domains == IntensityLevel.EXHAUSTIVE.domains
    assert [level.latency_budget_us for level in IntensityLevel] == [0, 50, 200, 500, 2000, 5000]
    defaults = FusionConfig()
    assert (defaults.intensity, defaults.control_flow_weight, defaults.semantics_weight) == (IntensityLevel.STANDARD, 1.0, 1.0)
    assert (defaults.adaptive_switching, defaults.soft_temperature) == (True, 1.0)


def test_traced_phases_select_the_same_domains_as_static_ones():
    codes = jnp.arange(-1, 5, dtype=jnp.int32)  # -1 and 3, 4: uncertain, so structured output
    for level, adaptive in itertools.product(IntensityLevel, (True, False)):
        traced = jax.jit(jax.vmap(lambda c, level=level, adaptive=adaptive: select_active_domains(level, c, adaptive)))(codes)
        for i, code in enumerate(codes.tolist()):
            static = select_active_domains(level, code if 0 <= code < 3 else None, adaptive)
            assert tuple(bool(flag[i]) for flag in traced) == static


def test_no_active_soft_domain_gives_zero_adjustment_of_the_same_shape():
    rng = np.random.default_rng(3)
    scores = {"control_flow": rng.uniform(-1, 1, V), "semantics": rng.uniform(-1, 1, V)}
    mask = {"syntax": pack(np.ones(V, bool))}
    for config, phase in [
        (FusionConfig(intensity="standard"), "structured_output"),
        (FusionConfig(intensity="full"), "reasoning"),  # adaptive switching suppresses them
        (FusionConfig(intensity="none"), "structured_output"),
    ]:
        result = fuse(mask, scores, config, phase)
        assert result.logit_adjustment.shape == (V,) and not np.asarray(result.logit_adjustment).any()
    assert fuse(mask, {}, FusionConfig()).logit_adjustment.shape == (32 * 7,)  # no scores: the mask width
    active = fuse(mask, scores, FusionConfig(intensity="full"), "structured_output")
    assert np.asarray(active.logit_adjustment).any()


def test_weights_and_temperature_arithmetic():
    scores = {Domain.CONTROL_FLOW: np.full(V, 0.5, np.float32), Domain.SEMANTICS: np.full(V, -0.25, np.float32)}
    config = FusionConfig(intensity="full", control_flow_weight=2.0, semantics_weight=4.0, soft_temperature=0.5)
    adjustment = apply_soft_scores(scores, {Domain.SEMANTICS: 3.0}, config)
    np.testing.assert_allclose(adjustment, (2.0 * 1.0 * 0.5 + 4.0 * 3.0 * -0.25) / 0.5)
    only = apply_soft_scores({"semantics": scores[Domain.SEMANTICS]}, None, FusionConfig(soft_temperature=4.0))
    np.testing.assert_allclose(only, -0.25 / 4.0)


def test_nan_scores_are_no_opinion_and_scores_are_clipped():
    scores = np.array([np.nan, 2.0, -np.inf, 0.5] + [0.0] * (V - 4), np.float32)
    adjustment = np.asarray(apply_soft_scores({"semantics": scores}, None, FusionConfig()))
    np.testing.assert_array_equal(adjustment[:4], [0.0, 1.0, -1.0, 0.5])
    assert np.isfinite(adjustment).all()


def _softmax(x):
    e = np.exp(x - x[np.isfinite(x)].max())
    return e / e.sum()


def test_masked_softmax_is_the_conditional_distribution_asap_identity():
    """softmax over the masked logits == p(x) / sum_{y in G} p(y), computed in float64 from the
    unmasked distribution (seed: ASAp, Grammar-Aligned Decoding)."""
    rng = np.random.default_rng(4)
    for _ in range(20):
        logits = rng.normal(0, 3, V).astype(np.float32)
        sets = random_sets(rng, 3, 0.7)
        result = fuse({d: pack(s) for d, s in zip(HARD, sets)}, {}, FusionConfig(intensity="full_hard"))
        masked = np.asarray(aj.apply_mask(jnp.asarray(logits), result.feasible_mask), np.float64)
        p = _softmax(logits.astype(np.float64))
        in_g = sets[0] & sets[1] & sets[2]
        conditional = np.where(in_g, p, 0.0) / p[in_g].sum()
        np.testing.assert_allclose(_softmax(masked), conditional, rtol=1e-5, atol=1e-12)


def test_additive_scores_keep_the_ranking_of_tokens_with_equal_adjustments():
    rng = np.random.default_rng(5)
    for _ in range(20):
        logits = rng.normal(0, 2, V).astype(np.float32)
        levels = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], V).astype(np.float32)  # a few groups of equal scores
        adjustment = np.asarray(apply_soft_scores({"control_flow": levels}, {"control_flow": 1.7}, FusionConfig(soft_temperature=0.3)))
        adjusted = logits + adjustment
        for level in np.unique(levels):
            group = np.flatnonzero(levels == level)
            np.testing.assert_array_equal(np.argsort(logits[group], kind="stable"), np.argsort(adjusted[group], kind="stable"))
            log_odds = np.subtract.outer(logits[group], logits[group])
            np.testing.assert_allclose(np.subtract.outer(adjusted[group], adjusted[group]), log_odds, atol=1e-5)


def test_config_json_round_trip_and_stable_form():
    configs = [
        FusionConfig(),
        FusionConfig(
            intensity="exhaustive", control_flow_weight=0.1, semantics_weight=-2.5, adaptive_switching=False, soft_temperature=1e-3
        ),
        FusionConfig(
            phase_triggers={"<think>": "reasoning", "</think>": "structured_output", "```": GenerationPhase.TRANSITION},
            initial_phase="reasoning",
        ),
    ]
    for config in configs:
        text = serialize_config_json(config)
        assert FusionConfig.from_json(text) == config and hash(FusionConfig.from_json(text)) == hash(config)
        assert text == config.to_json() == json.dumps(json.loads(text), sort_keys=True)
    assert json.loads(serialize_config_json(FusionConfig())) == {
        "adaptive_switching": True,
        "control_flow_weight": 1.0,
        "initial_phase": "structured_output",
        "intensity": "standard",
        "phase_triggers": [],
        "semantics_weight": 1.0,
        "soft_temperature": 1.0,
    }
    assert FusionConfig.from_json('{"intensity": "full"}') == FusionConfig(intensity=IntensityLevel.FULL)


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"intensity": "maximal"}', "unknown intensity 'maximal'"),
        ('{"initial_phase": "thinking"}', "unknown phase 'thinking'"),
        ('{"phase_triggers": [["</think>", "coding"]]}', "unknown phase 'coding'"),
        ('{"intensity": 3}', "unknown intensity 3"),
        ('{"semantics_weight": NaN}', "semantics_weight must be finite"),
        ('{"control_flow_weight": Infinity}', "control_flow_weight must be finite"),
        ('{"soft_temperature": 0}', "soft_temperature must be > 0"),
        ('{"adaptive_switching": 1}', "adaptive_switching must be a bool"),
        ('{"phase_triggers": [["", "reasoning"]]}', "non-empty text"),
        ('{"temperature": 1}', "unknown fusion config keys \\['temperature'\\]"),
        ("[1, 2]", "must be an object"),
        ("{", "not valid JSON"),
    ],
)
def test_bad_config_json_is_refused_clearly(text, message):
    with pytest.raises(FusionError, match=message):
        FusionConfig.from_json(text)


def test_bad_inputs_are_refused_at_trace_time():
    mask, short = pack(np.ones(V, bool)), pack(np.ones(V - 64, bool))
    scores = np.zeros(V, np.float32)
    cases = [
        (lambda: intersect_hard_masks([mask, short]), "different widths"),
        (lambda: intersect_hard_masks([mask.astype(np.int32)]), "packed uint32"),
        (lambda: intersect_hard_masks([]), "at least one mask"),
        (lambda: fuse({"syntax": mask, "types": short}, {}, FusionConfig()), "different widths"),
        (lambda: fuse({"syntax": mask}, {"control_flow": scores, "semantics": scores[:-1]}), "one length"),
        (lambda: fuse({"syntax": mask}, {"syntax": scores}), "syntax is a hard domain"),
        (lambda: fuse({"semantics": mask}, {}), "semantics is a soft domain"),
        (lambda: fuse({"grammar": mask}, {}), "unknown domain 'grammar'"),
        (lambda: fuse({"syntax": mask}, {"semantics": scores}, weights={"semantics": math.nan}), "semantics weight must be finite"),
        (lambda: fuse({"syntax": mask}, {"semantics": scores}, weights={"semantics": math.inf}), "must be finite"),
        (lambda: fuse({"syntax": mask}, {}, phase="thinking"), "unknown phase"),
        (lambda: fuse({}, {}), "a hard mask or a universe"),
        (lambda: FusionConfig(control_flow_weight=math.nan), "must be finite"),
        (lambda: FusionConfig(intensity="max"), "unknown intensity"),
    ]
    for call, message in cases:
        with pytest.raises(FusionError, match=message):
            call()
    with pytest.raises(FusionError, match="unknown phase"):  # inside jit too: raised while tracing
        jax.jit(lambda m: fuse({"syntax": m}, {}, phase="later").feasible_mask)(mask)
    with pytest.raises(FusionError, match="different widths"):
        jax.jit(lambda a, b: intersect_hard_masks([a, b]))(mask, short)


def test_inputs_are_not_mutated_and_configs_are_frozen():
    rng = np.random.default_rng(6)
    masks = {d: pack(s) for d, s in zip(HARD, random_sets(rng, 3))}
    scores = {"control_flow": rng.uniform(-1, 1, V).astype(np.float32)}
    scores["control_flow"][3] = np.nan
    before = {k: v.copy() for k, v in {**masks, **scores}.items()}
    fuse(masks, scores, FusionConfig(intensity="full"))
    relax(masks, EVERY)
    for k, v in {**masks, **scores}.items():
        np.testing.assert_array_equal(v, before[k])
    with pytest.raises(AttributeError):
        FusionConfig().intensity = IntensityLevel.FULL


def test_fuse_runs_under_jit_vmap_and_scan_with_a_traced_phase():
    rng = np.random.default_rng(7)
    masks = {d: jnp.asarray(np.stack([pack(s) for s in random_sets(rng, 4)])) for d in HARD}
    scores = {"semantics": jnp.asarray(rng.uniform(-1, 1, (4, V)), jnp.float32)}
    phases = jnp.asarray([0, 1, 2, 1], jnp.int32)
    config = FusionConfig(intensity="full")
    batched = jax.jit(jax.vmap(lambda m, s, p: fuse(m, s, config, p)))(masks, scores, phases)

    def body(carry, xs):
        m, s, p = xs
        return carry, fuse(m, s, config, p)

    scanned = jax.lax.scan(body, 0, (masks, scores, phases))[1]
    for i, phase in enumerate(GenerationPhase(int(p)) for p in phases):
        eager = fuse({d: m[i] for d, m in masks.items()}, {"semantics": scores["semantics"][i]}, config, phase)
        for got in (batched, scanned):
            np.testing.assert_array_equal(got.feasible_mask[i], eager.feasible_mask)
            np.testing.assert_array_equal(got.logit_adjustment[i], eager.logit_adjustment)
            assert bool(got.required_relaxation[i]) == bool(eager.required_relaxation)
            assert tuple(bool(a[i]) for a in got.active_domains) == eager.active_domains
