"""Fused constraints in `constrained_step`: whole masks and adjusted logits against a brute-force
fusion of brute-force domain masks (both real vocabularies), phases switching domains, the
relaxation flags in the state, and jit / vmap / scan."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax.fusion import (
    FusionConfig,
    FusionError,
    GenerationPhase,
    deferred,
    fused,
    soft_grammar,
    soft_scores,
)

from fusion_oracles import DeferredOracle, brute_phases, scripted_generation
from oracles import ReferenceMasks, unpack

SYNTAX = r'\{"city": "[A-Za-z ]{1,12}", "n": [0-9]{1,2}\}'
TYPES = r'\{"city": "[A-Z][a-z]*( [A-Z][a-z]*)?", "n": [1-9][0-9]?\}'
PREFERRED = r'\{"city": "(Paris|Lyon)", "n": 7\}'
TRIGGERS = {"<think>": GenerationPhase.REASONING, "</think>": GenerationPhase.STRUCTURED_OUTPUT}
CONFIG = FusionConfig(intensity="full", control_flow_weight=0.5, semantics_weight=2.0, soft_temperature=0.8, phase_triggers=TRIGGERS)
SCRIPT = '<think>The user wants a city.</think>{"city": "Paris", "n": '


class RegexDeferredOracle(DeferredOracle):
    """`DeferredOracle` for a regex after ``</think>``, with its masks from brute-force walks."""

    def __init__(self, pattern, vocab):
        dfa = regex_to_dfa(pattern)
        ref = ReferenceMasks(dfa, vocab)
        super().__init__(vocab, ["</think>"], lambda d: dfa.walk(dfa.start, d) != 0, lambda d: ref.allowed(dfa.walk(dfa.start, d)))


@functools.cache
def _case(vocab):
    """The fused constraint under test and the pieces of its brute-force twin."""
    rng = np.random.default_rng(len(vocab))
    digits = [i for i, t in enumerate(vocab.tokens) if t and t.strip(b" ").isdigit()]
    ordinary = [i for i, t in enumerate(vocab.tokens) if t and i not in vocab.special_token_ids]
    imports = sorted(set(ordinary) - set(digits))  # Imports never allow digits: relaxation at "n"
    scores = rng.uniform(-1.5, 1.5, vocab.logits_width).astype(np.float32)
    scores[rng.random(vocab.logits_width) < 0.1] = np.nan
    fc = fused(
        vocab,
        syntax=deferred(aj.compile_regex(SYNTAX, vocab), "</think>", vocab),
        types=deferred(aj.compile_regex(TYPES, vocab), "</think>", vocab),
        imports=aj.allowed_tokens(imports, vocab),
        control_flow=soft_scores(scores, weight=1.5),
        semantics=soft_grammar(deferred(aj.compile_regex(PREFERRED, vocab), "</think>", vocab), inside=1.0, outside=-0.5, weight=0.75),
        config=CONFIG,
    )
    imports_bits = np.zeros(vocab.logits_width, bool)
    imports_bits[imports + list(vocab.eos_token_ids)] = True
    twin = {
        "syntax": RegexDeferredOracle(SYNTAX, vocab),
        "types": RegexDeferredOracle(TYPES, vocab),
        "imports": imports_bits,
        "scores": scores,
        "preferred": RegexDeferredOracle(PREFERRED, vocab),
    }
    return fc, twin


def _expected(twin, vocab, data: bytes, logits: np.ndarray):
    """The fused mask, relaxation level and adjusted logits, computed from scratch in numpy."""
    phase = brute_phases(data, {t.encode(): p for t, p in TRIGGERS.items()}, GenerationPhase.STRUCTURED_OUTPUT)[-1]
    structured = phase != GenerationPhase.REASONING  # full intensity; reasoning keeps Syntax alone
    syntax, types = twin["syntax"].mask(data), twin["types"].mask(data)
    universe = twin["syntax"].free.copy()
    universe[list(vocab.eos_token_ids)] = True
    levels = [syntax & types & twin["imports"], syntax & types, syntax] if structured else [syntax] * 3
    level = next((i for i, m in enumerate(levels) if (m & universe).any()), 3)
    mask = levels[min(level, 2)] & universe
    adjustment = np.zeros(vocab.logits_width)
    if structured:
        clean = np.clip(np.nan_to_num(twin["scores"].astype(np.float64), nan=0.0), -1, 1)
        preferred = twin["preferred"]
        graded = np.where(preferred.mask(data), 1.0, -0.5) * (not preferred.is_error(data))
        adjustment = (0.5 * 1.5 * clean + 2.0 * 0.75 * graded) / 0.8
    return mask, level, np.where(mask, logits + adjustment, -np.inf)


_masked_logits = jax.jit(aj.masked_logits)
_step = jax.jit(aj.constrained_step, static_argnums=4)


def test_fused_masks_and_logits_match_a_brute_force_fusion(real_vocab):
    _, vocab, encode = real_vocab
    fc, twin = _case(vocab)
    script = encode(SCRIPT)
    params = aj.SamplingParams(temperature=1.0)
    levels_seen, phases_seen = set(), set()
    for walk in range(3):
        key = jax.random.key(walk)
        state, data = fc.init_state(), b""
        for t in range(len(script) + 8):
            key, logits_key, step_key = jax.random.split(key, 3)
            logits = np.array(jax.random.normal(logits_key, (vocab.logits_width,)))
            if t < len(script):
                logits[script[t]] += 60.0  # follow the script, where the constraint allows it
            mask, level, expected = _expected(twin, vocab, data, logits)
            got_mask = unpack(aj.token_mask(fc, state))
            np.testing.assert_array_equal(got_mask[: vocab.logits_width], mask, err_msg=repr(data))
            assert not got_mask[vocab.logits_width :].any()
            got = np.asarray(_masked_logits(fc, state, jnp.asarray(logits)))
            np.testing.assert_array_equal(np.isneginf(got), ~mask)
            np.testing.assert_allclose(got[mask], expected[mask], rtol=1e-5, atol=1e-5)
            assert bool(aj.accepts(fc, state)) == bool(mask[vocab.eos_token_ids[0]])
            token, state = _step(fc, state, jnp.asarray(logits), step_key, params)
            assert mask[int(token)] and int(state.relaxation) == level and not bool(state.parser_bug)
            levels_seen.add(level)
            phases_seen.add(int(fc.phase(state)))
            if int(token) in vocab.eos_token_ids:
                break
            data += vocab.token_bytes(int(token))
    assert levels_seen >= {0, 1} and phases_seen == {0, 1}


@pytest.mark.slow
def test_fused_generation_under_jit_vmap_and_scan_gives_valid_outputs(real_vocab):
    _, vocab, encode = real_vocab
    fc, _ = _case(vocab)
    keys = jax.random.split(jax.random.key(0), 6)
    (states, done), tokens = scripted_generation(fc, encode(SCRIPT), vocab, keys, steps=40, eos_bonus=8.0)
    finished = 0
    for row, is_done in zip(np.asarray(tokens), np.asarray(done)):
        ids = [int(t) for t in row if t >= 0]
        data = b"".join(vocab.token_bytes(t) for t in ids if t not in vocab.eos_token_ids)
        answer = data.split(b"</think>", 1)[1].decode()
        assert data.startswith(b"<think>The user wants a city.</think>")
        if is_done:
            assert re.fullmatch(SYNTAX, answer), answer  # Syntax always holds; Types may have been relaxed
            finished += 1
    assert finished >= 3
    assert not np.asarray(states.parser_bug).any()


@pytest.mark.slow
def test_eager_jit_and_vmap_steps_agree(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    fc, _ = _case(vocab)
    params = aj.SamplingParams(temperature=0.8, top_k=40)
    keys = jax.random.split(jax.random.key(1), 3)
    logits = jax.random.normal(jax.random.key(2), (3, vocab.logits_width))
    states = jax.vmap(lambda _: fc.init_state())(jnp.arange(3))
    for _ in range(2):
        tokens, new_states = jax.jit(jax.vmap(aj.constrained_step, in_axes=(None, 0, 0, 0, None)), static_argnums=4)(
            fc, states, logits, keys, params
        )
        for i in range(3):
            state_i = jax.tree_util.tree_map(lambda x, i=i: x[i], states)
            with jax.disable_jit():
                eager_token, eager_state = aj.constrained_step(fc, state_i, logits[i], keys[i], params)
            jit_token, jit_state = _step(fc, state_i, logits[i], keys[i], params)
            assert int(eager_token) == int(jit_token) == int(tokens[i])
            for a, b, c in zip(
                jax.tree_util.tree_leaves(eager_state), jax.tree_util.tree_leaves(jit_state), jax.tree_util.tree_leaves(new_states)
            ):
                np.testing.assert_array_equal(a, b)
                np.testing.assert_array_equal(b, c[i])
        states, keys = new_states, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys)


def test_reasoning_phase_keeps_syntax_alone(tekken_vocab):
    vocab = tekken_vocab
    syntax = aj.compile_regex(r"(?s).*", vocab)
    types = aj.compile_regex(r"[a-z<>/ ]*", vocab)
    ids = [i for i, t in enumerate(vocab.tokens) if t in (b"a", b"<", b">", b"think", b" ")]
    fc = fused(
        vocab,
        syntax=syntax,
        types=types,
        imports=aj.allowed_tokens(ids, vocab),
        semantics=soft_scores(np.ones(vocab.logits_width)),
        config=CONFIG,
    )
    encode_ids = {t: i for i, t in enumerate(vocab.tokens) if t in (b"<", b"think", b">")}
    state = fc.init_state()
    structured = unpack(aj.token_mask(fc, state))
    assert set(np.flatnonzero(structured)) == set(ids) | set(vocab.eos_token_ids)
    for piece in (b"<", b"think", b">"):
        state = aj.advance(fc, state, encode_ids[piece])
    assert int(fc.phase(state)) == GenerationPhase.REASONING
    reasoning = unpack(aj.token_mask(fc, state))
    np.testing.assert_array_equal(reasoning, unpack(aj.token_mask(syntax, state.domains[0])))
    result = fc.result(state)
    assert tuple(map(bool, result.active_domains)) == (True, False, False, False, False)
    assert not np.asarray(result.logit_adjustment).any()
    assert fc.result(fc.init_state()).logit_adjustment[0] == pytest.approx(2.0 / 0.8)
    nothing = fused(vocab, syntax=syntax, config=FusionConfig(intensity="none"))
    everything = unpack(aj.token_mask(nothing, nothing.init_state()))
    assert everything.sum() == len(vocab) - len(vocab.special_token_ids) + 1 and not everything[len(vocab) :].any()


def test_a_syntax_error_is_a_parser_bug_and_sampling_falls_back_to_eos(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    syntax = aj.compile_regex(r"[0-9]+", vocab)
    fc = fused(vocab, syntax=syntax, imports=aj.allowed_tokens([], vocab), config=FusionConfig(intensity="full_hard"))
    state = fc.init_state()
    assert int(fc.relaxation(state).level) == 1  # Imports allow only EOS, which Syntax refuses yet
    letter = vocab.tokens.index(b"a")
    broken = fc.init_state()._replace(domains=(aj.advance(syntax, state.domains[0], letter), *state.domains[1:]))
    assert int(fc.relaxation(broken).level) == 3 and bool(aj.is_error(fc, broken))
    token, after = aj.constrained_step(fc, broken, jnp.zeros(vocab.logits_width), jax.random.key(0))
    assert int(token) == vocab.eos_token_ids[0] and bool(after.parser_bug) and int(after.relaxation) == 3


def test_allowed_tokens(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    allow = aj.allowed_tokens(np.array([5, 100, 31999]), vocab)
    assert set(np.flatnonzero(unpack(aj.token_mask(allow, allow.init_state())))) == {5, 100, 31999, *vocab.eos_token_ids}
    state = aj.advance(allow, allow.init_state(), 7)  # no error state: the list is the same at every step
    assert bool(aj.accepts(allow, state)) and not bool(aj.is_error(allow, state))
    token, _ = aj.constrained_step(allow, state, jnp.arange(vocab.logits_width, dtype=jnp.float32), jax.random.key(0))
    assert int(token) == 31999
    for ids, message in [
        ([32000], "outside the vocabulary"),
        ([-1], "outside"),
        ([1], "special tokens"),
        ([[1, 2]], "1-D"),
        ([0.5], "integers"),
    ]:
        with pytest.raises(FusionError, match=message):
            aj.allowed_tokens(ids, vocab)


def test_fused_refuses_bad_domains(sentencepiece_vocab, tekken_vocab):
    vocab = sentencepiece_vocab
    cg = aj.compile_regex("a+", vocab)
    cases = [
        ({"syntax": soft_scores(np.zeros(vocab.logits_width))}, "syntax domain needs a constraint"),
        ({"semantics": cg}, "semantics domain needs a SoftDomain"),
        ({"control_flow": soft_scores(np.zeros(vocab.logits_width - 1))}, "expected \\[32000\\]"),
        ({"types": aj.compile_regex("a+", tekken_vocab)}, "types domain was built for"),
        ({"semantics": soft_grammar(aj.compile_regex("a+", tekken_vocab))}, "semantics domain was built for"),
        ({"config": FusionConfig(phase_triggers=[("x", "reasoning"), ("x", "transition")])}, "two phases"),
    ]
    for kwargs, message in cases:
        with pytest.raises(FusionError, match=message):
            fused(vocab, **kwargs)
    for bad in ({"weight": float("nan")}, {"inside": float("inf")}):
        with pytest.raises(FusionError, match="must be finite"):
            soft_grammar(cg, **bad)
    with pytest.raises(FusionError, match="float\\[V\\]"):
        soft_scores(np.zeros((2, 3)))
    fc = fused(vocab, syntax=cg)
    with pytest.raises(ValueError, match="logits have 100 entries"):  # logits checked when traced
        jax.jit(aj.constrained_step)(fc, fc.init_state(), jnp.zeros(100), jax.random.key(0))


def test_logits_wider_than_the_vocabulary(sentencepiece_vocab):
    wide = aj.Vocabulary(
        sentencepiece_vocab.tokens,
        eos_token_ids=sentencepiece_vocab.eos_token_ids,
        special_token_ids=sentencepiece_vocab.special_token_ids,
        logits_width=32_100,
    )
    syntax = aj.compile_regex(r"(?s).*", wide)
    fc = fused(wide, syntax=syntax, semantics=soft_scores(np.ones(32_100)), config=FusionConfig(intensity="full"))
    text = np.flatnonzero(unpack(aj.token_mask(syntax, syntax.init_state())))
    assert text.max() < 32_000
    for width in (32_000, 32_100):  # the tokenizer's size, or the model's wider logits_width
        out = np.asarray(aj.masked_logits(fc, fc.init_state(), jnp.zeros(width)))
        assert out.shape == (width,) and set(np.flatnonzero(np.isfinite(out))) == set(text) and (out[text] == 1.0).all()
    with pytest.raises(ValueError, match="logits_width=32100"):  # wider than the model's logits: not its logits
        aj.masked_logits(fc, fc.init_state(), jnp.zeros(32_128))
