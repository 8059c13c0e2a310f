"""The slow reference of ``lexer="lark"``: Lark's own LALR parser, driven byte by byte by a
longest-match contextual lexer written here with the ``regex`` module's partial matching.

After each terminal the lexer matches the terminals that Lark's parse table has an action for in
the parser's current state, and the ignored ones. A lexeme grows while some of them can still
match it whole (``regex.fullmatch(..., partial=True)``); at the first byte none can take, the
lexeme is cut, the terminal of highest precedence among those matching it is fed to Lark's
interactive parser, and the byte begins the next lexeme. The terminals' regexes are the grammar
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
class Prefix:
    """A text read so far: Lark's LR state stack after its cut lexemes, and the lexeme still growing."""

    stack: tuple[int, ...]
    lexeme: str


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

    @staticmethod
    def _stack(parser) -> tuple[int, ...]:
        return tuple(parser.parser_state.state_stack)

    def start(self) -> Prefix:
        return Prefix(next(iter(self._parsers)), "")

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

    def step(self, prefix: Prefix, char: str) -> Prefix | None:
        """The prefix one character on, or None if no text starts with it."""
        if self._grows(prefix.stack[-1], prefix.lexeme + char):
            return Prefix(prefix.stack, prefix.lexeme + char)
        if not prefix.lexeme:
            return None
        stack = self._cut(prefix.stack, prefix.lexeme)
        if stack is None or not self._grows(stack[-1], char):
            return None
        return Prefix(stack, char)

    def is_complete(self, prefix: Prefix) -> bool:
        stack = self._cut(prefix.stack, prefix.lexeme) if prefix.lexeme else prefix.stack
        return stack is not None and self._takes_end(stack)

    def read(self, text: str) -> Prefix | None:
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
