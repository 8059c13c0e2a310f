"""GBNF, llama.cpp's grammar format, to the grammar IR.

The syntax is llama.cpp's (its ``grammars/README.md``): ``name ::= alternatives`` with names of
letters, digits, ``-`` and ``_``; string literals and character classes whose escapes (``\\xNN``,
``\\uNNNN``, ``\\UNNNNNNNN``, ``\\n``, ``\\t``, ``\\r``, ``\\\\``, ``\\"``, ``\\[``, ``\\]``, ``\\-``,
``\\^``; any other punctuation escaped stands for itself) are code points, encoded as UTF-8;
``.`` for any code point (newline included); groups, ``|`` (empty alternatives allowed),
``* + ? {m} {m,} {m,n}`` and ``#`` comments. Token references name a token of the vocabulary
by id, ``<[10]>``, or by its text: ``<think>`` is the token written ``<think>``, and
``<[INST]>`` the one written ``[INST]`` (brackets around anything but digits are text).
``!<[11]>*`` and ``!<[11]>+`` are runs of text and of the other tokens the grammar names
(`ir.TokenRef`); a negated reference must be repeated so, since the text of exactly one token
is no language of bytes. It is parsed by lark with a grammar of GBNF. Rules are
told apart by ``name ::=``, so a rule may also continue on the next line outside parentheses.
Stricter than llama.cpp: a rule defined twice is an error. Rules not reachable from the root are
dropped with a warning naming them, as llama.cpp ignores them.

Terminal extraction, for the engine's sake: every maximal sub-expression that references no rule
becomes one terminal (a Python regex); a rule that references no other rule is inlined where it is
used (repeatedly, so regular rules built from such rules are inlined too), unless it is the root or
its regex is longer than `MAX_INLINE_REGEX`. Repetitions of sub-expressions that reference rules
become auxiliary rules named ``rule__N``: ``x*`` is ``a ::= ε | a x``, ``x+`` is ``a ::= x | a x``,
``x?`` is ``a ::= ε | x`` and ``x{m,n}`` is m copies of ``x`` then nested optionals; a rule that
is just ``x*`` or ``x+`` is itself that recursive rule. Terminals are named after their rule
(``VALUE_1``), one per distinct regex. A terminal matches the empty string only where a nullable
regular run stands alone between rule references (``a ws b`` with ``ws ::= [ ]*``): an empty
alternative next to rule references stays an ε alternative.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import warnings
from collections.abc import Iterable, Iterator

from lark import Lark, Token, Transformer
from lark.exceptions import (
    UnexpectedCharacters,
    UnexpectedInput,
    UnexpectedToken,
    VisitError,
)

from ananke_jax._src.errors import GrammarError
from ananke_jax._src.ir import Grammar, Rule, TerminalDef, TokenRef

MAX_INLINE_REGEX = 2000
"""Regular rules whose regex is longer than this stay rules instead of being inlined."""
MAX_REPEAT = 1000
"""Largest bound of ``{m,n}`` on a sub-expression that references rules (each copy is a rule)."""

_GBNF_SYNTAX = r"""
start: rule*
rule: RULE_NAME "::=" alternatives
alternatives: sequence ("|" sequence)*
sequence: item*
item: atom QUANTIFIER*
?atom: NAME -> ref
     | STRING -> literal
     | CLASS -> char_class
     | "." -> any_char
     | TOKEN -> token_ref
     | "(" alternatives ")"

