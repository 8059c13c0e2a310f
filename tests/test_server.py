"""`ananke-jax serve` in a subprocess, driven by the official ``openai`` client: every constrained
reply checked by an independent validator (jsonschema, ``re.fullmatch``, lark's Earley parser),
tools under each ``tool_choice``, streaming, concurrency, bad requests (the server healthy after
each), and no XLA compilation after warm-up, read from ``/metrics``.

The server runs the ``tiny`` model: random weights with SmolLM2's vocabulary, tokenizer and chat
template, so replies are nonsense that the constraints must still keep valid.
"""

import asyncio
import contextlib
import json
import os
import pathlib
import re
import signal
import time

import httpx
import jsonschema
import lark
import openai
import pydantic
import pytest
from prometheus_client.parser import text_string_to_metric_families

from servers import serve

pytestmark = pytest.mark.slow
KEY = "test-key"
MODEL = "tiny-random"
COMPACT = {"disable_any_whitespace": True}  # random weights would fill every whitespace run they may
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["C", "F"]}},
            "required": ["city", "unit"],
        },
    },
}
TIME = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object", "properties": {"zone": {"type": "integer", "minimum": -12, "maximum": 12}}, "required": ["zone"]}},
}  # fmt: skip
PARAMETERS = {t["function"]["name"]: t["function"]["parameters"] for t in (WEATHER, TIME)}


def _schema(i: int) -> dict:
    """The ``i``-th of many distinct small schemas (each a new compile)."""
    return {
        "type": "object",
        "properties": {
            f"id_{i}": {"type": "integer", "minimum": 0, "maximum": 100 + i},
            "label": {"type": "string", "maxLength": 6 + i % 5},
            "kind": {"enum": [f"k{i}", f"q{i}", "other"]},
        },
        "required": [f"id_{i}", "label", "kind"],
        "additionalProperties": False,
    }


@pytest.fixture(scope="module")
def server_process(smollm2_gguf):
    options = ["--model", "tiny", "--slots", "4", "--max-len", "384", "--prefill-buckets", "64,384", "--api-key", KEY]
    with serve(*options, "--compile-seconds", "4", "--max-grammar-bytes", "20000", "--max-body-bytes", "100000") as running:
        yield running


@pytest.fixture(scope="module")
def server(server_process):
    return server_process[1]


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=120)


def _chat(client, content="Answer, please.", **kwargs):
    kwargs.setdefault("max_tokens", 96)
    kwargs.setdefault("seed", 0)
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **kwargs)


def _finished(reply) -> str:
    choice = reply.choices[0]
    assert choice.finish_reason in ("stop", "tool_calls"), f"cut at {reply.usage.completion_tokens} tokens: {choice.message}"
    return choice.message.content


def _metrics(server) -> dict[str, float]:
    text = httpx.get(f"{server}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    return {s.name: s.value for family in text_string_to_metric_families(text) for s in family.samples if not s.labels}


def test_models_and_health(server, client):
    assert [m.id for m in client.models.list().data] == [MODEL]
    assert httpx.get(f"{server}/health").json() == {"status": "ok"}  # no key needed


@pytest.mark.parametrize("i", range(3))
def test_json_schema_replies_validate(client, i):
    schema = _schema(100 + i)
    fmt = {"type": "json_schema", "json_schema": {"name": f"s{i}", "schema": schema, "strict": True}}
    reply = _chat(client, response_format=fmt, seed=i, extra_body={"structured_outputs": COMPACT})
    jsonschema.validate(json.loads(_finished(reply)), schema)
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens > reply.usage.prompt_tokens


def test_strict_refuses_what_it_cannot_honour_and_non_strict_drops_it(client):
    """An unknown ``format``: 400 naming its pointer under ``strict``; without it, ignored and the
    rest of the schema kept."""
    schema = {"type": "object", "properties": {"card": {"type": "string", "format": "credit-card", "maxLength": 6}}, "required": ["card"]}
    fmt = lambda strict: {"type": "json_schema", "json_schema": {"name": "card", "schema": schema, "strict": strict}}
    with pytest.raises(openai.BadRequestError, match="#/properties/card"):
        _chat(client, response_format=fmt(True))
    reply = _chat(client, response_format=fmt(False), extra_body={"structured_outputs": COMPACT})
    jsonschema.validate(json.loads(_finished(reply)), schema)  # the format is not asserted by jsonschema either


def test_json_object_is_a_json_object(client):
    reply = _chat(client, response_format={"type": "json_object"}, max_tokens=160)
    assert isinstance(json.loads(_finished(reply)), dict)


class Person(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=10)
    age: int = pydantic.Field(ge=0, le=120)
    role: str = pydantic.Field(pattern="^(admin|user)$")


def test_pydantic_models_through_the_parse_helper(client):
    reply = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "A person."}], response_format=Person, max_tokens=96, seed=1,
        extra_body={"structured_outputs": COMPACT},
    )  # fmt: skip
    person = reply.choices[0].message.parsed
    assert isinstance(person, Person) and person.role in ("admin", "user")


