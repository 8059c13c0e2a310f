"""JSON strings: from languages of string values to languages of their JSON spelling.

Where the value matters (``pattern``, ``format``, ``enum``, object keys) a string is spelled as
``json.dumps(value, ensure_ascii=False)`` does: ``"`` and ``\\`` and control characters escaped
(``\\n``-style where JSON has a short escape, else ``\\u00XX``), everything else raw. One spelling
per value keeps the language operations exact (a key other than the declared ones, ``not``). A
string with only length bounds, or none, may use any JSON escape.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import json

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile import utf8
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, canonical_form, is_finite, minimise, trimmed
from ananke_jax._src.compile.budget import charge_states
from ananke_jax._src.compile.unit_loops import UnitLanguage
from ananke_jax._src.errors import BudgetError

_SHORT = {0x22: '\\"', 0x5C: "\\\\", 0x08: "\\b", 0x0C: "\\f", 0x0A: "\\n", 0x0D: "\\r", 0x09: "\\t"}
_ESCAPED = sorted(set(range(0x20)) | {0x22, 0x5C})  # code points json.dumps escapes
_RAW = tuple(utf8.complement([(0, 0x1F), (0x22, 0x22), (0x5C, 0x5C)]))
_HEX = rx.chars("09", "af", "AF")

# One character of a JSON string as written: raw, a short escape or a \u escape.
ANY_UNIT = rx.alt(
    rx.Chars(_RAW),
    rx.seq(rx.Text("\\"), rx.alt(rx.chars('"', "\\", "/", "b", "f", "n", "r", "t"), rx.seq(rx.Text("u"), rx.repeat(_HEX, 4, 4)))),
)


def _escape(cp: int) -> str:
    return _SHORT.get(cp, f"\\u{cp:04x}")


_ESCAPE_BYTES = {cp: _escape(cp).encode() for cp in _ESCAPED}  # as UTF-8 automata read them

# One character as json.dumps(ensure_ascii=False) writes it.
CANONICAL_UNIT = rx.alt(rx.Chars(_RAW), *[rx.Text(_escape(cp)) for cp in _ESCAPED])


@functools.lru_cache(maxsize=64)
def spelled(value: rx.Node) -> rx.Node:
    """The canonical JSON spellings (without quotes) of the strings in ``value``, kept per
    process (formats recur across schemas).

    `Automaton` nodes in ``value`` must read UTF-8 (values, not spellings).
    """
    return rx.map_leaves(value, _spelled_leaf)


def _spelled_leaf(value: rx.Node) -> rx.Node:
    if isinstance(value, rx.Chars) and all(any(a <= lo and hi <= b for a, b in _RAW) for lo, hi in value.ranges):
        return value  # nothing to escape
    if isinstance(value, rx.Chars):
        ranges = [(max(lo, a), min(hi, b)) for lo, hi in value.ranges for a, b in _RAW if max(lo, a) <= min(hi, b)]
        escapes = [rx.Text(_escape(cp)) for cp in _ESCAPED if any(lo <= cp <= hi for lo, hi in value.ranges)]
        return rx.alt(*([rx.Chars(tuple(ranges))] if ranges else []), *escapes)
    if isinstance(value, rx.Text):
        return rx.Text(spelling(value.text))
    assert isinstance(value, rx.Automaton), value  # a pattern with lookarounds: UTF-8
    return rx.Automaton(rx.substitute(value.dfa, _ESCAPE_BYTES))


def spelling(text: str) -> str:
    """The canonical JSON spelling of ``text``, without quotes."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def quoted(body: rx.Node) -> rx.Node:
    return rx.seq(rx.Text('"'), body, rx.Text('"'))


def literal(text: str) -> rx.Node:
    """The canonical JSON spelling of one string, with quotes."""
    return rx.Text(json.dumps(text, ensure_ascii=False))


