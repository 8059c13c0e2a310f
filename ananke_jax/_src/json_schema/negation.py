"""``not`` and the exclusions of ``oneOf``: differences of languages, taken type by type.

Where they are exact, differences are taken on scalars' canonical spellings (one per value), and
on arrays and objects by schema: the conjunction with each way of failing the excluded schema, so
that key order, optional members and layout do not matter. Where that needs more than JSON Schema
keywords can say (`Irregular`), ``not`` is refused and ``oneOf`` is compiled as ``anyOf`` for that
type, with a warning.
"""

from __future__ import annotations

import contextlib
import functools
import json
import warnings

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import ByteDFA
from ananke_jax._src.json_schema import numbers, strings
from ananke_jax._src.json_schema.keywords import NEGATIONS, OTHERS, TYPES, constrains, counts, json_equal, listed_values, trivial, types_of
from ananke_jax._src.json_schema.refs import child
from ananke_jax._src.json_schema.rules import automaton_node

MAX_NESTED_NEGATIONS = 8  # negations inside negated schemas; a recursive schema nests them forever


class Irregular(Exception):
    """A difference of languages that cannot be compiled exactly."""


class Negation:
    """The methods of `SchemaCompiler` that take differences (they use its ``bodies``, `flatten`,
    `branches`, `merge`, `typed`, `value` and the key helpers of `Objects`)."""

    def excluding(self, s: dict, t: str, node: rx.Node, pointer: str, depth: int) -> rx.Node:
        """``node``, the type-``t`` values of ``s`` without its negations, minus those of its
        ``not`` and of the oneOf branches it excludes. Where that cannot be exact, the oneOf
        exclusions are dropped with a warning, then ``not`` is `unsupported`; inside another
        difference, that one fails instead."""
        rules = set(self.bodies)
        try:
            return self.difference(s, t, node, [s[k] for k in NEGATIONS if k in s], pointer, depth)
        except Irregular as e:
            if self._negating:
                raise
            for name in set(self.bodies) - rules:  # compiled in the failed attempt, maybe half
                del self.bodies[name]
            if OTHERS in s:
                warnings.warn(f"'oneOf' at {pointer} is compiled as 'anyOf' for {t} values: {e}", stacklevel=2)
                return self.excluding({k: v for k, v in s.items() if k != OTHERS}, t, node, pointer, depth)
            self.unsupported("not", str(e), child(pointer, "not"))
            return node

    def difference(self, s: dict, t: str, node: rx.Node, negated: list, pointer: str, depth: int) -> rx.Node:
        """``node`` minus the type-``t`` values of the ``negated`` schemas (see `excluding`).

        Raises:
          Irregular: the difference needs more than JSON Schema keywords can say.
        """
        rest = {k: v for k, v in s.items() if k not in NEGATIONS}
        container = t in ("array", "object")
        original = cases = [self.merge([self.explicit(rest), {"type": t}], pointer)] if container else []
        with self.negating():
            for flat in [self.flatten(x, pointer) for x in negated]:
                for b in [] if flat is False else self.branches(flat, pointer):
                    if t not in types_of(b):
                        continue
                    if not constrains(b, t):
                        return rx.NOTHING
                    if container:
                        cases = [
                            m for c in cases for v in self.failures(c, b, t, pointer) if (m := self.merge([c, v], pointer)) is not False
                        ]
                    elif not self.disjoint(rest, b, t, pointer):
                        excluded = self.scalar_language(self.merge([b, {"type": t}], pointer), t, pointer, depth)
                        node = automaton_node(rx.difference(rx.intersect(rx.to_dfa(node), _canonical(t)), rx.to_dfa(excluded)))
            if cases != original:
                node = rx.alt(*[self.value(c, pointer, depth) for c in cases])
        return node

    def scalar_language(self, s: dict, t: str, pointer: str, depth: int) -> rx.Node:
        """The type-``t`` values of ``s`` (a scalar type: no rules are made), each schema's built
        once: a oneOf nested n deep excludes its inner branches from each outer one, which took
        2^n builds of the same languages."""
        key = (json.dumps(s, sort_keys=True), t, pointer, depth)
        if key not in self._scalar_languages:
            self._scalar_languages[key] = self.typed(s, pointer, depth).get(t, rx.NOTHING)
        return self._scalar_languages[key]

    @contextlib.contextmanager
    def negating(self):
        """Count one more difference being compiled inside the others (see `unsupported`)."""
        if self._negating >= MAX_NESTED_NEGATIONS:
            raise Irregular(f"negations nested more than {MAX_NESTED_NEGATIONS} deep (a recursive schema)")
        self._negating += 1
        try:
            yield
        finally:
            self._negating -= 1

    def failures(self, a: dict, b: dict, t: str, pointer: str) -> list[dict]:
        """Schemas whose conjunctions with ``a`` hold, together, the values of type ``t`` (array or
        object) of ``a`` that ``b`` rejects. Each is one way of failing ``b`` and the negation of
        the ways before it where a keyword can say so: disjoint languages keep the automaton of
        their union small (overlapping ones make it track every subset of them).

        Raises:
          Irregular: some way of failing ``b`` is not a JSON Schema.
        """
        if self.disjoint(a, b, t, pointer):
            return [{}]
        if {"enum", "const"} & set(b):
            raise Irregular(f"enum or const of {t} values")
        negated = [self.flatten(b[k], pointer) for k in NEGATIONS if k in b]  # failing "not x": x
        ways = [(self.explicit(x), {"not": x}) for flat in negated if flat is not False for x in self.branches(flat, pointer)]
        ways += (self.object_failures if t == "object" else self.array_failures)(a, b, pointer)
        return [{"allOf": [fail, *[hold for _, hold in ways[:i] if hold is not None]]} for i, (fail, _) in enumerate(ways)]

    def object_failures(self, a: dict, b: dict, pointer: str) -> list[tuple[dict, dict]]:
        """(fail, hold) pairs for `failures`: a way of failing ``b``, and its negation."""
        required = a.get("required", [])
        out = []
        for r in b.get("required", []):
            if not self.can_have(a, r, pointer):
                return [({}, None)]  # every object of a fails b
            if r not in required:
                out.append(({"properties": {r: False}}, {"required": [r]}))
        out += [({"maxProperties": n - 1}, {"minProperties": n}) for n in [max(counts(b, "minProperties", pointer) or [0])] if n]
        out += [({"minProperties": n + 1}, {"maxProperties": n}) for n in [min(counts(b, "maxProperties", pointer) or [-1])] if n >= 0]
        names = self.key_names(b, pointer)
        others = self.additional(b)
        for k in dict.fromkeys([*a.get("properties", {}), *required, *b.get("properties", {}), *b.get("required", [])]):
            if not self.can_have(a, k, pointer):
                continue
            schemas = self.key_schemas(b.get("properties", {}), b.get("patternProperties", {}), others, k, pointer)
            if names is not None and not names.accepts(strings.spelling(k).encode()):
                out.append(({"required": [k]}, {"properties": {k: False}}))
            elif not all(map(trivial, schemas)):
                out.append(({"required": [k], "properties": {k: {"not": {"allOf": schemas}}}}, {"properties": {k: {"allOf": schemas}}}))
        if (a.get("patternProperties") or a["additionalProperties"] is not False) and (
            b.get("patternProperties") or not trivial(others) or names is not None
        ):
            raise Irregular("the keys that neither schema names would need 'some member' constraints")
        return out

    def array_failures(self, a: dict, b: dict, pointer: str) -> list[tuple[dict, dict | None]]:
        """(fail, hold) pairs for `failures`; no hold for a ``contains`` (two cannot be merged)."""
        out = [({"maxItems": n - 1}, {"minItems": n}) for n in [max(counts(b, "minItems", pointer) or [0])] if n]
        out += [({"minItems": n + 1}, {"maxItems": n}) for n in [min(counts(b, "maxItems", pointer) or [-1])] if n >= 0]
        prefix = b.get("prefixItems", [])
        out += [
            ({"minItems": i + 1, "prefixItems": [True] * i + [{"not": p}]}, {"prefixItems": [True] * i + [p]})
            for i, p in enumerate(prefix)
            if not trivial(p)
        ]
        tail = self.items(b)
        if tail is False:
            out.append(({"minItems": len(prefix) + 1}, {"maxItems": len(prefix)}))
        elif not trivial(tail):
            if prefix:
                raise Irregular("items after prefixItems would need 'some later item' constraints")
            out.append(({"contains": {"not": tail}}, {"items": tail}))
        if "contains" in b:
            at_least, at_most = max(counts(b, "minContains", pointer) or [1]), counts(b, "maxContains", pointer)
            out += [({"contains": b["contains"], "minContains": 0, "maxContains": at_least - 1}, None)] if at_least else []
            out += [({"contains": b["contains"], "minContains": min(at_most) + 1}, None)] if at_most else []
        if "contains" in a and any("contains" in fail for fail, _ in out):
            raise Irregular("two contains keywords")
        return out

    def can_have(self, a: dict, key: str, pointer: str) -> bool:
        """Whether objects of ``a`` (with explicit additionalProperties) may have ``key``."""
        return False not in self.key_schemas(
            a.get("properties", {}), a.get("patternProperties", {}), a["additionalProperties"], key, pointer
        )

    def disjoint(self, a: dict, b: dict, t: str, pointer: str) -> bool:
        """Whether no value of type ``t`` satisfies both flattened schemas, judged cheaply (False
        when unsure) by their types, enum and const values, and for objects the values of the
        properties both require (a discriminator)."""
        if t not in types_of(a) & types_of(b):
            return True
        va, vb = listed_values(a), listed_values(b)
        if va is not None and vb is not None and not any(json_equal(x, y) for x in va for y in vb):
            return True
        if t == "object":
            for k in set(a.get("required", ())) & set(b.get("required", ())):
                pair = [self.member_schema(x, k, pointer) for x in (a, b)]
                if None not in pair:
                    fa, fb = (self.flatten(x, pointer) for x in pair)
                    if fa is False or fb is False or all(self.disjoint(fa, fb, u, pointer) for u in TYPES):
                        return True
        return False

    def explicit(self, s: dict) -> dict:
        """``s`` with the defaults of ``additionalProperties`` and ``items`` written out, so that
        merging it with other schemas keeps its objects and arrays closed (or open)."""
        return {**s, "additionalProperties": self.additional(s), "items": self.items(s)}


@functools.cache
def _canonical(t: str) -> ByteDFA:
    """The DFA of the canonical spellings of the scalars of type ``t``: one per value."""
    nodes = {"null": rx.Text("null"), "boolean": rx.alt(rx.Text("true"), rx.Text("false"))}
    nodes.update(number=numbers.CANONICAL, string=strings.quoted(rx.star(strings.CANONICAL_UNIT)))
    return rx.to_dfa(nodes[t])
