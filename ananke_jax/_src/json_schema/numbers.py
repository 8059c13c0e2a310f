"""Numbers as regular languages: decimal intervals and ``multipleOf``, exact on the written value.

A number is written ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?`` (an exponent only where the number is
unbounded on both sides), so an interval is a condition on two digit strings, the integer part and
the fraction, decided digit by digit. Negative numbers mirror positive ones; ``-0`` is not written.
Each run of digits may be bounded (``max_digits``), so that a model cannot write digits until its
token budget runs out.
"""

from __future__ import annotations

import decimal
import math

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import ByteDFA, minimise

DIGIT = rx.chars("09")
DIGITS = rx.star(DIGIT)
_NONZERO = rx.chars("19")
_FRACTION = rx.seq(rx.Text("."), rx.repeat(DIGIT, 1, None))
MAX_MULTIPLE_OF = 10_000  # remainders tracked by the multipleOf automaton
# One spelling per value, where languages are compared: no exponent, no trailing zero in the
# fraction, no "-0".
CANONICAL = rx.alt(
    rx.Text("0"),
    rx.seq(
        rx.optional(rx.Text("-")),
        rx.alt(rx.seq(rx.Text("0."), DIGITS, _NONZERO), rx.seq(_NONZERO, DIGITS, rx.optional(rx.seq(rx.Text("."), DIGITS, _NONZERO)))),
    ),
)


def json_number(*, integer: bool, max_digits: int | None = None) -> rx.Node:
    """Any JSON integer (no fraction or exponent) or any JSON number, with at most ``max_digits``
    digits in its integer part, fraction and exponent each (None: any number)."""
    magnitude = rx.alt(rx.Text("0"), rx.seq(_NONZERO, rx.repeat(DIGIT, 0, None if max_digits is None else max_digits - 1)))
    if integer:
        return rx.seq(rx.optional(rx.Text("-")), magnitude)
    digits = rx.repeat(DIGIT, 1, max_digits)
    exponent = rx.seq(rx.chars("e", "E"), rx.optional(rx.chars("+", "-")), digits)
    return rx.seq(rx.optional(rx.Text("-")), magnitude, rx.optional(rx.seq(rx.Text("."), digits)), rx.optional(exponent))


def interval(
    lo: decimal.Decimal | None, lo_open: bool, hi: decimal.Decimal | None, hi_open: bool, *, integer: bool, max_digits: int | None = None
) -> rx.Node:
    """Numbers ``x`` with ``lo <(=) x <(=) hi`` (a None bound is absent), written without exponent.

    Exact for every bound: the comparison runs on the decimal digits, so ``0.1`` is a bound as
    exact as ``1``. ``max_digits`` bounds the digits of the integer part and of the fraction
    (None: no bound), raised to one more than a bound's own where it has more, so that a bound
    never empties the interval.
    """
    if lo is None and hi is None:
        return json_number(integer=integer, max_digits=max_digits)
    if lo == hi and not (lo_open or hi_open or integer):
        return _spellings(lo, max_digits)
    caps = [] if max_digits is None else [_magnitudes(max_digits, [b for b in (lo, hi) if b is not None], integer)]
    parts = []
    # x >= 0: magnitudes m with lo <= m <= hi.
    if hi is None or hi > 0 or (hi == 0 and not hi_open):
        conditions = [_at_least(max(lo, 0) if lo is not None else 0, lo_open and lo >= 0, integer)]
        if hi is not None:
            conditions.append(_at_most(hi, hi_open, integer))
        parts.append(_all_of(conditions + caps))
    # x < 0: "-" and magnitudes m > 0 with -hi <= m <= -lo (mirrored bounds).
    if lo is None or lo < 0:
        conditions = [_at_least(0, True, integer)]
        if hi is not None and hi < 0:
            conditions.append(_at_least(-hi, hi_open, integer))
        if lo is not None:
            conditions.append(_at_most(-lo, lo_open, integer))
        parts.append(rx.seq(rx.Text("-"), _all_of(conditions + caps)))
    return rx.alt(*parts)


