"""The server's host parts without a server: the reply splitter against a direct reference on
random texts (streamed deltas add up to the final message), tool-call text written and read
back in every style, and requests to canonical specs."""

import json

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

import ananke_jax as aj
from ananke_jax._src.compile.unit_loops import token_outcomes
from ananke_jax._src.server.compiling import warm_up
from ananke_jax._src.server.limits import Limits
from ananke_jax._src.server.openai_types import ChatCompletionRequest
from ananke_jax._src.server.replies import Reply
from ananke_jax._src.server.specs import THINK, RequestError, Spec, compile_spec, request_spec

MARKER = "<tool_call>"
PIECES = ["a", "b", " ", "<", "/", ">", "th", "ink", THINK[0], THINK[1], "<tool", "_call>", MARKER, "STOP", "ST", "OP", "é"]


def _reference(text: str, stops: list[str], reasoning: bool, marker: str | None):
    """(reasoning, content, calls) of a finished reply, straight from the definitions."""
    cuts = [text.index(s) for s in stops if s in text]
    text = text[: min(cuts)] if cuts else text
    thought = None
    if reasoning:
        if not text.startswith(THINK[0]):
            return "", text, ""
        body = text[len(THINK[0]) :]
        thought, _, text = body.partition(THINK[1])
    if marker and marker in text:
        at = text.index(marker)
        return thought, text[:at], text[at:]
    return thought, text, ""


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(PIECES), max_size=16),
    st.booleans(),
    st.booleans(),
    st.lists(st.sampled_from(["STOP", "b>", "a a"]), max_size=2),
    st.data(),
)
def test_streamed_parts_only_grow_and_end_as_the_reference(pieces, reasoning, tools, stops, data):
    text = "".join(pieces)
    reply = Reply(stops, reasoning, MARKER if tools else None)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=6)))
    sent = {"reasoning": "", "content": ""}
    for cut in [*cuts, len(text)]:
        final = cut == len(text)
        parts = reply.split(text[:cut], final=final)
        for key in sent:
            now = getattr(parts, key) or ""
            assert now.startswith(sent[key]), (key, text[:cut], now, sent[key])  # a streamed delta is never taken back
            sent[key] = now
        if parts.stopped:
            break
    expected = _reference(text, stops, reasoning, MARKER if tools else None)
    assert (parts.reasoning, parts.content, parts.calls) == expected


@pytest.mark.parametrize("style", aj.TOOL_CALL_STYLES)
def test_tool_calls_written_in_a_style_read_back(style):
    tools = [{"type": "function", "function": {"name": n, "parameters": {"type": "object"}}} for n in ("f", "g.h")]
    calls = [("f", {"x": 1, "s": "</tool_call>"}), ("g.h", {})]
    text = aj.format_tool_calls(calls, style)
    assert aj.parse_tool_calls(text, tools, style) == calls
    assert aj.parse_tool_calls("Sure. " + aj.format_tool_calls(calls[:1], style), tools, style) == calls[:1]


def _request(**fields) -> ChatCompletionRequest:
    return ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}], **fields)


def test_requests_map_to_canonical_specs():
    schema = {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"}}}
    reordered = {"properties": {"b": {"type": "string"}, "a": {"type": "integer"}}, "type": "object"}
    fmt = lambda s, strict: {"type": "json_schema", "json_schema": {"name": "x", "schema": s, "strict": strict}}
    _, one = request_spec(_request(response_format=fmt(schema, True)), "hermes")
    _, two = request_spec(_request(structured_outputs={"json": json.dumps(reordered)}), "hermes")
    assert one == Spec("json_schema", schema) and one.key("v") == two.key("v") != one.key("w")
    _, loose = request_spec(_request(response_format=fmt(schema, None)), "hermes")
    assert not loose.strict and loose.key("v") != one.key("v")
    assert request_spec(_request(structured_outputs={"regex": "a+", "disable_any_whitespace": True}), "hermes") == (
        "structured_outputs.regex",
        Spec("regex", "a+", max_whitespace=0),
    )
    param, tools = request_spec(_request(tools=[{"function": {"name": "f"}}], reasoning_effort="low"), "smollm2")
    assert param == "tools" and tools.kind == "tools" and tools.style == "smollm2" and tools.reasoning_chars == 512
    assert tools.payload["tool_choice"] == "auto"
    assert request_spec(_request(), "hermes") == (None, Spec("text", None))
    with pytest.raises(RequestError, match="one constraint"):
        request_spec(_request(response_format={"type": "json_object"}, structured_outputs={"choice": ["a"]}), "hermes")
    with pytest.raises(RequestError, match="line 1, column"):
        request_spec(_request(structured_outputs={"json": "{oops"}), "hermes")
    with pytest.raises(RequestError, match="needs tools"):
        request_spec(_request(tool_choice="required"), "hermes")


@pytest.mark.parametrize("response_format", [{"type": "json_object"}, {"type": "json_schema", "json_schema": {"name": "x", "schema": {}}}])
def test_a_compile_worker_builds_the_tables_of_json_requests_before_serving(response_format, sentencepiece_vocab):
    """After a worker's warm-up, a request for any JSON value or any object builds no table
    of the vocabulary (a second on a 131k vocabulary, otherwise paid by its first request)."""
    token_outcomes.cache_clear()
    warm_up(sentencepiece_vocab)
    _, spec = request_spec(_request(response_format=response_format), "hermes", Limits().max_whitespace)
    before = token_outcomes.cache_info()
    compile_spec(spec, sentencepiece_vocab)
    after = token_outcomes.cache_info()
    assert after.misses == before.misses and after.hits > before.hits, (before, after)
