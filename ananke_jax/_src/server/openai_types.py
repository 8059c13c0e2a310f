"""The request body of ``POST /v1/chat/completions``, as pydantic models (OpenAI's Chat
Completions API, with vLLM's ``structured_outputs`` extension that clients send as ``extra_body``).

Fields the server cannot honour are refused by name (`unsupported`), never silently dropped;
fields that only describe the client (``user``, ``metadata``, ...) are ignored.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class _Body(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="ignore")


class TextPart(_Body):
    type: Literal["text"]
    text: str


class Message(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @property
    def text(self) -> str:
        """The content as one string (text parts joined)."""
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content or ""


class JsonSchemaFormat(_Body):
    name: str = "response"
    description: str | None = None
    schema_: dict[str, Any] | bool = Field(default_factory=dict, alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``text``, ``json_object``, ``json_schema``, or ``structural_tag`` (XGrammar's object: its
    other members are kept for the compiler)."""

    model_config = ConfigDict(populate_by_name=True, extra="allow")
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaFormat | None = None


class StructuredOutputs(_Body):
    """vLLM's ``structured_outputs``: exactly one of these constraints, and
    ``disable_any_whitespace`` for JSON without whitespace between tokens."""

    json_: dict[str, Any] | bool | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    structural_tag: dict[str, Any] | str | None = None
    disable_any_whitespace: bool = False


class Function(_Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"] = "function"
    function: Function


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"] = "function"
    function: NamedFunction


class StreamOptions(_Body):
    include_usage: bool = False


class ChatCompletionRequest(_Body):
    model: str
    messages: list[Message] = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    top_k: int = Field(default=0, ge=0)  # vLLM's sampling extensions
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    seed: int | None = None
    stop: str | list[str] | None = None  # capped by the server's Limits
    n: int = 1
    stream: bool = False
    stream_options: StreamOptions | None = None
    response_format: ResponseFormat | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    structured_outputs: StructuredOutputs | None = None
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    max_reasoning_chars: int | None = Field(default=None, ge=0)  # capped by the server's Limits
    logprobs: bool | None = None
    top_logprobs: int | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    @property
    def tool_dicts(self) -> list[dict] | None:
        return [tool.model_dump(exclude_none=True) for tool in self.tools] if self.tools else None

    @property
    def stop_strings(self) -> list[str]:
        return [self.stop] if isinstance(self.stop, str) else list(self.stop or [])

    def unsupported(self) -> str | None:
        """The first field set to what the server cannot do, with why (None: all can be done)."""
        if self.n != 1:
            return "n: one choice per request (send several requests)"
        if self.logprobs or self.top_logprobs:
            return "logprobs: not returned by this server"
        if self.presence_penalty or self.frequency_penalty:
            return "presence_penalty/frequency_penalty: use repetition_penalty"
        if self.logit_bias:
            return "logit_bias: use a constraint (structured_outputs) instead"
        return None