def _spellings(value: decimal.Decimal, max_digits: int | None) -> rx.Node:
    """The numbers equal to ``value`` (an enum's or a const's), written without exponent: its
    digits, then trailing zeros in the fraction, as many as ``max_digits`` (raised as `interval`
    raises it) lets the fraction have. The interval ``[value, value]``, spelled out directly: the
    general construction intersects automata, milliseconds a value."""
    whole, fraction = _split(value)
    room = None if max_digits is None else max(max_digits, len(fraction) + 1)
    if fraction:
        tail = rx.seq(rx.Text("." + fraction), rx.repeat(rx.Text("0"), 0, None if room is None else room - len(fraction)))
    else:
        tail = rx.optional(rx.seq(rx.Text("."), rx.repeat(rx.Text("0"), 1, room)))
    return rx.seq(rx.Text("-" if value < 0 else ""), rx.Text(whole), tail)


def _magnitudes(max_digits: int, bounds: list[decimal.Decimal], integer: bool) -> rx.Node:
    """Magnitudes with at most ``max_digits`` digits in the integer part and in the fraction, or
    one more than the longest of ``bounds`` has there."""
    whole, fraction = zip(*[_split(abs(b)) for b in bounds])
    room = lambda parts: max(max_digits, max(map(len, parts)) + 1)
    node = rx.repeat(DIGIT, 1, room(whole))
    return node if integer else rx.seq(node, rx.optional(rx.seq(rx.Text("."), rx.repeat(DIGIT, 1, room(fraction)))))


def _all_of(nodes: list[rx.Node]) -> rx.Node:
    dfa = rx.to_dfa(nodes[0])
    for n in nodes[1:]:
        dfa = rx.intersect(dfa, rx.to_dfa(n))
    return rx.Automaton(dfa) if dfa.start else rx.NOTHING


def _split(bound: decimal.Decimal) -> tuple[str, str]:
    """The integer digits and the fraction digits (trailing zeros dropped) of ``bound >= 0``."""
    text = format(abs(bound), "f")  # abs: -0 is a bound >= 0 too, formatted with its sign
    whole, _, fraction = text.partition(".")
    return whole.lstrip("0") or "0", fraction.rstrip("0")


def _at_least(bound: decimal.Decimal, strict: bool, integer: bool) -> rx.Node:
    """Magnitudes (unsigned numbers) ``m >= bound`` (``>`` when strict); ``bound >= 0``."""
    whole, fraction = _split(bound)
    above = rx.seq(_int_greater(whole), _any_fraction(integer))
    if integer:
        return rx.alt(above, rx.Text(whole) if not strict and not fraction else rx.NOTHING)
    return rx.alt(above, rx.seq(rx.Text(whole), _fraction_above(fraction, strict)))


def _at_most(bound: decimal.Decimal, strict: bool, integer: bool) -> rx.Node:
    """Magnitudes ``m <= bound`` (``<`` when strict); ``bound >= 0``."""
    whole, fraction = _split(bound)
    below = rx.seq(_int_less(whole), _any_fraction(integer))
    if integer:
        return rx.alt(below, rx.Text(whole) if not strict or fraction else rx.NOTHING)
    return rx.alt(below, rx.seq(rx.Text(whole), _fraction_below(fraction, strict)))


def _any_fraction(integer: bool) -> rx.Node:
    return rx.EMPTY if integer else rx.optional(_FRACTION)


def _int_greater(n: str) -> rx.Node:
    """Integer parts (no leading zeros) with value > n."""
    longer = rx.seq(_NONZERO, rx.repeat(DIGIT, len(n), None))
    return rx.alt(longer, _same_length(n, greater=True))


def _int_less(n: str) -> rx.Node:
    """Integer parts (no leading zeros) with value < n."""
    shorter = [rx.Text("0"), rx.seq(_NONZERO, rx.repeat(DIGIT, 0, len(n) - 2))] if len(n) > 1 else []
    return rx.alt(*shorter, _same_length(n, greater=False))


def _same_length(n: str, *, greater: bool) -> rx.Node:
    """Digit strings as long as n, beyond n, without a leading zero (unless one digit long)."""
    branches = []
    for i, d in enumerate(n):
        first = 1 if i == 0 and len(n) > 1 else 0
        lo, hi = (int(d) + 1, 9) if greater else (first, int(d) - 1)
        if lo <= hi:
            tail = rx.repeat(DIGIT, len(n) - i - 1, len(n) - i - 1)
            branches.append(rx.seq(rx.Text(n[:i]), rx.chars((48 + lo, 48 + hi)), tail))
    return rx.alt(*branches)


# Fractions are spelled "" (value 0) or "." and digits D (value 0.D); f below is the bound's
# fraction digits without trailing zeros.


