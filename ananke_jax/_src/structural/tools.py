"""OpenAI tool definitions to structural tags, in each model family's tool-call format, and the
calls read back from generated text (host code).

Styles (the text a model writes for a call to ``f`` with arguments ``A``; sources cited):

* ``hermes`` (also ``qwen``): ``<tool_call>\\n{"name": "f", "arguments": A}\\n</tool_call>``,
  calls separated by a newline. NousResearch's Hermes-Function-Calling prompt format, used by
  Hermes 2/3 and the chat templates of Qwen2.5 and Qwen3.
* ``llama3``: ``{"name": "f", "parameters": A}``, calls separated by ``; ``. Meta's Llama 3.1
  prompt format ("JSON based tool calling"), as read by vLLM's ``llama3_json`` parser.
* ``mistral``: the special token ``[TOOL_CALLS]``, then ``[{"name": "f", "arguments": A}, ...]``
  (each call may carry ``"id"``: nine letters or digits). mistral-common's
  ``InstructTokenizerV3`` (v3 and Tekken tokenizers) renders calls this way.
* ``smollm2``: ``<tool_call>[\\n{"name": "f", "arguments": A},\\n...\\n]</tool_call>``. The
  function-calling system prompt of SmolLM2-Instruct (its model card; Ollama's smollm2 template).

``tool_choice``: ``"none"`` (text, no call), ``"auto"`` (text, and calls where the model starts
one), ``"required"`` (one call or more, and nothing else), or ``{"type": "function", "function":
{"name": ...}}`` (exactly one call, to that function, and nothing else).
``parallel_tool_calls=False`` allows one call at most.
"""

from __future__ import annotations

import dataclasses
import json
import re

from ananke_jax._src.errors import GrammarError, SchemaError

_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


@dataclasses.dataclass(frozen=True)
class ToolStyle:
    """One family's tool-call text.

    Attributes:
      call_begin: the text before a call's arguments, with ``{name}`` for the function's name
        (JSON-quoted); after the arguments comes ``}``.
      separator: between two calls.
      opening: what opens the calls (the text of a special token when ``special``), and
        ``closing`` what closes them: around each call when ``per_call``, else around the list.
      trigger: where free text stops and calls begin (None: calls open the reply or none comes).
      arguments_key: the key of the arguments.
      call_id: a regex for an optional ``"id"`` member after the arguments (Mistral).
    """

    call_begin: str
    separator: str
    opening: str
    closing: str
    trigger: str | None
    per_call: bool = False
    special: bool = False
    arguments_key: str = "arguments"
    call_id: str | None = None


STYLES = {
    "hermes": ToolStyle('{{"name": {name}, "arguments": ', "\n", "<tool_call>\n", "\n</tool_call>", "<tool_call>", per_call=True),
    "llama3": ToolStyle('{{"name": {name}, "parameters": ', "; ", "", "", '{"name": ', per_call=True, arguments_key="parameters"),
    "mistral": ToolStyle('{{"name": {name}, "arguments": ', ", ", "[TOOL_CALLS]", "]", None, special=True, call_id='"[A-Za-z0-9]{9}"'),
    "smollm2": ToolStyle('{{"name": {name}, "arguments": ', ",\n", "<tool_call>[\n", "\n]</tool_call>", "<tool_call>"),
}
STYLES["qwen"] = STYLES["hermes"]
STYLE_NAMES = tuple(sorted(STYLES))


def tools_structural_tag(tools, tool_choice="auto", *, style: str = "hermes", parallel_tool_calls: bool = True) -> dict:
    """The structural tag (a dict) of OpenAI ``tools`` under ``tool_choice`` in ``style``.

    Raises:
      GrammarError: an unknown style or tool choice, a malformed tool, a named function that is
        not among the tools, or ``"required"`` with no tools; with the JSON pointer.
    """
    return tag_and_owners(tools, tool_choice, style, parallel_tool_calls)[0]