def string_body(
    min_length: int, max_length: int | None, values: list[rx.Node], longest: int | None = None, *, max_product: int | None = None
) -> rx.Node:
    """Spellings (without quotes) of strings with ``min_length <= len <= max_length`` code points
    that lie in every language of ``values`` (spelled canonically when there is any); where these
    leave the length unbounded, at most ``longest`` code points, or ``min_length`` if more (None:
    unbounded).

    The automaton of ``values`` is built here even where the tree is returned, so that one over
    the compile budget fails in its own subschema (and the error names its pointer). The last
    few hundred bodies are kept, so that schemas with the same string constraints (a ``format``,
    a ``pattern``) get the same node, whose automaton `rx.to_dfa` has kept too.

    Raises:
      BudgetError: the product of a pattern's automaton and the length's passes ``max_product``
        states (None: only the compile budget bounds it), or the compile budget is met.
    """
    values, min_length, max_length = _runs_as_lengths(values, min_length, max_length)
    return _string_body(min_length, max_length, tuple(values), longest, max_product)


def _runs_as_lengths(values: list[rx.Node], min_length: int, max_length: int | None) -> tuple[list[rx.Node], int, int | None]:
    """``values`` with each bounded run of one set of code points, ``C{lo,hi}`` (the pattern
    ``^\\S{1,1000}$``), as ``C*`` and its bounds folded into the length's: the same strings, whose
    automaton is then chained from one code point's (`_code_points_repeated`) instead of built
    from ``hi`` spelled copies of the set (an NFA of some 330 states a copy for ``\\S``)."""
    out = []
    for v in values:
        if isinstance(v, rx.Repeat) and isinstance(v.body, rx.Chars) and v.hi is not None:
            min_length, max_length = max(min_length, v.lo), v.hi if max_length is None else min(max_length, v.hi)
            v = rx.star(v.body)
        out.append(v)
    return out, min_length, max_length


def bounded_by_pattern(values: list[rx.Node]) -> bool:
    """Whether a value of ``values`` is one bounded run of code points (`_runs_as_lengths`): it
    bounds the length itself, so that dropping the length keywords makes no automaton smaller."""
    return _runs_as_lengths(values, 0, None)[2] is not None


@functools.lru_cache(maxsize=256)
def _string_body(
    min_length: int, max_length: int | None, values: tuple[rx.Node, ...], longest: int | None, max_product: int | None
) -> rx.Node:
    dfa = _all_of(values) if values else None
    if dfa is not None and _empty_at_most(missed := rx.difference(_every_spelling(), dfa)):
        # A pattern every string matches (``[\s\S]*``), or every one but the empty string
        # (``(?s).+``): the length alone bounds it, its characters the placeholder units.
        dfa, min_length = None, max(min_length, int(missed.start != DEAD))
    if max_length is None and longest is not None and (dfa is None or not is_finite(dfa)):
        max_length = max(longest, min_length)
    if dfa is None:
        inner = int((~_any_unit().accepting).sum()) - 1  # the states inside one unit, spelled out
        charge_states(((max_length if max_length is not None else min_length) + 1) * inner, "a length-bounded string's automaton")
        return rx.repeat(ANY_UNIT, min_length, max_length)
    if len(values) == 1 and (min_length, max_length) == (0, None):
        source = None if isinstance(values[0], rx.Automaton) else spelled(values[0])
        return rx.Automaton(dfa, source=source)  # built once, printed as the tree
    if (min_length, max_length) != (0, None):
        if (repeated := _code_points_repeated(dfa)) is not None:
            unit, lo = repeated
            node = rx.repeat(class_unit(unit), max(min_length, lo), max_length)
            charge_states(rx.nfa_size(node), "a length-bounded string's automaton")  # built where spelled out
            return node
        # Not minimised: its pairs of (pattern state, length) act alike too rarely to pay for it.
        dfa = rx.intersect(dfa, _canonical_length_dfa(min_length, max_length), minimal=False, at_most=max_product)
        if dfa is None:
            raise BudgetError(f"bounding the pattern's strings takes an automaton of more than {max_product:,} states", budget="max_states")
    return rx.Automaton(dfa) if dfa.start else rx.NOTHING