@pytest.mark.parametrize("kind", ["regex", "choice", "gbnf", "lark", "json", "structural_tag"])
def test_structured_outputs_in_extra_body(client, kind):
    grammars = {
        "gbnf": 'root ::= "(" item (", " item)* ")"\nitem ::= [a-z]{1,5} | [0-9]{1,3}',
        "lark": 'start: "[" pair (";" pair)* "]"\npair: WORD "=" NUMBER\nWORD: /[a-z]{1,5}/\nNUMBER: /[0-9]{1,3}/',
    }
    tag = {"type": "structural_tag", "format": {"type": "tag", "begin": "<answer>", "content": {"type": "json_schema", "json_schema": _schema(7)}, "end": "</answer>"}}  # fmt: skip
    request = {
        "regex": ("regex", r"[A-Z][a-z]{2,6} \d{1,4}(\.\d)?"),
        "choice": ("choice", ["red", "green", "blue", "light blue"]),
        "gbnf": ("grammar", grammars["gbnf"]),
        "lark": ("grammar", grammars["lark"]),
        "json": ("json", json.dumps(_schema(8))),
        "structural_tag": ("structural_tag", tag),
    }[kind]
    reply = _chat(client, extra_body={"structured_outputs": {request[0]: request[1], **COMPACT}}, max_tokens=120, seed=3)
    text = _finished(reply)
    if kind == "regex":
        assert re.fullmatch(request[1], text), text
    elif kind == "choice":
        assert text in request[1]
    elif kind in grammars:
        start = "root" if kind == "gbnf" else "start"
        lark_text = grammars["lark"] if kind == "lark" else 'root: "(" item (", " item)* ")"\nitem: /[a-z]{1,5}/ | /[0-9]{1,3}/'
        lark.Lark(lark_text, start=start, parser="earley", lexer="dynamic").parse(text)
    elif kind == "json":
        jsonschema.validate(json.loads(text), _schema(8))
    else:
        match = re.fullmatch(r"<answer>(.*)</answer>", text, re.S)
        assert match, text
        jsonschema.validate(json.loads(match.group(1)), _schema(7))


@pytest.mark.parametrize("choice", ["none", "auto", "required", "named"])
def test_tools_under_each_tool_choice(client, choice):
    tool_choice = {"type": "function", "function": {"name": "get_time"}} if choice == "named" else choice
    reply = _chat(
        client, "What is the weather in Paris?", tools=[WEATHER, TIME], tool_choice=tool_choice, max_tokens=150, seed=5,
        parallel_tool_calls=choice != "required", extra_body={"structured_outputs": COMPACT},
    )  # fmt: skip
    message, finish = reply.choices[0].message, reply.choices[0].finish_reason
    calls = message.tool_calls or []
    for call in calls:
        jsonschema.validate(json.loads(call.function.arguments), PARAMETERS[call.function.name])
    if choice == "none":
        assert not calls and finish in ("stop", "length")
    elif choice in ("required", "named"):
        assert finish == "tool_calls" and calls and message.content is None, message
        assert choice != "required" or len(calls) == 1  # parallel_tool_calls=False
        if choice == "named":
            assert [c.function.name for c in calls] == ["get_time"]
    else:
        assert finish in ("stop", "length", "tool_calls") and (finish == "tool_calls") == bool(calls)


def test_reasoning_comes_back_apart_from_the_answer(client):
    reply = _chat(client, extra_body={"structured_outputs": {"choice": ["yes", "no"]}, "max_reasoning_chars": 40}, max_tokens=120)
    message = reply.choices[0].message
    assert _finished(reply) in ("yes", "no")
    reasoning = message.model_extra["reasoning_content"]
    assert isinstance(reasoning, str) and len(reasoning) <= 40 and "<think>" not in reasoning


