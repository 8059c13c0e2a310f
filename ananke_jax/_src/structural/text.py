"""Free text as a regular language.

Free text is UTF-8 text in which none of the excluded strings occurs (an Aho–Corasick automaton
whose matching states are dead), optionally at most ``max_chars`` code points long. The special
tokens a tag names are spelled by `compile.token_refs`.
"""

from __future__ import annotations

import functools

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA
from ananke_jax._src.compile.token_refs import ANY_CHAR
from ananke_jax._src.fusion.triggers import ROOT, aho_corasick


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