def _code_points_repeated(dfa: ByteDFA) -> tuple[ByteDFA, int] | None:
    """``(unit, lo)`` where ``dfa`` (minimal, of canonical spellings) is ``unit{lo,}``: any run
    of code points from one set (``[^\\s]+``, ``[a-z0-9-]*``), ``unit`` that set's minimal DFA
    and ``lo`` 0 or 1; else None. Such a language under length bounds is ``unit{min,max}``,
    whose copies chain without a product with the length automaton and its minimisation."""
    unit = rx.intersect(dfa, _canonical_unit())
    if not unit.start:
        return None
    lo = 0 if dfa.accepting[dfa.start] else 1
    runs = rx.to_dfa(rx.repeat(rx.Automaton(unit), lo, None))
    same = not rx.difference(dfa, runs).start and not rx.difference(runs, dfa).start
    return (unit, lo) if same else None


def _all_of(values: list[rx.Node]) -> ByteDFA:
    """The minimal DFA of the canonical spellings in every language of ``values``."""
    dfa = spelled_dfa(values[0])
    for v in values[1:]:
        dfa = rx.intersect(dfa, spelled_dfa(v))
    return dfa


def _empty_at_most(dfa: ByteDFA) -> bool:
    """Whether ``dfa`` (minimal) accepts nothing or only the empty string."""
    return dfa.start == DEAD or not dfa.transitions[dfa.start].any()


@functools.cache
def _every_spelling() -> ByteDFA:
    """The minimal DFA of the canonical spellings of every string."""
    return rx.to_dfa(rx.star(CANONICAL_UNIT))


@functools.lru_cache(maxsize=64)
def spelled_dfa(value: rx.Node):
    """The minimal DFA of `spelled` ``value``, kept per process (formats recur across schemas)."""
    return rx.to_dfa(spelled(value))


@functools.lru_cache(maxsize=64)
def _canonical_length_dfa(min_length: int, max_length: int | None):
    """The minimal DFA of canonical spellings of ``min_length`` to ``max_length`` code points,
    kept per process (a schema's items and ``contains`` share their bounds).

    Built directly as copies of one code point's automaton, chained (copy k: k code points read;
    past ``min_length`` copies, an unbounded length loops on the last): a regex NFA of it would
    take some 180 states per code point, 360,000 for a ``maxLength`` of 2048.
    """
    unit = _canonical_unit()
    inner = np.flatnonzero(~unit.accepting)[1:]  # live states inside one code point (0 is dead)
    local = np.zeros(unit.num_states, np.int64)
    local[inner] = np.arange(len(inner))
    copies = (max_length if max_length is not None else min_length) + 1
    charge_states(copies * len(inner), "a length-bounded string's automaton")  # before it is built
    byte_class, first_byte = byte_classes(unit.transitions)  # the copies' classes are the unit's
    k = np.repeat(np.arange(copies), len(inner))[:, None]  # the code points read in each state
    target = unit.transitions[:, first_byte][np.tile(inner, copies)]
    after = k + 1 if max_length is not None else np.minimum(k + 1, min_length)
    moved = np.where(unit.accepting[target], after * len(inner) + local[unit.start], k * len(inner) + local[target]) + 1
    moved[(target == DEAD) | (after >= copies) & unit.accepting[target]] = DEAD
    transitions = np.vstack([np.zeros((1, len(first_byte)), np.int64), moved])
    reads = np.arange(copies)
    accepting = np.zeros(len(transitions), bool)
    accepting[reads * len(inner) + local[unit.start] + 1] = reads >= min_length
    start = local[unit.start] + 1
    # Under a maximum its live states all differ: trimming is minimising, some fifty times faster.
    finish = minimise if max_length is None else trimmed
    return finish(transitions.astype(np.int32), accepting, start=int(start), byte_class=byte_class.astype(np.int32))


@functools.cache
def _any_unit() -> ByteDFA:
    """The minimal DFA of one character of a JSON string as written (`ANY_UNIT`)."""
    return rx.to_dfa(ANY_UNIT)


