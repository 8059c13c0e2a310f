r"""Lark grammars to the grammar IR, through lark's own grammar loader.

Lark expands EBNF operators, templates, ``%import`` (``common.*`` included) and anonymous
terminals into BNF rules; this module converts those rules and the terminal patterns. Rule names
may be lark's internal ones (``__start_star_0``, ``_sep{NAME,COMMA}``); rules and terminals the
start rule does not need are dropped; ``%ignore`` becomes the IR's ``ignore``.

Semantics, by default (``lexer="context_free"``): the language is the context-free language of
the rules, each terminal read as the set of whole strings its regex matches, with ignored terminals
allowed between terminals. Lark's own lexers choose one tokenisation (terminal priorities, longest
match, keywords before names, lazy quantifiers stopping early); here every tokenisation counts. So
a keyword such as ``"select"`` is also a ``CNAME`` where the rules take one there, and two
terminals need nothing between them (``SELECTa`` is ``SELECT`` then the name ``a``). Lark's Earley
parser with ``lexer="dynamic_complete"`` comes closest to this reading.

With ``lexer="lark"``, the text is lexed as Lark's LALR parser lexes it (its default, contextual
lexer; `compile.lark_lexer`): only the terminals the parser can take next, the longest lexeme
one of them matches, and of the terminals matching it the first in Lark's order: higher
priority, then a string literal before a pattern (``"select"`` before ``CNAME``), then the
longer possible match, the longer definition, the name. Lark tries each terminal's regex in
that order and keeps the first that matches; here the longest lexeme wins first. The two agree
unless a higher-priority terminal matches a shorter text than another terminal does there.

Terminals:

* String literals are escaped. Flags (``"as"i``, ``/[a-z]+/i``) stay scoped inline flags
  (``(?i:...)``); ``i`` matches as Python's ``re.IGNORECASE`` does (``"as"i`` takes ``aſ``).
* A string built from lark's ``_STRING_ESC_INNER`` and a closing quote (``common.ESCAPED_STRING``
  is one) uses a lookbehind, which byte automata cannot take. Lark's lexer matches the *shortest*
  such string: the opening quote, characters other than newline where a backslash escapes the
  next one, and the first unescaped closing quote. That regular language,
  ``"(?:[^"\\\n]|\\.)*"``, is what we use (read as a whole-string match, lark's regex would
  also take unescaped quotes inside). Likewise ``common.C_COMMENT`` ends at the first ``*/``.
* Other lookarounds are exact where the terminal's own text decides them (``/\/(?!\/)[^\/]*\//``).
  A negative lookahead of one character class at the end of a match (lark's own
  ``OP: /[+*]|[?](?![a-z])/``) reads the text after the terminal: by default ``OP`` becomes a rule
  of two terminals, the matches without it and those with it, whose ``not_followed_by`` keeps
  the next text from beginning with the class. Any other lookaround that would read the text
  after the terminal or before it (and with ``lexer="lark"``, or on an ignored terminal, this one
  too), and backreferences and the like, raise `GrammarError` naming the terminal.
"""

from __future__ import annotations

import itertools
import re

from lark.exceptions import LarkError
from lark.lexer import PatternStr
from lark.load_grammar import load_grammar

from ananke_jax._src.compile.regex import regex_to_dfa, split_trailing_exclusion
from ananke_jax._src.errors import BudgetError, GrammarError
from ananke_jax._src.frontends.gbnf import regex_char, regex_literal
from ananke_jax._src.ir import Grammar, Rule, TerminalDef

_RELATIVE_IMPORT = re.compile(r"^[ \t]*%import[ \t]+\.", re.MULTILINE)

# Regex text lark compiles common.lark's _STRING_ESC_INNER to, then the closing quote.
_STRING_ESC_INNER = re.compile(re.escape(r".*?(?<!\\)(\\\\)*?") + r"(\\[^0-9A-Za-z]|[^\\()\[\]{}|*+?.^$])", re.DOTALL)
# Lark's C_COMMENT regex, and the language its lexer matches with it.
_LEXER_LANGUAGES = {"/\\*(.|\n)*?\\*/": r"/\*(?:[^*]|\*+[^*/])*\*+/"}
# An escape pair or a raw control character (scanning pairs first keeps `\\` apart from `\<newline>`).
_CONTROL = re.compile(r"\\(.)|([\x00-\x1f\x7f])", re.DOTALL)


