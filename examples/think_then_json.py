"""Think, then answer in JSON: free reasoning until ``</think>``, then JSON from a schema, with a
soft domain nudging one field's value. The whole decode loop is one jitted `lax.scan`.

    python examples/think_then_json.py [--samples 8] [--steps 96] [--seed 0]

The "model" emits random logits (a trained model plugs in the same way, through its logits): a
script boosts the first tokens so that each sample reasons for a while and writes ``</think>``;
from there the schema decides what may follow. A second run without the soft domain shows what
the nudge does. Needs mistral-common (for the Tekken vocabulary) and, to validate, jsonschema.
"""

from __future__ import annotations

import argparse
import json
import pathlib
from collections.abc import Callable

import jax
import jax.numpy as jnp

import ananke_jax as aj
from ananke_jax import fusion

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 2, "maxLength": 16},
        "country": {"enum": ["France", "Japan", "Peru"]},
        "population_millions": {"type": "integer", "minimum": 0, "maximum": 40},
    },
    "required": ["city", "country", "population_millions"],
}
# What the soft domain prefers: the same object, with a city from a short list.
PREFERRED = {**SCHEMA, "properties": {**SCHEMA["properties"], "city": {"enum": ["Paris", "Lyon", "Kyoto"]}}}
REASONING = "<think>The user wants a city. Paris is large; Lyon is smaller. Answer in JSON.</think>"


def tekken() -> tuple[aj.Vocabulary, Callable[[str], list[int]]]:
    """Mistral's Tekken vocabulary and its own tokenizer, both from mistral-common."""
    import mistral_common
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    path = pathlib.Path(mistral_common.__file__).parent / "data" / "tekken_240911.json"
    tokenizer = Tekkenizer.from_file(path)
    return aj.Vocabulary.from_tekken(path), lambda text: tokenizer.encode(text, bos=False, eos=False)


def constraint(vocab: aj.Vocabulary, nudge: bool) -> fusion.FusedConstraint:
    """Syntax: the schema after ``</think>``; Semantics (soft): the preferred values."""
    answer = fusion.deferred(aj.compile_json_schema(SCHEMA, vocab, whitespace="compact"), "</think>", vocab)
    preferred = fusion.deferred(aj.compile_json_schema(PREFERRED, vocab, whitespace="compact"), "</think>", vocab)
    config = fusion.FusionConfig(
        intensity="full",
        # Tokens that keep to the preferred values get +8 logits, others -8: random logits spread
        # their mass over 100k tokens, so the nudge must outweigh that; a trained model needs less.
        semantics_weight=4.0,
        soft_temperature=0.5,
        phase_triggers={"<think>": "reasoning", "</think>": "structured_output"},
    )
    semantics = fusion.soft_grammar(preferred, inside=1.0, outside=-1.0) if nudge else None
    return fusion.fused(vocab, syntax=answer, semantics=semantics, config=config)


def generate(fc, script: jax.Array, key: jax.Array, steps: int, eos: int):
    """Random-logit decoding in one `lax.scan`; the script's tokens are boosted while it lasts."""
    params = aj.SamplingParams(temperature=1.0)

    def body(carry, t):
        state, done = carry
        logits = jax.random.normal(jax.random.fold_in(key, t), (fc.logits_width,))
        boost = jnp.zeros(fc.logits_width).at[script[jnp.minimum(t, script.shape[0] - 1)]].set(50.0)
        logits = logits + jnp.where(t < script.shape[0], boost, 0.0).at[eos].add(10.0)
        token, new = aj.constrained_step(fc, state, logits, jax.random.fold_in(key, -t - 1), params)
        new = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new)
        return (new, done | (token == eos)), (jnp.where(done, -1, token), fc.phase(new))

    (_, done), (tokens, phases) = jax.lax.scan(body, (fc.init_state(), jnp.bool_(False)), jnp.arange(steps))
    return tokens, phases, done


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--steps", type=int, default=96)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    vocab, encode = tekken()
    eos = vocab.eos_token_ids[0]
    script = jnp.asarray(encode(REASONING), jnp.int32)
    keys = jax.random.split(jax.random.key(args.seed), args.samples)
    for nudge in (True, False):
        fc = constraint(vocab, nudge)
        run = jax.jit(jax.vmap(generate, in_axes=(None, None, 0, None, None)), static_argnums=(3, 4))
        tokens, phases, done = run(fc, script, keys, args.steps, eos)
        print(f"\n## {'with' if nudge else 'without'} the soft domain (Semantics prefers Paris, Lyon, Kyoto)")
        preferred = 0
        for row, row_phases, finished in zip(tokens.tolist(), phases.tolist(), done.tolist()):
            ids = [t for t in row if t >= 0 and t != eos]
            text = b"".join(vocab.token_bytes(t) for t in ids).decode("utf-8", "replace")
            thought, answer = text.split("</think>", 1)
            value = json.loads(answer) if finished else None
            preferred += bool(value) and value["city"] in ("Paris", "Lyon", "Kyoto")
            print(f"{'done' if finished else 'budget'} | phases {''.join('RST'[p] for p in row_phases[: len(ids)])}")
            print(f"  reasoning: {thought}</think>\n  answer:    {answer}")
            if value is not None:
                _validate(value)
        print(f"preferred city in {preferred} of {args.samples} answers")


def _validate(value) -> None:
    try:
        import jsonschema
    except ImportError:
        return
    jsonschema.validate(value, SCHEMA)


if __name__ == "__main__":
    main()
