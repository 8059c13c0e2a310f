"""`generate` with the tiny Llama: outputs checked by independent parsers, against a per-token
host loop, under batching, mixed banks and bad input."""

import dataclasses
import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.generate import GenerationResult
from ananke_jax._src.models.llama import (
    LlamaConfig,
    init_cache,
    init_params,
    make_step_fn,
)

# A byte-level vocabulary with a few multi-byte tokens; EOS is id 0.
TOKENS = [b"<eos>"] + [bytes([c]) for c in range(32, 127)] + [b'{"', b'":', b'",', b"true", b"false", b"null", b"ab", b"12"]
VOCAB = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
CONFIG = LlamaConfig.tiny(len(TOKENS))
PARAMS = init_params(CONFIG, jax.random.key(0))
STEP = make_step_fn(CONFIG)
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "name": {"type": "string", "maxLength": 6}},
    "required": ["ok", "name"],
}


def _prompts(batch, width=6, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, width + 1, batch)
    tokens = rng.integers(1, 96, (batch, width))
    return np.where(np.arange(width)[None, :] < lengths[:, None], tokens, 0), lengths


SAMPLE = aj.SamplingParams(temperature=1.0)


def _generate(constraint, batch=4, new=24, sampling=SAMPLE, seed=0, **options):
    prompt, lengths = _prompts(batch, seed=seed)
    cache = init_cache(CONFIG, batch, prompt.shape[1] + new + 8)  # room for speculative drafts
    return aj.generate(
        STEP, PARAMS, prompt, constraint, cache=cache, max_new_tokens=new, eos_token_ids=VOCAB.eos_token_ids,
        key=jax.random.key(seed), prompt_lengths=lengths, sampling=sampling, **options,
    )  # fmt: skip


def _texts(result: GenerationResult) -> list[str]:
    return [
        b"".join(VOCAB.token_bytes(t) for t in row[:n]).decode() for row, n in zip(np.asarray(result.tokens), np.asarray(result.lengths))
    ]


@jax.jit
def _last_logits(tokens, length):
    """Logits after ``tokens[:length]`` from a fresh full forward pass (int32[L] padded on the
    right: causal attention keeps the padding out)."""
    cache = init_cache(CONFIG, 1, tokens.shape[0])
    logits, _ = STEP(PARAMS, cache, tokens[None], jnp.arange(tokens.shape[0])[None])
    return logits[0, length - 1]


def _host_loop(constraint, prompt, length, new, key, params, row):
    """The reference: one row, the model run on the whole sequence each step, no cache reuse."""
    tokens, state, eos = list(prompt[:length]), constraint.init_state(), VOCAB.eos_token_ids
    width = len(prompt) + new
    out = []
    for step in range(new):
        logits = _last_logits(jnp.asarray(tokens + [0] * (width - len(tokens)), jnp.int32), len(tokens))
        mask = aj.token_mask(constraint, state)
        if not bool(mask.any()):
            return out, "constraint_error"
        others = np.asarray(aj.unpack_mask(mask, VOCAB.logits_width)).copy()
        others[list(eos)] = False
        if not others.any() and bool(aj.accepts(constraint, state)):
            return out, "grammar_complete"
        keys = jax.random.split(jax.random.fold_in(key, step), 4)
        token = int(aj.sample(aj.apply_mask(logits, mask), keys[row], params, fallback_token=eos[0]))
        if token in eos:
            return out, "eos"
        state = aj.advance(constraint, state, token)
        out.append(token)
        tokens.append(token)
    return out, "length"


@pytest.mark.parametrize("temperature", [0.0, pytest.param(1.0, marks=pytest.mark.slow)])
def test_matches_a_host_loop_without_cache(temperature):
    constraint = aj.compile_regex(r"(ab|[0-9]){2,9}", VOCAB)
    params = aj.SamplingParams(temperature=temperature)
    result = _generate(constraint, sampling=params, new=12)
    prompt, lengths = _prompts(4)
    for row in range(4):
        expected, reason = _host_loop(constraint, prompt[row], lengths[row], 12, jax.random.key(0), params, row)
        assert np.asarray(result.tokens[row, : result.lengths[row]]).tolist() == expected
        assert result.finish_names()[row] == reason


@pytest.mark.slow
def test_regex_rows_match_the_regex():
    result = _generate(aj.compile_regex(r"[a-z]{3,8}( [a-z]{2,5}){0,3}", VOCAB), batch=8, new=40)
    for text, reason in zip(_texts(result), result.finish_names()):
        assert reason in ("eos", "grammar_complete")
        assert re.fullmatch(r"[a-z]{3,8}( [a-z]{2,5}){0,3}", text), text


@pytest.mark.parametrize("seed", range(3))
def test_json_schema_rows_are_valid(seed):
    jsonschema = pytest.importorskip("jsonschema")
    result = _generate(aj.compile_json_schema(SCHEMA, VOCAB, whitespace="compact"), batch=8, new=64, seed=seed)
    finished = [(text, reason) for text, reason in zip(_texts(result), result.finish_names()) if reason != "length"]
    assert finished, "some rows finish within the budget"
    for text, reason in finished:
        assert reason in ("eos", "grammar_complete"), reason
        jsonschema.validate(json.loads(text), SCHEMA)


