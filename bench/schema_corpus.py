"""Real-world JSON Schemas (bench/schema_corpus.json): coverage and compile-time tail, ours with
`strict=True` and `strict=False` against XGrammar and llguidance, run by `json_schema.py --corpus`.

Each engine compiles each schema once, cold; the peers' first token mask is included (llguidance
builds its lexer lazily, during the first masks), ours is a lookup in the tables compiled. Ours runs under the default `CompileBudget`
(states, table bytes, 10 s) with ``max_seconds`` set to ``--limit``; a peer runs in its own
process, stopped and replaced when it passes the limit. An outcome is *compiled*, *refused* (the
engine's error, summarised by kind) or *over* the limit. The peers run as a user would run them
(XGrammar's default non-strict mode drops keywords it cannot honour, with a warning). Then the
grammar bombs, under the default budget.

    pip install torch==2.13.0 && pip install xgrammar llguidance   # optional peers
    python bench/schema_corpus.py [--quick] [--vocab tekken-131k] [--limit 5]
"""

from __future__ import annotations

import collections
import json
import multiprocessing
import pathlib
import re
import time
import warnings

import ananke_jax as aj

from harness import Table, headline, llguidance_tokenizer, load_vocabularies, parse, parser, percentile, record, xgrammar_info

CORPUS = pathlib.Path(__file__).resolve().parent / "schema_corpus.json"
QUICK = ["AWS::Amplify::App", "setuptools/distutils.schema.json"]


def load() -> dict[str, dict]:
    return {e["name"]: e["schema"] for e in json.loads(CORPUS.read_text(encoding="utf-8"))["schemas"]}


def _ours(vocab, strict: bool, limit: float):
    def compile_schema(schema):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # strict=False names each keyword it drops
            aj.compile_json_schema(schema, vocab, strict=strict, budget=aj.CompileBudget(max_seconds=limit))

    return compile_schema


def _peer_worker(connection, engine: str, vocab_name: str) -> None:
    """A peer in its own process: compile each schema received, answer (seconds, error)."""
    from harness import encoders, load_vocabularies

    vocab, encode = load_vocabularies()[vocab_name], encoders()[vocab_name]
    if engine == "xgrammar":
        import xgrammar as xgr

        info = xgrammar_info(vocab)
        bitmask = xgr.allocate_token_bitmask(1, vocab.logits_width)

        def compile_schema(text):
            compiled = xgr.GrammarCompiler(info, cache_enabled=False).compile_json_schema(text, any_whitespace=True)
            xgr.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)
    else:
        import llguidance

        tokenizer = llguidance_tokenizer(vocab, encode)

        def compile_schema(text):
            grammar = llguidance.LLMatcher.grammar_from_json_schema(text, defaults={"whitespace_flexible": True})
            matcher = llguidance.LLMatcher(tokenizer, grammar, log_level=0)
            if matcher.is_error():
                raise ValueError(matcher.get_error())
            matcher.compute_logit_bias()

    compile_schema(json.dumps({"type": "object", "properties": {"a": {"type": "string"}}}))
    connection.send("ready")
    while True:
        text = connection.recv()
        start = time.perf_counter()
        try:
            compile_schema(text)
            connection.send((time.perf_counter() - start, None))
        except Exception as e:  # a refusal is an outcome
            connection.send((time.perf_counter() - start, f"{type(e).__name__}: {e}"))


class _Peer:
    """A peer's worker process; `compile` stops and replaces it past ``limit`` seconds."""

    def __init__(self, engine: str, vocab_name: str, limit: float):
        self.engine, self.vocab_name, self.limit = engine, vocab_name, limit
        self._start()

    def _start(self):
        context = multiprocessing.get_context("spawn")
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_peer_worker, args=(theirs, self.engine, self.vocab_name), daemon=True)
        self.process.start()
        if self.connection.recv() != "ready":
            raise RuntimeError(f"{self.engine} did not start")

    def compile(self, schema) -> tuple[float | None, str | None]:
        self.connection.send(json.dumps(schema))
        if self.connection.poll(self.limit):
            return self.connection.recv()
        self.process.kill()
        self.process.join()
        self._start()
        return None, None

    def close(self):
        self.process.kill()


