"""Tokens a language names, spelled so that byte automata can read them (host code).

A special token has no text the engines read. To put one inside a language it gets a private
spelling, `PRIVATE_BYTE` and one byte of index. That byte never occurs in UTF-8, so no text the
language holds elsewhere contains it, and the tokens that could write it (byte-fallback tokens)
are made special in the vocabulary the constraint compiles against: only the named token itself
writes its spelling. Structural tags name special tokens this way, and GBNF's token references
(`ir.TokenRef`: ``<[10]>``, ``<think>``, ``!<[11]>*``) are resolved here against the vocabulary.
"""

from __future__ import annotations

import dataclasses
import functools

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.regex import choices_to_dfa
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.ir import Grammar, TokenRef
from ananke_jax._src.vocab import Vocabulary

ANY_CHAR = rx.chars((0, 0xD7FF), (0xE000, 0x10FFFF))  # one code point, surrogates aside
PRIVATE_BYTE = 0xF8  # never in UTF-8 (0xFE and 0xFF are the placeholders of JSON strings and gaps)
MAX_NAMED_TOKENS = 255


@functools.lru_cache(maxsize=8)
def spelled_vocabulary(vocab: Vocabulary, token_ids: tuple[int, ...]) -> Vocabulary:
    """A view of ``vocab`` in which the k-th of the tokens ``token_ids`` writes
    `private_spelling` (k) and is not special, and the other tokens that could write
    `PRIVATE_BYTE` are special (same ids as ``vocab``)."""
    if not token_ids:
        return vocab
    if len(token_ids) > MAX_NAMED_TOKENS:
        raise GrammarError(f"a language may name at most {MAX_NAMED_TOKENS} tokens, got {len(token_ids)}")
    spelling = {t: private_spelling(k) for k, t in enumerate(token_ids)}
    tokens = [spelling.get(i, t) for i, t in enumerate(vocab.tokens)]
    private = {i for i, t in enumerate(vocab.tokens) if i not in spelling and PRIVATE_BYTE in t}
    return Vocabulary(
        tokens,
        eos_token_ids=vocab.eos_token_ids,
        special_token_ids=(vocab.special_token_ids - set(token_ids)) | private,
        logits_width=vocab.logits_width,
    )


def private_spelling(k: int) -> bytes:
    """The bytes that stand for the k-th token a language names."""
    return bytes([PRIVATE_BYTE, k + 1])


def spell_token_refs(grammar: Grammar, vocab: Vocabulary) -> tuple[Grammar, Vocabulary]:
    """The grammar with each token-reference terminal given its byte language, and the
    vocabulary view those languages read (`spelled_vocabulary` of the tokens named); a grammar
    without token references comes back as it is.

    ``<X>`` is the spelling of token X. ``!<X>*`` (``at_least`` 0) and ``!<X>+`` (1) are runs of
    UTF-8 text and of the other tokens the grammar names: the texts a run of tokens other than X
    writes, special tokens the grammar does not name aside (X may be EOS, which no run holds).

    Raises:
      GrammarError: a reference to no token of the vocabulary, ``<X>`` of an EOS token, or more
        than `MAX_NAMED_TOKENS` tokens named.
    """
    refs = [t.token for t in grammar.terminals if t.token is not None]
    if not refs:
        return grammar, vocab
    ids = {ref.key: _token_id(ref, vocab) for ref in refs}
    eos = set(vocab.eos_token_ids)
    for ref in refs:
        if not ref.negated and ids[ref.key] in eos:
            raise GrammarError(f"{ref}: names the end-of-sequence token, which ends the output when the grammar is complete")
    named = tuple(dict.fromkeys(t for t in ids.values() if t not in eos))
    spelled = spelled_vocabulary(vocab, named)

    def language(ref: TokenRef):
        if not ref.negated:
            return choices_to_dfa([spelled.tokens[ids[ref.key]]])
        others = [spelled.tokens[t] for t in named if t != ids[ref.key]]
        written = rx.alt(ANY_CHAR, rx.Automaton(choices_to_dfa(others))) if others else ANY_CHAR
        return rx.to_dfa(rx.repeat(written, ref.at_least, None))

    terminals = tuple(t if t.token is None else dataclasses.replace(t, dfa=language(t.token)) for t in grammar.terminals)
    return dataclasses.replace(grammar, terminals=terminals), spelled


def _token_id(ref: TokenRef, vocab: Vocabulary) -> int:
    """The id ``ref`` names: by id, or the token whose text is ``ref.key`` (a special token's
    first, an EOS token's last)."""
    if isinstance(ref.key, int):
        if not 0 <= ref.key < len(vocab):
            raise GrammarError(f"{ref}: the vocabulary has no token {ref.key} (ids 0-{len(vocab) - 1})")
        return ref.key
    text, eos = ref.key.encode("utf-8"), set(vocab.eos_token_ids)
    written = [i for i, t in enumerate(vocab.tokens) if t == text]
    if not written:
        raise GrammarError(f"{ref}: no token of the vocabulary is written {ref.key!r}")
    return min(written, key=lambda i: (i in eos, i not in vocab.special_token_ids, i))
