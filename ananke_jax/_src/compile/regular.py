"""Entry points that compile regular languages (regexes, choice lists) against a vocabulary."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ananke_jax._src.compile.automaton import ByteDFA
from ananke_jax._src.compile.budget import CompileBudget, charge_bytes, metered
from ananke_jax._src.compile.regex import choices_to_dfa, regex_to_dfa
from ananke_jax._src.compile.token_table import token_tables
from ananke_jax._src.compile.unit_loops import UnitLoops
from ananke_jax._src.engines.regular import RegularGrammar, from_numpy
from ananke_jax._src.vocab import Vocabulary


def compile_regex(pattern: str, vocab: Vocabulary, *, budget: CompileBudget | None = None) -> RegularGrammar:
    """Compile a regex (Python syntax, full match; the supported syntax is in docs/guide.md) for
    ``vocab``, within ``budget`` (None: `CompileBudget()`).

    Raises:
      GrammarError: invalid or unsupported pattern, or an empty language. BudgetError (a
        GrammarError): over the budget, which it names.
    """
    with metered(budget):
        return compile_dfa(regex_to_dfa(pattern), vocab)


def compile_choices(choices: Sequence[str | bytes], vocab: Vocabulary, *, budget: CompileBudget | None = None) -> RegularGrammar:
    """Compile a constraint that the output is exactly one of ``choices`` (``budget`` as in
    `compile_regex`)."""
    with metered(budget):
        return compile_dfa(choices_to_dfa(choices), vocab)


def unconstrained(vocab: Vocabulary) -> RegularGrammar:
    """A constraint that allows every token but the special ones, and EOS at any point (a bank
    row with grammar index -1 in `ananke_jax.generate` is free of any constraint instead)."""
    anything = ByteDFA(transitions=np.array([[0] * 256, [1] * 256], np.int32), accepting=np.array([False, True]), start=1)
    return compile_dfa(anything, vocab)


def compile_dfa(dfa: ByteDFA, vocab: Vocabulary, loops: UnitLoops | None = None) -> RegularGrammar:
    """Align a byte DFA with ``vocab`` (its unit ``loops`` as `token_tables` says) and move the
    tables to the device."""
    if not isinstance(vocab, Vocabulary):
        raise TypeError(f"vocab must be an ananke_jax.Vocabulary, got {type(vocab).__name__}")
    tables = token_tables(dfa, vocab, loops)
    charge_bytes(
        sum(x.nbytes for x in (tables.mask_rows, tables.row_of_state, tables.class_of_token, tables.next_state)), "the token DFA's tables"
    )
    return from_numpy(
        tables,
        vocab_size=len(vocab),
        logits_width=vocab.logits_width,
        fallback_token=vocab.eos_token_ids[0],
    )