def _kind(error: str) -> str:
    """An error summarised for the refusal table: its type and first words, numbers dropped."""
    return re.sub(r"\d[\d,.]*", "N", re.sub(r" at #\S*.*| \(keyword.*", "", error))[:90]


def run(vocab, vocab_name: str, limit: float, names: list[str] | None = None) -> dict:
    """Every engine on every corpus schema, the engines taking turns; the results' tables."""
    schemas = load()
    names = names or list(schemas)
    engines = {"ours strict": _ours(vocab, True, limit), "ours non-strict": _ours(vocab, False, limit)}
    peers = {}
    for engine in ("xgrammar", "llguidance"):
        try:
            __import__(engine)
            peers[engine] = _Peer(engine, vocab_name, limit)
        except ImportError:
            print(f"# {engine}: not installed")
    engines["ours strict"]({"type": "object", "properties": {"a": {"type": "string"}}})
    path = _pushdown_path(engines["ours strict"], peers)
    outcomes: dict[str, dict[str, tuple]] = {e: {} for e in [*engines, *peers]}
    for name in names:
        for engine, compile_schema in engines.items():
            start = time.perf_counter()
            try:
                compile_schema(schemas[name])
                seconds = time.perf_counter() - start
                outcomes[engine][name] = (seconds, None) if seconds <= limit else (None, None)  # done, but late
            except aj.AnankeError as e:  # past the time limit: over it; any other error: a refusal
                over = "max_seconds" in str(e)
                outcomes[engine][name] = (None, None) if over else (time.perf_counter() - start, f"{type(e).__name__}: {e}")
        for engine, peer in peers.items():
            outcomes[engine][name] = peer.compile(schemas[name])
        line = "  ".join(f"{e}={_short(outcomes[e][name])}" for e in outcomes)
        print(f"{name[:40]:40s} {line}", flush=True)
    for peer in peers.values():
        peer.close()
    return {"outcomes": outcomes, "tables": [path, *_tables(outcomes, names, limit)], "headline": _headlines(outcomes, names, vocab_name)}


PUSHDOWN_PATH = {"{} (any JSON value)": {}, '{"format": "date-time"}': {"format": "date-time"}}


def _pushdown_path(ours, peers: dict) -> Table:
    """Compile time of the schemas that take the pushdown path in every engine: any JSON value
    (``response_format: json_object``), and any JSON value whose top-level strings are date-times.
    Each is new to every engine (run before the corpus, so nothing of it is cached)."""
    table = Table(
        "The pushdown path: compile time (ms; the peers' with their first mask), each schema new to each engine",
        {"schema": "s", "ours": ".1f", **dict.fromkeys(peers, ".1f")},
    )
    for name, schema in PUSHDOWN_PATH.items():
        start = time.perf_counter()
        ours(schema)
        row = [(time.perf_counter() - start) * 1000]
        for peer in peers.values():
            seconds, error = peer.compile(schema)
            row.append(None if seconds is None or error else seconds * 1000)
        table.add(name, *row)
    return table


def _short(outcome) -> str:
    seconds, error = outcome
    return "over" if seconds is None else f"{'refused' if error else 'ok'} {seconds * 1000:.0f}ms"


def _summary(outcome: dict[str, tuple]) -> dict:
    times = [s for s, e in outcome.values() if s is not None and e is None]
    return {
        "compiled": len(times),
        "refused": sum(1 for s, e in outcome.values() if e is not None),
        "over": sum(1 for s, _ in outcome.values() if s is None),
        "p50": percentile(times, 50),
        "p90": percentile(times, 90),
        "p99": percentile(times, 99),
        "max": max(times) if times else None,
    }


