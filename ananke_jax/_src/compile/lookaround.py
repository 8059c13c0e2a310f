"""Lookaround assertions as regular languages: marker bytes, a difference per assertion, erasure.

A regex with lookarounds is first compiled with a fresh marker byte standing at each assertion's
place (`regex_ast.single_byte`), then every string where some marker's assertion fails is taken
out, and the markers are erased (`resolve`). An assertion inside a repeat leaves a marker per
iteration, and each of them is checked, so any placement is exact. The markers are bytes that
UTF-8 never holds.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile import utf8
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, Fragment, NFABuilder, determinise

MARKER_BYTES = (0xF5, 0xF6, 0xF7, 0xF9, 0xFA, 0xFB, 0xFC, 0xFD)  # not UTF-8, nor placeholders
_CHAR = rx.Chars(((0, utf8.MAX_CODE_POINT),))
_TEXT = rx.star(_CHAR)


class Lookaround(NamedTuple):
    """One assertion, by the language the text on its side must (or, ``negative``, must not) be in.

    Attributes:
      byte: its marker byte.
      ahead: True for a lookahead (the text after its place), False for a lookbehind (before).
      inner: the allowed texts where the place is not at the string's edge on that side's far
        end (a tree over code points: ``X.*`` for a lookahead ``(?=X)``, ``.*X`` for a lookbehind).
      at_edge: the allowed texts where the place is at the far edge (a lookahead at the string's
        start, where ``^`` in it can hold; a lookbehind at its end, for ``$``).
      negative: the assertion is ``(?!...)`` or ``(?<!...)``.
    """

    byte: int
    ahead: bool
    inner: rx.Node
    at_edge: rx.Node
    negative: bool


def resolve(marked: rx.Node, assertions: list[Lookaround]) -> ByteDFA:
    """The minimal DFA of the strings of ``marked`` (a tree with markers, `regex_ast.single_byte`
    nodes) whose every marker's assertion holds, markers erased."""
    bytes_ = [a.byte for a in assertions]
    anything = _anything(bytes_)
    markers = rx.star(rx.alt(*map(rx.single_byte, bytes_)))
    nonempty = rx.seq(markers, _CHAR, anything)
    kept = rx.to_dfa(marked)
    for a in assertions:  # one difference at a time: a union of all would track every one at once
        inner, at_edge = (_ignoring(_failing(lang, a.negative), bytes_) for lang in (a.inner, a.at_edge))
        # Away from the far edge, then at it. A place whose marker no string holds needs no check:
        # `^(?!...)` stands at the start alone, where a check of places anywhere made an automaton
        # of thousands of subsets.
        checks = [(nonempty, inner), (markers, at_edge)]
        violations = [
            _around(a, side, failing) for side, failing in checks if rx.intersect(kept, rx.to_dfa(_around(a, side, anything))).start != DEAD
        ]
        if violations:
            kept = rx.difference(kept, rx.to_dfa(rx.alt(*violations)))
    return rx.substitute(kept, dict.fromkeys(bytes_, b""))


def _around(a: Lookaround, side: rx.Node, text: rx.Node) -> rx.Node:
    """``a``'s marker between ``side`` and ``text``, ``text`` on the side the assertion reads."""
    here = rx.single_byte(a.byte)
    return rx.seq(side, here, text) if a.ahead else rx.seq(text, here, side)