def tag_and_owners(tools, tool_choice, style: str, parallel_tool_calls: bool) -> tuple[dict, dict[int, str]]:
    """The structural tag, and the pointer of the tool that owns each argument schema format
    (keyed by the format object's id)."""
    if style not in STYLES:
        raise GrammarError(f"unknown tool-call style {style!r}; known: {', '.join(sorted(STYLES))}")
    s = STYLES[style]
    functions = _functions(tools)
    chosen = _chosen(tool_choice, functions)
    if chosen is None:
        return {"type": "structural_tag", "format": _free_text(s)}, {}
    owners: dict[int, str] = {}
    calls = [_call(s, name, parameters, f"#/tools/{i}/function/parameters", owners) for i, (name, parameters) in chosen]
    one_only = not parallel_tool_calls or isinstance(tool_choice, dict)
    if s.per_call:
        calls = [{**c, "begin": s.opening + c["begin"], "end": c["end"] + s.closing} for c in calls]
    listed = {"type": "tags_with_separator", "tags": calls, "separator": s.separator, "at_least_one": True, "stop_after_first": one_only}
    if s.per_call:
        opened = listed
    elif s.special:
        opened = {
            "type": "sequence",
            "elements": [
                {"type": "token", "token": s.opening},
                {"type": "const_string", "value": "["},
                listed,
                {"type": "const_string", "value": s.closing},
            ],
        }
    else:
        opened = {"type": "tag", "begin": s.opening, "content": listed, "end": s.closing}
    if tool_choice != "auto":
        fmt = opened
    elif s.trigger is None:  # the calls open the reply, or none comes
        fmt = {"type": "or", "elements": [_free_text(s), opened]}
    else:
        tags = calls if s.per_call else [opened]
        fmt = {"type": "triggered_tags", "triggers": [s.trigger], "tags": tags, "stop_after_first": one_only or not s.per_call}
    return {"type": "structural_tag", "format": fmt}, owners


def parse_tool_calls(text: str, tools, style: str = "hermes") -> list[tuple[str, dict]]:
    """The calls in ``text`` (generated in ``style``), as ``(name, arguments)`` in order.

    Each call block is read as the constraint writes it: its marker, then one JSON value (a call,
    or Mistral's and SmolLM2's list of calls), read whole by a JSON decoder, so an argument
    holding a closing tag does not end it. Text around the blocks is ignored. ``text`` may keep
    or drop Mistral's special ``[TOOL_CALLS]``: without it, a reply that is nothing but a JSON
    list of calls is read as calls, anything else as text.

    Raises:
      ValueError: an unknown style; a call block that is not valid JSON, or a call that names no
        known tool or lacks its arguments.
    """
    if style not in STYLES:
        raise ValueError(f"unknown tool-call style {style!r}")
    s, known, marker = STYLES[style], {name for name, _ in _functions(tools)}, call_marker(style)
    decoder, calls, position = json.JSONDecoder(), [], 0
    if s.special and marker not in text:
        body = text.strip()
        try:
            value, end = decoder.raw_decode(body) if body.startswith("[") else (None, 0)
        except json.JSONDecodeError:
            return []
        return [_call_of(c, known, s) for c in value] if end == len(body) and _all_calls(value, known) else []
    while (found := text.find(marker, position)) >= 0:
        start = found if marker.startswith("{") else found + len(marker)  # Llama's marker opens the call
        start += len(text[start:]) - len(text[start:].lstrip())
        try:
            value, position = decoder.raw_decode(text, start)
        except json.JSONDecodeError as e:
            raise ValueError(f"a tool call is not valid JSON: {e.msg} at {e.pos}") from None
        calls += [_call_of(c, known, s) for c in (value if isinstance(value, list) else [value])]
    return calls


def format_tool_calls(calls, style: str = "hermes") -> str:
    """The text of ``calls`` (``(name, arguments)`` pairs) as ``style`` writes them: what
    `parse_tool_calls` reads back, and what a chat history shows for a past assistant turn."""
    if style not in STYLES:
        raise ValueError(f"unknown tool-call style {style!r}")
    s = STYLES[style]
    bodies = [s.call_begin.format(name=json.dumps(name)) + json.dumps(arguments) + "}" for name, arguments in calls]
    if s.per_call:
        return s.separator.join(s.opening + body + s.closing for body in bodies)
    return s.opening + ("[" if s.special else "") + s.separator.join(bodies) + s.closing


