"""Structural tags for tool calls: cold compile and per-token mask + advance of 1, 10 and 100
OpenAI tools in the Hermes/Qwen tool-call format, side by side with XGrammar and llguidance (when
installed), on the Tekken 131k vocabulary.

The tools are generated from a seed, no data downloaded: names such as ``book_flights``, a
description, and parameters that mix strings, string enums, integers with bounds, numbers,
booleans, nested objects and arrays (of scalars or of objects, some with ``minItems`` or
``maxItems``), with required and optional keys; every object has ``additionalProperties: false``
(as OpenAI's strict mode asks), so no engine's default for unlisted keys matters. The constraint
is ``aj.tools_constraint(tools, vocab, "auto", style="hermes")``: free text, in which
``<tool_call>`` opens a call ``<tool_call>\\n{"name": "f", "arguments": A}\\n</tool_call>``
with ``A`` valid for f's parameters, any number of calls, text between and after them.

Compile: ours as above; XGrammar compiles the same structural tag (``aj.tools_structural_tag``,
XGrammar's own format) with ``GrammarCompiler(cache_enabled=False).compile_structural_tag``;
llguidance compiles the Lark grammar of the same language written below (it has no structural
tag of its own beyond a Python helper that writes such Lark), timed through `LLMatcher` creation
and its first mask: llguidance builds its lexer lazily, so part of its compile work is paid
later, in its per-token time. Each engine first compiles an unrelated warm-up tag, so the
per-vocabulary preprocessing (ours' token tables, XGrammar's TokenizerInfo, llguidance's
tokenizer) and jax start-up are excluded for everyone; then each repeat compiles a tool set of
each size new to every engine (the seed is the repeat's), the engines taking turns; the table
gives the medians.

Per token: a reply of free text then two calls (random valid arguments, raw UTF-8, ``", "`` and
``": "`` separators), tokenised by mistral_common's Tekken tokenizer. Ours runs inside one
jitted `lax.scan` over the reply's tokens computing `aj.token_mask` and `aj.advance` at each
step ("scan": its seconds over the tokens, compiled beforehand); "unconstrained" is the same
scan with a trivial step in place of the constraint (the token xor-ed into a mask-wide vector),
so ours/unconstrained is the constraint's cost over a bare scan's, the launch included in both.
"loop" is the scan over the reply repeated to 2048 tokens from the initial state each time (the
cost of a token in a jitted decode loop, where the launch is paid once per generation), "call"
`aj.Matcher` per call from the host (regular grammars step on the host there). The peers run
per call, their only mode: fill a full token bitmask, accept the token, each walk on a new
matcher (for llguidance a new `LLMatcher`, so its lazily built lexer is built again, as for a
new request). The engines take turns, each running twice in its turn and timed the second time
(right after another engine's walk, a first run pays for the caches and idle threads that engine
left: several times slower in trials on a busy 2-core machine); medians. The ratios to the peers are
ours in the scan over each peer.

Validity: every walked reply must be accepted by all three engines (asserted: ours accepts at
the scan's end; XGrammar accepts EOS after it; llguidance is accepting), and the agreement
table checks a few more replies per size: valid ones (no call at all, one call then text) that
all must accept, and invalid ones (an unknown tool, a missing required key, an unlisted key, a
value of the wrong type, ``<tool_call>`` followed by plain text) that all should refuse; a
disagreement is listed in the notes.

The three languages are the same on these replies. Differences found by probing single calls:
ours bounds a run of JSON whitespace at 24 characters, the peers do not; llguidance refuses the
JSON escape ``\\/`` and escaped lone surrogates such as ``\\ud83d`` that the others accept (the
Lark grammar sets llguidance's ``json_allow_general_unicode_escapes`` so that ``\\u00e9`` passes
as in the others: by default llguidance refuses it too). llguidance's own ``StructTag`` helper
lets the text after the last call contain ``<tool_call>``; the grammar here excludes it, as ours
and XGrammar do, with llguidance's ``&``/``~`` regex operators. All three fix the keys' order to
the schema's, refuse whitespace between the call's text and its arguments, and take JSON numbers
alike.

    pip install torch==2.13.0 && pip install xgrammar llguidance   # optional peers
    python bench/structural_tags.py [--quick] [--tools 1 10 100] [--repeats 3] [--walks 11]
"""

from __future__ import annotations

import dataclasses
import json
import random
import statistics
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

import ananke_jax as aj

