"""Context-free grammars: per-token mask + advance, compile time and table bytes, side by side
with XGrammar and llguidance (when installed) on the same token walk.

The walk is a tokenised example output of the JSON and C grammars in grammars/, with both real
vocabularies. ananke_jax is timed the way it is used, inside one jitted `lax.scan` over the
tokens, and also per call from the host; the peers are timed per call (their only mode).

    pip install torch==2.13.0 && pip install xgrammar llguidance   # optional peers
    python bench/cfg.py
"""

from __future__ import annotations

import statistics
import sys
import time

_HERE = __file__.rsplit("/", 1)[0]
sys.path[:0] = [_HERE, f"{_HERE}/../tests"]
from common import encoders, llguidance_tokenizer, llguidance_walk, load_vocabularies, machine, ours_per_token, summary, xgrammar_info, xgrammar_walk  # noqa: E402
from test_frontends import GRAMMAR_EXAMPLES  # noqa: E402

import ananke_jax as aj  # noqa: E402

WORKLOADS = {"json": "json.gbnf", "c": "c_subset.gbnf"}


def bench_ours(text: str, vocab, tokens: list[int]) -> dict:
    start = time.perf_counter()
    cg = aj.compile_gbnf(text, vocab)
    compile_s = time.perf_counter() - start
    return {"compile": compile_s, "bytes": cg.table_bytes, **ours_per_token(cg, tokens)}


def bench_xgrammar(text: str, vocab, tokens: list[int]):
    import xgrammar as xgr

    info = xgrammar_info(vocab)
    start = time.perf_counter()
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(text)
    compile_s = time.perf_counter() - start
    return {"compile": compile_s, "call": xgrammar_walk(compiled, vocab, tokens)}


def bench_llguidance(text: str, vocab, encode, tokens: list[int]):
    import llguidance
    from llguidance.gbnf_to_lark import any_to_lark

    tokenizer = llguidance_tokenizer(vocab, encode)
    start = time.perf_counter()
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(any_to_lark(text)))
    compile_s = time.perf_counter() - start
    assert not matcher.is_error(), matcher.get_error()
    return {"compile": compile_s, "call": llguidance_walk(matcher, tokenizer.vocab_size, tokens)}


def main():
    print(f"# machine: {machine()}")
    vocabs, encode = load_vocabularies(), encoders()
    for workload, filename in WORKLOADS.items():
        text = open(f"{_HERE}/../grammars/{filename}").read()
        example = max(GRAMMAR_EXAMPLES[filename], key=len)
        for name, vocab in vocabs.items():
            tokens = encode[name](example)
            print(f"\n## {workload} ({filename}), {name}, {len(tokens)} tokens")
            ours = bench_ours(text, vocab, tokens)
            print(f"{'ananke_jax scan':>18}: {ours['scan'] * 1e6:8.1f} us/token (mask + advance, one jitted lax.scan)")
            print(f"{'ananke_jax call':>18}: {summary(ours['call'])}   compile {ours['compile']:.2f} s, tables {ours['bytes'] / 1e6:.1f} MB")
            for peer, run in (("xgrammar", lambda: bench_xgrammar(text, vocab, tokens)), ("llguidance", lambda: bench_llguidance(text, vocab, encode[name], tokens))):
                try:
                    result = run()
                except ImportError:
                    print(f"{peer:>18}: not installed")
                    continue
                except Exception as e:  # a peer that cannot take the grammar is reported, not fatal
                    print(f"{peer:>18}: failed: {type(e).__name__}: {str(e)[:120]}")
                    continue
                ratio = ours["scan"] / statistics.mean(result["call"])
                print(f"{peer:>18}: {summary(result['call'])}   compile {result['compile']:.2f} s   ours(scan)/peer = {ratio:.2f}")


if __name__ == "__main__":
    main()
