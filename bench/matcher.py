"""Host matchers on the grammar pool: a new pushdown grammar per request, batches of 1, 16, 64.

A server that samples in its own loop makes one `aj.Matcher` per request. Pushdown grammars run
on a pool that the matchers of a vocabulary share, so a matcher on a new grammar compiles
nothing once the pool's programs are compiled, and `aj.fill_bitmasks` fills every pooled
matcher in one call (an accepted token is applied there, for the whole batch at once). Per
batch size B, B requests, each with a recursive JSON Schema (eight distinct ones per batch:
distinct property names and bounds, about 270 lexer states each, so that a batch fits the
default pool), walk a valid JSON document with SmolLM2's vocabulary.
Reported per request: the matcher's set-up (admission to the pool; the grammar's compile is
left out, as it is for the peer), then per token the bitmask fill and the accept, side by side
with XGrammar's GrammarMatcher on the same schemas and tokens; and the XLA compilations during
the timed part (none is the design).

    python bench/matcher.py [--quick] [--batches 1 16 64] [--repeats 3] [--distinct 8]
"""

from __future__ import annotations

import json
import statistics
import time

import stream

import ananke_jax as aj
from ananke_jax.serving import CompileCounter

from harness import Table, headline, parse, parser, ratio, ratio_figure, record, xgrammar_info


def schema(i: int) -> dict:
    """A recursive schema of its own for request ``i`` (a tree of records)."""
    return {
        "type": "object",
        "properties": {
            f"id{i}": {"type": "integer", "maximum": 1000 + i},
            "kids": {"type": "array", "items": {"$ref": "#"}, "maxItems": 2 + i % 3},
        },
        "required": [f"id{i}", "kids"],
        "additionalProperties": False,
    }


def document(i: int, depth: int = 2) -> dict:
    """A document of `schema(i)`, ``depth`` levels deep."""
    return {f"id{i}": depth * 7 + i % 5, "kids": [document(i, depth - 1)] if depth else []}


def requests(first: int, count: int, distinct: int, vocab, encode):
    """``count`` requests over ``distinct`` schemas from number ``first`` on: (our grammar, the
    schema, the walk's tokens ending with EOS)."""
    kinds = []
    for i in range(first, first + min(count, distinct)):
        tokens = [*encode(json.dumps(document(i))), vocab.eos_token_ids[0]]
        kinds.append((aj.compile_json_schema(schema(i), vocab), schema(i), tokens))
    return [kinds[k % len(kinds)] for k in range(count)]


def ours(reqs, vocab) -> tuple[float, float]:
    """Seconds per request of set-up, and per request and token of fill + accept."""
    start = time.perf_counter()
    matchers = [aj.Matcher(g, vocab) for g, _, _ in reqs]
    setup = (time.perf_counter() - start) / len(reqs)
    bitmask = aj.allocate_token_bitmask(len(reqs), vocab.logits_width)
    start, taken = time.perf_counter(), 0
    for step in range(max(len(t) for _, _, t in reqs)):
        live = [(m, t[step]) for m, (_, _, t) in zip(matchers, reqs) if step < len(t)]
        aj.fill_bitmasks([m for m, _ in live], bitmask)
        for m, token in live:
            assert m.accept_token(token), f"token {token} refused"
        taken += len(live)
    return setup, (time.perf_counter() - start) / taken


def xgrammar(reqs, vocab, info) -> tuple[float, float]:
    """XGrammar's GrammarMatcher on the same schemas and tokens (the compile left out)."""
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(info, cache_enabled=False)
    compiled = [compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=True) for _, s, _ in reqs]
    start = time.perf_counter()
    matchers = [xgr.GrammarMatcher(c) for c in compiled]
    setup = (time.perf_counter() - start) / len(reqs)
    bitmask = xgr.allocate_token_bitmask(len(reqs), vocab.logits_width)
    start, taken = time.perf_counter(), 0
    for step in range(max(len(t) for _, _, t in reqs)):
        for row, (m, (_, _, t)) in enumerate(zip(matchers, reqs)):
            if step < len(t):
                m.fill_next_token_bitmask(bitmask, row)
                assert m.accept_token(t[step]), f"XGrammar refused token {t[step]}"
                taken += 1
    return setup, (time.perf_counter() - start) / taken


def main():
    p = parser(__doc__)
    p.add_argument("--batches", type=int, nargs="+", default=[1, 16, 64])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--distinct", type=int, default=8, help="distinct schemas in a batch")
    args = parse(p, batches=[1, 16], repeats=1)
    vocab, encode = stream.smollm2()
    info = xgrammar_info(vocab)
    warm = requests(0, max(args.batches), args.distinct, vocab, encode)
    for batch in (1 << k for k in range(max(args.batches).bit_length())):  # the pooled programs, every padded group size
        ours(warm[:batch], vocab)
    CompileCounter.install()
    before = CompileCounter.count
    table = Table(
        f"per request (us): recursive JSON Schemas new to the pool ({args.distinct} distinct a batch), SmolLM2 vocabulary",
        {"batch": "d", "engine": "s", "set-up": ".0f", "fill + accept per token": ".0f", "ratio": ".3f"},
        "Set-up: the matcher (ours: admission to the shared pool; compile excluded for both). Per "
        "token: bitmask fill (ours: `aj.fill_bitmasks` over the batch) and accept, over all requests.",
    )
    heads = []
    for batch in args.batches:
        runs = {"ananke_jax": [], "xgrammar": []}
        for r in range(args.repeats):
            group = requests((r + 1) * 1000 + batch, batch, args.distinct, vocab, encode)  # schemas the pool has not seen
            runs["ananke_jax"].append(ours(group, vocab))
            runs["xgrammar"].append(xgrammar(group, vocab, info))
        medians = {k: [statistics.median(x[i] for x in v) for i in range(2)] for k, v in runs.items()}
        for engine, (setup, per_token) in medians.items():
            table.add(batch, engine, setup * 1e6, per_token * 1e6, ratio(per_token, medians["xgrammar"][1]))
        heads.append(
            headline(
                f"matcher: new recursive schema per request, fill + accept per token, batch {batch}",
                ratio_figure(ratio(medians["ananke_jax"][1], medians["xgrammar"][1]), "XGrammar"),
            )
        )
    compilations = CompileCounter.count - before
    heads.append(headline("matcher: XLA compilations for new pushdown grammars after warm-up", f"{compilations}"))
    record("matcher", args, {"tables": [table], "notes": [f"XLA compilations during the timed runs: {compilations}"], "headline": heads})


if __name__ == "__main__":
    main()
