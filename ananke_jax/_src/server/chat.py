"""Chat messages to the prompt text, through the model's own chat template (the Jinja2 source
in its GGUF file, rendered in a sandbox as Hugging Face's ``apply_chat_template`` does).

A template that does not take ``tools`` (SmolLM2's) gets them in a system message that shows the
model's tool-call format; past calls of assistant turns are written in that format too.
"""

from __future__ import annotations

import datetime
import json

import jinja2
import jinja2.sandbox

from ananke_jax._src.server.openai_types import Message
from ananke_jax._src.server.specs import THINK, RequestError
from ananke_jax._src.structural.tools import format_tool_calls

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplate:
    """Renders `Message`s for one model, in the Jinja2 environment Hugging Face's
    ``apply_chat_template`` gives templates (loop controls, ``raise_exception``, ``strftime_now``,
    an unescaped ``tojson``), sandboxed.

    Args:
      source: the Jinja2 template (None: ChatML).
      tool_style: the model's tool-call style (`ananke_jax.TOOL_CALL_STYLES`).
      special: variables templates read, such as ``bos_token`` and ``eos_token``.
    """

    def __init__(self, source: str | None, tool_style: str, **special: str):
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        environment.filters["tojson"] = _tojson  # as Hugging Face's templates expect: no HTML escaping
        environment.globals |= {"raise_exception": _raise, "strftime_now": lambda fmt: datetime.datetime.now().strftime(fmt)}
        self.source = source or CHATML
        self.template = environment.from_string(self.source)
        self.tool_style, self.special = tool_style, special

    def render(self, messages: list[Message], tools: list[dict] | None = None, reasoning: bool = False) -> str:
        """The prompt, ending where the assistant's reply begins.

        Raises:
          RequestError: the template refuses the conversation (400).
        """
        rows = [{"role": "system" if m.role == "developer" else m.role, "content": self._content(m)} for m in messages]
        hints = []
        if tools and "tools" not in self.source:
            hints.append(self._tools_prompt(tools))
        if reasoning:
            hints.append(f"Think step by step inside {THINK[0]}...{THINK[1]} first, then answer.")
        if hints:
            if rows[0]["role"] == "system":
                rows[0] = {"role": "system", "content": "\n\n".join([rows[0]["content"], *hints])}
            else:
                rows.insert(0, {"role": "system", "content": "\n\n".join(hints)})
        try:
            return self.template.render(messages=rows, tools=tools, add_generation_prompt=True, **self.special)
        except jinja2.TemplateError as e:
            raise RequestError(400, f"the model's chat template refused the messages: {e}", param="messages") from None

    def _content(self, message: Message) -> str:
        calls = message.tool_calls or []
        if not calls:
            return message.text
        try:
            pairs = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
        except (KeyError, TypeError, json.JSONDecodeError) as e:
            raise RequestError(400, f"a tool call in the messages is malformed: {e}", param="messages") from None
        return message.text + format_tool_calls(pairs, self.tool_style)

    def _tools_prompt(self, tools: list[dict]) -> str:
        example = format_tool_calls([("function_name", {"argument": "value"})], self.tool_style)
        return (
            "You are an expert in composing functions. You have access to the following tools:\n"
            f"<tools>{json.dumps([t['function'] for t in tools])}</tools>\n"
            f"To call tools, answer with their calls in this format: {example}"
        )


def _tojson(value, indent=None, separators=None, sort_keys=False, ensure_ascii=False):
    return json.dumps(value, indent=indent, separators=separators, sort_keys=sort_keys, ensure_ascii=ensure_ascii)


def _raise(message: str):
    raise jinja2.TemplateError(message)
