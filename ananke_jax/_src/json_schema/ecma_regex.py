"""ECMA-262 regexes (JSON Schema ``pattern``) as the languages of the strings they find a match in.

A JSON Schema pattern is an unanchored search: a string is valid when the regex matches some
substring, and ``^`` / ``$`` assert the ends of the whole string (no flags, so never line ends).
The parser is our own, over code points, with Unicode-mode (``u`` flag) meanings:

* ``.`` is any code point but the line terminators ``\\n \\r \\u2028 \\u2029``; ``\\d`` and ``\\w`` are
  ASCII; ``\\s`` is the ECMA white space and line terminator set; ``[^]`` is any code point.
* Escapes: ``\\f \\n \\r \\t \\v``, ``\\cX``, ``\\0``, ``\\xHH``, ``\\uHHHH`` (surrogate pairs joined),
  ``\\u{H...}``, ``\\p{...}`` / ``\\P{...}`` for general categories (``L``, ``Letter``, ``gc=Nd``,
  ``digit``...) and ``Any``, ``ASCII``, ``Assigned``.
* Leniencies of Annex B, where the meaning is unambiguous: ``{``, ``}`` and ``]`` are literals where
  they cannot be syntax, any non-alphanumeric character may be escaped, and a class escape at a
  range end makes the ``-`` literal (``[\\w-.]``).
* Lazy quantifiers match the same language as greedy ones.
* Lookahead and lookbehind, of any width and anywhere outside another lookaround, are exact
  (`ananke_jax._src.compile.lookaround`).
* Flags ``i`` (simple case folding) and ``s`` (``.`` matches line terminators too) are set for a
  group as in ES2025 (``(?i:...)``, ``(?-i:...)``) or, as in PCRE, for the rest of the group
  (``(?i)``), a leniency for patterns written for other engines.

Backreferences, lookaround inside lookaround, ``\\b`` / ``\\B``, the ``m`` flag and unknown
property names raise `SchemaError`. Anchors may stand anywhere (``(^|,)x``, ``(a$)?``): the
language is exact.
"""

from __future__ import annotations

import functools
import itertools
import re
import string
import unicodedata
import warnings
from typing import NamedTuple

from ananke_jax._src.compile import casefold, utf8
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.lookaround import MARKER_BYTES, Lookaround, resolve
from ananke_jax._src.errors import SchemaError

Ranges = list[tuple[int, int]]

_ANY: Ranges = [(0, utf8.MAX_CODE_POINT)]
_LINE_TERMINATORS: Ranges = [(0x0A, 0x0A), (0x0D, 0x0D), (0x2028, 0x2029)]
_DIGIT: Ranges = [(0x30, 0x39)]
_WORD: Ranges = [(0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A)]
# WhiteSpace (tab, VT, FF, space, NBSP, ZWNBSP, the Zs category) and LineTerminator.
_SPACE: Ranges = [
    (0x09, 0x0D), (0x20, 0x20), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
    (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000), (0xFEFF, 0xFEFF),
]  # fmt: skip
_CLASS_ESCAPES = {"d": _DIGIT, "w": _WORD, "s": _SPACE}
_CONTROL_ESCAPES = {"f": 0x0C, "n": 0x0A, "r": 0x0D, "t": 0x09, "v": 0x0B}
_DIGITS = frozenset("0123456789")
_NONZERO_DIGITS = _DIGITS - {"0"}
_LOOKAROUND = {"?=": "lookahead", "?!": "negative lookahead", "?<=": "lookbehind", "?<!": "negative lookbehind"}
_FLAGS = frozenset("is")
_MODIFIERS = re.compile(r"\?([a-z]*)(?:-([a-z]*))?([:)])")
_QUANTIFIER = re.compile(r"\{([0-9]+)(,([0-9]*))?\}")
_GROUP_NAME = re.compile(r"[^\W\d]\w*>")
_PROPERTY = re.compile(r"\{([A-Za-z_]+)(?:=([A-Za-z_]+))?\}")
_BRACED_HEX = re.compile(r"([0-9A-Fa-f]+)\}")
_TRAIL_SURROGATE = re.compile(r"\\u([Dd][C-Fc-f][0-9A-Fa-f]{2})")