from harness import (
    Table,
    encoders,
    headline,
    llguidance_tokenizer,
    llguidance_walk,
    matcher_per_call,
    matcher_walk,
    mistral_data,
    ours_scan,
    parse,
    parser,
    ratio,
    ratio_figure,
    record,
    xgrammar_info,
)  # fmt: skip

OURS, XGRAMMAR, LLGUIDANCE = "ananke_jax", "xgrammar", "llguidance"
STYLE = "hermes"
TRIGGER, CALL_END = "<tool_call>", "}\n</tool_call>"

# ---------------------------------------------------------------------------------------------
# Tools, their arguments and replies, generated from a seed

VERBS = [
    "get", "search", "create", "update", "delete", "list", "book", "cancel", "send", "schedule", "convert", "translate",
    "calculate", "fetch", "find", "check", "reserve", "order", "track", "summarize", "compare", "lookup", "set", "play",
]  # fmt: skip
NOUNS = [
    "weather", "flights", "hotel", "calendar_event", "email", "reminder", "invoice", "stock_price", "currency", "restaurant",
    "recipe", "movie", "song", "playlist", "package", "order", "ticket", "user_profile", "document", "contact", "meeting",
    "route", "exchange_rate", "news", "timer", "alarm", "task", "note", "file", "payment", "subscription", "car_rental",
    "train", "parking", "doctor_appointment", "lab_result", "prescription", "product", "review", "support_case",
]  # fmt: skip
KEYS = [
    "query", "city", "location", "date", "start_date", "end_date", "title", "body", "recipient", "subject", "language",
    "currency", "amount", "limit", "page", "unit", "category", "priority", "status", "notes", "tags", "count",
    "duration_minutes", "include_details", "verbose", "notify", "max_results", "sort_by", "order", "filters", "address",
    "passengers", "rating", "price_range", "time_zone", "user_id", "account", "options", "attendees", "items",
]  # fmt: skip
ENUMS = [
    ["celsius", "fahrenheit"], ["low", "medium", "high", "critical"], ["asc", "desc"], ["economy", "premium_economy", "business", "first"],
    ["open", "in_progress", "closed"], ["en", "fr", "de", "es", "it", "pt", "ja"], ["USD", "EUR", "GBP", "JPY", "CHF"],
    ["relevance", "date", "price", "rating"], ["daily", "weekly", "monthly"],
]  # fmt: skip
WORDS = [
    "Paris", "Tokyo", "New York", "quarterly report", "Lisbon", "dinner with Sam", "budget", "urgent", "Main Street 12",
    "project kickoff", "Berlin", "weekly sync", "grocery list", "São Paulo", "Zürich", "meeting notes", "Kraków",
]  # fmt: skip
PREAMBLES = [
    "Sure, let me look that up for you.",
    "I'll check a couple of things first, then get back to you with the details.",
    "Good idea. I will take care of both requests right away.",
    "Let me find the information you asked for and set everything up.",
]


def _leaf(rng: random.Random) -> dict:
    kind = rng.choice(["string", "string", "enum", "integer", "boolean", "number"])
    description = f"The {rng.choice(['requested', 'target', 'preferred', 'optional'])} value."
    if kind == "enum":
        return {"type": "string", "enum": rng.choice(ENUMS), "description": description}
    if kind == "integer":
        low = rng.choice([0, 1, 1, 10])
        return {"type": "integer", "minimum": low, "maximum": low + rng.choice([9, 99, 365, 10000]), "description": description}
    return {"type": kind, "description": description}


def _object(rng: random.Random, nested: bool = False) -> dict:
    keys = rng.sample(KEYS, rng.randint(1, 3 if nested else 6))
    properties = {}
    for key in keys:
        r = rng.random()
        if not nested and r < 0.12:
            properties[key] = {**_object(rng, nested=True), "description": "Nested settings."}
        elif not nested and r < 0.24:
            array = {"type": "array", "items": _leaf(rng) if rng.random() < 0.7 else _object(rng, nested=True), "description": "A list."}
            if rng.random() < 0.5:
                array["minItems"] = 1
            if rng.random() < 0.3:
                array["maxItems"] = rng.choice([3, 5, 10])
            properties[key] = array
        else:
            properties[key] = _leaf(rng)
    required = [key for key in keys if rng.random() < 0.5] or keys[:1]
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def make_tools(n: int, seed) -> list[dict]:
    """``n`` OpenAI tool definitions, the same for the same ``(n, seed)``."""
    rng = random.Random(f"tools-{n}-{seed}")
    names = rng.sample([f"{verb}_{noun}" for verb in VERBS for noun in NOUNS], n)
    return [
        {
            "type": "function",
            "function": {"name": name, "description": f"{name.replace('_', ' ').capitalize()} for the user.", "parameters": _object(rng)},
        }
        for name in names
    ]


