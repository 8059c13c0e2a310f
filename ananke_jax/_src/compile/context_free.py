"""Entry points that compile context-free grammars (Lark, GBNF, IR) against a vocabulary."""

from __future__ import annotations

from ananke_jax._src.compile.cfg import compile_ir
from ananke_jax._src.compiled_cfg import PushdownGrammar
from ananke_jax._src.frontends.gbnf import gbnf_to_ir
from ananke_jax._src.frontends.lark_frontend import lark_to_ir
from ananke_jax._src.ir import Grammar
from ananke_jax._src.vocab import Vocabulary

DEFAULT_STACK_DEPTH = 64
DEFAULT_MAX_CONFIGS = 4


def compile_grammar(
    grammar: Grammar, vocab: Vocabulary, *, stack_depth: int = DEFAULT_STACK_DEPTH, max_configs: int = DEFAULT_MAX_CONFIGS
) -> PushdownGrammar:
    """Compile a grammar IR for ``vocab`` into the bounded-stack pushdown engine.

    Args:
      grammar: the IR (`ananke_jax.ir.Grammar`).
      vocab: the vocabulary.
      stack_depth: static LR stack depth (default 64); deeper nesting is masked.
      max_configs: static number of parse configurations kept where lexing is ambiguous.

    Raises:
      GrammarError: malformed grammar, empty language, or LR conflicts (named).
    """
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"vocab must be an ananke_jax.Vocabulary, got {type(vocab).__name__}")
    return compile_ir(grammar, vocab, stack_depth=stack_depth, max_configs=max_configs)


def compile_lark(text: str, vocab: Vocabulary, *, start: str = "start", **options) -> PushdownGrammar:
    """Compile a Lark grammar (read by lark's own loader; the language is the context-free
    language of its rules, without lexer priorities). Options as in `compile_grammar`."""
    return compile_grammar(lark_to_ir(text, start=start), vocab, **options)


def compile_gbnf(text: str, vocab: Vocabulary, *, root: str = "root", **options) -> PushdownGrammar:
    """Compile a GBNF grammar (llama.cpp's syntax). Options as in `compile_grammar`."""
    return compile_grammar(gbnf_to_ir(text, root=root), vocab, **options)
