"""Shared helpers of the benchmarks: the real vocabularies and a side-by-side timer."""

from __future__ import annotations

import os
import platform
import statistics
import time

import ananke_jax as aj


def mistral_data(name: str) -> str:
    import mistral_common  # from the `test` extra

    return os.path.join(os.path.dirname(mistral_common.__file__), "data", name)


def load_vocabularies() -> dict[str, aj.Vocabulary]:
    return {
        "sentencepiece-32k": aj.Vocabulary.from_sentencepiece(mistral_data("tokenizer.model.v1")),
        "tekken-131k": aj.Vocabulary.from_tekken(mistral_data("tekken_240911.json")),
    }


def interleaved_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each no-argument function, run in turn so drift hits all alike."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def machine() -> str:
    import jax

    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__} on {jax.devices()[0].platform}"