def instance(schema: dict, rng: random.Random):
    """A random value of one of `make_tools`' schemas: required keys and about half the optional
    ones, in the schema's order."""
    if "enum" in schema:
        return rng.choice(schema["enum"])
    kind = schema["type"]
    if kind == "string":
        return rng.choice(WORDS)
    if kind == "integer":
        return rng.randint(schema["minimum"], schema["maximum"])
    if kind == "number":
        return round(rng.uniform(-50, 5000), rng.choice([0, 1, 2]))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        low = schema.get("minItems", 0)
        return [instance(schema["items"], rng) for _ in range(rng.randint(low, min(schema.get("maxItems", 3), low + 2)))]
    required = set(schema["required"])
    return {key: instance(sub, rng) for key, sub in schema["properties"].items() if key in required or rng.random() < 0.5}


def call_text(name: str, arguments) -> str:
    """One call as a Hermes model writes it."""
    return f"{TRIGGER}\n{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}\n</tool_call>"


def reply(tools: list[dict], rng: random.Random) -> str:
    """Free text, then two calls (of two tools, or twice the only one), a newline between."""
    chosen = rng.sample(range(len(tools)), 2) if len(tools) > 1 else [0, 0]
    calls = [call_text(tools[i]["function"]["name"], instance(tools[i]["function"]["parameters"], rng)) for i in chosen]
    return rng.choice(PREAMBLES) + "\n" + "\n".join(calls)


def probes(tools: list[dict], rng: random.Random) -> list[tuple[str, str, bool]]:
    """``(what, reply, valid)``: replies beside the walked one that every engine must judge alike."""
    function = tools[0]["function"]
    name, parameters = function["name"], function["parameters"]
    arguments = instance(parameters, rng)
    first = next(iter(arguments))
    missing = {k: v for k, v in arguments.items() if k != parameters["required"][0]}
    wrong = {**arguments, first: 12345 if isinstance(arguments[first], str) else "oops"}
    return [
        ("no call", "I can answer that without any tool: the capital of Portugal is Lisbon.", True),
        ("one call, then text", f"On it.\n{call_text(name, arguments)}\nI will report back.", True),
        ("unknown tool", f"Let me see.\n{call_text('no_such_tool', {})}", False),
        ("missing required key", f"Let me see.\n{call_text(name, missing)}", False),
        ("unlisted key", f"Let me see.\n{call_text(name, {**arguments, 'zz_unlisted': 1})}", False),
        ("wrong type", f"Let me see.\n{call_text(name, wrong)}", False),
        ("trigger, then text", f"Let me see. {TRIGGER} and then plain text.", False),
    ]


def lark_grammar(tools: list[dict]) -> str:
    """llguidance's Lark for the language of ``aj.tools_constraint(tools, vocab, "auto",
    style="hermes")``: ``T (C T)*``, T text without ``<tool_call>``, C one call.

    The text before a call is the lazy lexeme ``ANY "<tool_call>"`` (the shortest match: text up
    to the first trigger), as in llguidance's docs and its StructTag helper; the text after the
    last call excludes the trigger with the ``&``/``~`` regex operators."""
    calls = []
    for i, tool in enumerate(tools):
        function = tool["function"]
        begin = '\n{"name": ' + json.dumps(function["name"]) + ', "arguments": '
        schema = {**function["parameters"], "x-guidance": {"json_allow_general_unicode_escapes": True}}
        calls.append(f"call_{i}: {json.dumps(begin)} %json {json.dumps(schema)} {json.dumps(CALL_END)}")
    return "\n".join(
        [
            f"start: (trigger ({' | '.join(f'call_{i}' for i in range(len(tools)))}))* TEXT",
            f"trigger[lazy]: ANY {json.dumps(TRIGGER)}",
            "ANY: /(?s:.*)/",
            f"TEXT: /(?s:.*)/ & ~/(?s:.*){TRIGGER}(?s:.*)/",
            *calls,
        ]
    )


# ---------------------------------------------------------------------------------------------
# Engines


