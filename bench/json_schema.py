"""JSON Schema: cold compile time and per-token mask + advance, side by side with XGrammar,
llguidance and outlines-core (when installed), on the realistic schemas of tests/json_schemas.py.

Compile time is the median of cold compiles per schema: before any is timed, each engine compiles
one unrelated warm-up schema, so per-vocabulary preprocessing (XGrammar's TokenizerInfo,
llguidance's tokenizer, outlines-core's Vocabulary, ours' list of ordinary tokens) and jax
start-up are excluded for everyone; after that no schema has been compiled before (XGrammar's
cache is off, the others keep none per schema). The engines take turns, so drift hits all alike.
A peer that raises or refuses a schema is a failure, reported, never fatal; one that compiles may
still ignore keywords it does not support (XGrammar warns of some on stderr). llguidance builds
its lexer lazily: much of its compile work is paid during the first masks, in its per-token time.

The walk is json.dumps(EXAMPLES[name]), with ", " and ": " separators (flexible whitespace in
ours, XGrammar and llguidance; outlines-core's default `[ ]?` admits them too), tokenised by the
vocabulary's own tokenizer. ananke_jax is timed inside one
jitted `lax.scan` over the tokens ("scan"), inside one over the walk repeated to 2048 tokens
from the initial state each time ("loop": the cost of a token in a jitted decode loop, where
the scan's launch is paid once per generation; one pass of a short walk such as enum_only's 3
tokens mostly times that launch), and per call from the host through `aj.Matcher` (a server's own
loop; regular grammars step on the host there); the peers per call, each filling a full token
bitmask then advancing. The ratio is ours(loop) / the fastest peer on that schema,
summarised by its geometric mean over the regular and the recursive schemas apart, with the
same for ours(scan).

    pip install torch==2.13.0 && pip install xgrammar llguidance outlines-core   # optional peers
    python bench/json_schema.py [--quick] [--vocab sentencepiece-32k] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

_HERE = __file__.rsplit("/", 1)[0]
sys.path[:0] = [_HERE, f"{_HERE}/../tests"]
from common import encoders, llguidance_tokenizer, llguidance_walk, load_vocabularies, machine, ours_per_token, xgrammar_info, xgrammar_walk
from json_schemas import EXAMPLES, RECURSIVE, REGULAR

import ananke_jax as aj

OURS = "ananke_jax"
SCHEMAS = {**REGULAR, **RECURSIVE}
QUICK = ("weather_call", "person", "tags", "tree")  # a peer refuses tags; tree is recursive
WARM_UP = {"type": "object", "properties": {"note": {"type": "string"}, "n": {"type": "number"}}, "required": ["note"]}


def _xgrammar(vocab, encode):
    import xgrammar as xgr

    info = xgrammar_info(vocab)

    def compile_schema(schema):
        return xgr.GrammarCompiler(info, cache_enabled=False).compile_json_schema(json.dumps(schema), any_whitespace=True, strict_mode=True)

    return compile_schema, lambda compiled, tokens: xgrammar_walk(compiled, vocab, tokens)


def _llguidance(vocab, encode):
    import llguidance

    tokenizer = llguidance_tokenizer(vocab, encode)

    def compile_schema(schema):
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults={"whitespace_flexible": True})
        matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
        if matcher.is_error():  # its constructor never raises: a refused schema is an error state
            raise ValueError(matcher.get_error())
        return matcher

    return compile_schema, lambda matcher, tokens: llguidance_walk(matcher, tokenizer.vocab_size, tokens)


def _outlines(vocab, encode):
    import outlines_core

    ids: dict[bytes, list[int]] = {}
    for i, token in enumerate(vocab.tokens):
        if i not in vocab.special_token_ids:  # outlines-core keys text tokens by raw bytes; EOS apart
            ids.setdefault(token, []).append(i)
    vocabulary = outlines_core.Vocabulary(vocab.eos_token_ids[0], ids)

    def compile_schema(schema):
        return outlines_core.Index(outlines_core.json_schema.build_regex_from_schema(json.dumps(schema)), vocabulary)

    def walk(index, tokens):
        guide, mask = outlines_core.Guide(index), np.zeros(-(-vocab.logits_width // 32), np.int32)
        per_call = []
        for token in tokens:
            start = time.perf_counter()
            guide.write_mask_into(mask.ctypes.data, mask.size, mask.itemsize)
            guide.advance(token, return_tokens=False)  # raises on a refused token
            per_call.append(time.perf_counter() - start)
        return per_call

    return compile_schema, walk


def engines(vocab, encode) -> dict:
    """Each engine's (compile(schema), walk(compiled, tokens)), ours first and then the installed
    peers, their per-vocabulary preprocessing done here, untimed. A peer's walk gives the seconds
    of each token; ours gives `ours_per_token`'s scan, loop and per-call times."""
    found = {OURS: (lambda schema: aj.compile_json_schema(schema, vocab), lambda cg, tokens: ours_per_token(cg, vocab, tokens))}
    for name, make in (("xgrammar", _xgrammar), ("llguidance", _llguidance), ("outlines-core", _outlines)):
        try:
            found[name] = make(vocab, encode)
        except ImportError:
            print(f"# {name}: not installed")
    return found


def cold_compiles(compilers: dict, schema, repeats: int) -> tuple[dict, dict]:
    """Each engine's median compile seconds and last compiled result, the engines taking turns;
    an engine that raises has its exception as result and no time."""
    times, results = {name: [] for name in compilers}, {}
    for _ in range(repeats):
        for name, compile_schema in compilers.items():
            if isinstance(results.get(name), Exception):
                continue
            start = time.perf_counter()
            try:
                results[name] = compile_schema(schema)
            except Exception as e:  # a peer that cannot take the schema is reported, not fatal
                results[name] = e
                continue
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items() if ts}, results