def call_marker(style: str) -> str:
    """The text where ``style``'s calls begin in a reply (what free text before them never holds)."""
    s = STYLES[style]
    return s.trigger if s.trigger is not None else s.opening


def _all_calls(value, known: set[str]) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(c, dict) and c.get("name") in known for c in value)


def _call_of(call, known: set[str], s: ToolStyle) -> tuple[str, dict]:
    if not isinstance(call, dict) or call.get("name") not in known or not isinstance(call.get(s.arguments_key), dict):
        raise ValueError(f"not a call to a known tool with {s.arguments_key!r}: {json.dumps(call)[:80]}")
    return call["name"], call[s.arguments_key]


def _functions(tools) -> list[tuple[str, object]]:
    """``(name, parameters schema)`` of OpenAI tools, checked."""
    if not isinstance(tools, list):
        raise GrammarError("tools must be a list of tool definitions", pointer="#/tools")
    out = []
    for i, tool in enumerate(tools):
        where = f"#/tools/{i}"
        function = tool.get("function") if isinstance(tool, dict) and tool.get("type", "function") == "function" else None
        if not isinstance(function, dict):
            raise GrammarError("a tool must be {'type': 'function', 'function': {...}}", pointer=where)
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise GrammarError(
                f"a function name must be 1 to 64 letters, digits, '_', '.' or '-', got {name!r}", pointer=f"{where}/function/name"
            )
        if any(name == other for other, _ in out):
            raise GrammarError(f"function {name!r} is defined twice", pointer=f"{where}/function/name")
        out.append((name, function.get("parameters", {"type": "object"})))
    return out


def _chosen(tool_choice, functions: list) -> list[tuple[int, tuple]] | None:
    """The tools a call may name (with their indices), or None for no call at all."""
    if tool_choice == "none":
        return None
    if tool_choice in ("auto", "required"):
        if not functions:
            if tool_choice == "required":
                raise GrammarError("tool_choice 'required' needs at least one tool", pointer="#/tools")
            return None
        return list(enumerate(functions))
    name = tool_choice.get("function", {}).get("name") if isinstance(tool_choice, dict) else None
    if name is None:
        raise GrammarError(
            f"tool_choice must be 'none', 'auto', 'required' or a named function, got {tool_choice!r}", pointer="#/tool_choice"
        )
    for i, (other, parameters) in enumerate(functions):
        if other == name:
            return [(i, (other, parameters))]
    raise GrammarError(f"tool_choice names {name!r}, which is not among the tools", pointer="#/tool_choice/function/name")


def _call(s: ToolStyle, name: str, parameters, owner: str, owners: dict[int, str]) -> dict:
    content = {"type": "json_schema", "json_schema": parameters}
    owners[id(content)] = owner
    if s.call_id is not None:
        content = {"type": "sequence", "elements": [content, {"type": "regex", "pattern": f'(, "id": {s.call_id})?'}]}
    return {"type": "tag", "begin": s.call_begin.format(name=json.dumps(name)), "content": content, "end": "}"}


def _free_text(s: ToolStyle) -> dict:
    return {"type": "any_text", "excludes": [s.trigger]} if s.trigger else {"type": "any_text"}


def schema_pointers(spec, owners: dict[int, str], pointer: str = "#") -> dict[str, str]:
    """The pointer, inside ``spec``, of each argument schema, to its tool's own pointer."""
    out = {}
    if isinstance(spec, dict):
        if id(spec) in owners:
            out[f"{pointer}/json_schema"] = owners[id(spec)]
        items = spec.items()
    elif isinstance(spec, list):
        items = enumerate(spec)
    else:
        return out
    for key, value in items:
        out.update(schema_pointers(value, owners, f"{pointer}/{key}"))
    return out


def tool_pointer(error: SchemaError, pointers: dict[str, str]) -> SchemaError:
    """``error`` with its pointer inside the structural tag replaced by the tool's own."""
    for inside, tool in pointers.items():
        if error.pointer == inside or error.pointer.startswith(inside + "/"):
            return SchemaError(error.reason, keyword=error.keyword, pointer=tool + error.pointer[len(inside) :])
    return error
