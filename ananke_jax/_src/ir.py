"""The grammar IR every front end produces: BNF rules over named terminals.

A terminal is a regex (Python syntax, full match, compiled to UTF-8 byte automata like
`compile_regex`). Rules are plain BNF: one `Rule` per alternative, an empty expansion is the
empty string. The language is the context-free language of the rules, with the terminals
substituted by their regular languages; no lexer priorities apply. Terminals listed in
``ignore`` may appear any number of times between two terminals (Lark's ``%ignore``).

``lexer="lark"`` reads the text the way Lark's contextual lexer does instead: after each terminal
only the terminals the parser can take there (and the ignored ones) are matched, a lexeme is as
long as one of them can continue it, and of the terminals matching it the one of highest
``precedence`` is taken (`compile.lark_lexer`).
"""

from __future__ import annotations

import collections
import dataclasses
from collections.abc import Iterable

from ananke_jax._src.errors import GrammarError

LEXERS = ("context_free", "lark")


@dataclasses.dataclass(frozen=True)
class TokenRef:
    """A token named by its id (``key`` an int: GBNF's ``<[10]>``) or by its text (a str:
    ``<think>`` names the token written ``<think>``, ``<[INST]>`` the one written ``[INST]``).

    A terminal of a plain reference is that token alone; one of a ``negated`` run (``!<[11]>*``,
    ``!<[11]>+``) is the text written by ``at_least`` (0 or 1) or more tokens other than it,
    special tokens the grammar does not name aside. The vocabulary resolves them when the
    grammar is compiled (`compile.token_refs`)."""

    key: int | str
    negated: bool = False
    at_least: int = 0
    where: str = dataclasses.field(default="", compare=False)  # e.g. "GBNF line 3, column 12"

    @property
    def written(self) -> str:
        """As GBNF writes it: ``<[10]>``, ``<think>``, ``!<[11]>*``."""
        named = f"<[{self.key}]>" if isinstance(self.key, int) else self.key if self.key.startswith("<") else f"<{self.key}>"
        return f"!{named}{'+' if self.at_least else '*'}" if self.negated else named

    def __str__(self) -> str:
        return f"{self.where}: token reference {self.written}" if self.where else f"token reference {self.written}"


@dataclasses.dataclass(frozen=True)
class TerminalDef:
    """A named regular language: ``regex`` in Python syntax, matched in full.

    ``dfa``, when given, is the language itself (a `ByteDFA`) and ``regex`` only its description;
    compilers that build languages by intersection and difference give terminals this way. With
    ``units`` (a `UnitLanguage`) too, ``dfa`` reads its placeholder byte for one unit, which keeps
    long counted strings small (`lexer.terminal_dfa` spells the units out). With ``token``,
    the language is that of a token reference, given as ``dfa`` once the grammar is compiled
    against a vocabulary (``regex`` describes it). ``not_followed_by`` holds the code point ranges
    of a trailing ``(?![...])``: the text after the terminal (of the next terminal, ignored ones
    included) may not begin with one of them; the end of the text may follow.
    """

    name: str
    regex: str
    dfa: object = dataclasses.field(default=None, compare=False, repr=False)
    units: object = dataclasses.field(default=None, compare=False, repr=False)
    precedence: int = 0  # with lexer="lark": of the terminals matching a lexeme, the highest wins
    token: TokenRef | None = None  # a token reference: its language comes from the vocabulary
    not_followed_by: tuple[tuple[int, int], ...] = ()  # code points no text right after it begins with


