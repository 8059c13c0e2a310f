"""Context-free grammars: per-token mask + advance, compile time and table bytes, side by side
with XGrammar and llguidance (when installed) on the same token walk.

The walk is a tokenised example output of the JSON and C grammars in grammars/, with both real
vocabularies. ananke_jax is timed the way it is used, inside one jitted `lax.scan` over the
tokens, and also per call from the host through `aj.Matcher` (fill the bitmask, accept the
token), as a server with its own loop would; the peers are timed per call (their only mode).
Our scans and llguidance's walks are taken in turn, and their medians compared.

    pip install torch==2.13.0 && pip install xgrammar llguidance   # optional peers
    python bench/cfg.py
"""

from __future__ import annotations

import statistics
import sys
import time

import numpy as np

_HERE = __file__.rsplit("/", 1)[0]
sys.path[:0] = [_HERE, f"{_HERE}/../tests"]
from common import encoders, llguidance_tokenizer, llguidance_walk, load_vocabularies, machine, matcher_per_call, ours_scan, summary, xgrammar_info, xgrammar_walk  # noqa: E402
from test_frontends import GRAMMAR_EXAMPLES  # noqa: E402

import ananke_jax as aj  # noqa: E402

WORKLOADS = {"json": "json.gbnf", "c": "c_subset.gbnf"}
REPEATS = 21  # walks of ours and of llguidance, in turn: this machine's timings drift


def xgrammar_run(text: str, vocab, tokens: list[int]) -> tuple[float, list[float]]:
    """XGrammar's compile seconds and per-call seconds along the walk (one walk: it is slow)."""
    import xgrammar as xgr

    start = time.perf_counter()
    compiled = xgr.GrammarCompiler(xgrammar_info(vocab), cache_enabled=False).compile_grammar(text)
    return time.perf_counter() - start, xgrammar_walk(compiled, vocab, tokens)


def llguidance_matchers(text: str, vocab, encode):
    """llguidance's compile seconds, a function making a fresh matcher for the grammar, and the
    width of its bitmasks."""
    import llguidance
    from llguidance.gbnf_to_lark import any_to_lark

    tokenizer = llguidance_tokenizer(vocab, encode)
    grammar = llguidance.LLMatcher.grammar_from_lark(any_to_lark(text))

    def matcher():
        m = llguidance.LLMatcher(tokenizer, grammar)
        assert not m.is_error(), m.get_error()
        return m

    start = time.perf_counter()
    matcher()
    return time.perf_counter() - start, matcher, tokenizer.vocab_size


def main():
    print(f"# machine: {machine()}")
    vocabs, encode = load_vocabularies(), encoders()
    for workload, filename in WORKLOADS.items():
        text = open(f"{_HERE}/../grammars/{filename}").read()
        example = max(GRAMMAR_EXAMPLES[filename], key=len)
        for name, vocab in vocabs.items():
            tokens = encode[name](example)
            print(f"\n## {workload} ({filename}), {name}, {len(tokens)} tokens")
            start = time.perf_counter()
            cg = aj.compile_gbnf(text, vocab)
            compile_s = time.perf_counter() - start
            scan = ours_scan(cg, tokens)
            try:
                llg_compile, matcher, width = llguidance_matchers(text, vocab, encode[name])
            except ImportError:
                matcher = None
            ours, peer, peer_calls = [], [], []
            for _ in range(REPEATS):
                ours.append(scan())
                if matcher is not None:
                    peer_calls = llguidance_walk(matcher(), width, tokens)
                    peer.append(statistics.mean(peer_calls))
            print(f"{'ananke_jax scan':>18}: {statistics.median(ours) * 1e6:8.1f} us/token (mask + advance, one jitted lax.scan; median of {REPEATS})")
            print(f"{'ananke_jax call':>18}: {summary(matcher_per_call(cg, vocab, tokens))}   compile {compile_s:.2f} s, tables {cg.table_bytes / 1e6:.1f} MB")
            if matcher is None:
                print(f"{'llguidance':>18}: not installed")
            else:
                ratio = statistics.median(ours) / statistics.median(peer)
                print(f"{'llguidance':>18}: {statistics.median(peer) * 1e6:8.1f} us/token (median of {REPEATS} walks, taken in turn with ours; last walk p99 {np.percentile(peer_calls, 99) * 1e6:.1f} us)   compile {llg_compile:.2f} s   ours(scan)/peer = {ratio:.2f}")
            try:
                xgr_compile, xgr_calls = xgrammar_run(text, vocab, tokens)
                print(f"{'xgrammar':>18}: {summary(xgr_calls)}   compile {xgr_compile:.2f} s   ours(scan)/peer = {statistics.median(ours) / statistics.mean(xgr_calls):.2f}")
            except ImportError:
                print(f"{'xgrammar':>18}: not installed")


if __name__ == "__main__":
    main()
