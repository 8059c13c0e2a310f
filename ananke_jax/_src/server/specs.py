"""What a request asks its reply to be, as a `Spec`: canonical, so that identical constraints
share one compile (`Spec.key`), and self-contained, so that a worker process compiles it
(`compile_spec`).

Request fields map to spec kinds (`request_spec`):

* ``response_format``: ``json_object`` (any JSON object), ``json_schema`` (``strict: true``:
  every keyword honoured exactly, or HTTP 400 naming the one that cannot be; otherwise keywords
  that cannot be compiled are dropped with a warning in the server log, and the reply keeps to
  the rest), ``structural_tag``;
* vLLM's ``structured_outputs``: ``json``, ``regex``, ``choice``, ``grammar`` (GBNF when the
  text has ``::=``, else Lark), ``structural_tag``;
* ``tools`` with ``tool_choice`` other than ``"none"``: the calls in the model's tool-call style.

A reasoning budget (``reasoning_effort`` or ``max_reasoning_chars``) puts a ``<think>`` block of
at most that many characters before any of them, or before free text.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

import ananke_jax as aj
from ananke_jax._src.compile.budget import metered
from ananke_jax._src.frontends.api import grammar_to_ir
from ananke_jax._src.server.openai_types import ChatCompletionRequest

REASONING_CHARS = {"minimal": 0, "low": 512, "medium": 2048, "high": 8192}
THINK = ("<think>", "</think>")


class RequestError(Exception):
    """A request the server refuses: HTTP ``status`` with an OpenAI-style error body."""

    def __init__(self, status: int, message: str, *, param: str | None = None, code: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


@dataclasses.dataclass(frozen=True)
class Spec:
    """A constraint to compile: ``kind`` (a key of `KINDS`), its JSON ``payload``, the JSON
    options (``strict``, and ``max_whitespace``: the longest whitespace run between JSON tokens,
    None for the library's default), the tool-call ``style`` and ``parallel`` for tools, and the
    reasoning block's character budget (None: no block)."""

    kind: str
    payload: Any
    strict: bool = True
    max_whitespace: int | None = None
    style: str | None = None
    parallel: bool = True
    reasoning_chars: int | None = None

    def key(self, vocab_fingerprint: str) -> str:
        """The cache key: the spec in canonical JSON, with the vocabulary it is compiled for."""
        text = json.dumps([vocab_fingerprint, dataclasses.asdict(self)], sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def size(self) -> int:
        """Bytes of the payload's JSON (capped by the server)."""
        return len(json.dumps(self.payload))

    @property
    def free(self) -> bool:
        """Whether nothing constrains the reply (no compile needed)."""
        return self.kind == "text" and self.reasoning_chars is None

    @property
    def json_options(self) -> dict:
        """Options of the library's compilers for the JSON this spec holds."""
        return {"strict": self.strict} | ({} if self.max_whitespace is None else {"max_whitespace": self.max_whitespace})


def _grammar(text: str, vocab, _spec):
    return aj.compile_grammar(grammar_to_ir(text), vocab)


def _format(direct, after_block):
    """A kind's compiler from its direct compile and the structural-tag format of its payload,
    which goes after a reasoning block when the spec has one."""

    def compile_kind(payload, vocab, spec: Spec, block: dict | None):
        if block is None:
            return direct(payload, vocab, spec)
        return aj.compile_structural_tag(aj.reasoning_structural_tag(after_block(payload), **block), vocab, **spec.json_options)

    return compile_kind


def _tools(payload, vocab, spec: Spec, block: dict | None):
    return aj.tools_constraint(
        payload["tools"], vocab, payload["tool_choice"], style=spec.style, parallel_tool_calls=spec.parallel, reasoning=block,
        **spec.json_options,
    )  # fmt: skip


# kind: compile(payload, vocab, spec, reasoning block options or None)
KINDS = {
    "json_schema": _format(
        lambda schema, vocab, spec: aj.compile_json_schema(schema, vocab, **spec.json_options),
        lambda schema: {"type": "json_schema", "json_schema": schema},
    ),
    "regex": _format(lambda pattern, vocab, _: aj.compile_regex(pattern, vocab), lambda pattern: {"type": "regex", "pattern": pattern}),
    "choice": _format(
        lambda choices, vocab, _: aj.compile_choices(choices, vocab),
        lambda choices: {"type": "or", "elements": [{"type": "const_string", "value": c} for c in choices]},
    ),
    "grammar": _format(_grammar, lambda text: {"type": "grammar", "grammar": text}),
    "structural_tag": _format(lambda tag, vocab, spec: aj.compile_structural_tag(tag, vocab, **spec.json_options), lambda tag: tag),
    "tools": _tools,
    "text": _format(lambda *_: None, lambda _: None),
}


def compile_spec(spec: Spec, vocab, budget: aj.CompileBudget | None = None):
    """The compiled constraint of ``spec`` (None: free text) within ``budget`` (None: the
    library's defaults). Raises the library's errors."""
    block = None if spec.reasoning_chars is None else {"max_chars": spec.reasoning_chars, "begin": THINK[0], "end": THINK[1]}
    with metered(budget):
        return KINDS[spec.kind](spec.payload, vocab, spec, block)


def request_spec(request: ChatCompletionRequest, tool_style: str, max_whitespace: int | None = None) -> tuple[str | None, Spec]:
    """The request field that constrains the reply (None: none) and its `Spec` (kind ``"text"``
    when nothing constrains the reply). ``max_whitespace``: the server's default run of JSON
    whitespace; ``structured_outputs.disable_any_whitespace`` makes it 0.

    Raises:
      RequestError: two constraints at once, or a field that cannot be read (400).
    """
    found = _constraints(request, tool_style)
    if len(found) > 1:
        raise RequestError(400, f"give one constraint per request, not {len(found)}: {', '.join(p for p, _ in found)}")
    param, spec = found[0] if found else (None, Spec("text", None))
    chars = request.max_reasoning_chars
    if chars is None and request.reasoning_effort is not None:
        chars = REASONING_CHARS[request.reasoning_effort]
    if request.structured_outputs is not None and request.structured_outputs.disable_any_whitespace:
        max_whitespace = 0
    return param, dataclasses.replace(spec, reasoning_chars=chars or None, max_whitespace=max_whitespace)


def _constraints(request: ChatCompletionRequest, tool_style: str) -> list[tuple[str, Spec]]:
    found = []
    fmt = request.response_format
    if fmt is not None and fmt.type == "json_object":
        found.append(("response_format", Spec("json_schema", {"type": "object"})))
    elif fmt is not None and fmt.type == "json_schema":
        if fmt.json_schema is None:
            raise RequestError(400, "response_format of type json_schema needs a json_schema member", param="response_format")
        found.append(("response_format", Spec("json_schema", fmt.json_schema.schema_, strict=bool(fmt.json_schema.strict))))
    elif fmt is not None and fmt.type == "structural_tag":
        found.append(("response_format", Spec("structural_tag", fmt.model_dump(exclude_none=True))))
    outputs = request.structured_outputs
    if outputs is not None:
        for name, value in outputs.model_dump(by_alias=True, exclude_none=True, exclude={"disable_any_whitespace"}).items():
            kind = {"json": "json_schema"}.get(name, name)
            if kind in ("json_schema", "structural_tag") and isinstance(value, str):
                value = _json(value, f"structured_outputs.{name}")
            found.append((f"structured_outputs.{name}", Spec(kind, value)))
    choice = request.tool_choice or ("auto" if request.tools else "none")
    if choice != "none":
        if not request.tools:
            raise RequestError(400, f"tool_choice {_choice_name(choice)!r} needs tools", param="tool_choice")
        choice = choice if isinstance(choice, str) else choice.model_dump()
        payload = {"tools": request.tool_dicts, "tool_choice": choice}
        found.append(("tools", Spec("tools", payload, style=tool_style, parallel=request.parallel_tool_calls)))
    return found


def _choice_name(choice) -> str:
    return choice if isinstance(choice, str) else choice.function.name


def _json(text: str, param: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise RequestError(400, f"{param}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}", param=param) from None