# Long names and aliases of the general categories (Unicode PropertyValueAliases.txt).
_CATEGORY_NAMES = {
    "Other": "C", "Control": "Cc", "cntrl": "Cc", "Format": "Cf", "Unassigned": "Cn",
    "Private_Use": "Co", "Surrogate": "Cs", "Letter": "L", "Cased_Letter": "LC",
    "Lowercase_Letter": "Ll", "Modifier_Letter": "Lm", "Other_Letter": "Lo",
    "Titlecase_Letter": "Lt", "Uppercase_Letter": "Lu", "Mark": "M", "Combining_Mark": "M",
    "Spacing_Mark": "Mc", "Enclosing_Mark": "Me", "Nonspacing_Mark": "Mn", "Number": "N",
    "Decimal_Number": "Nd", "digit": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
    "Punctuation": "P", "punct": "P", "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd",
    "Close_Punctuation": "Pe", "Final_Punctuation": "Pf", "Initial_Punctuation": "Pi",
    "Other_Punctuation": "Po", "Open_Punctuation": "Ps", "Symbol": "S", "Currency_Symbol": "Sc",
    "Modifier_Symbol": "Sk", "Math_Symbol": "Sm", "Other_Symbol": "So", "Separator": "Z",
    "Line_Separator": "Zl", "Paragraph_Separator": "Zp", "Space_Separator": "Zs",
}  # fmt: skip


def pattern_node(pattern: str, *, pointer: str = "", keyword: str = "pattern", python_anchors: bool = False) -> rx.Node:
    """The strings in which the ECMA-262 regex ``pattern`` finds a match (JSON Schema semantics).

    Args:
      pattern: the regex source, as the schema holds it.
      pointer: JSON pointer of the schema holding the pattern, for error messages.
      keyword: the keyword holding it (``pattern``, ``patternProperties``...), for errors.
      python_anchors: read ``\\A`` and ``\\Z``, which ECMA-262 does not have, as ``^`` and ``$``, as
        Python's ``re`` does (patterns written for it), with a warning; else they are refused.

    Returns:
      A tree over code points; with lookarounds, one `Automaton` reading their UTF-8.

    Raises:
      SchemaError: a syntax error or an unsupported feature, named with its position.
    """
    if not isinstance(pattern, str):
        raise SchemaError(f"a pattern must be a string, got {type(pattern).__name__}", keyword=keyword, pointer=pointer)
    parser = _Parser(pattern, pointer, keyword, python_anchors)
    lang = parser.parse()
    if parser.python_anchored:
        warnings.warn(
            f"{keyword!r} {pattern!r} at {pointer or '#'}: \\A and \\Z are read as ^ and $, as Python's re reads them", stacklevel=2
        )
    anything = rx.star(rx.Chars(tuple(_ANY)))
    whole = rx.alt(rx.seq(anything, lang.free, anything), rx.seq(lang.start, anything), rx.seq(anything, lang.end), lang.both)
    return rx.Automaton(resolve(whole, parser.lookarounds)) if parser.lookarounds else whole


class _Lang(NamedTuple):
    """A sub-pattern's matches, split by the anchors they pass (each the consumed text).

    ``free``: no anchor; ``start``: a ``^`` and no ``$``; ``end``: a ``$`` and no ``^``; ``both``.
    A match through ``^`` consumed nothing before it, one through ``$`` nothing after it.
    """

    free: rx.Node
    start: rx.Node = rx.NOTHING
    end: rx.Node = rx.NOTHING
    both: rx.Node = rx.NOTHING

    @property
    def anchored(self) -> bool:
        return (self.start, self.end, self.both) != (rx.NOTHING,) * 3


_EMPTY = _Lang(rx.EMPTY)


