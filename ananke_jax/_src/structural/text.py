"""Free text as a regular language, and special tokens spelled so that a language can name them.

Free text is UTF-8 text in which none of the excluded strings occurs (an Aho–Corasick automaton
whose matching states are dead), optionally at most ``max_chars`` code points long.

A special token has no text the engines read; to put one inside a language it gets a private
spelling, `PRIVATE_BYTE` and one byte of index. That byte never occurs in UTF-8, so no text the
language holds elsewhere can contain it, and the tokens that spell it (byte-fallback tokens) are
made special in the vocabulary the constraint compiles against: only the special token itself
can write its spelling.
"""

from __future__ import annotations

import functools

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.fusion.triggers import ROOT, aho_corasick
from ananke_jax._src.vocab import Vocabulary

ANY_CHAR = rx.chars((0, 0xD7FF), (0xE000, 0x10FFFF))  # one code point, surrogates aside
PRIVATE_BYTE = 0xF8  # never in UTF-8 (0xFE and 0xFF are the placeholders of JSON strings and gaps)


@functools.lru_cache(maxsize=64)
def free_text(excludes: tuple[bytes, ...], max_chars: int | None) -> rx.Node:
    """The node of UTF-8 text without any of ``excludes`` (non-empty byte strings), at most
    ``max_chars`` code points long (None: unbounded)."""
    text = rx.repeat(ANY_CHAR, 0, max_chars)
    if not excludes:
        return text
    transitions, match = aho_corasick(excludes)
    transitions = np.where(match[transitions] >= 0, DEAD, transitions).astype(np.int32)
    accepting = np.ones(len(transitions), bool)
    accepting[DEAD] = False
    without = ByteDFA(transitions, accepting, ROOT)
    return rx.Automaton(rx.intersect(rx.to_dfa(text), without))


@functools.lru_cache(maxsize=64)
def until_first(triggers: tuple[bytes, ...], stops: tuple[bytes, ...], which: int) -> rx.Node:
    """The node of UTF-8 text that reads up to the first point where a trigger or a stop (an
    exclude, an end) has been read whole, and where that is ``triggers[which]``: a stop there
    refuses the text, and of several triggers the longest counts."""
    patterns = tuple(dict.fromkeys(triggers + stops))
    transitions, _ = aho_corasick(patterns)
    # Each state stands for a prefix of some pattern: what ends there, found by walking it.
    ending = np.zeros((len(transitions), len(patterns)), bool)
    for pattern in patterns:
        state = ROOT
        for i, b in enumerate(pattern):
            state = int(transitions[state, b])
            ending[state] = [pattern[: i + 1].endswith(p) for p in patterns]
    stopped = ending[:, [patterns.index(p) for p in stops]].any(axis=1)
    ended = ending[:, : len(triggers)]  # the triggers come first among the patterns
    longest = np.where(ended, [len(t) for t in triggers], -1).argmax(axis=1)
    first = ByteDFA(
        np.where(ending.any(axis=1)[:, None], DEAD, transitions).astype(np.int32),  # nothing is read after
        ended[:, which] & ~stopped & (longest == which),
        ROOT,
    )
    return rx.Automaton(rx.intersect(rx.to_dfa(rx.star(ANY_CHAR)), first))


@functools.lru_cache(maxsize=8)
def spelled_vocabulary(vocab: Vocabulary, token_ids: tuple[int, ...]) -> Vocabulary:
    """A view of ``vocab`` in which the k-th of the special tokens ``token_ids`` writes
    `private_spelling` (k), and the tokens that could write its bytes are special (no ids:
    ``vocab`` itself)."""
    if not token_ids:
        return vocab
    if len(token_ids) > 255:
        raise GrammarError("a structural tag may name at most 255 special tokens")
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
    """The bytes that stand for the k-th special token a language names."""
    return bytes([PRIVATE_BYTE, k + 1])