def test_streaming_deltas_add_up_to_a_valid_reply(client):
    pattern = r"[a-z]{3,8}( [a-z]{3,8}){2,4}\."
    stream = _chat(client, stream=True, stream_options={"include_usage": True}, extra_body={"structured_outputs": {"regex": pattern}})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["stop"] and re.fullmatch(pattern, text), (finishes, text)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_stop_strings_end_the_reply(client):
    reply = _chat(client, stop=["7"], extra_body={"structured_outputs": {"regex": r"[0-9]{40}"}}, max_tokens=60)
    text = reply.choices[0].message.content
    assert "7" not in text and re.fullmatch(r"[0-9]*", text)
    assert reply.choices[0].finish_reason == "stop" or len(text) == 40


def test_concurrent_requests_with_different_schemas(server):
    """12 requests at once, each with a schema not seen before: all valid, and sooner than the
    same kind of requests one at a time."""
    client = openai.AsyncOpenAI(base_url=f"{server}/v1", api_key=KEY, max_retries=0, timeout=300)

    async def one(i):
        schema = _schema(i)
        fmt = {"type": "json_schema", "json_schema": {"name": f"c{i}", "schema": schema, "strict": True}}
        reply = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": f"Record {i}."}], response_format=fmt, max_tokens=96, seed=i,
            extra_body={"structured_outputs": COMPACT},
        )  # fmt: skip
        jsonschema.validate(json.loads(_finished(reply)), schema)

    async def timed(run):
        start = time.perf_counter()
        await run
        return time.perf_counter() - start

    async def main():
        together = await timed(asyncio.gather(*(one(i) for i in range(200, 212))))

        async def in_turn():
            for i in range(300, 312):
                await one(i)

        return together, await timed(in_turn())

    together, in_turn = asyncio.run(main())
    assert together < in_turn, (together, in_turn)


def test_a_client_that_leaves_frees_its_slot(server, client):
    stream = _chat(client, stream=True, max_tokens=150, extra_body={"structured_outputs": {"regex": "[a-z ]{150,}"}})
    next(iter(stream))
    stream.close()
    deadline = time.monotonic() + 30
    while _metrics(server)["ananke_requests_running"] and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _metrics(server)["ananke_requests_running"] == 0