def _fraction_above(f: str, strict: bool) -> rx.Node:
    """Fraction spellings with value >= 0.f (> when strict)."""
    if f:
        return rx.seq(rx.Text("."), _digits_above(f, strict))
    return rx.seq(rx.Text("."), DIGITS, _NONZERO, DIGITS) if strict else rx.optional(_FRACTION)


def _digits_above(f: str, strict: bool) -> rx.Node:
    """Non-empty digit strings D with 0.D >= 0.f (> when strict), f non-empty."""
    d = int(f[0])
    higher = rx.seq(rx.chars((49 + d, 57)), DIGITS) if d < 9 else rx.NOTHING
    if f[1:]:
        rest = _digits_above(f[1:], strict)
    else:
        rest = rx.seq(DIGITS, _NONZERO, DIGITS) if strict else DIGITS
    return rx.alt(higher, rx.seq(rx.Text(f[0]), rest))


def _fraction_below(f: str, strict: bool) -> rx.Node:
    """Fraction spellings with value <= 0.f (< when strict)."""
    if f:
        return rx.alt(rx.EMPTY, rx.seq(rx.Text("."), _digits_below(f, strict)))
    return rx.NOTHING if strict else rx.optional(rx.seq(rx.Text("."), rx.repeat(rx.Text("0"), 1, None)))


def _digits_below(f: str, strict: bool) -> rx.Node:
    """Non-empty digit strings D with 0.D <= 0.f (< when strict), f non-empty."""
    d = int(f[0])
    lower = rx.seq(rx.chars((48, 47 + d)), DIGITS) if d > 0 else rx.NOTHING
    if f[1:]:
        rest = rx.alt(rx.EMPTY, _digits_below(f[1:], strict))
    else:
        rest = rx.NOTHING if strict else rx.star(rx.Text("0"))
    return rx.alt(lower, rx.seq(rx.Text(f[0]), rest))


def multiple_of(divisor: decimal.Decimal, *, integer: bool) -> rx.Node | None:
    """Numbers written as multiples of ``divisor`` (no exponent), or None beyond the size cap.

    ``divisor = p / 10**k``; a number is a multiple when its digits, with the fraction padded to
    k places, form a multiple of p: a remainder automaton over (remainder, fraction digits read).
    """
    exponent = divisor.normalize().as_tuple().exponent
    places = max(0, -exponent)
    p = int(divisor.scaleb(places))
    if p <= 0 or p > MAX_MULTIPLE_OF or places > 12:
        return None
    return rx.Automaton(_remainder_dfa(p, places, fraction_allowed=not integer))


def _remainder_dfa(p: int, places: int, *, fraction_allowed: bool) -> ByteDFA:
    """DFA over ``-?digits(.digits)?`` accepting values that are multiples of p / 10**places.

    States: dead, start, after "-", then (remainder r, j fraction digits read, phase) where phase
    0 is the integer part and 1 the fraction (j <= places; further fraction digits must be 0).
    """
    order: list[tuple] = [("dead",), ("start",), ("minus",)]
    index: dict[tuple, int] = {s: i for i, s in enumerate(order)}
    rows: list[list[int]] = []
    accepting: list[bool] = []

    def state(key):
        if key not in index:
            index[key] = len(order)
            order.append(key)
        return index[key]

    i = 0
    while i < len(order):
        key = order[i]
        row = [0] * 256
        acc = False
        if key[0] in ("start", "minus"):
            for d in range(10):
                row[48 + d] = state(("int", d % p, d == 0))
            if key[0] == "start":
                row[ord("-")] = index[("minus",)]
        elif key[0] == "int":
            _, r, zero = key
            acc = (r * 10**places) % p == 0
            if not zero:
                for d in range(10):
                    row[48 + d] = state(("int", (r * 10 + d) % p, False))
            if fraction_allowed:
                row[ord(".")] = state(("dot", r, 0))
        elif key[0] in ("dot", "frac"):
            _, r, j = key
            acc = key[0] == "frac" and (r * 10 ** (places - j)) % p == 0
            for d in range(10):
                if j < places:
                    row[48 + d] = state(("frac", (r * 10 + d) % p, j + 1))
                elif d == 0:
                    row[48] = state(("frac", r, j))
        rows.append(row)
        accepting.append(acc)
        i += 1
    table = np.asarray(rows, np.int32)
    return minimise(table, np.asarray(accepting), start=1, byte_class=np.arange(256, dtype=np.int32))


def is_integral(value) -> bool:
    return isinstance(value, (int, decimal.Decimal)) and not isinstance(value, bool) and value == math.floor(value)
