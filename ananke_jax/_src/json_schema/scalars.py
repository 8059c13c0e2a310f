"""Scalar values: ``enum`` and ``const`` (of any type), numbers, and string bodies."""

from __future__ import annotations

import json

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.budget import charge_states
from ananke_jax._src.errors import BudgetError, SchemaError
from ananke_jax._src.json_schema import numbers, strings
from ananke_jax._src.json_schema.ecma_regex import pattern_node
from ananke_jax._src.json_schema.formats import format_node
from ananke_jax._src.json_schema.keywords import as_list, compact, counts, json_equal, to_decimal, type_of
from ananke_jax._src.json_schema.rules import automaton_node, is_regular

MAX_LENGTH_PRODUCT_STATES = 1_024  # strict=False drops length bounds whose product with a pattern is larger


class Scalars:
    """The methods of `SchemaCompiler` for values given by list and for numbers and strings (they
    use its layout, ``max_digits`` and ``max_string_length`` options, `typed` and `unsupported`)."""

    def enum(self, s: dict, pointer: str, depth: int, declared: set[str]) -> dict[str, rx.Node]:
        """The values ``s`` lists (``enum``, ``const``) that its other keywords and the types
        ``declared`` allow, split by JSON type."""
        values = [s["const"]] if "const" in s else s["enum"]
        if "const" in s and "enum" in s:
            values = [v for v in s["enum"] if json_equal(v, s["const"])]
        # Each byte of a value's text is about two NFA states: a long enum is refused from its
        # text, before its tree is built.
        charge_states(2 * sum(len(compact(v).encode()) for v in values), "an enum's NFA")
        rest = {k: v for k, v in s.items() if k not in ("enum", "const")}
        check = self.typed(rest, pointer, depth) if set(rest) - {"type"} else None
        out: dict[str, list[rx.Node]] = {}
        for v in values:
            t = type_of(v)
            if t not in declared or (t == "number" and "integer" in s.get("type", ()) and not numbers.is_integral(v)):
                continue
            if check is not None:
                allowed = check.get(t)
                scalar = t not in ("array", "object")
                if allowed is None or (
                    is_regular(allowed)
                    and (scalar or not self.layout.depth_dependent)
                    and not rx.to_dfa(allowed).accepts(compact(v).encode())
                ):
                    continue
            out.setdefault(t, []).append(self.literal(v, depth))
        return {t: rx.alt(*nodes) for t, nodes in out.items()}

    def literal(self, v, depth: int) -> rx.Node:
        """The spellings of one JSON value (numbers: as given, plus equal decimal spellings)."""
        if isinstance(v, (dict, list)):
            if isinstance(v, dict):
                items = [rx.seq(strings.literal(k), self.layout.colon(), self.literal(x, depth + 1)) for k, x in v.items()]
            else:
                items = [self.literal(x, depth + 1) for x in v]
            body = rx.join(items, self.layout.comma(depth)) if v else rx.NOTHING
            return self.layout.container("{}" if isinstance(v, dict) else "[]", body, not v, depth)
        if isinstance(v, str):
            return strings.literal(v)
        if isinstance(v, bool) or v is None:
            return rx.Text(json.dumps(v))
        number = to_decimal(v, "enum", "#")
        return numbers.interval(number, False, number, False, integer=False, max_digits=self.max_digits)

    def number(self, s: dict, pointer: str, integer: bool) -> rx.Node:
        """The numbers within the bounds of ``s`` and multiples of its ``multipleOf`` (only
        integers when ``integer``)."""
        lo, lo_open, hi, hi_open = None, False, None, False
        for key, bound in (("minimum", False), ("exclusiveMinimum", True)):
            if key in s:
                v = to_decimal(s[key], key, pointer)
                if lo is None or v > lo or (v == lo and bound):
                    lo, lo_open = v, bound
        for key, bound in (("maximum", False), ("exclusiveMaximum", True)):
            if key in s:
                v = to_decimal(s[key], key, pointer)
                if hi is None or v < hi or (v == hi and bound):
                    hi, hi_open = v, bound
        node = numbers.interval(lo, lo_open, hi, hi_open, integer=integer, max_digits=self.max_digits)
        for m in as_list(s.get("multipleOf", [])):
            d = to_decimal(m, "multipleOf", pointer)
            if d <= 0:
                raise SchemaError("multipleOf must be greater than 0", keyword="multipleOf", pointer=pointer)
            multiples = numbers.multiple_of(d, integer=integer)
            if multiples is None:
                self.unsupported("multipleOf", f"the divisor {m} needs more than {numbers.MAX_MULTIPLE_OF} remainders", pointer)
                continue
            node = automaton_node(rx.intersect(rx.to_dfa(node), multiples.dfa))
        return node

    def string_body(self, s: dict, pointer: str) -> rx.Node:
        """The insides of the strings ``s`` allows (``pattern``, ``format``, length bounds)."""
        values = [pattern_node(p, pointer=pointer, python_anchors=not self.strict) for p in as_list(s.get("pattern", []))]
        values += self.formats(s, pointer)
        lo = max(counts(s, "minLength", pointer) or [0])
        his = counts(s, "maxLength", pointer)
        hi = min(his) if his else None
        if self.strict or (lo, hi) == (0, None):
            return strings.string_body(lo, hi, values, self.max_string_length)
        try:  # strict=False: length bounds that make a large automaton are dropped, as unsupported keywords are
            node = strings.string_body(lo, hi, values, self.max_string_length, max_product=MAX_LENGTH_PRODUCT_STATES)
            charge_states(rx.nfa_size(node), "a length-bounded string's NFA")
            return node
        except BudgetError as e:
            if e.budget != "max_states":
                raise
            if strings.bounded_by_pattern(values):  # the pattern's own bounds would cost as much
                return strings.string_body(lo, hi, values, self.max_string_length)
            unbounded = strings.string_body(0, None, values, self.max_string_length)  # or the pattern is over it too
            for keyword in ("minLength", "maxLength"):
                if keyword in s:
                    self.unsupported(keyword, f"{e}; the string's length is left unbounded", pointer)
            return unbounded

    def formats(self, s: dict, pointer: str) -> list[rx.Node]:
        """The string languages of the formats ``s`` names (unknown ones are `unsupported`)."""
        known = []
        for f in as_list(s.get("format", [])):
            node = format_node(f)
            if node is None:
                self.unsupported("format", f"unknown format {f!r}", pointer)
            else:
                known.append(node)
        return known
