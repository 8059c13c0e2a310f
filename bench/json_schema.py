"""JSON Schema: cold compile time and per-token mask + advance, side by side with XGrammar,
llguidance and outlines-core (when installed), on the realistic schemas of
grammars/json_schemas.json.

Compile time is the median of cold compiles per schema: before any is timed, each engine compiles
one unrelated warm-up schema, so per-vocabulary preprocessing (XGrammar's TokenizerInfo,
llguidance's tokenizer, outlines-core's Vocabulary, ours' list of ordinary tokens) and jax
start-up are excluded for everyone; after that no schema has been compiled before (XGrammar's
cache is off, the others keep none per schema). The engines take turns, so drift hits all alike.
A peer that raises or refuses a schema is a failure, reported, never fatal; one that compiles may
still ignore keywords it does not support (XGrammar warns of some on stderr). llguidance builds
its lexer lazily: much of its compile work is paid during the first masks, in its per-token time.

The walk is json.dumps of the schema's example instance, with ", " and ": " separators (flexible
whitespace in ours, XGrammar and llguidance; outlines-core's default `[ ]?` admits them too),
tokenised by the vocabulary's own tokenizer. ananke_jax is timed inside one jitted `lax.scan`
over the tokens ("scan"), inside one over the walk repeated to 2048 tokens from the initial
state each time ("loop": the cost of a token in a jitted decode loop, where the scan's launch is
paid once per generation; one pass of a short walk such as enum_only's 3 tokens mostly times
that launch), and per call from the host through `aj.Matcher` ("call": a server's own loop;
regular grammars step on the host there); the peers per call, each filling a full token bitmask
then advancing. The ratios are ours / the fastest peer on that schema, summarised by their
geometric mean over the regular and the recursive schemas apart.

    pip install torch==2.13.0 && pip install xgrammar llguidance outlines-core   # optional peers
    python bench/json_schema.py [--quick] [--vocab tekken-131k] [--repeats 3] [--schemas NAME ...]
    python bench/json_schema.py --corpus [--limit 5]   # = python bench/schema_corpus.py
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import ananke_jax as aj

import schema_corpus
from harness import (
    Table,
    corpus,
    encoders,
    headline,
    llguidance_tokenizer,
    llguidance_walk,
    load_vocabularies,
    ours_per_token,
    outlines_vocabulary,
    outlines_walk,
    parse,
    parser,
    ratio_figure,
    record,
    xgrammar_info,
    xgrammar_walk,
)  # fmt: skip

OURS = "ananke_jax"
CORPUS = corpus("json_schemas")
SCHEMAS = {**CORPUS["regular"], **CORPUS["recursive"]}
QUICK = ["weather_call", "person", "tags", "tree"]  # a peer refuses tags; tree is recursive
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

    vocabulary = outlines_vocabulary(vocab)

    def compile_schema(schema):
        return outlines_core.Index(outlines_core.json_schema.build_regex_from_schema(json.dumps(schema)), vocabulary)

    return compile_schema, lambda index, tokens: outlines_walk(index, vocab, tokens)


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


def _failure(e: Exception) -> str:
    return f"{type(e).__name__}: {' '.join(str(e).split())[:150]}"


def compile_table(names: list[str], compilers: dict, repeats: int) -> tuple[Table, dict, list[str]]:
    """The compile seconds per schema and their summaries, the compiled results, the failures."""
    table = Table(
        f"cold compile, seconds (median of {repeats})",
        {"schema": "s", **{f"{e} s": ".3f" for e in compilers}},
        "A missing time is a failure (see the notes).",
    )
    seconds, compiled, failures = {}, {}, []
    for name in names:
        seconds[name], compiled[name] = cold_compiles(compilers, SCHEMAS[name], repeats)
        table.add(name, *(seconds[name].get(e) for e in compilers))
        failures += [f"{e} compile {name}: {_failure(r)}" for e, r in compiled[name].items() if isinstance(r, Exception)]
    per_engine = {e: [seconds[n][e] for n in names if e in seconds[n]] for e in compilers}
    common = [n for n in names if len(seconds[n]) == len(compilers)]
    table.add("median", *(statistics.median(ts) if ts else None for ts in per_engine.values()))
    table.add("sum", *(sum(ts) for ts in per_engine.values()))
    table.add(f"sum, {len(common)} common", *(sum(seconds[n][e] for n in common) for e in compilers))
    table.add("compiled", *(f"{len(ts)}/{len(names)}" for ts in per_engine.values()))
    return table, compiled, failures


def walk_table(names: list[str], walkers: dict, compiled: dict, encode) -> tuple[Table, dict, list[str]]:
    """Mask + advance us/token per schema; {schema: {engine: seconds/token}}, with ours timed in
    a scan of the walk ("scan"), of the walk repeated ("loop") and per call ("call"); failures."""
    peers = [e for e in walkers if e != OURS]
    us = {f"{e} us": ".1f" for e in ["ours scan", "ours loop", "ours call", *peers]}
    table = Table("mask + advance along the example, us/token (mean)", {"schema": "s", "tokens": "d", **us, "loop/fastest peer": ".2f"})
    means, failures = {}, []
    for name in names:
        tokens = encode(json.dumps(CORPUS["examples"][name]))
        means[name] = m = {}
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
                m.update(scan=per_token["scan"], loop=per_token["loop"], call=statistics.mean(per_token["call"]))
            else:
                m[engine] = statistics.mean(per_token)
        fastest = min((m[p] for p in peers if p in m), default=None)
        table.add(
            name,
            len(tokens),
            *(m[e] * 1e6 if e in m else None for e in ["scan", "loop", "call", *peers]),
            m["loop"] / fastest if fastest and "loop" in m else None,
        )
    return table, means, failures


def _mean(values: list[float]):
    return statistics.mean(values) if values else None


def peer_ratios(names: list[str], means: dict, peers: list[str], mode: str) -> list[float]:
    """Ours (``mode``: scan, loop or call) / the fastest peer, per schema that both walked."""
    rs = []
    for n in names:
        fastest = min((means[n][p] for p in peers if p in means[n]), default=None)
        if fastest and mode in means[n]:
            rs.append(means[n][mode] / fastest)
    return rs


def group_tables(names: list[str], means: dict, peers: list[str]) -> list[Table]:
    """Per group of schemas (regular, recursive): each engine's mean us/token, and ours (in a
    loop, in one scan, per call) over the fastest peer."""
    ours = ["scan", "loop", "call"]
    mean_us = Table(
        "mean us/token over the schemas of each group",
        {"group": "s", "schemas": "d", **{f"ours {e} us": ".1f" for e in ours}, **{f"{e} us": ".1f" for e in peers}},
        "Each engine's mean over the schemas it walked (a failed one is left out: see the notes).",
    )
    rows = []
    for group in ("regular", "recursive"):
        members = [n for n in names if n in CORPUS[group]]
        mean_us.add(group, len(members), *(_mean([means[n][e] * 1e6 for n in members if e in means[n]]) for e in ours + peers))
        for mode in ours:
            rs = peer_ratios(members, means, peers, mode)
            if rs:
                rows.append([group, mode, statistics.geometric_mean(rs), min(rs), max(rs), len(rs)])
    ratios = Table(
        "ours / the fastest peer, per schema: geometric mean and range",
        {"group": "s", "ours": "s", "geometric mean": ".2f", "min": ".2f", "max": ".2f", "schemas": "d"},
    )
    for row in rows:
        ratios.add(*row)
    return [mean_us, ratios]


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def headlines(names: list[str], compiles: Table, means: dict, engines: list[str], vocab: str) -> list[dict]:
    """The median cold compile, ours against XGrammar's; ours in a jitted loop over the fastest
    peer per token, geometric mean and range over the schemas."""
    medians = dict(zip(engines, next(row for row in compiles.rows if row[0] == "median")[1:]))
    ours, xgr, rows = medians[OURS], medians.get("xgrammar"), []
    what = (
        f"JSON Schema cold compile, median over {len(names)} schema{'s' if len(names) > 1 else ''} ({vocab.rsplit('-', 1)[-1]} vocabulary)"
    )
    if ours is not None and xgr:
        rows.append(headline(what, f"{ratio_figure(ours / xgr, 'XGrammar')} ({_ms(ours)} vs {_ms(xgr)} ms)"))
    elif ours is not None:
        rows.append(headline(what, f"{_ms(ours)} ms (XGrammar not installed)"))
    peers = [e for e in engines if e != OURS]
    for kind in ("regular", "recursive"):
        what = f"JSON Schema, {kind} schemas: mask + advance per token in a jitted decode loop vs the fastest peer"
        rs = peer_ratios([n for n in names if n in CORPUS[kind]], means, peers, "loop")
        if rs:
            figure = f"{ratio_figure(statistics.geometric_mean(rs), 'fastest peer')} (geometric mean, {min(rs):.2f}-{max(rs):.2f}x over {len(rs)} schemas)"
            rows.append(headline(what, figure))
        elif not peers:
            rows.append(headline(what, "no peer installed"))
    return rows


def main():
    if "--corpus" in sys.argv:  # the real-world corpus: schema_corpus.py, its own options and record
        sys.argv.remove("--corpus")
        return schema_corpus.main()
    vocabs = load_vocabularies()
    p = parser(__doc__)
    p.add_argument("--vocab", choices=sorted(vocabs), default="tekken-131k")
    p.add_argument("--repeats", type=int, default=3, help="cold compiles per schema and engine")
    p.add_argument("--schemas", nargs="+", choices=list(SCHEMAS), default=list(SCHEMAS))
    args = parse(p, schemas=QUICK, repeats=1)
    vocab, encode = vocabs[args.vocab], encoders()[args.vocab]
    print(f"# vocabulary: {args.vocab}, {len(args.schemas)} schemas")
    found = engines(vocab, encode)
    compilers = {name: compile_schema for name, (compile_schema, _) in found.items()}
    for compile_schema in compilers.values():
        compile_schema(WARM_UP)
    compiles, compiled, failures = compile_table(args.schemas, compilers, args.repeats)
    walks, means, walk_failures = walk_table(args.schemas, {name: walk for name, (_, walk) in found.items()}, compiled, encode)
    groups = group_tables(args.schemas, means, [e for e in found if e != OURS])
    notes = [f"failure: {f}" for f in failures + walk_failures]
    print("\n## failures\n" + ("\n".join(notes) or "none"))
    heads = headlines(args.schemas, compiles, means, list(found), args.vocab)
    record("json_schema", args, {"tables": [*groups, compiles, walks], "notes": notes, "headline": heads})


if __name__ == "__main__":
    main()
