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

import jax
import jax.numpy as jnp
import numpy as np

_HERE = __file__.rsplit("/", 1)[0]
sys.path[:0] = [_HERE, f"{_HERE}/../tests"]
from common import load_vocabularies, machine, mistral_data  # noqa: E402
from test_frontends import GRAMMAR_EXAMPLES  # noqa: E402

import ananke_jax as aj  # noqa: E402

WORKLOADS = {"json": "json.gbnf", "c": "c_subset.gbnf"}


def encoders():
    import sentencepiece
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(open(mistral_data("tokenizer.model.v1"), "rb").read())
    proto.normalizer_spec.add_dummy_prefix = False
    sp = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
    tekken = Tekkenizer.from_file(mistral_data("tekken_240911.json"))
    return {"sentencepiece-32k": sp.encode, "tekken-131k": lambda t: tekken.encode(t, bos=False, eos=False)}


def summary(seconds: list[float]) -> str:
    us = np.asarray(seconds) * 1e6
    return f"mean {us.mean():8.1f} us  p99 {np.percentile(us, 99):8.1f} us"


def bench_ours(text: str, vocab, tokens: list[int]) -> dict:
    start = time.perf_counter()
    cg = aj.compile_gbnf(text, vocab)
    compile_s = time.perf_counter() - start
    mask, advance = jax.jit(aj.token_mask), jax.jit(aj.advance)

    @jax.jit
    def walk(cg, tokens):
        def body(carry, token):
            state, acc = carry
            acc = acc ^ aj.token_mask(cg, state)
            return (aj.advance(cg, state, token), acc), None

        init = (cg.init_state(), jnp.zeros(cg.mask_words, jnp.uint32))
        (state, acc), _ = jax.lax.scan(body, init, tokens)
        return acc, aj.accepts(cg, state)

    ids = jnp.asarray(tokens, jnp.int32)
    _, ok = walk(cg, ids)
    assert bool(ok), "the example must be accepted"
    scans = []
    for _ in range(15):  # the median of many runs: this machine's timings are noisy
        start = time.perf_counter()
        walk(cg, ids)[0].block_until_ready()
        scans.append((time.perf_counter() - start) / len(tokens))
    state = cg.init_state()
    mask(cg, state).block_until_ready()
    advance(cg, state, tokens[0]).live.block_until_ready()  # compile both before timing
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        mask(cg, state).block_until_ready()
        state = advance(cg, state, token)
        state.live.block_until_ready()
        per_call.append(time.perf_counter() - start)
    return {"compile": compile_s, "bytes": cg.table_bytes, "scan": statistics.median(scans), "call": per_call}


def bench_xgrammar(text: str, vocab, tokens: list[int]):
    import xgrammar as xgr

    info = xgr.TokenizerInfo(list(vocab.tokens), xgr.VocabType.RAW, vocab_size=vocab.logits_width, stop_token_ids=list(vocab.eos_token_ids))
    start = time.perf_counter()
    compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_grammar(text)
    compile_s = time.perf_counter() - start
    bitmask = xgr.allocate_token_bitmask(1, vocab.logits_width)
    xgr.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)  # warm up
    matcher = xgr.GrammarMatcher(compiled)
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token)
        per_call.append(time.perf_counter() - start)
    return {"compile": compile_s, "call": per_call}


class _Tokens:
    """The minimal tokenizer llguidance's TokenizerWrapper reads."""

    def __init__(self, vocab, encode):
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.tokens = list(vocab.tokens)
        self.special_token_ids = sorted(vocab.special_token_ids)
        self._encode = encode

    def __call__(self, text):
        return self._encode(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)


def bench_llguidance(text: str, vocab, encode, tokens: list[int]):
    import llguidance
    import llguidance.numpy
    from llguidance.gbnf_to_lark import any_to_lark

    tokenizer = llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tokens(vocab, encode)))
    start = time.perf_counter()
    matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(any_to_lark(text)))
    compile_s = time.perf_counter() - start
    assert not matcher.is_error(), matcher.get_error()
    bitmask = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size)
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, 0)
        assert matcher.consume_token(token), matcher.get_error()
        per_call.append(time.perf_counter() - start)
    return {"compile": compile_s, "call": per_call}


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