def split_at_trailing(marked: rx.Node, assertions: list[Lookaround], i: int) -> tuple[rx.Node, rx.Node, rx.Chars] | None:
    """Where assertion ``i`` is a negative lookahead of one character class standing at the end
    of the match (``[?](?![a-z])``), and the match alone decides every other one: the strings
    of ``marked`` that end without it and those that end with it (both as trees, their
    assertions resolved, markers erased) and its class, which no text after the second kind may
    begin with. None otherwise."""
    a, others = assertions[i], assertions[:i] + assertions[i + 1 :]
    excluded = a.inner.parts[0] if isinstance(a.inner, rx.Seq) and len(a.inner.parts) == 2 else None
    if not (a.ahead and a.negative and isinstance(excluded, rx.Chars) and a.inner == rx.seq(excluded, _TEXT)):
        return None
    bytes_ = [b.byte for b in assertions]
    everything, markers = _anything(bytes_), rx.star(rx.alt(*map(rx.single_byte, bytes_)))
    here = rx.single_byte(a.byte)
    dfa = rx.to_dfa(marked)
    if rx.intersect(dfa, rx.to_dfa(rx.seq(everything, here, markers, _CHAR, everything))).start != DEAD:
        return None  # text follows it somewhere: not at the end
    ending = rx.to_dfa(rx.seq(everything, here, everything))
    parts = [rx.Automaton(rx.substitute(part, {a.byte: b""})) for part in (rx.difference(dfa, ending), rx.intersect(dfa, ending))]
    if others and any(reading_outside(part, others) is not None for part in parts):
        return None
    without, with_ = (rx.Automaton(resolve(part, others)) if others else part for part in parts)
    return without, with_, excluded


def reading_outside(marked: rx.Node, assertions: list[Lookaround]) -> int | None:
    """The index of the first assertion whose verdict, somewhere in ``marked`` taken as the
    whole text, would change with text beyond it (a lookahead near the end, a lookbehind near
    the start), or None: then the text alone decides every assertion, as in a lexer's token."""
    bytes_ = [a.byte for a in assertions]
    anything = _anything(bytes_)
    dfa = rx.to_dfa(marked)
    for i, a in enumerate(assertions):
        allowed = rx.to_dfa(a.inner)
        if allowed.start == DEAD:
            continue  # never holds: decided without any text
        undecided = _ignoring(rx.difference(_prefixes(allowed) if a.ahead else _suffixes(allowed), allowed), bytes_)
        here = rx.single_byte(a.byte)
        where = rx.seq(anything, here, undecided) if a.ahead else rx.seq(undecided, here, anything)
        if rx.intersect(dfa, rx.to_dfa(where)).start != DEAD:
            return i
    return None


def _anything(bytes_: list[int]) -> rx.Node:
    """Any text with the markers ``bytes_`` anywhere in it."""
    return rx.star(rx.alt(_CHAR, *map(rx.single_byte, bytes_)))


def _prefixes(dfa: ByteDFA) -> ByteDFA:
    """The prefixes of ``dfa``'s strings (its live states accept; minimised, all are co-accessible)."""
    return ByteDFA(dfa.transitions, np.arange(dfa.num_states) != DEAD, dfa.start)


def _suffixes(dfa: ByteDFA) -> ByteDFA:
    """The minimal DFA of the suffixes of ``dfa``'s strings (entered at any live state)."""
    builder = NFABuilder()
    copied = builder.copy(dfa)
    entry = builder.state()
    offset = copied.start - dfa.start
    builder.epsilons[entry] += [s + offset for s in range(1, dfa.num_states)]
    return determinise(builder, Fragment(entry, copied.end))


def _failing(allowed: rx.Node, negative: bool) -> ByteDFA:
    """The minimal DFA of the texts that fail an assertion allowing ``allowed``."""
    return rx.to_dfa(allowed) if negative else rx.difference(_text(), rx.to_dfa(allowed))


@functools.cache
def _text() -> ByteDFA:
    return rx.to_dfa(_TEXT)


def _ignoring(dfa: ByteDFA, bytes_: list[int]) -> rx.Automaton:
    """``dfa`` reading the marker ``bytes_`` anywhere without moving (texts with markers added)."""
    transitions = dfa.transitions.copy()
    live = np.arange(1, dfa.num_states)
    transitions[1:, np.asarray(bytes_)] = live[:, None]
    return rx.Automaton(ByteDFA(transitions, dfa.accepting, dfa.start))