BAD_SCHEMA = {"type": "object", "properties": {"a": {"minimum": "zero"}}}
BAD = {
    "invalid schema": (
        {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": BAD_SCHEMA, "strict": True}}},
        400,
        "#/properties/a",
    ),
    "invalid regex": ({"structured_outputs": {"regex": "[a-"}}, 400, "regex"),
    "invalid grammar": ({"structured_outputs": {"grammar": 'root ::= "a" missing'}}, 400, "line 1, column"),
    "remote $ref": ({"structured_outputs": {"json": {"$ref": "https://example.com/schema.json"}}}, 400, "$ref"),
    "unknown model": ({"model": "gpt-4"}, 404, "does not exist"),
    "no messages": ({"messages": []}, 400, "messages"),
    "wrong type": ({"temperature": "hot"}, 400, "temperature"),
    "two constraints": ({"structured_outputs": {"regex": "a", "choice": ["a"]}}, 400, "one constraint"),
    "prompt too long": ({"messages": [{"role": "user", "content": "word " * 600}]}, 400, "prompt has"),
    "max_tokens beyond the context": ({"max_tokens": 370}, 400, "context holds"),
    "grammar too large": ({"structured_outputs": {"choice": [f"option {i}" for i in range(3000)]}}, 400, "over the limit"),
    "n > 1": ({"n": 2}, 400, "one choice"),
    "too many stop strings": ({"stop": ["a", "b", "c", "d", "e"]}, 400, "at most 4"),
    "a reasoning block too long": ({"max_reasoning_chars": 10**6}, 400, "max_reasoning_chars"),
    "bad tool": ({"tools": [{"type": "function", "function": {"name": "has space"}}]}, 400, "function name"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_requests_are_refused_and_the_server_stays_healthy(server, client, name):
    fields, status, message = BAD[name]
    body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8} | fields
    response = httpx.post(f"{server}/v1/chat/completions", json=body, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    assert response.status_code == status, response.text
    assert message in response.json()["error"]["message"], response.text
    assert _finished(_chat(client, extra_body={"structured_outputs": {"choice": ["ok", "fine"]}}, max_tokens=8)) in ("ok", "fine")


def test_http_limits_and_the_api_key(server):
    post = lambda **kw: httpx.post(f"{server}/v1/chat/completions", timeout=60, **kw)
    assert post(json={"model": MODEL, "messages": []}).status_code == 401
    assert post(json={}, headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{server}/metrics").status_code == 401
    assert post(content=b"{" + b" " * 200_000 + b"}", headers={"Authorization": f"Bearer {KEY}"}).status_code == 413
    chunked = post(content=iter([b"{"] + [b" " * 50_000] * 4 + [b"}"]), headers={"Authorization": f"Bearer {KEY}"})  # no length declared
    assert chunked.status_code == 413 and "over the limit" in chunked.json()["error"]["message"]
    missing = httpx.get(f"{server}/v1/nothing", headers={"Authorization": f"Bearer {KEY}"})
    assert missing.status_code == 404 and "error" in missing.json()
    response = post(content=b"{not json", headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"})
    assert response.status_code == 400 and "not valid JSON" in response.json()["error"]["message"]


def test_a_grammar_bomb_is_stopped_by_the_budget_without_stalling_others(server, client):
    """A compile past the budget gets 400 naming it, while other requests are served."""
    headers = {"Authorization": f"Bearer {KEY}"}

    async def main():
        async with httpx.AsyncClient(timeout=120, headers=headers) as http:
            body = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
            bomb = asyncio.ensure_future(http.post(f"{server}/v1/chat/completions", json=body | {"structured_outputs": {"regex": "(a{1000}){1000}"}}))  # fmt: skip
            await asyncio.sleep(0.5)
            start = time.perf_counter()
            fine = await http.post(f"{server}/v1/chat/completions", json=body | {"structured_outputs": {"choice": ["x", "y"]}})
            return await bomb, fine, time.perf_counter() - start

    bomb, fine, seconds = asyncio.run(main())
    assert bomb.status_code == 400 and re.search("compile budget|too large", bomb.json()["error"]["message"]), bomb.text
    assert fine.status_code == 200 and seconds < 4, (fine.text, seconds)
    assert _finished(_chat(client, extra_body={"structured_outputs": {"regex": "[a-c]{3}"}})) is not None


def _compile_workers(pid: int) -> list[int]:
    """The spawned processes of the server ``pid`` (not multiprocessing's resource tracker)."""
    found = []
    for proc in pathlib.Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError):
            parent = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            if parent == pid and b"spawn_main" in (proc / "cmdline").read_bytes():
                found.append(int(proc.name))
    return found


@pytest.mark.skipif(not pathlib.Path("/proc").is_dir(), reason="finds the compile workers through /proc (Linux)")
def test_compile_workers_that_die_are_replaced(server_process, client):
    """Every compile worker killed: a request may fail with 500 (never hang), and the same
    request is served once new workers are up."""
    process, _ = server_process
    workers = _compile_workers(process.pid)
    assert workers  # two, unless one is being replaced after an earlier test's grammar bomb
    for pid in workers:
        os.kill(pid, signal.SIGKILL)
    schema = _schema(900)
    fmt = {"type": "json_schema", "json_schema": {"name": "after", "schema": schema, "strict": True}}
    deadline = time.monotonic() + 180
    while True:
        try:
            reply = _chat(client, response_format=fmt, extra_body={"structured_outputs": COMPACT})
            break
        except openai.InternalServerError as e:
            assert "worker" in str(e) and time.monotonic() < deadline, str(e)
            time.sleep(1)
    jsonschema.validate(json.loads(_finished(reply)), schema)


def test_no_xla_compilation_after_warm_up(server, client):
    """After requests of both engines (token DFA and pushdown), streamed and not: none compiled."""
    _chat(client, response_format={"type": "json_object"}, max_tokens=16)
    _chat(client, extra_body={"structured_outputs": {"grammar": 'root ::= "x" root | "y"'}}, max_tokens=16, stream=False)
    metrics = _metrics(server)
    assert metrics["ananke_xla_compilations_total"] == 0
    assert metrics["ananke_generation_tokens_total"] > 0 and metrics["ananke_time_to_first_token_seconds_count"] > 0