def _row(label: str, cells, width: int = 14) -> str:
    return f"{label:<20}" + "".join(f"{c:>{width}}" for c in cells)


def _failure(e: Exception) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:150]}"


def compile_table(names: list[str], compilers: dict, repeats: int) -> tuple[dict, list[str]]:
    """Print the compile seconds per schema and their summaries; return the compiled results."""
    print(f"\n## cold compile, seconds (median of {repeats})")
    print(_row("schema", compilers))
    seconds, compiled, failures = {}, {}, []
    for name in names:
        seconds[name], compiled[name] = cold_compiles(compilers, SCHEMAS[name], repeats)
        print(_row(name, [f"{seconds[name][e]:.3f}" if e in seconds[name] else "failed" for e in compilers]), flush=True)
        failures += [f"{e} compile {name}: {_failure(r)}" for e, r in compiled[name].items() if isinstance(r, Exception)]
    per_engine = {e: [seconds[n][e] for n in names if e in seconds[n]] for e in compilers}
    common = [n for n in names if len(seconds[n]) == len(compilers)]
    print(_row("median", [f"{statistics.median(ts):.3f}" if ts else "-" for ts in per_engine.values()]))
    print(_row("sum", [f"{sum(ts):.2f}" for ts in per_engine.values()]))
    print(_row(f"sum, {len(common)} common", [f"{sum(seconds[n][e] for n in common):.2f}" for e in compilers]))
    print(_row("compiled", [f"{len(ts)}/{len(names)}" for ts in per_engine.values()]))
    return compiled, failures


def walk_table(names: list[str], walkers: dict, compiled: dict, encode) -> tuple[dict, list[str]]:
    """Print mask + advance us/token per schema; return {schema: {engine: seconds/token}}, with
    ours timed in a scan of the walk ("scan"), of the walk repeated ("loop") and per call (OURS),
    and the failures."""
    peers = [e for e in walkers if e != OURS]
    print("\n## mask + advance along the example, us/token (mean)")
    print(_row("schema", ["tokens", "ours scan", "ours loop", "ours call", *peers, "loop/fastest"]))
    means, failures = {}, []
    for name in names:
        tokens = encode(json.dumps(EXAMPLES[name]))
        means[name] = {}
        for engine, walk in walkers.items():
            result = compiled[name].get(engine)
            if result is None or isinstance(result, Exception):
                continue
            try:
                per_token = walk(result, tokens)
            except Exception as e:  # a refused example token is reported, not fatal
                failures.append(f"{engine} walk {name}: {_failure(e)}")
                continue
            if engine == OURS:
                means[name].update(scan=per_token["scan"], loop=per_token["loop"])
                per_token = per_token["call"]
            means[name][engine] = statistics.mean(per_token)
        m = means[name]
        fastest = min((m[p] for p in peers if p in m), default=None)
        ratio = f"{m['loop'] / fastest:.2f}" if fastest and "loop" in m else "-"
        print(_row(name, [len(tokens), *(f"{m[e] * 1e6:.1f}" if e in m else "failed" for e in ["scan", "loop", OURS, *peers]), ratio]), flush=True)
    return means, failures


def walk_summary(group: str, names: list[str], means: dict, peers: list[str]) -> None:
    """Print the mean us/token of each engine over a group's schemas, and ours (in a loop, in one
    scan, per call) over the fastest peer."""
    cells = []
    for engine in ["scan", "loop", OURS, *peers]:
        us = [means[n][engine] * 1e6 for n in names if engine in means[n]]
        cells.append(f"{statistics.mean(us):.1f} ({len(us)})" if us else "-")
    print(_row(f"{group} ({len(names)})", ["", *cells]))
    for ours in ("loop", "scan", OURS):
        ratios = []
        for n in names:
            fastest = min((means[n][p] for p in peers if p in means[n]), default=None)
            if fastest and ours in means[n]:
                ratios.append(means[n][ours] / fastest)
        if ratios:
            print(f"{'':<20}ours({'call' if ours == OURS else ours})/fastest peer: geometric mean {statistics.geometric_mean(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f} over {len(ratios)} schemas")


def main():
    vocabs = load_vocabularies()
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, one repeat")
    parser.add_argument("--vocab", choices=sorted(vocabs), default="tekken-131k")
    parser.add_argument("--repeats", type=int, default=3, help="cold compiles per schema and engine")
    args = parser.parse_args()
    vocab, encode = vocabs[args.vocab], encoders()[args.vocab]
    names = list(QUICK) if args.quick else list(SCHEMAS)
    print(f"# machine: {machine()}\n# vocabulary: {args.vocab}, {len(names)} schemas")
    found = engines(vocab, encode)
    compilers = {name: compile_schema for name, (compile_schema, _) in found.items()}
    for compile_schema in compilers.values():
        compile_schema(WARM_UP)
    compiled, failures = compile_table(names, compilers, 1 if args.quick else args.repeats)
    means, walk_failures = walk_table(names, {name: walk for name, (_, walk) in found.items()}, compiled, encode)
    peers = [e for e in found if e != OURS]
    print("\n## mean us/token over the schemas each engine walked (how many)")
    print(_row("group", ["", "ours scan", "ours loop", "ours call", *peers]))
    for group, members in (("regular", REGULAR), ("recursive", RECURSIVE)):
        walk_summary(group, [n for n in names if n in members], means, peers)
    print("\n## failures")
    print("\n".join(failures + walk_failures) or "none")


if __name__ == "__main__":
    main()