@dataclasses.dataclass(frozen=True)
class Rule:
    """One alternative: ``origin ::= expansion`` (symbol names; empty means the empty string)."""

    origin: str
    expansion: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class Grammar:
    """BNF rules over terminals, a start symbol and the terminals ignored between terminals."""

    rules: tuple[Rule, ...]
    terminals: tuple[TerminalDef, ...]
    start: str
    ignore: tuple[str, ...] = ()
    lexer: str = "context_free"  # or "lark" (see the module docstring)

    @property
    def terminal_names(self) -> frozenset[str]:
        return frozenset(t.name for t in self.terminals)

    @property
    def nonterminals(self) -> tuple[str, ...]:
        """Rule names in order of first definition."""
        return tuple(dict.fromkeys(r.origin for r in self.rules))

    def rules_of(self, name: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if r.origin == name)

    def validate(self) -> Grammar:
        """Check the grammar is well formed; return it.

        Raises:
          GrammarError: duplicate terminal names, names both a rule and a terminal, undefined
            symbols, an unknown lexer, an undefined start or ignored terminal, unused rules or terminals, or rules
            that derive no string (an empty language when it is the start rule).
        """
        if self.lexer not in LEXERS:
            raise GrammarError(f"lexer must be one of {', '.join(map(repr, LEXERS))}, got {self.lexer!r}")
        names = collections.Counter(t.name for t in self.terminals)
        duplicates = sorted(n for n, count in names.items() if count > 1)
        if duplicates:
            raise GrammarError(f"terminals defined twice: {', '.join(duplicates)}")
        terminals, nonterminals = self.terminal_names, set(self.nonterminals)
        clash = sorted(terminals & nonterminals)
        if clash:
            raise GrammarError(f"names used for both a rule and a terminal: {', '.join(clash)}")
        if self.start not in nonterminals:
            raise GrammarError(f"start rule {self.start!r} is not defined")
        undefined = sorted({s for r in self.rules for s in r.expansion} - terminals - nonterminals)
        if undefined:
            raise GrammarError(f"undefined symbols: {', '.join(undefined)}")
        bad_ignore = sorted(set(self.ignore) - terminals)
        if bad_ignore:
            raise GrammarError(f"ignored names are not terminals: {', '.join(bad_ignore)}")
        unused = sorted((nonterminals | terminals) - self._reachable() - set(self.ignore))
        if unused:
            raise GrammarError(f"unused rules or terminals (not reachable from {self.start!r}): {', '.join(unused)}")
        productive = self.productive()
        barren = [n for n in self.nonterminals if n not in productive]
        if self.start in barren:
            raise GrammarError(f"the grammar's language is empty: {self.start!r} derives no string")
        if barren:
            raise GrammarError(f"rules that derive no string (infinite recursion): {', '.join(barren)}")
        return self

    def productive(self) -> frozenset[str]:
        """Nonterminals that derive at least one string of terminals (a worklist: each rule is
        looked at once per symbol of it that becomes productive)."""
        terminals = self.terminal_names
        waiting = [len(set(r.expansion) - terminals) for r in self.rules]
        uses: dict[str, list[int]] = {}
        for i, r in enumerate(self.rules):
            for s in set(r.expansion) - terminals:
                uses.setdefault(s, []).append(i)
        done: set[str] = set()
        ready = [r.origin for r, w in zip(self.rules, waiting) if w == 0]
        while ready:
            name = ready.pop()
            if name in done:
                continue
            done.add(name)
            for i in uses.get(name, ()):
                waiting[i] -= 1
                if waiting[i] == 0:
                    ready.append(self.rules[i].origin)
        return frozenset(done)

    def _reachable(self) -> set[str]:
        expansions: dict[str, list[tuple[str, ...]]] = {}
        for r in self.rules:
            expansions.setdefault(r.origin, []).append(r.expansion)
        seen, stack = {self.start}, [self.start]
        while stack:
            for expansion in expansions.get(stack.pop(), ()):
                for s in expansion:
                    if s not in seen:
                        seen.add(s)
                        stack.append(s)
        return seen

    def __str__(self) -> str:
        lines = []
        for name in self.nonterminals:
            alts = [" ".join(r.expansion) if r.expansion else "ε" for r in self.rules_of(name)]
            lines.append(f"{name} ::= " + " | ".join(alts))
        lines += [f"{t.name} : /{t.regex}/" for t in self.terminals]
        lines += [f"%ignore {name}" for name in self.ignore]
        return "\n".join(lines)


def grammar(rules: Iterable[tuple[str, Iterable[str]]], terminals: dict[str, str], start: str, ignore=()) -> Grammar:
    """Convenience constructor: ``grammar([("s", ["A", "s"]), ("s", [])], {"A": "a"}, "s")``."""
    return Grammar(
        rules=tuple(Rule(o, tuple(e)) for o, e in rules),
        terminals=tuple(TerminalDef(n, r) for n, r in terminals.items()),
        start=start,
        ignore=tuple(ignore),
    )
