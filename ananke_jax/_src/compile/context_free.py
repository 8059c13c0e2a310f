"""The entry point that compiles a context-free grammar IR against a vocabulary (the Lark and
GBNF front ends, and JSON Schemas that need a stack, come through here)."""

from __future__ import annotations

from ananke_jax._src.compile.budget import CompileBudget, metered
from ananke_jax._src.compile.cfg import compile_ir
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.ir import Grammar
from ananke_jax._src.vocab import Vocabulary

DEFAULT_STACK_DEPTH = 64
DEFAULT_MAX_CONFIGS = 4


def compile_grammar(
    grammar: Grammar,
    vocab: Vocabulary,
    *,
    stack_depth: int = DEFAULT_STACK_DEPTH,
    max_configs: int = DEFAULT_MAX_CONFIGS,
    forks: bool = True,
    budget: CompileBudget | None = None,
) -> PushdownGrammar:
    """Compile a grammar IR for ``vocab`` into the bounded-stack pushdown engine.

    Args:
      grammar: the IR (`ananke_jax.Grammar`).
      vocab: the vocabulary.
      stack_depth: static LR stack depth (default 64); deeper nesting is masked.
      max_configs: static number of parse configurations kept where lexing or parsing is
        ambiguous.
      forks: where the LR tables conflict, fork the parse (GLR-style, within ``max_configs``);
        False refuses a grammar that is not LALR(1).
      budget: the compile's `CompileBudget` (None: the defaults).

    Raises:
      GrammarError: malformed grammar, empty language, or LR conflicts (named) beyond what
        ``forks`` takes. BudgetError (a
        GrammarError): over the budget, which it names.
    """
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"vocab must be an ananke_jax.Vocabulary, got {type(vocab).__name__}")
    with metered(budget):
        return compile_ir(grammar, vocab, stack_depth=stack_depth, max_configs=max_configs, forks=forks)