def test_grammar_complete_ends_without_eos_from_the_model():
    result = _generate(aj.compile_choices(["true", "false"], VOCAB), batch=6, new=8)
    assert set(result.finish_names()) == {"grammar_complete"}
    assert set(_texts(result)) <= {"true", "false"}


@pytest.mark.slow
def test_budget_ends_with_length():
    result = _generate(aj.compile_regex(r"[a-z]{26,}", VOCAB), new=5)  # 5 tokens spell 25 letters at most ("false")
    assert result.finish_names() == ["length"] * 4 and np.asarray(result.lengths).tolist() == [5] * 4


@pytest.mark.slow
def test_mixed_bank_of_grammars_and_unconstrained_rows():
    grammars = [aj.compile_regex(r"[0-9]{4}", VOCAB), aj.unconstrained(VOCAB), aj.compile_choices(["null", "true"], VOCAB)]
    bank = aj.stack_grammars(grammars)
    index = np.array([0, 1, 2, 0, 1, 2])
    result = _generate(bank, batch=6, new=10, grammar_index=index)
    free = _generate(None, batch=6, new=10)
    texts = _texts(result)
    for row, text in enumerate(texts):
        if index[row] == 0:
            assert re.fullmatch(r"[0-9]{4}", text)
        elif index[row] == 2:
            assert text in ("null", "true")
        else:  # the unconstrained grammar changes nothing: same tokens as without a constraint
            assert np.asarray(result.tokens[row]).tolist() == np.asarray(free.tokens[row]).tolist()
    # Each row equals its own single-grammar run.
    for g in range(3):
        alone = _generate(grammars[g], batch=6, new=10)
        rows = np.flatnonzero(index == g)
        np.testing.assert_array_equal(np.asarray(alone.tokens)[rows], np.asarray(result.tokens)[rows])


@pytest.mark.slow
def test_per_row_sampling_params_equal_separate_runs():
    greedy, hot = aj.SamplingParams(temperature=0.0), aj.SamplingParams(temperature=1.5, top_k=20)
    constraint = aj.compile_regex(r"[a-z ]{1,20}", VOCAB)
    mixed = _generate(constraint, sampling=[greedy, hot, greedy, hot])
    for params, rows in ((greedy, [0, 2]), (hot, [1, 3])):
        alone = _generate(constraint, sampling=params)
        np.testing.assert_array_equal(np.asarray(alone.tokens)[rows], np.asarray(mixed.tokens)[rows])


@pytest.mark.slow
def test_batch_equals_rows_run_alone():
    constraint = aj.compile_regex(r"[a-z]{2,30}", VOCAB)
    greedy = _generate(constraint, batch=4, new=16, sampling=aj.SamplingParams(temperature=0.0))
    prompt, lengths = _prompts(4)
    for row in range(4):
        cache = init_cache(CONFIG, 1, prompt.shape[1] + 16)
        alone = aj.generate(
            STEP, PARAMS, prompt[row : row + 1], constraint, cache=cache, max_new_tokens=16,
            eos_token_ids=VOCAB.eos_token_ids, key=jax.random.key(0), prompt_lengths=lengths[row : row + 1],
            sampling=aj.SamplingParams(temperature=0.0),
        )  # fmt: skip
        np.testing.assert_array_equal(np.asarray(alone.tokens[0]), np.asarray(greedy.tokens[row]))


@pytest.mark.slow
def test_pushdown_constraint_outputs_parse():
    grammar = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]+ | root'
    cg = aj.compile_gbnf(grammar, VOCAB, stack_depth=16)
    result = _generate(cg, batch=6, new=30)
    for text, reason in zip(_texts(result), result.finish_names()):
        if reason != "length":
            assert reason in ("eos", "grammar_complete")
            json.loads(text)  # every sentence of the grammar is a JSON array


@pytest.mark.slow
def test_a_bank_of_context_free_grammars_with_free_rows():
    """Rows of a pushdown bank (grammars of different sizes and stack depths; index -1: no
    constraint) produce the tokens their own grammar (or no constraint) produces alone; finished
    rows parse."""
    jsonschema = pytest.importorskip("jsonschema")
    tree = {
        "type": "object",
        "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["v"],
    }
    nested = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]+ | root'
    grammars = [
        aj.compile_gbnf(nested, VOCAB, stack_depth=16),
        aj.compile_json_schema(tree, VOCAB, whitespace="compact"),
        aj.compile_json_schema(SCHEMA, VOCAB, whitespace="compact", engine="pushdown"),
    ]
    index = np.array([0, 1, 2, -1, 1, 2])
    result = _generate(aj.stack_grammars(grammars), batch=6, new=40, grammar_index=index)
    # The recursive schema's rows against the schema alone (bank rows equal their own grammar's at
    # every step in test_pushdown, free rows equal unconstrained ones in the mixed-bank test above).
    for g, constraint in [(1, grammars[1])]:
        rows = np.flatnonzero(index == g)
        alone = _generate(constraint, batch=6, new=40)
        np.testing.assert_array_equal(np.asarray(alone.tokens)[rows], np.asarray(result.tokens)[rows])
        assert [alone.finish_names()[r] for r in rows] == [result.finish_names()[r] for r in rows]
    finished = 0
    for g, text, reason in zip(index, _texts(result), result.finish_names()):
        if g >= 0 and reason != "length":
            finished += 1
            value = json.loads(text)  # each grammar's sentences are JSON
            if g > 0:
                jsonschema.validate(value, [tree, SCHEMA][g - 1])
    assert finished, "some constrained rows finish within the budget"


