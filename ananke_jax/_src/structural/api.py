"""`compile_structural_tag`: XGrammar's structural-tag JSON to one constraint."""

from __future__ import annotations

from ananke_jax._src.compile.automaton import pausing_gc
from ananke_jax._src.compile.budget import CompileBudget, metered
from ananke_jax._src.compile.context_free import DEFAULT_MAX_CONFIGS
from ananke_jax._src.compile.regular import compile_dfa
from ananke_jax._src.compile.token_refs import spelled_vocabulary
from ananke_jax._src.engines.protocol import Constraint
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar
from ananke_jax._src.errors import GrammarError, SchemaError
from ananke_jax._src.json_schema.api import DEFAULT_MAX_DEPTH, compile_rules, regular_automaton
from ananke_jax._src.json_schema.assemble import inline, recursive_rules
from ananke_jax._src.json_schema.gaps import MixedGaps, rules_with_bounded_gaps
from ananke_jax._src.json_schema.rules import Rules
from ananke_jax._src.structural.formats import StructuralCompiler, root_format
from ananke_jax._src.structural.reasoning import reasoning_budget
from ananke_jax._src.structural.tools import schema_pointers, tag_and_owners, tool_pointer
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
    budget: CompileBudget | None = None,
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
      engine: ``"auto"`` (a token DFA unless a rule recurses or it would be too large for the
        budget, as `compile_json_schema` decides) or ``"pushdown"``.
      budget: the compile's `CompileBudget` (None: the defaults).
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
    with metered(budget):
        view, rules, run = _rules(spec, vocab, strict=strict, max_depth=max_depth, **json_options)
        options = dict(stack_depth=4 * max_depth, max_configs=max_configs, engine=engine)
        try:
            return compile_rules(rules, view, gaps=True, max_whitespace=run, **options)
        except MixedGaps:
            return compile_rules(rules_with_bounded_gaps(rules, run), view, gaps=False, **options)


def _rules(spec, vocab: Vocabulary, **json_options) -> tuple[Vocabulary, Rules, int]:
    """The vocabulary the tag compiles against (its special tokens spelled), its rules, and the
    whitespace run of their placeholder gaps."""
    compiler = StructuralCompiler(vocab, **json_options)
    rules = compiler.rules(spec)
    return spelled_vocabulary(vocab, tuple(compiler.special_ids)), rules, compiler.max_whitespace


def reasoning_structural_tag(
    spec=None, *, begin: str = "<think>", end: str = "</think>", max_chars: int | None = None, opened: bool = False
) -> dict:
    """``spec`` (a structural tag or format; None: any text) after a reasoning block.

    The block is ``begin``, free text without ``begin`` or ``end`` of at most ``max_chars`` code
    points (None: unbounded), then ``end``; once the budget is spent only ``end`` may follow.
    ``opened``: the prompt already ends with ``begin`` (chat templates that open the block for
    the model), so the output starts inside the block.
    """
    inner = {"type": "any_text"} if spec is None else root_format(spec)[1]
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
      reasoning: keyword arguments of `reasoning_constraint` for a reasoning block first
        (e.g. ``{"max_tokens": 512, "opened": True}``); None: none.
      **options: as `compile_structural_tag` (e.g. ``any_order=True`` for the arguments).

    Raises:
      GrammarError: bad tools or tool choice (JSON pointer into the request: ``#/tools/2/...``).
      SchemaError: a tool's parameters that do not compile, with the pointer of the keyword
        inside that tool (``#/tools/2/function/parameters/properties/x``).
    """
    spec, owners = tag_and_owners(tools, tool_choice, style, parallel_tool_calls)
    try:
        if reasoning is not None:
            return reasoning_constraint(spec, vocab, **reasoning, **options)
        return compile_structural_tag(spec, vocab, **options)
    except SchemaError as e:
        compiled = spec if reasoning is None else reasoning_structural_tag(spec)  # the schemas sit where they do in either block
        raise tool_pointer(e, schema_pointers(compiled, owners)) from None


def reasoning_constraint(
    spec,
    vocab: Vocabulary,
    *,
    begin: str = "<think>",
    end: str = "</think>",
    max_chars: int | None = None,
    max_tokens: int | None = None,
    opened: bool = False,
    **options,
) -> Constraint:
    """Compile ``spec`` after a reasoning block (`reasoning_structural_tag`), with a budget.

    Args:
      spec: a structural tag or format (None: any text after the block).
      vocab: the vocabulary.
      begin, end, max_chars, opened: as `reasoning_structural_tag`.
      max_tokens: at most this many tokens inside the block (from the token after ``begin``);
        then only ``end`` may follow. Needs ``spec`` without recursion (one token DFA).
      **options: as `compile_structural_tag`.

    Returns:
      The compiled tag, or with ``max_tokens`` a `ReasoningBudget` (its state counts the tokens;
      it runs under jit, vmap and scan, not in the grammar pool).
    """
    tag = reasoning_structural_tag(spec, begin=begin, end=end, max_chars=max_chars, opened=opened)
    if max_tokens is None:
        return compile_structural_tag(tag, vocab, **options)
    options.pop("max_configs", None)
    if options.pop("engine", "auto") != "auto":
        raise GrammarError("a token budget needs the token DFA engine (engine='auto')")
    view, rules, run = _rules(tag, vocab, **options)
    if recursive_rules(rules):
        raise GrammarError("a token budget needs a structure without recursion (one token DFA); bound the block with max_chars instead")
    try:
        dfa, loops = regular_automaton(inline(rules, set())[rules.start], gaps=True, max_whitespace=run)
    except MixedGaps:
        dfa, loops = regular_automaton(inline(rules_with_bounded_gaps(rules, run), set())[rules.start], gaps=False)
    grammar = compile_dfa(dfa, view, loops=loops)
    entry = b"" if opened else begin.encode("utf-8")
    return reasoning_budget(grammar, dfa, view, entry=entry, end=end.encode("utf-8"), budget=max_tokens)