RULE_NAME.2: /[A-Za-z0-9_-]+(?=\s*::=)/
NAME: /[A-Za-z0-9_-]+/
STRING: /"(?:[^"\\\n]|\\.)*"/
CLASS: /\[(?:[^\]\\\n]|\\.)*\]/
TOKEN: /!?<[^<>\s]+>/
QUANTIFIER: /[*+?]/ | /\{[ \t]*[0-9]+[ \t]*(?:,[ \t]*[0-9]*[ \t]*)?\}/
COMMENT: /#[^\n]*/
%ignore COMMENT
%ignore /\s+/
"""

# How tightly a regex binds, so that it is grouped only where needed: an alternation needs a group
# inside a concatenation, anything but a single atom needs one under a quantifier.
_ALT, _SEQ, _ATOM = range(3)


@dataclasses.dataclass(frozen=True)
class _Regular:
    """A sub-expression that references no rule, as a Python regex."""

    regex: str
    strength: int


@dataclasses.dataclass(frozen=True)
class _Ref:
    name: str
    line: int = dataclasses.field(compare=False)
    column: int = dataclasses.field(compare=False)


@dataclasses.dataclass(frozen=True)
class _Token:
    """A token reference; a negated one is a run once repeated by ``*`` or ``+``."""

    ref: TokenRef
    run: bool = False


@dataclasses.dataclass(frozen=True)
class _Seq:
    items: tuple


@dataclasses.dataclass(frozen=True)
class _Alt:
    options: tuple


@dataclasses.dataclass(frozen=True)
class _Repeat:
    item: object
    lo: int
    hi: int | None


_EMPTY = _Regular("", _SEQ)
_ANY = _Regular("(?s:.)", _ATOM)  # GBNF's '.' is any code point, newline included

# ----------------------------------------------------------------------------------------------
# Regex text of code points, shared with the Lark front end.

_SHORT_ESCAPES = {0x09: r"\t", 0x0A: r"\n", 0x0D: r"\r"}
# Special in a regex or a class, in verbose mode (#), in set-operation warnings (& ~), or as the
# delimiter of Lark's /regex/ syntax (/).
_SPECIAL = frozenset(r".^$*+?{}[]\|()-#&~/")


def regex_char(code_point: int) -> str:
    """One code point as Python regex text, valid inside and outside a character class.

    Special characters are backslash-escaped (never as ``\\xNN``: tools that unescape the regex
    text, as Lark does, must not turn ``\\x5d`` into a bare ``]``); control characters and
    unprintable code points use escapes, so the regex is printable.
    """
    char = chr(code_point)
    if code_point in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[code_point]
    if char in _SPECIAL:
        return "\\" + char
    if char.isprintable():
        return char
    if code_point < 0x100:
        return f"\\x{code_point:02x}"
    return f"\\u{code_point:04x}" if code_point <= 0xFFFF else f"\\U{code_point:08x}"


def regex_literal(text: str) -> str:
    """A regex that matches exactly ``text``."""
    return "".join(regex_char(ord(c)) for c in text)


# ----------------------------------------------------------------------------------------------
# Expression constructors: they keep every sub-expression that references no rule as one regex.


def _grouped(node: _Regular, strength: int) -> str:
    return node.regex if node.strength >= strength else f"(?:{node.regex})"


def _seq(items: Iterable) -> object:
    """A concatenation; nested ones are flattened and adjacent regular items merged."""
    flat: list = []
    for item in items:
        for sub in item.items if isinstance(item, _Seq) else (item,):
            if sub == _EMPTY:
                continue
            if isinstance(sub, _Regular) and flat and isinstance(flat[-1], _Regular):
                flat[-1] = _Regular(_grouped(flat[-1], _SEQ) + _grouped(sub, _SEQ), _SEQ)
            else:
                flat.append(sub)
    if not flat:
        return _EMPTY
    return flat[0] if len(flat) == 1 else _Seq(tuple(flat))


def _alt(options: Iterable) -> object:
    """An alternation; its regular options are merged into one (the empty one kept apart)."""
    flat = tuple(dict.fromkeys(o for option in options for o in (option.options if isinstance(option, _Alt) else (option,))))
    if len(flat) == 1:
        return flat[0]
    if all(isinstance(o, _Regular) for o in flat):
        return _Regular("|".join(o.regex for o in flat), _ALT)
    regular = [o for o in flat if isinstance(o, _Regular) and o != _EMPTY]
    merged = [_alt(regular)] if regular else []
    # An empty option stays an ε alternative rather than making a terminal match the empty string.
    empty = [_EMPTY] if _EMPTY in flat else []
    return _Alt((*merged, *(o for o in flat if not isinstance(o, _Regular)), *empty))


def _quantifier(lo: int, hi: int | None) -> str:
    known = {(0, None): "*", (1, None): "+", (0, 1): "?"}
    if (lo, hi) in known:
        return known[lo, hi]
    if hi is None:
        return f"{{{lo},}}"
    return f"{{{lo}}}" if lo == hi else f"{{{lo},{hi}}}"


def _repeat(item, lo: int, hi: int | None) -> object:
    if isinstance(item, _Regular):
        return _Regular(_grouped(item, _ATOM) + _quantifier(lo, hi), _SEQ)
    if isinstance(item, _Token) and item.ref.negated and not item.run and hi is None and lo <= 1:
        return _Token(dataclasses.replace(item.ref, at_least=lo), run=True)
    return _Repeat(item, lo, hi)


def _substitute(node, inline: dict[str, object]) -> object:
    """``node`` with the references to the rules in ``inline`` replaced by their expressions."""
    if isinstance(node, _Ref):
        return inline.get(node.name, node)
    if isinstance(node, _Seq):
        return _seq(_substitute(i, inline) for i in node.items)
    if isinstance(node, _Alt):
        return _alt(_substitute(o, inline) for o in node.options)
    if isinstance(node, _Repeat):
        return _repeat(_substitute(node.item, inline), node.lo, node.hi)
    return node


def _refs(node) -> Iterator[_Ref]:
    if isinstance(node, _Ref):
        yield node
    elif isinstance(node, (_Seq, _Alt)):
        for child in node.items if isinstance(node, _Seq) else node.options:
            yield from _refs(child)
    elif isinstance(node, _Repeat):
        yield from _refs(node.item)


# ----------------------------------------------------------------------------------------------
# Parsing: lark's LALR parser with a contextual lexer builds the expressions.


@functools.cache
def _parser() -> Lark:
    return Lark(_GBNF_SYNTAX, parser="lalr", lexer="contextual")


def _error_at(token: Token, message: str) -> GrammarError:
    return GrammarError(f"GBNF line {token.line}, column {token.column}: {message}")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r"}
_HEX_ESCAPES = {"x": 2, "u": 4, "U": 8}


def _decode(token: Token, body: str) -> list[tuple[int, bool]]:
    """The code points of a literal's or class's text, each with whether it was escaped."""
    code_points, i = [], 0
    while i < len(body):
        char, i = body[i], i + 1
        if char != "\\":
            code_points.append((ord(char), False))
            continue
        escape, i = body[i], i + 1  # the token's regex guarantees a character after a backslash
        if escape in _HEX_ESCAPES:
            digits = body[i : i + _HEX_ESCAPES[escape]]
            if len(digits) < _HEX_ESCAPES[escape] or not all(d in "0123456789abcdefABCDEF" for d in digits):
                raise _error_at(token, f"\\{escape} needs {_HEX_ESCAPES[escape]} hex digits in {token.value}")
            code_point, i = int(digits, 16), i + len(digits)
            if code_point > 0x10FFFF or 0xD800 <= code_point <= 0xDFFF:
                raise _error_at(token, f"\\{escape}{digits} is not a Unicode scalar value (in {token.value})")
            code_points.append((code_point, True))
        elif escape in _ESCAPES:
            code_points.append((ord(_ESCAPES[escape]), True))
        elif not escape.isalnum():
            code_points.append((ord(escape), True))
        else:
            raise _error_at(token, f"unknown escape \\{escape} in {token.value}")
    return code_points


def _class_regex(token: Token) -> _Regular:
    body = token.value[1:-1]
    negated = body.startswith("^")
    points = _decode(token, body[1:] if negated else body)
    members, i = [], 0
    while i < len(points):
        # As in llama.cpp, '-' between two characters makes a range, anywhere else it is itself.
        if i + 2 < len(points) and points[i + 1] == (ord("-"), False):
            (lo, _), (hi, _) = points[i], points[i + 2]
            if lo > hi:
                raise _error_at(token, f"reversed range {chr(lo)!r}-{chr(hi)!r} in {token.value}")
            members.append(regex_char(lo) + "-" + regex_char(hi))
            i += 3
        else:
            members.append(regex_char(points[i][0]))
            i += 1
    if not members:
        if negated:
            return _ANY
        raise _error_at(token, "the empty character class [] matches nothing")
    return _Regular(f"[{'^' if negated else ''}{''.join(members)}]", _ATOM)


class _ToExpressions(Transformer):
    """GBNF parse tree to ``[(name token, expression)]``."""

    def start(self, rules):
        return rules

    def rule(self, children):
        name, expression = children
        return name, expression

    def alternatives(self, sequences):
        return _alt(sequences)

    def sequence(self, items):
        return _seq(items)

    def item(self, children):
        node, *quantifiers = children
        for quantifier in quantifiers:
            lo, hi = _bounds(quantifier)
            node = _repeat(node, lo, hi)
        return node

    def ref(self, children):
        (name,) = children
        return _Ref(name.value, name.line, name.column)

    def literal(self, children):
        (token,) = children
        text = "".join(chr(code_point) for code_point, _ in _decode(token, token.value[1:-1]))
        return _Regular(regex_literal(text), _ATOM if len(text) == 1 else _SEQ) if text else _EMPTY

    def char_class(self, children):
        return _class_regex(children[0])

    def any_char(self, _):
        return _ANY

    def token_ref(self, children):
        (token,) = children
        negated, written = token.value.startswith("!"), token.value.lstrip("!")
        by_id = re.fullmatch(r"<\[([0-9]+)\]>", written)
        key = int(by_id[1]) if by_id else written[1:-1] if written.startswith("<[") and written.endswith("]>") else written
        return _Token(TokenRef(key, negated, where=f"GBNF line {token.line}, column {token.column}"))


def _bounds(quantifier: Token) -> tuple[int, int | None]:
    text = quantifier.value
    if text in "*+?":
        return {"*": (0, None), "+": (1, None), "?": (0, 1)}[text]
    lo, comma, hi = re.sub(r"\s", "", text[1:-1]).partition(",")
    if not comma:
        return int(lo), int(lo)
    if hi and int(hi) < int(lo):
        raise _error_at(quantifier, f"repetition {text} has its maximum below its minimum")
    return int(lo), int(hi) if hi else None


def _syntax_error(text: str, error: UnexpectedInput) -> GrammarError:
    if isinstance(error, UnexpectedCharacters):
        found = repr(text[error.pos_in_stream])
    elif isinstance(error, UnexpectedToken) and error.token.type != "$END":
        found = repr(error.token.value)
    else:
        lines = text.splitlines() or [""]
        return GrammarError(f"GBNF syntax error at line {len(lines)}, column {len(lines[-1]) + 1}: unexpected end of grammar")
    where = f"line {error.line}, column {error.column}"
    return GrammarError(f"GBNF syntax error at {where}: unexpected {found}\n{error.get_context(text)}")


def _parse(text: str) -> dict[str, object]:
    try:
        tree = _parser().parse(text)
    except UnexpectedInput as error:
        raise _syntax_error(text, error) from None
    try:
        definitions = _ToExpressions().transform(tree)
    except VisitError as error:  # lark wraps what the callbacks raise
        raise error.orig_exc from None
    rules: dict[str, object] = {}
    for name, expression in definitions:
        if name.value in rules:
            raise _error_at(name, f"rule {name.value!r} is defined twice")
        rules[name.value] = expression
    return rules


# ----------------------------------------------------------------------------------------------
# Checks, inlining and lowering to BNF.


def _reachable_rules(rules: dict[str, object], root: str) -> dict[str, object]:
    """``rules`` without those the root never uses (dropped with a warning), once every rule
    referenced anywhere is known to be defined."""
    if root not in rules:
        raise GrammarError(f"GBNF: the root rule {root!r} is not defined")
    undefined = {}
    for expression in rules.values():
        for ref in _refs(expression):
            if ref.name not in rules:
                undefined.setdefault(ref.name, ref)
    if undefined:
        where = ", ".join(f"{r.name!r} (line {r.line}, column {r.column})" for r in undefined.values())
        raise GrammarError(f"GBNF: undefined rules referenced: {where}")
    reachable, stack = {root}, [root]
    while stack:
        for ref in _refs(rules[stack.pop()]):
            if ref.name not in reachable:
                reachable.add(ref.name)
                stack.append(ref.name)
    unused = [name for name in rules if name not in reachable]
    if unused:
        warnings.warn(f"GBNF: rules not reachable from {root!r} are ignored: {', '.join(unused)}", stacklevel=3)
    return {name: e for name, e in rules.items() if name in reachable}


def _inline_regular_rules(rules: dict[str, object], root: str) -> dict[str, object]:
    """Substitute the rules that reference no rule into their users, until none is left."""
    while True:
        inline = {name: e for name, e in rules.items() if name != root and isinstance(e, _Regular) and len(e.regex) <= MAX_INLINE_REGEX}
        if not inline:
            return rules
        rules = {name: _substitute(e, inline) for name, e in rules.items() if name not in inline}


class _Lowering:
    """Expressions to BNF rules over terminals, with auxiliary rules for groups and repetitions."""

    def __init__(self, rule_names: Iterable[str]):
        self.rules: dict[str, list[tuple[str, ...]]] = {}
        self.terminals: dict[str, str] = {}  # regex -> name: one terminal per distinct regex
        self.token_terminals: dict[TokenRef, str] = {}
        self.taken = set(rule_names)
        self.counters: dict[tuple[str, str], int] = {}

    def _fresh(self, template: str, base: str) -> str:
        while True:
            self.counters[template, base] = count = self.counters.get((template, base), 0) + 1
            name = template.format(base=base, count=count)
            if name not in self.taken:
                self.taken.add(name)
                return name

    def rule(self, name: str, expression, base: str) -> None:
        self.rules[name] = [()]  # reserve its place before the auxiliary rules it creates
        if isinstance(expression, _Repeat) and expression.hi is None and expression.lo <= 1:
            self.repetition(expression, base, name)  # `list ::= item+` is itself the recursive rule
            return
        options = expression.options if isinstance(expression, _Alt) else (expression,)
        self.rules[name] = [tuple(self.symbols(option, base)) for option in options]

    def symbols(self, node, base: str) -> list[str]:
        if isinstance(node, _Regular):
            return [self.terminal(node.regex, base)] if node.regex else []
        if isinstance(node, _Ref):
            return [node.name]
        if isinstance(node, _Token):
            return [self.token_terminal(node, base)]
        if isinstance(node, _Seq):
            return [s for item in node.items for s in self.symbols(item, base)]
        if isinstance(node, _Alt):
            name = self._fresh("{base}__{count}", base)
            self.rule(name, node, base)
            return [name]
        return self.repetition(node, base)

    def terminal(self, regex: str, base: str) -> str:
        if regex not in self.terminals:
            self.terminals[regex] = self._terminal_name(base)
        return self.terminals[regex]

    def token_terminal(self, node: _Token, base: str) -> str:
        if node.ref.negated and not node.run:
            single = node.ref.written[:-1]
            raise GrammarError(
                f"{node.ref.where}: {single} must itself be followed by * or +, as {single}* or {single}+ "
                "(the text of exactly one token is no language of bytes)"
            )
        if node.ref not in self.token_terminals:
            self.token_terminals[node.ref] = self._terminal_name(base)
        return self.token_terminals[node.ref]

    def _terminal_name(self, base: str) -> str:
        return self._fresh("{base}_{count}", re.sub(r"[^A-Za-z0-9]", "_", base).upper())

    def repetition(self, node: _Repeat, base: str, name: str | None = None) -> list[str]:
        if max(node.lo, node.hi or 0) > MAX_REPEAT:
            raise GrammarError(
                f"GBNF: repetition {_quantifier(node.lo, node.hi)} in rule {base!r} repeats a sub-expression that "
                f"references rules more than {MAX_REPEAT} times"
            )
        body = tuple(self.symbols(node.item, base))
        if not body:
            return []
        if node.hi is None:  # x{m,} is m - 1 copies of x, then x+ (x* when m is 0)
            name = name or self._fresh("{base}__{count}", base)
            self.rules[name] = [body if node.lo else (), (name, *body)]
            return [*body * max(node.lo - 1, 0), name]
        tail: tuple[str, ...] = ()
        for _ in range(node.hi - node.lo):  # nested optionals: unambiguous, unlike x? x? ...
            optional = self._fresh("{base}__{count}", base)
            self.rules[optional] = [(), (*body, *tail)]
            tail = (optional,)
        return [*body * node.lo, *tail]


def gbnf_to_ir(text: str, *, root: str = "root") -> Grammar:
    """Read a GBNF grammar.

    Args:
      text: the grammar, in llama.cpp's GBNF syntax.
      root: the start rule.

    Returns:
      The validated grammar IR; ``root`` stays a rule.

    Raises:
      GrammarError: a syntax error (with line and column), an undefined or twice-defined rule, a
        missing root, a bad escape, or a grammar whose language is empty.
    """
    rules = _reachable_rules(_parse(text), root)
    rules = _inline_regular_rules(rules, root)
    lowering = _Lowering(rules)
    for name, expression in rules.items():
        lowering.rule(name, expression, name)
    return Grammar(
        rules=tuple(Rule(name, expansion) for name, expansions in lowering.rules.items() for expansion in expansions),
        terminals=(
            *(TerminalDef(name, regex) for regex, name in lowering.terminals.items()),
            *(TerminalDef(name, ref.written, token=ref) for ref, name in lowering.token_terminals.items()),
        ),
        start=root,
    ).validate()