def lark_to_ir(text: str, *, start: str = "start", lexer: str = "context_free") -> Grammar:
    """Read a Lark grammar.

    Args:
      text: the grammar, in Lark's syntax.
      start: the start rule.
      lexer: ``"context_free"`` (every tokenisation counts) or ``"lark"`` (Lark's contextual
        lexer: longest match, priorities, keywords before names).

    Returns:
      The validated grammar IR.

    Raises:
      GrammarError: lark refuses the grammar (syntax errors carry line and column), a terminal
        uses a feature byte automata cannot take (named), the language is empty, a relative
        ``%import`` would read a grammar file from the working directory, or with
        ``lexer="lark"``, a terminal matches the empty string.
    """
    if relative := _RELATIVE_IMPORT.search(text):
        line = text.count("\n", 0, relative.start()) + 1
        raise GrammarError(f"Lark grammar, line {line}: a relative %import reads files from disk; put the rules in the grammar")
    try:
        grammar, _ = load_grammar(text, "<grammar>", [], False)
        terminals, rules, ignore = grammar.compile([start], ())
    # Lark reports some mistakes as OSError (an %import it cannot find) or AssertionError.
    except (LarkError, OSError, AssertionError) as error:
        raise GrammarError(f"Lark grammar: {error}") from None
    if lexer == "lark":
        empty = [t.name for t in terminals if t.pattern.min_width == 0]
        if empty:
            raise GrammarError(f"Lark grammar: terminals {', '.join(empty)} match the empty string, which lexer='lark' cannot cut")
    order = sorted(
        terminals, key=lambda t: (-t.priority, not isinstance(t.pattern, PatternStr), -t.pattern.max_width, -len(t.pattern.value), t.name)
    )
    precedence = {t.name: len(order) - i for i, t in enumerate(order)}
    defs, wrappers = [], []
    taken = {t.name for t in terminals} | {r.origin.name for r in rules}
    for t in terminals:
        regex = _terminal_regex(t)
        split = _checked(t, regex, may_split=lexer == "context_free" and t.name not in ignore)
        if split is None:
            defs.append(TerminalDef(t.name, regex, precedence=precedence[t.name]))
            continue
        without, with_, excluded = split
        names = (n for k in itertools.count(1) if (n := f"{t.name}__{k}") not in taken)
        parts = [TerminalDef(next(names), regex, dfa=without)] if without is not None else []
        parts.append(TerminalDef(next(names), regex, dfa=with_, not_followed_by=excluded))
        taken.update(p.name for p in parts)
        defs += parts
        wrappers += [Rule(t.name, (part.name,)) for part in parts]
    return Grammar(
        rules=(*(Rule(r.origin.name, tuple(s.name for s in r.expansion)) for r in rules), *wrappers),
        terminals=tuple(defs),
        start=start,
        ignore=tuple(ignore),
        lexer=lexer,
    ).validate()


def _terminal_regex(terminal) -> str:
    """A lark terminal's pattern as a regex our regex compiler takes; raises naming the terminal."""
    pattern = terminal.pattern
    if isinstance(pattern, PatternStr):
        regex = regex_literal(pattern.value)
        for flag in sorted(pattern.flags):
            regex = f"(?{flag}:{regex})"
    else:
        regex = pattern.to_regexp()
    regex = _LEXER_LANGUAGES.get(regex, regex)
    regex = _STRING_ESC_INNER.sub(_string_body, regex)
    if "(?x" not in regex:  # raw whitespace is not literal in verbose mode: leave it alone there
        regex = _CONTROL.sub(_escape_control, regex)
    return regex


def _checked(terminal, regex: str, *, may_split: bool):
    """None where the regex alone is the terminal's language, or with ``may_split`` its
    `regex.split_trailing_exclusion`; raises naming the terminal."""
    try:
        split = split_trailing_exclusion(regex) if may_split else None
        if split is None:
            regex_to_dfa(regex)
        return split
    except BudgetError as error:
        raise BudgetError(f"Lark terminal {terminal.user_repr()}: {error}", budget=error.budget) from None
    except GrammarError as error:
        raise GrammarError(f"Lark terminal {terminal.user_repr()}: {error}") from None


def _string_body(match: re.Match) -> str:
    quote = regex_char(ord(match.group(1)[-1]))
    return rf"(?:[^{quote}\\\n]|\\.)*{quote}"


def _escape_control(match: re.Match) -> str:
    char = match.group(1) or match.group(2)
    return regex_char(ord(char)) if ord(char) < 0x20 or ord(char) == 0x7F else match.group(0)
