"""`compile_structural_tag`: XGrammar's structural-tag JSON to one constraint."""

from __future__ import annotations

import json

from ananke_jax._src.compile.automaton import pausing_gc
from ananke_jax._src.compile.context_free import DEFAULT_MAX_CONFIGS
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar
from ananke_jax._src.errors import GrammarError, SchemaError
from ananke_jax._src.json_schema.api import DEFAULT_MAX_DEPTH, compile_rules
from ananke_jax._src.json_schema.gaps import with_bounded_gaps
from ananke_jax._src.json_schema.rules import Rules
from ananke_jax._src.structural.formats import StructuralCompiler, legacy_format
from ananke_jax._src.structural.text import special_spellings
from ananke_jax._src.structural.tools import schema_pointers, tool_pointer
from ananke_jax._src.structural.tools import tag_and_owners as tools_tag
from ananke_jax._src.vocab import Vocabulary


@pausing_gc
def compile_structural_tag(
    spec,
    vocab: Vocabulary,
    *,
    strict: bool = True,
    max_depth: int = DEFAULT_MAX_DEPTH,
    max_configs: int = DEFAULT_MAX_CONFIGS,
    engine: str = "auto",
    **json_options,
) -> RegularGrammar | PushdownGrammar:
    """Compile a structural tag (XGrammar's format objects; the languages are in docs/guide.md).

    Args:
      spec: a dict or JSON text: ``{"type": "structural_tag", "format": {...}}``, the older
        ``{"type": "structural_tag", "structures": [...], "triggers": [...]}``, or a bare format.
      vocab: the vocabulary.
      strict: as in `compile_json_schema`, for every ``json_schema`` format.
      max_depth: nesting room of recursive schemas and grammars (pushdown stack ``4 * max_depth``).
      max_configs: parse configurations of the pushdown engine.
      engine: ``"auto"`` (a token DFA unless a rule recurses) or ``"pushdown"``.
      **json_options: further `compile_json_schema` options for every ``json_schema`` format
        (``any_order``, ``max_whitespace``, ...); a format's own fields take precedence.

    Returns:
      One constraint of the `Constraint` protocol. Special tokens named by ``token`` formats are
      allowed exactly where the tag puts them.

    Raises:
      GrammarError: an unknown or unsupported format, a malformed field, a trigger that begins no
        tag, ambiguous begins; with the JSON pointer of the format object.
      SchemaError: a ``json_schema`` that does not compile, with its pointer inside the spec.
    """
    if engine not in ("auto", "pushdown"):
        raise GrammarError(f"engine must be 'auto' or 'pushdown', got {engine!r}")
    compiler = StructuralCompiler(vocab, strict=strict, max_depth=max_depth, **json_options)
    rules = compiler.rules(spec)
    view, _ = special_spellings(vocab, compiler.special_ids)
    options = dict(stack_depth=4 * max_depth, max_configs=max_configs, engine=engine)
    try:
        return compile_rules(rules, view, gaps=True, **options)
    except AssertionError:  # a state reads both a JSON gap and literal whitespace: no placeholders
        bounded = Rules(rules.start, {name: with_bounded_gaps(body) for name, body in rules.bodies.items()})
        return compile_rules(bounded, view, gaps=False, **options)


def reasoning_structural_tag(
    spec=None, *, begin: str = "<think>", end: str = "</think>", max_chars: int | None = None, opened: bool = False
) -> dict:
    """``spec`` (a structural tag or format; None: any text) after a reasoning block.

    The block is ``begin``, free text without ``begin`` or ``end`` of at most ``max_chars`` code
    points (None: unbounded), then ``end``; once the budget is spent only ``end`` may follow.
    ``opened``: the prompt already ends with ``begin`` (chat templates that open the block for
    the model), so the output starts inside the block.
    """
    if spec is None:
        inner = {"type": "any_text"}
    else:
        inner = _format_of(spec)
    thinking = {"type": "any_text", "excludes": [begin], "max_chars": max_chars}
    block = {"type": "tag", "begin": "" if opened else begin, "content": thinking, "end": end}
    return {"type": "structural_tag", "format": {"type": "sequence", "elements": [block, inner]}}


def tools_constraint(
    tools,
    vocab: Vocabulary,
    tool_choice="auto",
    *,
    style: str = "hermes",
    parallel_tool_calls: bool = True,
    reasoning: dict | None = None,
    **options,
) -> RegularGrammar | PushdownGrammar:
    """Compile OpenAI ``tools`` into a constraint on the model's reply in ``style``'s tool-call
    format (styles and their sources: `ananke_jax._src.structural.tools`).

    Args:
      tools: OpenAI tool definitions, ``[{"type": "function", "function": {"name", "parameters"}}]``.
      vocab: the vocabulary.
      tool_choice: ``"none"``, ``"auto"``, ``"required"`` or ``{"type": "function", "function":
        {"name": ...}}``.
      style: ``"hermes"`` (= ``"qwen"``), ``"llama3"``, ``"mistral"`` or ``"smollm2"``.
      parallel_tool_calls: False allows one call at most.
      reasoning: keyword arguments of `reasoning_structural_tag` for a reasoning block first
        (e.g. ``{"max_chars": 2000, "opened": True}``); None: none.
      **options: as `compile_structural_tag` (e.g. ``any_order=True`` for the arguments).

    Raises:
      GrammarError: bad tools or tool choice (JSON pointer into the request: ``#/tools/2/...``).
      SchemaError: a tool's parameters that do not compile, with the pointer of the keyword
        inside that tool (``#/tools/2/function/parameters/properties/x``).
    """
    spec, owners = tools_tag(tools, tool_choice, style, parallel_tool_calls)
    if reasoning is not None:
        spec = reasoning_structural_tag(spec, **reasoning)
    try:
        return compile_structural_tag(spec, vocab, **options)
    except SchemaError as e:
        raise tool_pointer(e, schema_pointers(spec, owners)) from None


def _format_of(spec) -> dict:
    if isinstance(spec, (str, bytes)):
        spec = json.loads(spec)
    if isinstance(spec, dict) and spec.get("type") == "structural_tag":
        return spec["format"] if "format" in spec else legacy_format(spec)
    return spec
