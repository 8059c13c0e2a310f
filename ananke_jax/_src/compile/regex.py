"""Regex and choice lists to byte automata.

Patterns are parsed by the standard library's own parser (``re._parser``), so the accepted syntax
is exactly Python's. The constraint is always a *full* match. Semantics:

* ``\\d``, ``\\w`` and ``\\s`` are ASCII classes (``[0-9]``, ``[A-Za-z0-9_]``, ``[ \\t\\n\\r\\f\\v]``),
  as with ``re.ASCII``; everything else is Unicode, compiled to UTF-8 byte sequences.
* ``.`` excludes ``\\n`` unless the DOTALL flag (``(?s)``) is on, as in Python.
* Lazy quantifiers match the same language as greedy ones.
* ``^``/``\\A`` and ``$``/``\\Z`` are accepted only where they mark the start or end of the match.
* ``(?i)`` matches as ``re.IGNORECASE`` does (`casefold.python_partners`).
* Lookahead and lookbehind are exact where the matched text alone decides them
  (`ananke_jax._src.compile.lookaround`); one that would read past the text's end or before its
  start (``a(?!b)`` at the end of a terminal) raises `GrammarError`.
* Non-regular or match-order features (backreferences, conditionals, atomic groups, possessive
  quantifiers, word boundaries) raise `GrammarError`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ananke_jax._src.compile import casefold, utf8
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, NFABuilder, determinise
from ananke_jax._src.compile.lookaround import MARKER_BYTES, Lookaround, reading_outside, resolve, split_at_trailing
from ananke_jax._src.errors import GrammarError

try:  # Python >= 3.11
    from re import _constants as sre
    from re import _parser as sre_parse
except ImportError:  # pragma: no cover - Python 3.10
    import sre_constants as sre  # type: ignore[no-redef]
    import sre_parse  # type: ignore[no-redef]

_DIGIT = [(0x30, 0x39)]
_WORD = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
_SPACE = [(0x09, 0x0D), (0x20, 0x20)]
_CATEGORIES = {
    sre.CATEGORY_DIGIT: _DIGIT,
    sre.CATEGORY_NOT_DIGIT: utf8.complement(_DIGIT),
    sre.CATEGORY_WORD: _WORD,
    sre.CATEGORY_NOT_WORD: utf8.complement(_WORD),
    sre.CATEGORY_SPACE: _SPACE,
    sre.CATEGORY_NOT_SPACE: utf8.complement(_SPACE),
}
_NEWLINE = 0x0A
_START_ANCHORS = {sre.AT_BEGINNING, sre.AT_BEGINNING_STRING}
_END_ANCHORS = {sre.AT_END, sre.AT_END_STRING}

# Unsupported constructs: name, and a regex that finds where the construct is written.
_UNSUPPORTED = {
    sre.GROUPREF: ("backreference", r"\\[1-9]|\(\?P="),
    sre.GROUPREF_EXISTS: ("conditional group", r"\(\?\("),
}
_LOOKAROUND_SOURCE = r"\(\?<?[=!]"
for _name, _feature in (
    ("ATOMIC_GROUP", ("atomic group", r"\(\?>")),
    ("POSSESSIVE_REPEAT", ("possessive quantifier", r"[*+?}]\+")),
):
    if hasattr(sre, _name):  # Python >= 3.11
        _UNSUPPORTED[getattr(sre, _name)] = _feature


def regex_to_dfa(pattern: str) -> ByteDFA:
    """Compile a Python-syntax regex (full match) to a minimal byte DFA.

    Raises:
      GrammarError: invalid syntax (with the position), an unsupported feature (named, with its
        position), or a pattern that matches no string at all.
    """
    return _checked(rx.to_dfa(parse_regex(pattern)), f"regex {pattern!r}")


def parse_regex(pattern: str) -> rx.Node:
    """The expression tree of a Python-syntax regex (full match).

    Raises:
      GrammarError: invalid syntax (with the position) or an unsupported feature (named, with
        its position).
    """
    node, lookarounds = _translated(pattern)
    if not lookarounds:
        return node
    outside = reading_outside(node, lookarounds)
    if outside is not None:
        _reading_outside(pattern, lookarounds, outside)
    return rx.Automaton(resolve(node, lookarounds))


def split_trailing_exclusion(pattern: str) -> tuple[ByteDFA | None, ByteDFA, tuple[tuple[int, int], ...]] | None:
    """A regex whose one lookaround reading past the match is ``(?![...])`` at its end, as
    in lark's ``[+*]|[?](?![a-z])``: the DFAs of its matches without it (None: there are none)
    and with it, and the code point ranges no text after the latter may begin with. None for a
    regex that its matches alone decide (`regex_to_dfa` takes it).

    Raises:
      GrammarError: as `parse_regex`, and for any other lookaround reading past the match.
    """
    node, lookarounds = _translated(pattern)
    outside = reading_outside(node, lookarounds) if lookarounds else None
    if outside is None:
        return None
    split = split_at_trailing(node, lookarounds, outside)
    if split is None:
        _reading_outside(pattern, lookarounds, outside)
    without, with_ = (rx.to_dfa(part) for part in split[:2])
    if with_.start == DEAD or with_.accepting[with_.start]:  # nothing to exclude after, or after nothing
        _reading_outside(pattern, lookarounds, outside)
    return (None if without.start == DEAD else without), with_, split[2].ranges


def _translated(pattern: str) -> tuple[rx.Node, list[Lookaround]]:
    """The tree of a regex with a marker for each lookaround, and the lookarounds."""
    if not isinstance(pattern, str):
        raise GrammarError(f"regex must be a str, got {type(pattern).__name__}")
    try:
        parsed = sre_parse.parse(pattern, 0)
    except re.error as e:
        raise GrammarError(f"invalid regex {pattern!r}: {e.msg} at position {e.pos}") from None
    translator = _Translator(pattern)
    return translator.sequence(list(parsed), True, True, parsed.state.flags), translator.lookarounds


def _reading_outside(pattern: str, lookarounds: list[Lookaround], outside: int):
    feature = "lookahead that reads past the end of the match" if lookarounds[outside].ahead else "lookbehind that reads before its start"
    _unsupported(pattern, feature, _LOOKAROUND_SOURCE, outside)


def choices_to_dfa(choices: Sequence[str | bytes]) -> ByteDFA:
    """Compile a list of literal alternatives (str is UTF-8 encoded) to a minimal byte DFA."""
    if isinstance(choices, (str, bytes)) or not choices:
        raise GrammarError("choices must be a non-empty sequence of strings")
    builder = NFABuilder()
    parts = []
    for c in choices:
        if not isinstance(c, (str, bytes)):
            raise GrammarError(f"each choice must be str or bytes, got {type(c).__name__}: {c!r}")
        parts.append(builder.literal(c.encode("utf-8") if isinstance(c, str) else c))
    return determinise(builder, builder.alternation(parts))


def _checked(dfa: ByteDFA, what: str) -> ByteDFA:
    if dfa.start == 0:
        raise GrammarError(f"{what} matches no string: its language is empty")
    return dfa


def _unsupported(pattern: str, feature: str, source: str, occurrence: int = 0):
    plain = _plain_positions(pattern)
    starts = [m.start() for m in re.finditer(source, pattern) if plain[m.start()]]
    where = f" at position {starts[occurrence]}" if len(starts) > occurrence else ""
    raise GrammarError(f"unsupported regex feature: {feature}{where} in {pattern!r}")


def _plain_positions(pattern: str) -> list[bool]:
    """Which characters of ``pattern`` are syntax: not escaped and not inside a class."""
    plain, in_class, i = [False] * (len(pattern) + 1), False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            plain[i] = not in_class
            i += 2
            continue
        if in_class:
            # A ']' right after '[' or '[^' is a member, not the end of the class.
            if c == "]" and not (pattern[i - 1] == "[" or pattern[i - 2 : i] == "[^"):
                in_class = False
        elif c == "[":
            in_class = True
        else:
            plain[i] = True
        i += 1
    return plain


class _Translator:
    """Walks ``re._parser``'s tree and builds the expression tree."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.lookarounds: list[Lookaround] = []
        self.asserting = False  # inside a lookaround

    def sequence(self, items: list, at_start: bool, at_end: bool, flags: int) -> rx.Node:
        # Zero-width anchors at the ends do not move the "at start/end" position.
        first = next((i for i, it in enumerate(items) if not _is_anchor(it)), len(items))
        last = max((i for i, it in enumerate(items) if not _is_anchor(it)), default=-1)
        parts = [self.item(op, av, at_start and i <= first, at_end and i >= last, flags) for i, (op, av) in enumerate(items)]
        return rx.seq(*parts)

    def item(self, op, av, at_start: bool, at_end: bool, flags: int) -> rx.Node:
        if op is sre.LITERAL:
            return self.chars([(av, av)], flags)
        if op is sre.NOT_LITERAL:
            return rx.Chars(tuple(utf8.complement(self.chars([(av, av)], flags).ranges)))
        if op is sre.ANY:
            return rx.Chars(((0, utf8.MAX_CODE_POINT),) if flags & re.DOTALL else tuple(utf8.complement([(_NEWLINE, _NEWLINE)])))
        if op is sre.IN:
            return rx.Chars(tuple(utf8.normalise(self.char_class(av, flags))))
        if op is sre.BRANCH:
            return rx.alt(*[self.sequence(list(alt), at_start, at_end, flags) for alt in av[1]])
        if op is sre.SUBPATTERN:
            _group, add_flags, del_flags, body = av
            return self.sequence(list(body), at_start, at_end, (flags | add_flags) & ~del_flags)
        if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
            lo, hi, body = av
            upper = None if hi is sre.MAXREPEAT else hi
            return rx.repeat(self.sequence(list(body), False, False, flags), lo, upper)
        if op in (sre.ASSERT, sre.ASSERT_NOT):
            return self.lookaround(op is sre.ASSERT_NOT, *av, flags)
        if op is sre.AT:
            if (av in _START_ANCHORS and at_start) or (av in _END_ANCHORS and at_end):
                return rx.EMPTY
            if av in _START_ANCHORS | _END_ANCHORS:
                _unsupported(self.pattern, "anchor away from the ends of the pattern", r"\^|\$|\\[AZ]")
            _unsupported(self.pattern, "word boundary", r"\\[bB]")
        if op in _UNSUPPORTED:
            _unsupported(self.pattern, *_UNSUPPORTED[op])
        _unsupported(self.pattern, f"regex construct {op}", r"$^")

    def chars(self, ranges: list[tuple[int, int]], flags: int) -> rx.Chars:
        """A class of ``ranges``, with their case partners under ``re.IGNORECASE``."""
        if flags & re.IGNORECASE:
            ranges = casefold.closed(ranges, casefold.python_partners())
        return rx.Chars(tuple(utf8.normalise(ranges)))

    def lookaround(self, negative: bool, direction: int, body, flags: int) -> rx.Node:
        """A lookaround's marker (its assertion kept in `lookarounds`)."""
        kind = ("lookahead" if direction == 1 else "lookbehind") + (" (negative)" if negative else "")
        if self.asserting:
            _unsupported(self.pattern, f"{kind} inside a lookaround", _LOOKAROUND_SOURCE, len(self.lookarounds) + 1)
        if len(self.lookarounds) == len(MARKER_BYTES):
            _unsupported(self.pattern, f"more than {len(MARKER_BYTES)} lookarounds", _LOOKAROUND_SOURCE, len(MARKER_BYTES))
        self.asserting = True
        text = rx.star(rx.Chars(((0, utf8.MAX_CODE_POINT),)))
        inner = self.sequence(list(body), False, False, flags)
        self.asserting = False
        allowed = rx.seq(inner, text) if direction == 1 else rx.seq(text, inner)
        byte = MARKER_BYTES[len(self.lookarounds)]
        self.lookarounds.append(Lookaround(byte, direction == 1, allowed, allowed, negative))
        return rx.single_byte(byte)

    def char_class(self, items, flags: int) -> list[tuple[int, int]]:
        negate = bool(items) and items[0][0] is sre.NEGATE
        ranges: list[tuple[int, int]] = []
        for op, av in items[negate:]:
            if op is sre.LITERAL:
                ranges.append((av, av))
            elif op is sre.RANGE:
                ranges.append(av)
            elif op is sre.CATEGORY and av in _CATEGORIES:
                ranges.extend(_CATEGORIES[av])
            else:
                _unsupported(self.pattern, f"character-class item {op} {av}", r"\[")
        ranges = list(self.chars(ranges, flags).ranges)
        return utf8.complement(ranges) if negate else ranges


def _is_anchor(item) -> bool:
    op, av = item
    return op is sre.AT and av in _START_ANCHORS | _END_ANCHORS
