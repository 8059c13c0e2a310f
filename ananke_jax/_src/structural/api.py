"""`compile_structural_tag`: XGrammar's structural-tag JSON to one constraint."""

from __future__ import annotations

from ananke_jax._src.compile.automaton import pausing_gc
from ananke_jax._src.compile.context_free import DEFAULT_MAX_CONFIGS
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.json_schema.api import DEFAULT_MAX_DEPTH, compile_rules
from ananke_jax._src.json_schema.gaps import with_bounded_gaps
from ananke_jax._src.json_schema.rules import Rules
from ananke_jax._src.structural.formats import StructuralCompiler
from ananke_jax._src.structural.text import special_spellings
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
