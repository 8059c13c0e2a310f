"""The examples run, their outputs pass independent checks, and their decode loops trace once."""

import importlib.util
import itertools
import json
import pathlib

import chex
import jax
import jax.numpy as jnp
import jsonschema
import pytest

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def nnx_example():
    return _load("nnx_decode_loop")


@pytest.fixture(scope="module")
def nnx_prepared(nnx_example):
    return nnx_example.setup()


@pytest.mark.slow
def test_nnx_decode_loop_outputs_are_valid_json_for_the_schema(nnx_example, nnx_prepared):
    for seed in range(3):
        text = nnx_example.generate(seed, nnx_prepared)
        jsonschema.validate(json.loads(text), nnx_example.SCHEMA)


@pytest.mark.slow
def test_nnx_decode_loop_is_traced_once_across_seeds(nnx_example, nnx_prepared, monkeypatch):
    chex.clear_trace_counter()
    counted = jax.jit(chex.assert_max_traces(nnx_example.decode_loop, n=1), static_argnames="eos")
    monkeypatch.setattr(nnx_example, "decode", counted)
    first = nnx_example.generate(10, nnx_prepared)  # a second trace would raise here
    second = nnx_example.generate(11, nnx_prepared)
    assert first != second  # the seed is data: new samples, same compiled loop


@pytest.mark.slow
def test_nnx_decode_loop_ends_with_eos_then_padding(nnx_example, nnx_prepared):
    vocab, constraint, graphdef, weights = nnx_prepared
    prompt = jnp.asarray(list(b"A person: "), jnp.int32)
    eos = vocab.eos_token_ids[0]
    tokens = nnx_example.decode(graphdef, weights, constraint, prompt, jax.random.key(0), eos=eos).tolist()
    end = tokens.index(eos)  # the schema's values are short: EOS comes within the budget
    assert all(t == -1 for t in tokens[end + 1 :])
    assert all(0 <= t < len(vocab) and t != eos for t in tokens[:end])


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_think_then_json_reasons_then_answers_with_the_preferred_city(tekken_path):
    example = _load("think_then_json")
    vocab, encode = example.tekken()
    eos = vocab.eos_token_ids[0]
    script = jnp.asarray(encode(example.REASONING), jnp.int32)
    fc = example.constraint(vocab, nudge=True)
    keys = jax.random.split(jax.random.key(0), 2)
    run = jax.jit(jax.vmap(example.generate, in_axes=(None, None, 0, None, None)), static_argnums=(3, 4))
    tokens, phases, done = run(fc, script, keys, 96, eos)
    assert done.all()
    for row, row_phases in zip(tokens.tolist(), phases.tolist()):
        ids = [t for t in row if t >= 0 and t != eos]
        text = b"".join(vocab.token_bytes(t) for t in ids).decode("utf-8")
        thought, answer = text.split("</think>", 1)
        assert thought.startswith("<think>") and "</think>" not in answer
        value = json.loads(answer)
        jsonschema.validate(value, example.SCHEMA)
        assert value["city"] in ("Paris", "Lyon", "Kyoto")  # the soft domain's preference
        # Phase codes: reasoning (0) after "<think>", structured output (1) from "</think>" on.
        prefixes = itertools.accumulate(vocab.token_bytes(t) for t in ids)
        think_end = next(i for i, prefix in enumerate(prefixes) if b"</think>" in prefix)
        assert 0 in row_phases[:think_end] and set(row_phases[think_end : len(ids)]) == {1}
