"""Entry points that compile Lark and GBNF grammars against a vocabulary: the front end reads the
grammar into the IR, `compile_grammar` builds the pushdown engine's tables from it."""

from __future__ import annotations

from ananke_jax._src.compile.budget import CompileBudget, metered
from ananke_jax._src.compile.context_free import compile_grammar
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.frontends.gbnf import gbnf_to_ir
from ananke_jax._src.frontends.lark_frontend import lark_to_ir
from ananke_jax._src.vocab import Vocabulary


def grammar_to_ir(text: str):
    """The IR of a grammar given as text: GBNF when it has a ``::=`` rule, Lark otherwise (how
    structural tags and servers tell the two apart)."""
    return gbnf_to_ir(text) if "::=" in text else lark_to_ir(text)


def compile_lark(
    text: str, vocab: Vocabulary, *, start: str = "start", lexer: str = "context_free", budget: CompileBudget | None = None, **options
) -> PushdownGrammar:
    """Compile a Lark grammar (read by lark's own loader). With ``lexer="context_free"`` the
    language is the context-free language of its rules, without lexer priorities; ``lexer="lark"``
    lexes as Lark's LALR parser does (contextual, longest match, priorities: `lark_to_ir`).
    Options as in `compile_grammar`."""
    with metered(budget):
        return compile_grammar(lark_to_ir(text, start=start, lexer=lexer), vocab, **options)


def compile_gbnf(text: str, vocab: Vocabulary, *, root: str = "root", budget: CompileBudget | None = None, **options) -> PushdownGrammar:
    """Compile a GBNF grammar (llama.cpp's syntax). Options as in `compile_grammar`."""
    with metered(budget):
        return compile_grammar(gbnf_to_ir(text, root=root), vocab, **options)
