"""Constrained vs unconstrained decode step inside a jitted `lax.scan`, side by side.

Per batch size, a 64-step jitted `lax.scan` samples (temperature 1) from model-sized logits
(131,072 wide) with and without a regex constraint, same sampler and logits, the two taken in
turn (median of the repeats); the ratio is constrained / unconstrained. Then the compile time of
the test regexes (grammars/regexes.json) and the largest table bytes, against both real
vocabularies.

    python bench/step.py [--quick] [--batches 1 8 64] [--steps 64] [--repeats 7]
"""

from __future__ import annotations

import statistics
import time

import jax
import jax.numpy as jnp

import ananke_jax as aj

from harness import Table, corpus, headline, interleaved_medians, load_vocabularies, parse, parser, ratio_figure, record

STEP_REGEX = r'\{"name": "[A-Za-z ]{1,40}", "email": "[a-z0-9.]+@[a-z0-9]+\.[a-z]{2,4}", "age": (0|[1-9]\d{0,2})\}'
LOGIT_BANK = 4  # distinct logit arrays cycled through, standing in for a model's output


def scans(cg: aj.RegularGrammar, batch: int, steps: int, params: aj.SamplingParams):
    """Two jitted functions of (logit bank, key): an unconstrained and a constrained sampling scan."""
    sample = jax.vmap(lambda logits, key: aj.sample(logits, key, params))
    step = jax.vmap(lambda s, logits, key: aj.constrained_step(cg, s, logits, key, params))

    @jax.jit
    def unconstrained(bank, key):
        def body(tokens, t):
            keys = jax.random.split(jax.random.fold_in(key, t), batch)
            return tokens + sample(bank[t % LOGIT_BANK], keys), None

        return jax.lax.scan(body, jnp.zeros(batch, jnp.int32), jnp.arange(steps))[0]

    @jax.jit
    def constrained(bank, key):
        def body(carry, t):
            tokens, state = carry
            keys = jax.random.split(jax.random.fold_in(key, t), batch)
            token, state = step(state, bank[t % LOGIT_BANK], keys)
            return (tokens + token, state), None

        states = jax.vmap(lambda _: cg.init_state())(jnp.arange(batch))
        return jax.lax.scan(body, (jnp.zeros(batch, jnp.int32), states), jnp.arange(steps))[0][0]

    return unconstrained, constrained


def timed_scans(fns: dict, bank, repeats: int) -> dict[str, float]:
    """Median seconds per call of each scan of ``fns`` (compiled first), taken in turn."""
    key = jax.random.key(1)
    for fn in fns.values():
        fn(bank, key).block_until_ready()
    return interleaved_medians({name: lambda fn=fn: fn(bank, key).block_until_ready() for name, fn in fns.items()}, repeats)


def step_table(vocab: aj.Vocabulary, args) -> Table:
    cg = aj.compile_regex(STEP_REGEX, vocab)
    params = aj.SamplingParams(temperature=args.temperature)
    table = Table(
        f"{args.steps}-step jitted lax.scan, vocabulary {len(vocab):,}, median of {args.repeats} (ms per scan)",
        {"batch": "d", "unconstrained ms": ".2f", "constrained ms": ".2f", "ratio": ".3f", "us/token constrained": ".2f"},
        f"Regex `{STEP_REGEX}`.",
    )
    for batch in args.batches:
        bank = jax.random.normal(jax.random.key(0), (LOGIT_BANK, batch, vocab.logits_width))
        unconstrained, constrained = scans(cg, batch, args.steps, params)
        t = timed_scans({"u": unconstrained, "c": constrained}, bank, args.repeats)
        table.add(batch, t["u"] * 1e3, t["c"] * 1e3, t["c"] / t["u"], t["c"] / (args.steps * batch) * 1e6)
    return table


def compile_table(vocabs: dict) -> Table:
    regexes = corpus("regexes")
    table = Table(
        f"compile: the {len(regexes)} test regexes, and the step's regex ({len(STEP_REGEX)} chars)",
        {
            "vocabulary": "s",
            "median ms": ".1f",
            "max ms": ".1f",
            "largest tables MB": ".2f",
            "step regex ms": ".1f",
            "first compile ms": ".0f",
        },
        "A vocabulary's first compile also builds its caches (token ids, byte trie): timed apart, before the others.",
    )
    for name, vocab in vocabs.items():
        start = time.perf_counter()
        aj.compile_regex("warm", vocab)
        first = time.perf_counter() - start
        times, sizes = [], []
        for pattern in [*regexes, STEP_REGEX]:
            start = time.perf_counter()
            sizes.append(aj.compile_regex(pattern, vocab).table_bytes)
            times.append(time.perf_counter() - start)
        step = times.pop()
        table.add(name, statistics.median(times) * 1e3, max(times) * 1e3, max(sizes[:-1]) / 1e6, step * 1e3, first * 1e3)
    return table


def headlines(table: Table) -> list[dict]:
    """The constrained / unconstrained step ratio at the smallest batch and at the largest."""
    rows = sorted(table.rows, key=lambda row: row[0])
    return [
        headline(
            f"constrained decode step in a jitted scan, batch {row[0]} (regex, 131k vocabulary)", ratio_figure(row[3], "unconstrained")
        )
        for row in (rows[:1] + rows[-1:] if len(rows) > 1 else rows)
    ]


def main():
    p = parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--temperature", type=float, default=1.0)
    args = parse(p, batches=[1, 8], repeats=3)
    vocabs = load_vocabularies()
    compiles = compile_table(vocabs)  # first: a vocabulary's first compile is timed apart
    steps = step_table(vocabs["tekken-131k"], args)
    record("step", args, {"tables": [steps, compiles], "headline": headlines(steps)})


if __name__ == "__main__":
    main()
