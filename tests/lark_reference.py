"""The slow reference of ``lexer="lark"``: Lark's own LALR parser, driven byte by byte by a
longest-match contextual lexer written here with the ``regex`` module's partial matching.

After each terminal the lexer matches the terminals that Lark's parse table has an action for in
the parser's current state, and the ignored ones. A lexeme is the longest text that one of them
matches whole, the terminal of highest precedence among those matching it is fed to Lark's
interactive parser, and the next lexeme begins after it. Read a character at a time, a lexeme
may grow while some terminal can still match it (``regex.fullmatch(..., partial=True)``), or be
cut where one matches it; a cut keeps a shadow of the lexeme as it would have grown, and the
reading dies if the shadow ever matches whole (`Reading`). The terminals' regexes are the grammar
IR's (`lark_to_ir`), which reads lazy string and comment patterns as the languages Lark's lexer
matches with them; nothing else here shares code with the engine's automata or LR tables.
"""

from __future__ import annotations

import dataclasses
import functools

import regex
from lark import Lark, Token
from lark.exceptions import UnexpectedInput
from lark.lexer import PatternStr

from ananke_jax import lark_to_ir


def precedence_order(terminals) -> dict[str, int]:
    """Lark's order of the terminals that match the same text: priority, a string literal before
    a pattern, the longer possible match, the longer definition, the name (highest value first)."""
    order = sorted(
        terminals, key=lambda t: (-t.priority, not isinstance(t.pattern, PatternStr), -t.pattern.max_width, -len(t.pattern.value), t.name)
    )
    return {t.name: len(order) - i for i, t in enumerate(order)}


@dataclasses.dataclass(frozen=True)
class Reading:
    """One way of reading a text so far: Lark's LR state stack after its cut lexemes, the lexeme
    still growing, and the *shadows*: each cut lexeme that the text since could still extend,
    with the parser state it was read in (a cut is only right if no shadow ever matches whole)."""

    stack: tuple[int, ...]
    lexeme: str
    shadows: tuple[tuple[int, str], ...] = ()


class LarkLexing:
    def __init__(self, grammar: str):
        self.lark = Lark(grammar, parser="lalr")
        self.ignore = set(self.lark.ignore_tokens)
        terminals = self.lark.terminals
        self.rank = precedence_order(terminals)
        self.pattern = {t.name: regex.compile(t.regex) for t in lark_to_ir(grammar).terminals}
        self.table = self.lark.parser.parser.parser.parse_table.states
        initial = self.lark.parse_interactive("")
        self._parsers = {self._stack(initial): initial}  # one interactive parser per stack reached
        # Memoised per instance: a walk asks the same questions again and again.
        self._context, self._grows = functools.cache(self._context), functools.cache(self._grows)
        self._cut, self._takes_end = functools.cache(self._cut), functools.cache(self._takes_end)
        self._matches = functools.cache(self._matches)

    @staticmethod
    def _stack(parser) -> tuple[int, ...]:
        return tuple(parser.parser_state.state_stack)

    def start(self) -> frozenset[Reading]:
        return frozenset([Reading(next(iter(self._parsers)), "")])

    def _context(self, top: int) -> tuple[str, ...]:
        return tuple(name for name in self.table[top] if name in self.pattern) + tuple(sorted(self.ignore))

    def _grows(self, top: int, text: str) -> bool:
        return any(self.pattern[n].fullmatch(text, partial=True) for n in self._context(top))

    def _cut(self, stack: tuple[int, ...], lexeme: str) -> tuple[int, ...] | None:
        """The stack after the lexeme's terminal, or None where no terminal matches it or the
        parser refuses it."""
        matching = [n for n in self._context(stack[-1]) if self.pattern[n].fullmatch(lexeme)]
        if not matching:
            return None
        winner = max(matching, key=self.rank.get)
        if winner in self.ignore:
            return stack
        parser = self._parsers[stack].copy()
        try:
            parser.feed_token(Token(winner, lexeme))
        except UnexpectedInput:
            return None
        stack = self._stack(parser)
        self._parsers.setdefault(stack, parser)
        return stack

    def _takes_end(self, stack: tuple[int, ...]) -> bool:
        try:
            self._parsers[stack].copy().feed_eof()
        except UnexpectedInput:
            return False
        return True

    def _matches(self, top: int, text: str) -> bool:
        return any(self.pattern[n].fullmatch(text) for n in self._context(top))

    def _steps(self, reading: Reading, char: str) -> list[Reading]:
        shadows = []
        for top, text in reading.shadows:
            if self._matches(top, text + char):
                return []  # a longer lexeme than the one cut: the cut was wrong
            if self._grows(top, text + char):
                shadows.append((top, text + char))
        top, out = reading.stack[-1], []
        if self._grows(top, reading.lexeme + char):
            out.append(Reading(reading.stack, reading.lexeme + char, tuple(shadows)))
        if reading.lexeme and not self._matches(top, reading.lexeme + char):
            stack = self._cut(reading.stack, reading.lexeme)
            if stack is not None and self._grows(stack[-1], char):
                longer = [(top, reading.lexeme + char)] if self._grows(top, reading.lexeme + char) else []
                out.append(Reading(stack, char, tuple(shadows + longer)))
        return out

    def step(self, prefix: frozenset[Reading], char: str) -> frozenset[Reading] | None:
        """The readings one character on, or None if no text starts with it: each reading reads
        on, or cuts its lexeme there if that can still be the longest match."""
        readings = frozenset(r for reading in prefix for r in self._steps(reading, char))
        return readings or None

    def is_complete(self, prefix: frozenset[Reading]) -> bool:
        return any(self._complete(r) for r in prefix)

    def _complete(self, reading: Reading) -> bool:
        stack = self._cut(reading.stack, reading.lexeme) if reading.lexeme else reading.stack
        return stack is not None and self._takes_end(stack)

    def read(self, text: str) -> frozenset[Reading] | None:
        prefix = self.start()
        for char in text:
            prefix = self.step(prefix, char)
            if prefix is None:
                return None
        return prefix

    def viable_texts(self, alphabet: str, length: int) -> tuple[set[str], set[str]]:
        """Every text over ``alphabet`` of at most ``length`` characters that is complete, and every
        prefix of those (the texts a bounded search finds viable)."""
        complete, stack = set(), [("", self.start())]
        while stack:
            text, prefix = stack.pop()
            if self.is_complete(prefix):
                complete.add(text)
            if len(text) < length:
                stack += [(text + c, p) for c in alphabet if (p := self.step(prefix, c)) is not None]
        return complete, {t[:i] for t in complete for i in range(len(t) + 1)}