@dataclasses.dataclass
class Engine:
    """One engine: ``prepare(tools)`` its input (untimed), ``compile(input)`` (timed),
    ``walk(compiled, tokens)`` the seconds of each token along an accepted walk (asserted; None
    for ours, which is timed in a scan), ``judge(compiled, tokens)`` whether it accepts the
    tokens as a whole reply."""

    prepare: Callable
    compile: Callable
    walk: Callable | None
    judge: Callable


def ours(vocab: aj.Vocabulary) -> Engine:
    eos = vocab.eos_token_ids[0]

    def judge(cg, tokens):
        matcher = aj.Matcher(cg, vocab)
        return all(matcher.accept_token(t) for t in tokens) and matcher.accept_token(eos)

    return Engine(lambda tools: tools, lambda tools: aj.tools_constraint(tools, vocab, "auto", style=STYLE), None, judge)


def xgrammar(vocab: aj.Vocabulary) -> Engine:
    import xgrammar as xgr

    info, eos = xgrammar_info(vocab), vocab.eos_token_ids[0]
    bitmask = xgr.allocate_token_bitmask(1, vocab.logits_width)

    def compile_tag(text):
        return xgr.GrammarCompiler(info, cache_enabled=False).compile_structural_tag(text)

    def walk(compiled, tokens):
        matcher = xgr.GrammarMatcher(compiled)
        per_token = matcher_walk(matcher, bitmask, tokens)
        assert matcher.accept_token(eos), "XGrammar: the walk must be complete"
        return per_token

    def judge(compiled, tokens):
        matcher = xgr.GrammarMatcher(compiled)
        return all(matcher.accept_token(t) for t in tokens) and matcher.accept_token(eos)

    return Engine(lambda tools: json.dumps(aj.tools_structural_tag(tools, "auto", style=STYLE)), compile_tag, walk, judge)


def llguidance(vocab: aj.Vocabulary, encode) -> Engine:
    import llguidance as llg
    import llguidance.numpy

    tokenizer = llguidance_tokenizer(vocab, encode)
    bitmask = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size)

    def matcher(grammar):
        m = llg.LLMatcher(tokenizer, grammar, log_level=0)
        if m.is_error():  # its constructor never raises: a refused grammar is an error state
            raise ValueError(m.get_error())
        return m

    def compile_grammar(grammar):
        llguidance.numpy.fill_next_token_bitmask(matcher(grammar), bitmask, 0)  # the first mask: its lexer is lazy
        return grammar

    def walk(grammar, tokens):
        m = matcher(grammar)  # untimed: the compile was timed apart
        per_token = llguidance_walk(m, tokenizer.vocab_size, tokens)
        assert m.is_accepting(), "llguidance: the walk must be complete"
        return per_token

    def judge(grammar, tokens):
        m = matcher(grammar)
        return all(m.consume_token(t) for t in tokens) and m.is_accepting()

    return Engine(lambda tools: llg.LLMatcher.grammar_from_lark(lark_grammar(tools)), compile_grammar, walk, judge)


def engines(vocab: aj.Vocabulary, encode) -> dict[str, Engine]:
    """Ours and the installed peers, their per-vocabulary preprocessing done here, untimed."""
    found = {OURS: ours(vocab)}
    for name, make in ((XGRAMMAR, lambda: xgrammar(vocab)), (LLGUIDANCE, lambda: llguidance(vocab, encode))):
        try:
            found[name] = make()
        except ImportError:
            print(f"# {name}: not installed")
    return found


# ---------------------------------------------------------------------------------------------
# Measurements


def cold_compiles(found: dict[str, Engine], n: int, repeats: int) -> tuple[dict[str, float], dict]:
    """Each engine's median compile seconds over ``repeats`` tool sets of ``n`` tools (one new
    set per repeat, the engines taking turns), and what each compiled from the first set."""
    times, first = {name: [] for name in found}, {}
    for r in range(repeats):
        tools = make_tools(n, r)
        for name, engine in found.items():
            given = engine.prepare(tools)
            start = time.perf_counter()
            compiled = engine.compile(given)
            times[name].append(time.perf_counter() - start)
            if r == 0:
                first[name] = compiled
            del compiled
    return {name: statistics.median(ts) for name, ts in times.items()}, first


