"""Constrained vs unconstrained decode step inside a jitted `lax.scan`, side by side.

Prints, per batch size, the time of a 64-step scan that samples from model-sized logits with
and without the constraint (same sampler, same logits), their ratio, and then the compile time
and table bytes of the test regexes against both real vocabularies.

    python bench/step.py [--batches 1 8 64] [--steps 64] [--repeats 7]
"""

from __future__ import annotations

import argparse
import sys
import time

import jax
import jax.numpy as jnp

_HERE = __file__.rsplit("/", 1)[0]
sys.path[:0] = [_HERE, f"{_HERE}/../tests"]
from common import interleaved_medians, load_vocabularies, machine  # noqa: E402

import ananke_jax as aj  # noqa: E402

STEP_REGEX = r'\{"name": "[A-Za-z ]{1,40}", "email": "[a-z0-9.]+@[a-z0-9]+\.[a-z]{2,4}", "age": (0|[1-9]\d{0,2})\}'
LOGIT_BANK = 4  # distinct logit arrays cycled through, standing in for a model's output


def scans(cg: aj.RegularGrammar, batch: int, steps: int, params: aj.SamplingParams):
    """Two jitted functions: an unconstrained and a constrained 64-step sampling scan."""
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--steps", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--temperature", type=float, default=1.0)
    args = parser.parse_args()
    vocabs = load_vocabularies()
    print(f"# machine: {machine()}")

    vocab = vocabs["tekken-131k"]
    cg = aj.compile_regex(STEP_REGEX, vocab)
    params = aj.SamplingParams(temperature=args.temperature)
    print(f"\n## step: {args.steps}-step jitted lax.scan, vocabulary {len(vocab):,}, regex {STEP_REGEX!r}")
    print(f"{'batch':>5} {'unconstrained ms':>17} {'constrained ms':>15} {'ratio':>6} {'us/token (constr.)':>19}")
    for batch in args.batches:
        bank = jax.random.normal(jax.random.key(0), (LOGIT_BANK, batch, vocab.logits_width))
        unconstrained, constrained = scans(cg, batch, args.steps, params)
        key = jax.random.key(1)
        for fn in (unconstrained, constrained):
            fn(bank, key).block_until_ready()
        t = interleaved_medians(
            {"u": lambda: unconstrained(bank, key).block_until_ready(), "c": lambda: constrained(bank, key).block_until_ready()},
            args.repeats,
        )
        per_token = t["c"] / (args.steps * batch) * 1e6
        print(f"{batch:>5} {t['u'] * 1e3:>17.2f} {t['c'] * 1e3:>15.2f} {t['c'] / t['u']:>6.3f} {per_token:>19.2f}")

    from oracles import REGEXES

    print(f"\n## compile: {len(REGEXES)} test regexes (median / max ms; largest tables)")
    for name, v in vocabs.items():
        start = time.perf_counter()
        aj.compile_regex("warm", v)  # a vocabulary's first compile caches its token ids and byte trie
        print(f"{name:>18}: warm-up compile (builds the per-vocabulary caches unless the step did): {(time.perf_counter() - start) * 1e3:.0f} ms")
        times, sizes = [], []
        for pattern in REGEXES:
            start = time.perf_counter()
            g = aj.compile_regex(pattern, v)
            times.append(time.perf_counter() - start)
            sizes.append(g.table_bytes)
        times.sort()
        print(f"{name:>18}: median {times[len(times) // 2] * 1e3:.1f} ms, max {times[-1] * 1e3:.1f} ms, tables max {max(sizes) / 1e6:.2f} MB")
        start = time.perf_counter()
        g = aj.compile_regex(STEP_REGEX, v)
        print(f"{'':>18}  step regex ({len(STEP_REGEX)} chars): {(time.perf_counter() - start) * 1e3:.1f} ms, {g}")


if __name__ == "__main__":
    main()