def _tables(outcomes: dict, names: list[str], limit: float) -> list[Table]:
    ms = lambda seconds: None if seconds is None else seconds * 1000
    coverage = Table(
        f"Real-world JSON Schemas ({len(names)}): coverage, and compile time (ms; the peers' with their first mask); limit {limit:g} s",
        {"engine": "s", "compiled": "d", "refused": "d", f"over {limit:g} s": "d", "p50": ".1f", "p90": ".1f", "p99": ".1f", "max": ".1f"},
        note="Refused: the engine's error (ours: SchemaError with keyword and pointer, or the budget). "
        "XGrammar compiles some schemas by dropping keywords it cannot honour.",
    )
    for engine, outcome in outcomes.items():
        s = _summary(outcome)
        coverage.add(engine, s["compiled"], s["refused"], s["over"], ms(s["p50"]), ms(s["p90"]), ms(s["p99"]), ms(s["max"]))
    reasons = collections.Counter((engine, _kind(e)) for engine, o in outcomes.items() for _, e in o.values() if e is not None)
    refusals = Table("Refusals by kind", {"engine": "s", "count": "d", "reason": "s"})
    for (engine, reason), count in sorted(reasons.items()):
        refusals.add(engine, count, reason)
    return [coverage, refusals]


def _headlines(outcomes: dict, names: list[str], vocab_name: str) -> list[dict]:
    """One row: how many compile (ours strict, non-strict, each peer) and our strict p90."""
    count = lambda engine: _summary(outcomes[engine])["compiled"]
    figure = f"{count('ours strict')} strict, {count('ours non-strict')} non-strict" + "".join(
        f"; {p} {count(p)}" for p in outcomes if not p.startswith("ours")
    )
    p90 = _summary(outcomes["ours strict"])["p90"]
    figure += "" if p90 is None else f" (our strict p90 {p90 * 1000:.0f} ms)"
    return [headline(f"real-world JSON Schemas that compile, of {len(names)} ({vocab_name})", figure)]


def bombs(vocab) -> Table:
    """Grammar bombs under the default budget: seconds to the refusal (or the compile)."""
    nested: dict = {"type": "string"}
    for _ in range(10):
        nested = {"oneOf": [{"type": "integer"}, nested]}
    cases = {
        "(a{1000}){1000}": lambda: aj.compile_regex("(a{1000}){1000}", vocab),
        "((a|aa)*)* nested": lambda: aj.compile_regex("((((a|aa)*b|aa)*c|a)*d)*", vocab),
        "oneOf nested 10 deep": lambda: aj.compile_json_schema(nested, vocab),
        "64 optional properties": lambda: aj.compile_json_schema(
            {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(64)}}, vocab
        ),
        "10,000-value enum": lambda: aj.compile_json_schema({"enum": [f"value-{i}" for i in range(10_000)]}, vocab),
        "$ref chain of 200": lambda: aj.compile_json_schema(
            {"$defs": {f"d{i}": {"$ref": f"#/$defs/d{i + 1}"} for i in range(200)} | {"d200": {}}, "$ref": "#/$defs/d0"}, vocab
        ),
        "pattern ^.{0,20}x.{30}$": lambda: aj.compile_json_schema({"type": "string", "pattern": "^.{0,20}x.{30}$"}, vocab),
    }
    table = Table("Grammar bombs under the default CompileBudget", {"input": "s", "ms": ".0f", "outcome": "s"})
    for name, build in cases.items():
        start = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                build()
            outcome = "compiled"
        except aj.AnankeError as e:
            outcome = " ".join(str(e).split())[:110]
        table.add(name, (time.perf_counter() - start) * 1000, outcome)
    return table


def main():
    vocabs = load_vocabularies()
    p = parser(__doc__)
    p.add_argument("--vocab", choices=sorted(vocabs), default="tekken-131k")
    p.add_argument("--limit", type=float, default=5.0, help="seconds per compile before it counts as over")
    p.add_argument("--schemas", nargs="+", help="corpus entries by name (default: all)")
    args = parse(p, schemas=QUICK)
    results = run(vocabs[args.vocab], args.vocab, args.limit, names=args.schemas)
    record("schema_corpus", args, {"tables": [*results["tables"], bombs(vocabs[args.vocab])], "headline": results["headline"]})


if __name__ == "__main__":
    main()