def _concat(a: _Lang, b: _Lang) -> _Lang:
    """``a`` then ``b``: text before a ``^`` or after a ``$`` must be empty."""
    if not (a.anchored or b.anchored):
        return _Lang(rx.seq(a.free, b.free))
    return _Lang(
        rx.seq(a.free, b.free),
        rx.alt(rx.seq(a.start, b.free), rx.seq(_eps(a.free, a.start), b.start)),
        rx.alt(rx.seq(a.free, b.end), rx.seq(a.end, _eps(b.free, b.end))),
        rx.alt(
            rx.seq(_eps(a.free, a.start), b.both),
            rx.seq(a.start, b.end),
            rx.seq(a.both, _eps(b.free, b.end)),
            rx.seq(_eps(a.end, a.both), _eps(b.start, b.both)),
        ),
    )


def _sequence(terms: list[_Lang]) -> _Lang:
    """Concatenation; runs of unanchored terms become one `rx.seq` (linear in the pattern)."""
    lang = _EMPTY
    for anchored, group in itertools.groupby(terms, key=lambda t: t.anchored):
        run = list(group)
        lang = _concat(lang, functools.reduce(_concat, run) if anchored else _Lang(rx.seq(*(t.free for t in run))))
    return lang


def _union(parts: list[_Lang]) -> _Lang:
    return _Lang(*(rx.alt(*side) for side in zip(*parts))) if parts else _Lang(rx.NOTHING)


def _repeat(body: _Lang, lo: int, hi: int | None) -> _Lang:
    if not body.anchored:
        return _Lang(rx.repeat(body.free, lo, hi))
    tail = [_star(body)] if hi is None else [_union([_EMPTY, body])] * (hi - lo)
    return _sequence([body] * lo + tail)


def _star(x: _Lang) -> _Lang:
    """``x*``: iterations before the last ``^`` or after the first ``$`` consume nothing."""
    free = rx.star(x.free)
    return _Lang(free, rx.seq(x.start, free), rx.seq(free, x.end), rx.alt(x.both, rx.seq(x.start, free, x.end)))


def _eps(*nodes: rx.Node) -> rx.Node:
    """The strings of ``nodes`` that consume no text: the empty string if some node accepts it,
    else nothing; where lookarounds' markers stand in them, those of markers alone."""
    if any(isinstance(leaf, rx.Automaton) for node in nodes for leaf in rx.leaves(node)):
        return rx.Automaton(rx.intersect(rx.to_dfa(rx.alt(*nodes)), _markers_only()))
    return rx.EMPTY if any(map(_nullable, nodes)) else rx.NOTHING


@functools.cache
def _markers_only():
    return rx.to_dfa(rx.star(rx.alt(*map(rx.single_byte, MARKER_BYTES))))


def _nullable(node: rx.Node) -> bool:
    if isinstance(node, rx.Text):
        return not node.text
    if isinstance(node, rx.Seq):
        return all(map(_nullable, node.parts))
    if isinstance(node, rx.Alt):
        return any(map(_nullable, node.parts))
    if isinstance(node, rx.Repeat):
        return node.lo == 0 or _nullable(node.body)
    return False  # Chars