@pytest.mark.slow
def test_interventions_count_masked_argmaxes():
    free = _generate(None, sampling=aj.SamplingParams(temperature=0.0))
    assert np.asarray(free.interventions).tolist() == [0] * 4
    forced = _generate(aj.compile_regex(r"~{5}", VOCAB), sampling=aj.SamplingParams(temperature=0.0), new=8)
    assert (np.asarray(forced.interventions) >= 1).all()


def test_bad_input_is_refused_clearly():
    constraint = aj.compile_regex(r"[a-z]+", VOCAB)
    prompt, _lengths = _prompts(2)
    base = {"eos_token_ids": VOCAB.eos_token_ids, "key": jax.random.key(0), "max_new_tokens": 8}
    with pytest.raises(ValueError, match="cache holds 10"):
        aj.generate(STEP, PARAMS, prompt, constraint, cache=init_cache(CONFIG, 2, 10), **base)
    with pytest.raises(ValueError, match="grammar bank needs grammar_index"):
        aj.generate(STEP, PARAMS, prompt, aj.stack_grammars([constraint]), cache=init_cache(CONFIG, 2, 20), **base)
    with pytest.raises(ValueError, match=r"grammar_index must be 2 ints in \[-1, 1\)"):
        aj.generate(STEP, PARAMS, prompt, aj.stack_grammars([constraint]), cache=init_cache(CONFIG, 2, 20), grammar_index=[0, 1], **base)
    with pytest.raises(ValueError, match="prompt_lengths"):
        aj.generate(STEP, PARAMS, prompt, constraint, cache=init_cache(CONFIG, 2, 20), prompt_lengths=[0, 3], **base)
    other = aj.compile_regex(r"[a-z]+", aj.Vocabulary.from_tokens(TOKENS + [b"zz"], eos_token_ids=[0]))
    with pytest.raises(ValueError, match="compiled for a vocabulary of"):
        aj.generate(STEP, PARAMS, prompt, other, cache=init_cache(CONFIG, 2, 20), **base)


def test_finish_reason_names():
    assert aj.FINISH_REASONS[0] == "running" and len(set(aj.FINISH_REASONS)) == len(aj.FINISH_REASONS)


@pytest.mark.slow
def test_a_row_whose_mask_is_empty_ends_with_constraint_error_alone():
    """A grammar started in its dead state allows nothing: its rows end at once with
    constraint_error and no token; the other rows of the bank are as when run alone."""
    good = aj.compile_regex(r"[a-z]{2,8}", VOCAB)
    dead = dataclasses.replace(good, start_state=jnp.int32(0))
    index = np.array([0, 1, 0, 1])
    result = _generate(aj.stack_grammars([good, dead]), grammar_index=index, new=12)
    alone = _generate(good, new=12)
    assert result.finish_names()[1::2] == ["constraint_error"] * 2
    assert np.asarray(result.lengths)[1::2].tolist() == [0, 0] and (np.asarray(result.tokens)[1::2] == -1).all()
    np.testing.assert_array_equal(np.asarray(result.tokens)[::2], np.asarray(alone.tokens)[::2])


@pytest.mark.slow
def test_fused_constraint_applies_its_hard_and_soft_domains():
    """A fused constraint in the loop: the hard domain holds in every row, and a soft domain that
    favours digits makes them win where the hard domain leaves a choice."""
    syntax = aj.compile_regex(r"[a-z0-9]{4}", VOCAB)
    digits = aj.compile_regex(r"[0-9]{4}", VOCAB)
    plain = aj.fusion.fused(VOCAB, syntax=syntax)
    nudged = aj.fusion.fused(VOCAB, syntax=syntax, semantics=aj.fusion.soft_grammar(digits, inside=1.0, outside=-1.0),
                             config=aj.fusion.FusionConfig(intensity=aj.fusion.IntensityLevel.FULL, semantics_weight=50.0))  # fmt: skip
    free = _texts(_generate(plain, batch=6, new=8))
    pushed = _texts(_generate(nudged, batch=6, new=8))
    assert free == _texts(_generate(syntax, batch=6, new=8)), "a fusion of one hard domain is that domain"
    assert all(re.fullmatch(r"[a-z0-9]{4}", t) for t in free + pushed)
    assert all(re.fullmatch(r"[0-9]{4}", t) for t in pushed) and not all(re.fullmatch(r"[0-9]{4}", t) for t in free)
