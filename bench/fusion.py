"""Fusion overhead: three hard domains and two soft ones vs the plain constrained step.

Prints, per batch size, the time of a 64-step jitted `lax.scan` sampling from 131k-wide logits
under the Syntax grammar alone and under the fusion (Syntax, Types, Imports intersected once;
ControlFlow and Semantics added once), measured side by side in one run, and their ratio; then
the same with phase tracking and deferred activation. Bar (issue 6): fusion adds <= 5%.

    python bench/fusion.py [--batches 1 8] [--steps 64] [--repeats 9]
"""

from __future__ import annotations

import argparse
import sys

import jax
import numpy as np

_HERE = __file__.rsplit("/", 1)[0]
sys.path[:0] = [_HERE]
from common import interleaved_medians, load_vocabularies, machine
from step import LOGIT_BANK, STEP_REGEX, scans

import ananke_jax as aj
from ananke_jax import fusion

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
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=9)
    args = parser.parse_args()
    vocab = load_vocabularies()["tekken-131k"]
    print(f"# machine: {machine()}")
    syntax, constraints = fused_constraints(vocab)
    params = aj.SamplingParams(temperature=1.0)
    print(f"\n## {args.steps}-step jitted lax.scan, vocabulary {len(vocab):,}, median of {args.repeats} (ms per scan)")
    print(f"{'batch':>5} {'constraint':>13} {'plain ms':>9} {'fused ms':>9} {'ratio':>6}")
    for batch in args.batches:
        bank = jax.random.normal(jax.random.key(0), (LOGIT_BANK, batch, vocab.logits_width))
        key = jax.random.key(1)
        runs = {"plain": scans(syntax, batch, args.steps, params)[1]}
        runs.update({name: scans(fc, batch, args.steps, params)[1] for name, fc in constraints.items()})
        for fn in runs.values():
            fn(bank, key).block_until_ready()
        calls = {name: lambda fn=fn, bank=bank, key=key: fn(bank, key).block_until_ready() for name, fn in runs.items()}
        times = interleaved_medians(calls, args.repeats)
        for name in constraints:
            print(f"{batch:>5} {name:>13} {times['plain'] * 1e3:>9.2f} {times[name] * 1e3:>9.2f} {times[name] / times['plain']:>6.3f}")


if __name__ == "__main__":
    main()