class _Parser:
    """Recursive descent over the ECMA-262 pattern grammar, building `_Lang` values."""

    def __init__(self, pattern: str, pointer: str, keyword: str, python_anchors: bool):
        self.src, self.pos = pattern, 0
        self.pointer, self.keyword = pointer, keyword
        self.python_anchors, self.python_anchored = python_anchors, False
        self.flags: frozenset[str] = frozenset()
        self.lookarounds: list[Lookaround] = []
        self.asserting = False  # inside a lookaround

    def parse(self) -> _Lang:
        lang = self.disjunction()
        if self.pos < len(self.src):
            self.fail("unmatched ')'")
        return lang

    def fail(self, message: str, at: int | None = None):
        where = self.pos if at is None else at
        message = f"{message} at position {where} in pattern {self.src!r}"
        raise SchemaError(message, keyword=self.keyword, pointer=self.pointer)

    def peek(self, text: str) -> bool:
        return self.src.startswith(text, self.pos)

    def eat(self, text: str) -> bool:
        if self.peek(text):
            self.pos += len(text)
            return True
        return False

    def ahead(self) -> str:
        """The next character, or "" at the end."""
        return self.src[self.pos : self.pos + 1]

    def take(self) -> str:
        if self.pos >= len(self.src):
            self.fail("unexpected end of pattern")
        self.pos += 1
        return self.src[self.pos - 1]

    def disjunction(self) -> _Lang:
        branches = [self.alternative()]
        while self.eat("|"):
            branches.append(self.alternative())
        return _union(branches)

    def alternative(self) -> _Lang:
        terms = []
        while self.pos < len(self.src) and not self.peek("|") and not self.peek(")"):
            terms.append(self.term())
        return _sequence(terms)

    def term(self) -> _Lang:
        at = self.pos
        python = self.python_anchors and self.src.startswith(("\\A", "\\Z"), self.pos)
        if python:
            self.python_anchored, self.pos = True, self.pos + 1  # at the anchor's letter
        if self.eat("A" if python else "^"):
            return self.unquantified(_Lang(rx.NOTHING, start=rx.EMPTY), at)
        if self.eat("Z" if python else "$"):
            return self.unquantified(_Lang(rx.NOTHING, end=rx.EMPTY), at)
        if self.peek("(") and (m := _MODIFIERS.match(self.src, self.pos + 1)) and m[3] == ")":
            self.flags, self.pos = self.modified(m, at), m.end()  # for the rest of the group
            return self.unquantified(_EMPTY, at)
        if any(self.peek("(" + prefix) for prefix in _LOOKAROUND):
            return self.unquantified(self.lookaround(at), at)
        atom = self.atom()
        bounds = self.quantifier()
        if bounds is None:
            return atom
        if self.quantifier() is not None:
            self.fail("nothing to repeat")
        return _repeat(atom, *bounds)

    def unquantified(self, assertion: _Lang, at: int) -> _Lang:
        if self.quantifier() is not None:
            self.fail("quantified assertion", at)
        return assertion

    def quantifier(self) -> tuple[int, int | None] | None:
        """The bounds of a quantifier here (consumed, with its lazy ``?``), or None."""
        c = self.ahead()
        bounds = {"*": (0, None), "+": (1, None), "?": (0, 1)}.get(c)
        if bounds is not None:
            self.pos += 1
        elif m := _QUANTIFIER.match(self.src, self.pos):
            lo = int(m[1])
            hi = lo if m[2] is None else int(m[3]) if m[3] else None
            if hi is not None and hi < lo:
                self.fail("numbers out of order in {} quantifier")
            self.pos, bounds = m.end(), (lo, hi)
        else:
            return None
        self.eat("?")
        return bounds

    def atom(self) -> _Lang:
        at = self.pos
        c = self.take()
        if c == "(":
            flags = self.flags
            body = self.group(at)
            if not self.eat(")"):
                self.fail("missing ')'", at)
            self.flags = flags
            return body
        if c in "*+?" or (c == "{" and _QUANTIFIER.match(self.src, at)):
            self.fail("nothing to repeat", at)
        if c == "[":
            return _chars(self.char_class())
        if c == ".":
            return _chars(_ANY if "s" in self.flags else utf8.complement(_LINE_TERMINATORS))
        if c == "\\":
            return _chars(self.folded(self.atom_escape(at)))
        return _chars(self.folded([(ord(c), ord(c))]))

    def group(self, at: int) -> _Lang:
        if self.eat("?:"):
            return self.disjunction()
        if self.eat("?<"):
            name = _GROUP_NAME.match(self.src, self.pos)
            if not name:
                self.fail("invalid group name")
            self.pos = name.end()
        elif m := _MODIFIERS.match(self.src, self.pos):
            self.flags, self.pos = self.modified(m, at), m.end()
        elif self.peek("?"):
            self.fail("invalid group", at)
        return self.disjunction()

    def modified(self, m: re.Match, at: int) -> frozenset[str]:
        """The flags after the modifiers ``m`` (`_MODIFIERS`) of the group at ``at``."""
        on, off = set(m[1]), set(m[2] or "")
        if not (on or off) or on & off or len(on) < len(m[1]) or len(off) < len(m[2] or ""):
            self.fail("invalid group: malformed flags", at)
        if unknown := (on | off) - _FLAGS:
            self.fail(f"unsupported regex feature: the {''.join(sorted(unknown))} flag", at)
        return (self.flags | on) - off

    def lookaround(self, at: int) -> _Lang:
        """A lookaround's marker (its assertion kept in `lookarounds`); ``(`` is next."""
        prefix = next(p for p in sorted(_LOOKAROUND, key=len, reverse=True) if self.peek("(" + p))
        feature = _LOOKAROUND[prefix]
        if self.asserting:
            self.fail(f"unsupported regex feature: {feature} inside a lookaround", at)
        if len(self.lookarounds) == len(MARKER_BYTES):
            self.fail(f"unsupported regex feature: more than {len(MARKER_BYTES)} lookarounds", at)
        self.pos += 1 + len(prefix)
        flags, self.asserting = self.flags, True
        body = self.disjunction()
        if not self.eat(")"):
            self.fail("missing ')'", at)
        self.flags, self.asserting = flags, False
        text = rx.star(rx.Chars(tuple(_ANY)))
        if ahead := prefix in ("?=", "?!"):
            inner = rx.alt(rx.seq(body.free, text), body.end)
            at_edge = rx.alt(inner, rx.seq(body.start, text), body.both)  # at the string's start
        else:
            inner = rx.alt(rx.seq(text, body.free), body.start)
            at_edge = rx.alt(inner, rx.seq(text, body.end), body.both)  # at the string's end
        byte = MARKER_BYTES[len(self.lookarounds)]
        self.lookarounds.append(Lookaround(byte, ahead, inner, at_edge, negative=prefix.endswith("!")))
        return _Lang(rx.single_byte(byte))

    def folded(self, ranges: Ranges) -> Ranges:
        """``ranges`` and, under the ``i`` flag, every code point with the same simple case fold."""
        return casefold.closed(ranges, casefold.ecma_partners()) if "i" in self.flags else ranges

    def atom_escape(self, at: int) -> Ranges:
        """Ranges of the escape after a ``\\`` outside a class."""
        c = self.ahead()
        if c in ("b", "B"):
            self.fail("unsupported regex feature: word boundary", at)
        if c in _NONZERO_DIGITS or c == "k":
            self.fail("unsupported regex feature: backreference", at)
        ranges = self.class_escape(at)
        return [(cp := self.character_escape(at), cp)] if ranges is None else ranges

    def class_escape(self, at: int) -> Ranges | None:
        """Ranges of ``\\d \\D \\s \\S \\w \\W \\p{..} \\P{..}`` here (consumed), or None."""
        c = self.ahead()
        if c.lower() in _CLASS_ESCAPES:
            self.pos += 1
            ranges = _CLASS_ESCAPES[c.lower()]
            return ranges if c.islower() else utf8.complement(ranges)
        if c in ("p", "P"):
            self.pos += 1
            m = _PROPERTY.match(self.src, self.pos)
            if not m:
                self.fail("invalid property escape", at)
            self.pos = m.end()
            ranges = self.property(m[1], m[2], at)
            return ranges if c == "p" else utf8.complement(ranges)
        return None

    def property(self, name: str, value: str | None, at: int) -> Ranges:
        if value is not None and name in ("General_Category", "gc"):
            name, value = value, None
        if value is None and name in ("Any", "ASCII", "Assigned"):
            return {"Any": _ANY, "ASCII": [(0, 0x7F)], "Assigned": utf8.complement(_category("Cn"))}[name]
        category = _CATEGORY_NAMES.get(name, name)
        if value is not None or category not in {*_categories(), "C", "L", "LC", "M", "N", "P", "S", "Z"}:
            self.fail(f"unsupported Unicode property \\p{{{self.src[at + 3 : self.pos - 1]}}}", at)
        return _category(category)

    def character_escape(self, at: int) -> int:
        """The code point of the character escape after a ``\\`` (consumed)."""
        c = self.take()
        if c in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[c]
        if c == "c":
            letter = self.take()
            if letter not in string.ascii_letters:
                self.fail("invalid control escape", at)
            return ord(letter) % 32
        if c == "0":
            if self.ahead() in _DIGITS:
                self.fail("unsupported regex feature: octal escape", at)
            return 0
        if c == "x":
            return self.hex_digits(2, at)
        if c == "u":
            return self.unicode_escape(at)
        if c.isalnum():
            self.fail(f"invalid escape \\{c}", at)
        return ord(c)

    def unicode_escape(self, at: int) -> int:
        if self.eat("{"):
            m = _BRACED_HEX.match(self.src, self.pos)
            if not m or int(m[1], 16) > utf8.MAX_CODE_POINT:
                self.fail("invalid \\u{...} escape", at)
            self.pos = m.end()
            return int(m[1], 16)
        cp = self.hex_digits(4, at)
        if 0xD800 <= cp <= 0xDBFF and (m := _TRAIL_SURROGATE.match(self.src, self.pos)):
            self.pos = m.end()
            return 0x10000 + ((cp - 0xD800) << 10) + int(m[1], 16) - 0xDC00
        return cp

    def hex_digits(self, n: int, at: int) -> int:
        digits = self.src[self.pos : self.pos + n]
        if not re.fullmatch(f"[0-9A-Fa-f]{{{n}}}", digits):
            self.fail("invalid hexadecimal escape", at)
        self.pos += n
        return int(digits, 16)

    def char_class(self) -> Ranges:
        """Ranges of the class whose ``[`` was just read."""
        at = self.pos - 1
        negate = self.eat("^")
        ranges: Ranges = []
        while not self.eat("]"):
            if self.pos >= len(self.src):
                self.fail("unterminated character class", at)
            first = self.class_atom()
            if self.peek("-") and not self.peek("-]") and self.pos + 1 < len(self.src):
                self.pos += 1
                last = self.class_atom()
                if isinstance(first, int) and isinstance(last, int):
                    if last < first:
                        self.fail("range out of order in character class")
                    ranges.append((first, last))
                    continue
                ranges.append((ord("-"), ord("-")))  # Annex B: a class escape makes '-' literal
                ranges += _as_ranges(last)
            ranges += _as_ranges(first)
        ranges = self.folded(ranges)
        return utf8.complement(ranges) if negate else ranges

    def class_atom(self) -> int | Ranges:
        """A code point, or the ranges of a class escape."""
        at = self.pos
        c = self.take()
        if c != "\\":
            return ord(c)
        if self.eat("b"):
            return 0x08
        if self.eat("-"):
            return ord("-")
        if self.ahead() in _NONZERO_DIGITS:
            self.fail("invalid escape in character class", at)
        ranges = self.class_escape(at)
        return self.character_escape(at) if ranges is None else ranges


def _chars(ranges: Ranges) -> _Lang:
    return _Lang(rx.Chars(tuple(utf8.normalise(ranges))))


def _as_ranges(atom: int | Ranges) -> Ranges:
    return [(atom, atom)] if isinstance(atom, int) else atom


def _category(name: str) -> Ranges:
    """Code points of a general category (``Lu``) or group (``L``, ``LC``)."""
    table = _categories()
    members = ["Lu", "Ll", "Lt"] if name == "LC" else [c for c in table if c.startswith(name)]
    return utf8.normalise([r for c in members for r in table[c]])


@functools.cache
def _categories() -> dict[str, Ranges]:
    """Ranges per two-letter general category, from this Python's `unicodedata`."""
    table: dict[str, Ranges] = {}
    start = 0
    for category, run in itertools.groupby(map(unicodedata.category, map(chr, range(utf8.MAX_CODE_POINT + 1)))):
        n = sum(1 for _ in run)
        table.setdefault(category, []).append((start, start + n - 1))
        start += n
    return table