def unconstrained_scan(width: int, tokens: list[int]):
    """`harness.ours_scan`'s scan with the constraint taken out: each step xors the token into a
    mask-wide vector. Returns a function giving its seconds per token."""
    words = -(-width // 32)

    @jax.jit
    def walk(tokens):
        def body(acc, token):
            return acc ^ token.astype(jnp.uint32), None

        return jax.lax.scan(body, jnp.zeros(words, jnp.uint32), tokens)[0]

    ids = jnp.asarray(np.asarray(tokens, np.int32))
    walk(ids).block_until_ready()

    def run() -> float:
        start = time.perf_counter()
        walk(ids).block_until_ready()
        return (time.perf_counter() - start) / len(ids)

    return run


def per_token(found: dict[str, Engine], compiled: dict, vocab: aj.Vocabulary, tokens: list[int], walks: int, loop_tokens: int) -> dict:
    """Seconds per token: ours in a scan ("scan"), in a scan of the walk repeated to at least
    ``loop_tokens`` tokens ("loop") and per call ("call": the median of three walks' means), the
    unconstrained scan, each peer per call. The engines take turns (medians of ``walks`` turns); in its turn each runs twice and
    the second run is timed, so that none starts from the caches and idle threads that the
    previous one left (in trials on a busy 2-core machine, a scan right after a peer's walk took
    several times as long as the next)."""
    cg = compiled[OURS]
    timed = {
        "scan": ours_scan(cg, tokens),
        "loop": ours_scan(cg, tokens, repeat=-(-loop_tokens // len(tokens))),
        "unconstrained": unconstrained_scan(vocab.logits_width, tokens),
    }
    for name, engine in found.items():
        if engine.walk is not None:
            timed[name] = lambda engine=engine, name=name: statistics.mean(engine.walk(compiled[name], tokens))
    seconds = {name: [] for name in timed}
    for _ in range(walks):
        for name, run in timed.items():
            run()
            seconds[name].append(run())
    medians = {name: statistics.median(ts) for name, ts in seconds.items()}
    medians["call"] = statistics.median(statistics.mean(matcher_per_call(cg, vocab, tokens)) for _ in range(3))
    return medians


def agreement(found: dict[str, Engine], compiled: dict, tools: list[dict], walked: list[int], encode, n: int) -> tuple[list, list[str]]:
    """Per engine, how many of the walked reply and the `probes` it judged as expected; the
    disagreements as notes. A valid reply refused by any engine is fatal."""
    cases = [("walked reply", walked, True)] + [
        (what, encode(text), valid) for what, text, valid in probes(tools, random.Random(f"probe-{n}"))
    ]
    right, notes = dict.fromkeys(found, 0), []
    for what, tokens, valid in cases:
        verdicts = {name: engine.judge(compiled[name], tokens) for name, engine in found.items()}
        for name, accepted in verdicts.items():
            assert accepted or not valid, f"{name} refused a valid reply ({what}, {n} tools)"
            right[name] += accepted == valid
        if len(set(verdicts.values())) > 1 or any(verdicts.values()) != valid:
            notes.append(f"{n} tools, {what}: " + ", ".join(f"{e} {'accepts' if a else 'refuses'}" for e, a in verdicts.items()))
    return [f"{right[name]}/{len(cases)}" for name in found], notes


def headlines(compiles: dict, tokens: dict, largest: int) -> list[dict]:
    """At the largest tool count: our cold compile against XGrammar's, and our scan per token
    against the fastest peer's."""
    rows, c, t = [], compiles[largest], tokens[largest]
    what = f"tool-call structural tag, {largest} tools: cold compile (131k vocabulary)"
    if c.get(XGRAMMAR):
        rows.append(headline(what, f"{ratio_figure(c[OURS] / c[XGRAMMAR], 'XGrammar')} ({c[OURS]:.3g} vs {c[XGRAMMAR]:.3g} s)"))
    else:
        rows.append(headline(what, f"{c[OURS]:.3g} s (XGrammar not installed)"))
    peers = {name: t[name] for name in (XGRAMMAR, LLGUIDANCE) if t.get(name)}
    what = f"tool-call structural tag, {largest} tools: mask + advance per token, jitted scan vs the fastest peer"
    if peers:
        fastest = min(peers, key=peers.get)
        rows.append(headline(what, ratio_figure(t["scan"] / peers[fastest], {XGRAMMAR: "XGrammar", LLGUIDANCE: "llguidance"}[fastest])))
    else:
        rows.append(headline(what, "no peer installed"))
    return rows


def main():
    p = parser(__doc__)
    p.add_argument("--tools", type=int, nargs="+", default=[1, 10, 100], help="tool counts")
    p.add_argument("--repeats", type=int, default=3, help="cold compiles per tool count and engine (a new tool set each)")
    p.add_argument("--walks", type=int, default=11, help="timed walks per tool count and engine, in turn")
    p.add_argument("--loop-tokens", type=int, default=2048, help="tokens of ours' loop: the walk repeated")
    args = parse(p, tools=[1, 10], repeats=1, walks=3)
    vocab = aj.Vocabulary.from_tekken(mistral_data("tekken_240911.json"))
    encode = encoders()["tekken-131k"]
    found = engines(vocab, encode)
    for engine in found.values():  # per-vocabulary work and jax start-up, excluded from the timings
        engine.compile(engine.prepare(make_tools(2, "warm-up")))
    peers = [name for name in found if name != OURS]

    compile_table = Table(
        f"cold compile, seconds (median of {args.repeats} tool sets)",
        {
            "tools": "d",
            "tools JSON kB": ".1f",
            **{f"{name} s": ".3f" for name in (OURS, XGRAMMAR, LLGUIDANCE)},
            "ours/xgrammar": ".2f",
            "ours/llguidance": ".2f",
            "our tables MB": ".1f",
        },
        "llguidance's time is its `LLMatcher` creation and first mask; its lexer is built lazily, the rest during the walk.",
    )
    compiles, compiled, tokens_seconds, walked, notes = {}, {}, {}, {}, []
    for n in args.tools:
        compiles[n], compiled[n] = cold_compiles(found, n, args.repeats)
        seconds = compiles[n]
        compile_table.add(
            n,
            len(json.dumps(make_tools(n, 0))) / 1e3,
            *(seconds.get(name) for name in (OURS, XGRAMMAR, LLGUIDANCE)),
            ratio(seconds[OURS], seconds.get(XGRAMMAR)),
            ratio(seconds[OURS], seconds.get(LLGUIDANCE)),
            compiled[n][OURS].table_bytes / 1e6,
        )
    token_table = Table(
        f"mask + advance per token along a reply with two calls (us/token, median of {args.walks} walks)",
        {
            "tools": "d",
            "tokens": "d",
            "unconstrained us": ".2f",
            "ours scan us": ".2f",
            "ours/unconstrained": ".2f",
            "ours loop us": ".2f",
            "ours call us": ".1f",
            "xgrammar us": ".1f",
            "llguidance us": ".1f",
            "ours/xgrammar": ".3f",
            "ours/llguidance": ".3f",
        },
        f'Ours in one jitted scan over the reply ("scan"), over the reply repeated to {args.loop_tokens} tokens ("loop") and per call '
        'through `aj.Matcher` ("call"); the peers per call. The ratios are ours in the scan over the unconstrained scan and over each peer.',
    )
    for n in args.tools:
        walked[n] = encode(reply(make_tools(n, 0), random.Random(f"reply-{n}")))
        t = tokens_seconds[n] = per_token(found, compiled[n], vocab, walked[n], args.walks, args.loop_tokens)
        token_table.add(
            n,
            len(walked[n]),
            *(None if t.get(k) is None else t[k] * 1e6 for k in ("unconstrained", "scan")),
            t["scan"] / t["unconstrained"],
            t["loop"] * 1e6,
            t["call"] * 1e6,
            *(None if t.get(k) is None else t[k] * 1e6 for k in (XGRAMMAR, LLGUIDANCE)),
            ratio(t["scan"], t.get(XGRAMMAR)),
            ratio(t["scan"], t.get(LLGUIDANCE)),
        )
    agree_table = Table(
        "agreement: replies judged as expected (the walked reply, 2 more valid, 5 invalid)",
        {"tools": "d", **dict.fromkeys(found, "s")},
    )
    for n in args.tools:
        counts, disagreements = agreement(found, compiled[n], make_tools(n, 0), walked[n], encode, n)
        agree_table.add(n, *counts)
        notes += disagreements
    valid = f"every walked reply was accepted by {', '.join(found)}"
    notes = [f"validity: {valid}; {'no disagreement on the other replies' if not notes else 'disagreements below'}", *notes]
    if not peers:
        notes.append("no peer installed: pip install xgrammar llguidance")
    print("\n## notes\n" + "\n".join(notes))
    record(
        "structural_tags",
        args,
        {
            "tables": [compile_table, token_table, agree_table],
            "notes": notes,
            "headline": headlines(compiles, tokens_seconds, max(args.tools)),
        },
    )


if __name__ == "__main__":
    main()
