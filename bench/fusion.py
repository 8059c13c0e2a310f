"""Fusion overhead: three hard domains and two soft ones vs the plain constrained step.

Per batch size, a 64-step jitted `lax.scan` samples from 131,072-wide logits under the Syntax
grammar alone ("plain") and under the fusion (Syntax, Types, Imports intersected once;
ControlFlow and Semantics added once), then the same with phase tracking and deferred
activation, all taken in turn in one run (median of the repeats); the ratio is fused / plain.
Bar: fusion adds at most 5%.

    python bench/fusion.py [--quick] [--batches 1 8] [--steps 64] [--repeats 9]
"""

from __future__ import annotations

import jax
import numpy as np
from step import LOGIT_BANK, STEP_REGEX, scans, timed_scans

import ananke_jax as aj
from ananke_jax import fusion

from harness import Table, headline, load_vocabularies, parse, parser, ratio_figure, record

TYPES_REGEX = r"[ -~]*"  # printable ASCII: another token DFA over the same output
PREFERRED_REGEX = r'\{"name": "(Ada|Alan) [A-Za-z ]*", "email": "[a-z0-9.]+@[a-z0-9]+\.org", "age": [1-9]\d\}'


def fused_constraints(vocab: aj.Vocabulary) -> tuple[aj.RegularGrammar, dict]:
    """The plain Syntax grammar and the fused constraints built around it."""
    syntax = aj.compile_regex(STEP_REGEX, vocab)
    rng = np.random.default_rng(0)
    imports = [i for i, t in enumerate(vocab.tokens) if t and i not in vocab.special_token_ids and b"Q" not in t]
    domains = {
        "syntax": syntax,
        "types": aj.compile_regex(TYPES_REGEX, vocab),
        "imports": aj.allowed_tokens(imports, vocab),
        "control_flow": fusion.soft_scores(rng.uniform(-1, 1, vocab.logits_width).astype(np.float32)),
        "semantics": fusion.soft_grammar(aj.compile_regex(PREFERRED_REGEX, vocab), outside=-0.5),
    }
    triggers = {"<think>": "reasoning", "</think>": "structured_output"}
    phased = {**domains, "syntax": fusion.deferred(syntax, "</think>", vocab)}
    return syntax, {
        "fused": fusion.fused(vocab, **domains, config=fusion.FusionConfig(intensity="full")),
        "fused+phases": fusion.fused(vocab, **phased, config=fusion.FusionConfig(intensity="full", phase_triggers=triggers)),
    }


def main():
    p = parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--steps", type=int, default=64)
    p.add_argument("--repeats", type=int, default=9)
    args = parse(p, batches=[1], repeats=3)
    vocab = load_vocabularies()["tekken-131k"]
    syntax, constraints = fused_constraints(vocab)
    params = aj.SamplingParams(temperature=1.0)
    table = Table(
        f"{args.steps}-step jitted lax.scan, vocabulary {len(vocab):,}, median of {args.repeats} (ms per scan)",
        {"batch": "d", "constraint": "s", "plain ms": ".2f", "fused ms": ".2f", "ratio": ".3f"},
    )
    for batch in args.batches:
        bank = jax.random.normal(jax.random.key(0), (LOGIT_BANK, batch, vocab.logits_width))
        fns = {name: scans(cg, batch, args.steps, params)[1] for name, cg in {"plain": syntax, **constraints}.items()}
        times = timed_scans(fns, bank, args.repeats)
        for name in constraints:
            table.add(batch, name, times["plain"] * 1e3, times[name] * 1e3, times[name] / times["plain"])
    smallest = min(row[0] for row in table.rows)
    fused = next(row for row in table.rows if row[0] == smallest and row[1] == "fused")
    what = f"fused step (3 hard + 2 soft domains) vs the plain constrained step, batch {smallest}"
    record("fusion", args, {"tables": [table], "headline": [headline(what, ratio_figure(fused[4], "plain step"))]})


if __name__ == "__main__":
    main()