@functools.cache
def _canonical_unit():
    """The minimal DFA of one code point's canonical spelling (its accepting states lead nowhere)."""
    dfa = rx.to_dfa(CANONICAL_UNIT)
    assert (dfa.transitions[dfa.accepting] == DEAD).all()
    return dfa


def any_key(longest: int | None = None):
    """The minimal DFA of every canonical spelling of a string's contents of at most ``longest``
    code points (None: any; cached)."""
    return _canonical_length_dfa(0, longest)


UNIT_BYTE = 0xFE  # never in UTF-8 text, and so free to stand for one `ANY_UNIT`


UNIT = rx.single_byte(UNIT_BYTE)  # a placeholder for ANY_UNIT


@functools.cache
def string_units() -> UnitLanguage:
    """The characters of a JSON string as a `UnitLanguage`: `UNIT` stands for one, ``"`` exits."""
    return UnitLanguage(rx.to_dfa(rx.star(ANY_UNIT)), exit_byte=ord('"'), placeholder=UNIT_BYTE)


def with_placeholder_units(node: rx.Node) -> rx.Node:
    """``node`` with `UNIT` for each `ANY_UNIT` in its tree (free and length-bounded strings;
    automata inside it, already combined with other languages, keep theirs)."""
    return rx.rewrite(node, lambda subtree: UNIT if subtree == ANY_UNIT else None)


CLASS_BYTE = 0xC0  # never in UTF-8 text (nor `UNIT_BYTE`, `gaps.GAP_BYTE`): one character of a `ClassUnit`


@dataclasses.dataclass(frozen=True, eq=False)
class ClassUnit(rx.Automaton):
    """One character from a set of code points (``dfa``: their canonical spellings), as strings
    of that set under length bounds repeat it (``[^\\s]{1,1024}``); ``language``, its loops, whose
    placeholder is `CLASS_BYTE`. One node per set (`class_unit`), so that its token outcomes
    are computed once per vocabulary."""

    language: UnitLanguage | None = None


_CLASS_UNITS: dict[bytes, ClassUnit] = {}  # by the unit's canonical form, the latest 64


def class_unit(unit: ByteDFA) -> ClassUnit:
    """The `ClassUnit` of ``unit`` (minimal, of canonical spellings of code points), kept per
    process: equal sets of code points give one node."""
    form = canonical_form(unit)
    if form not in _CLASS_UNITS:
        if len(_CLASS_UNITS) >= 64:
            del _CLASS_UNITS[next(iter(_CLASS_UNITS))]
        language = UnitLanguage(rx.to_dfa(rx.star(rx.Automaton(unit))), exit_byte=ord('"'), placeholder=CLASS_BYTE)
        _CLASS_UNITS[form] = ClassUnit(unit, language=language)
    return _CLASS_UNITS[form]


def with_placeholder_class(node: rx.Node) -> tuple[rx.Node, UnitLanguage] | None:
    """``node`` with one `CLASS_BYTE` for each character of its class-bounded strings (repeats
    of a `ClassUnit`) of one class, and that class's language; None where it
    has none. Of several classes, the one whose loops would hold the most states (characters
    times the states of a character) is chosen; the others stay spelled out."""

    def repeated_unit(subtree) -> ClassUnit | None:
        return subtree.body if isinstance(subtree, rx.Repeat) and isinstance(subtree.body, ClassUnit) else None

    held = collections.Counter()
    for subtree in rx.subtrees(node):
        if (unit := repeated_unit(subtree)) is not None:
            held[unit] += (subtree.hi or subtree.lo + 1) * (unit.language.dfa.num_states - 1)
    if not held:
        return None
    chosen = held.most_common(1)[0][0]
    placeholder = rx.single_byte(CLASS_BYTE)
    tree = rx.rewrite(node, lambda n: rx.repeat(placeholder, n.lo, n.hi) if repeated_unit(n) is chosen else None)
    return tree, chosen.language
