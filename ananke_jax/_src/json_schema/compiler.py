"""JSON Schema to rules over regex trees.

`SchemaCompiler` turns each subschema into the language of its JSON texts: a `regex_ast` tree in
which `Ref` nodes stand for other rules (``$ref`` targets, and the "any JSON value" rule). Rules
that are not recursive are inlined later, so a schema without recursion becomes one regular
language.

Keywords in a schema without ``type`` apply only to values of their own type, as the
specification says. ``allOf`` (and keywords beside ``$ref``) are merged keyword by keyword;
``anyOf`` distributes over the rest of the schema; ``oneOf`` too, each branch without the values
of the other branches it may share; ``if``/``then``/``else`` is ``(if and then) or (not if and
else)``.

``not`` and the exclusions of ``oneOf`` are differences taken type by type where they are exact:
scalars on their canonical spellings (one per value), arrays and objects by schema (the
conjunction with each way of failing the excluded schema), so that key order, optional members
and layout do not matter. Where that needs more than JSON Schema keywords can say, ``not`` is
refused and ``oneOf`` is compiled as ``anyOf`` for that type, with a warning.
"""

from __future__ import annotations

import contextlib
import dataclasses
import decimal
import functools
import itertools
import json
import warnings

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, minimise
from ananke_jax._src.errors import SchemaError
from ananke_jax._src.json_schema import numbers, strings
from ananke_jax._src.json_schema.ecma_regex import pattern_node
from ananke_jax._src.json_schema.formats import format_node
from ananke_jax._src.json_schema.layout import Layout
from ananke_jax._src.json_schema.refs import Resolver, child

TYPES = ("null", "boolean", "number", "string", "array", "object")
_ANY_OF = "anyOf*"  # in a flattened schema: a list of branch lists, one value of each applies
_OTHERS = "oneOf others*"  # in a flattened schema: other oneOf branches, whose values it excludes
_NEGATIONS = ("not", _OTHERS)
MAX_NESTED_NEGATIONS = 8  # negations inside negated schemas; a recursive schema nests them forever
_ANNOTATIONS = frozenset(
    ["$schema", "$id", "$anchor", "$comment", "$defs", "definitions", "$vocabulary", "$dynamicAnchor", "title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly", "contentMediaType", "contentEncoding", "contentSchema"]
)
_ASSERTIONS = frozenset(
    ["type", "enum", "const", "properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties", "minLength", "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf", "items", "prefixItems", "minItems", "maxItems", "contains", "minContains", "maxContains", "anyOf", "oneOf", "allOf", "not", "if", "then", "else", "$ref", _OTHERS]
)
# Keywords that cannot be compiled, and what strict=False does with them.
_UNSUPPORTED = {
    "uniqueItems": "ignored: items may repeat",
    "dependentRequired": "ignored",
    "dependentSchemas": "ignored",
    "dependencies": "ignored",
    "unevaluatedProperties": "ignored",
    "unevaluatedItems": "ignored",
    "$dynamicRef": "ignored",
    "$recursiveRef": "ignored",
    "additionalItems": "ignored",
}
MAX_PATTERN_PROPERTIES = 6  # key regions are the 2**n combinations of pattern matches
_MEMBER_KEYWORDS = frozenset(("items", "prefixItems", "properties", "patternProperties", "additionalProperties"))
_RAW = frozenset(("$ref", "allOf", "anyOf", "oneOf", "if", "then", "else"))


class _Irregular(Exception):
    """A difference of languages that cannot be compiled exactly."""


# Expansions of anyOf branches within anyOf branches (through $ref) before a cycle is assumed.
MAX_ANY_OF_NESTING = 32


class _Cycle(SchemaError):
    """A ``$ref`` cycle that consumes no input."""


@dataclasses.dataclass(frozen=True)
class Ref:
    """A reference to the rule ``name`` inside a rule body."""

    name: str


@dataclasses.dataclass
class Rules:
    """The compiled rules: ``bodies[name]`` is a regex tree that may hold `Ref` nodes."""

    start: str
    bodies: dict[str, rx.Node]


class SchemaCompiler:
    """Translates one schema document; use `compile_rules`."""

    def __init__(self, root, *, whitespace, strict: bool, allow_additional: bool, max_depth: int, placeholder_gaps: bool = False):
        self.resolver = Resolver(root)
        self.layout = Layout(whitespace, placeholder_gaps=placeholder_gaps)
        self.strict = strict
        self.allow_additional = allow_additional
        self.max_depth = max_depth
        self.bodies: dict[str, rx.Node | None] = {}
        self._key_patterns: dict[str, ByteDFA] = {}
        self._negating = 0  # nesting of the differences being compiled

    # --- rules -------------------------------------------------------------------------------

    def rule(self, pointer: str, depth: int) -> rx.Node:
        """A `Ref` to the rule for the schema at ``pointer`` (compiled on first use)."""
        if self.layout.depth_dependent and depth > self.max_depth:
            return rx.NOTHING
        name = pointer if not self.layout.depth_dependent else f"{pointer}@{depth}"
        if name not in self.bodies:
            self.bodies[name] = None  # reserved: references from inside the body resolve to it
            self.bodies[name] = self.value(self.resolver.get(pointer), pointer, depth)
        return Ref(name)

    def any_value(self, depth: int) -> rx.Node:
        """A `Ref` to the rule of any JSON value."""
        name = "any" if not self.layout.depth_dependent else f"any@{depth}"
        if self.layout.depth_dependent and depth > self.max_depth:
            return rx.NOTHING
        if name not in self.bodies:
            self.bodies[name] = None
            self.bodies[name] = rx.alt(*self.typed({}, "#", depth).values())
        return Ref(name)

    # --- schemas -----------------------------------------------------------------------------

    def value(self, schema, pointer: str, depth: int) -> rx.Node:
        """The JSON texts of the values valid under ``schema``."""
        if schema is True:
            return self.any_value(depth)
        if schema is False:
            return rx.NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {json.dumps(schema)[:40]}", pointer=pointer)
        if set(schema) & _ASSERTIONS == {"$ref"}:
            return self.rule(self.resolver.resolve(schema["$ref"], pointer), depth)
        flat = self.flatten(schema, pointer)
        if flat is False:
            return rx.NOTHING
        alternatives = flat.get(_ANY_OF, [])
        if len(alternatives) == 1 and not set(flat) & _ASSERTIONS:  # keep each branch's own rules
            return rx.alt(*[self.value(b, pointer, depth) for b in alternatives[0]])
        return rx.alt(*[node for b in self.branches(flat, pointer) for node in self.typed(b, pointer, depth).values()])

    def branches(self, flat: dict, pointer: str, nesting: int = 0):
        """The conjunctions that the flattened ``flat`` is the union of: one per choice of a branch
        in each of its anyOf lists (flattened, without `_ANY_OF`)."""
        if nesting > MAX_ANY_OF_NESTING:  # a branch that leads back to the schema keeps expanding
            raise _Cycle(f"a $ref cycle that consumes no input (anyOf branches expand more than {MAX_ANY_OF_NESTING} levels deep)", keyword="$ref", pointer=pointer)
        rest = {k: v for k, v in flat.items() if k != _ANY_OF}
        for combo in itertools.product(*flat.get(_ANY_OF, [])):
            merged = self.merge([rest, *combo], pointer)
            if merged is not False:
                yield from self.branches(merged, pointer, nesting + 1) if _ANY_OF in merged else [merged]

    def flatten(self, schema, pointer: str, _seen=()):
        """``schema`` without ``$ref``, ``allOf``, ``anyOf``, ``oneOf`` and ``if``: one merged
        dict (the alternatives collected under `_ANY_OF`), or False for no value."""
        if schema is True:
            return {}
        if schema is False:
            return False
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {json.dumps(schema, default=str)[:40]}", pointer=pointer)
        self.check_keywords(schema, pointer)
        parts = [{k: v for k, v in schema.items() if k not in _RAW}]
        ref = schema.get("$ref")
        if ref is not None:
            target = self.resolver.resolve(ref, pointer)
            if target in _seen:
                raise _Cycle("a $ref cycle that consumes no input", keyword="$ref", pointer=pointer)
            parts.append(self.flatten(self.resolver.get(target), target, (*_seen, target)))
        for i, sub in enumerate(schema.get("allOf", [])):
            parts.append(self.flatten(sub, child(pointer, "allOf", i), _seen))
        any_of = [[*schema["anyOf"]]] if "anyOf" in schema else []
        if "oneOf" in schema:
            any_of.append(self.exactly_one(schema["oneOf"], pointer, (*_seen, pointer)))
        if "if" in schema and ("then" in schema or "else" in schema):
            condition = schema["if"]
            any_of.append([{"allOf": [condition, schema.get("then", True)]}, {"allOf": [{"not": condition}, schema.get("else", True)]}])
        if any_of:
            parts.append({_ANY_OF: any_of})
        return self.merge(parts, pointer)

    def exactly_one(self, branches: list, pointer: str, seen: tuple) -> list:
        """The ``oneOf`` ``branches`` as alternatives, each excluding the others it may overlap
        (see `disjoint`). A branch that leads back here without consuming input excludes
        nothing: that ``oneOf`` is compiled as ``anyOf``, with a warning."""
        try:
            flat = [self.flatten(b, child(pointer, "oneOf", i), seen) for i, b in enumerate(branches)]
        except _Cycle:
            warnings.warn(f"'oneOf' at {pointer} is compiled as 'anyOf': a branch refers back to it", stacklevel=5)
            return [*branches]
        out = []
        for i, b in enumerate(branches):
            others = [c for j, c in enumerate(branches) if j != i and flat[i] is not False and flat[j] is not False and not all(self.disjoint(flat[i], flat[j], t, pointer) for t in TYPES)]
            out.append({"allOf": [b], _OTHERS: {"anyOf": others}} if others else b)
        return out

    def check_keywords(self, schema: dict, pointer: str) -> None:
        for key, relaxation in _UNSUPPORTED.items():
            if key in schema and not (key == "uniqueItems" and schema[key] is False):
                message = f"unsupported JSON Schema keyword {key!r}"
                if self.strict:
                    raise SchemaError(message + " (strict=False: " + relaxation + ")", keyword=key, pointer=pointer)
                warnings.warn(f"{message} at {pointer}: {relaxation}", stacklevel=6)

    def merge(self, parts: list, pointer: str):
        """The conjunction of flattened schemas, keyword by keyword (False: no value)."""
        flat = []
        for part in parts:
            part = self.flatten(part, pointer) if part is True or part is False or _RAW & set(part) else part
            if part is False:
                return False
            flat.append(part)
        out: dict = {**_merged_items(flat), **self.merged_members(flat, pointer)}
        for part in flat:
            for key, value in part.items():
                if key in _MEMBER_KEYWORDS:
                    continue
                if key not in out:
                    out[key] = value
                else:
                    out[key] = _merge_keyword(key, out[key], value, pointer)
        return out

    def merged_members(self, parts: list[dict], pointer: str) -> dict:
        """``properties``, ``patternProperties`` and ``additionalProperties`` of several schemas:
        each schema's patterns and additional schema apply to the keys it does not declare."""
        objects = [p for p in parts if {"properties", "patternProperties", "additionalProperties"} & set(p)]
        if len(objects) <= 1:
            return {k: v for p in objects for k, v in p.items() if k in ("properties", "patternProperties", "additionalProperties")}
        names = list(dict.fromkeys(k for p in objects for k in p.get("properties", {})))
        properties = {}
        for name in names:
            schemas = [x for p in objects if (x := self.member_schema(p, name, pointer)) is not None]
            properties[name] = schemas[0] if len(schemas) == 1 else {"allOf": schemas}
        patterns: dict = {}
        for p in objects:
            others = [q.get("additionalProperties") for q in objects if q is not p and "additionalProperties" in q]
            if p.get("patternProperties") and any("patternProperties" in q for q in objects if q is not p and "additionalProperties" in q):
                self.unsupported("allOf", "patternProperties and additionalProperties in different branches", pointer)
            for pattern, schema in p.get("patternProperties", {}).items():
                patterns.setdefault(pattern, []).extend([schema, *others])
        out: dict = {"properties": properties} if properties else {}
        if patterns:
            out["patternProperties"] = {k: v[0] if len(v) == 1 else {"allOf": v} for k, v in patterns.items()}
        extras = [p["additionalProperties"] for p in objects if "additionalProperties" in p]
        if extras:
            out["additionalProperties"] = extras[0] if len(extras) == 1 else {"allOf": extras}
        return out

    def member_schema(self, s: dict, name: str, pointer: str):
        """What ``s`` asks of the value of key ``name`` (None: nothing)."""
        schemas = self.key_schemas(s.get("properties", {}), s.get("patternProperties", {}), s.get("additionalProperties"), name, pointer)
        return None if not schemas else schemas[0] if len(schemas) == 1 else {"allOf": schemas}

    def key_schemas(self, properties: dict, patterns: dict, additional, name: str, pointer: str) -> list:
        """The schemas the value of key ``name`` must satisfy: its property schema and those of the
        patterns it matches, else ``additional`` (None: none)."""
        key = strings.spelling(name).encode()
        out = [properties[name]] if properties.get(name) is not None else []
        out += [x for p, x in patterns.items() if self.key_pattern(p, pointer).accepts(key)]
        return out or ([] if additional is None else [additional])

    def key_pattern(self, pattern: str, pointer: str):
        """The DFA of the key spellings in which ``pattern`` finds a match."""
        if pattern not in self._key_patterns:
            node = pattern_node(pattern, pointer=child(pointer, "patternProperties", pattern), keyword="patternProperties")
            self._key_patterns[pattern] = strings.spelled_dfa(node)
        return self._key_patterns[pattern]

    # --- per type -----------------------------------------------------------------------------

    def typed(self, s: dict, pointer: str, depth: int) -> dict[str, rx.Node]:
        """The language of ``s`` (flattened, without anyOf) split by JSON type."""
        declared = s.get("type", list(TYPES))
        declared = {declared} if isinstance(declared, str) else set(declared)
        unknown = declared - set(TYPES) - {"integer"}
        if unknown:
            raise SchemaError(f"unknown type {min(unknown)!r}", keyword="type", pointer=pointer)
        integer = "integer" in declared and "number" not in declared
        if integer:
            declared.add("number")
        if "enum" in s or "const" in s:
            return self.enum(s, pointer, depth, declared)
        builders = {
            "null": lambda: rx.Text("null"),
            "boolean": lambda: rx.alt(rx.Text("true"), rx.Text("false")),
            "number": lambda: self.number(s, pointer, integer),
            "string": lambda: strings.quoted(self.string_body(s, pointer)),
            "array": lambda: self.array(s, pointer, depth),
            "object": lambda: self.object(s, pointer, depth),
        }
        out = {t: builders[t]() for t in TYPES if t in declared}
        if set(_NEGATIONS) & set(s):
            out = {t: self.excluding(s, t, node, pointer, depth) for t, node in out.items()}
        return {t: node for t, node in out.items() if node != rx.NOTHING}

    # --- differences ----------------------------------------------------------------------------

    def excluding(self, s: dict, t: str, node: rx.Node, pointer: str, depth: int) -> rx.Node:
        """``node``, the type-``t`` values of ``s`` without its negations, minus those of its
        ``not`` and of the oneOf branches it excludes. Where that cannot be exact, the oneOf
        exclusions are dropped with a warning, then ``not`` is `unsupported`; inside another
        difference, that one fails instead."""
        rules = set(self.bodies)
        try:
            return self.difference(s, t, node, [s[k] for k in _NEGATIONS if k in s], pointer, depth)
        except _Irregular as e:
            if self._negating:
                raise
            for name in set(self.bodies) - rules:  # compiled in the failed attempt, maybe half
                del self.bodies[name]
            if _OTHERS in s:
                warnings.warn(f"'oneOf' at {pointer} is compiled as 'anyOf' for {t} values: {e}", stacklevel=2)
                return self.excluding({k: v for k, v in s.items() if k != _OTHERS}, t, node, pointer, depth)
            self.unsupported("not", str(e), child(pointer, "not"))
            return node

    def difference(self, s: dict, t: str, node: rx.Node, negated: list, pointer: str, depth: int) -> rx.Node:
        """``node`` minus the type-``t`` values of the ``negated`` schemas (see `excluding`).

        Raises:
          _Irregular: the difference needs more than JSON Schema keywords can say.
        """
        rest = {k: v for k, v in s.items() if k not in _NEGATIONS}
        container = t in ("array", "object")
        original = cases = [self.merge([self.explicit(rest), {"type": t}], pointer)] if container else []
        with self.negating():
            for flat in [self.flatten(x, pointer) for x in negated]:
                for b in [] if flat is False else self.branches(flat, pointer):
                    if t not in _types(b):
                        continue
                    if not _constrains(b, t):
                        return rx.NOTHING
                    if container:
                        cases = [m for c in cases for v in self.failures(c, b, t, pointer) if (m := self.merge([c, v], pointer)) is not False]
                    elif not self.disjoint(rest, b, t, pointer):
                        excluded = self.typed(self.merge([b, {"type": t}], pointer), pointer, depth).get(t, rx.NOTHING)
                        node = _automaton(rx.difference(rx.intersect(rx.to_dfa(node), _canonical(t)), rx.to_dfa(excluded)))
            if cases != original:
                node = rx.alt(*[self.value(c, pointer, depth) for c in cases])
        return node

    @contextlib.contextmanager
    def negating(self):
        """Count one more difference being compiled inside the others (see `unsupported`)."""
        if self._negating >= MAX_NESTED_NEGATIONS:
            raise _Irregular(f"negations nested more than {MAX_NESTED_NEGATIONS} deep (a recursive schema)")
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
          _Irregular: some way of failing ``b`` is not a JSON Schema.
        """
        if self.disjoint(a, b, t, pointer):
            return [{}]
        if {"enum", "const"} & set(b):
            raise _Irregular(f"enum or const of {t} values")
        negated = [self.flatten(b[k], pointer) for k in _NEGATIONS if k in b]  # failing "not x": x
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
        out += [({"maxProperties": n - 1}, {"minProperties": n}) for n in [max(_counts(b, "minProperties", pointer) or [0])] if n]
        out += [({"minProperties": n + 1}, {"maxProperties": n}) for n in [min(_counts(b, "maxProperties", pointer) or [-1])] if n >= 0]
        names = self.key_names(b, pointer)
        others = self.additional(b)
        for k in dict.fromkeys([*a.get("properties", {}), *required, *b.get("properties", {}), *b.get("required", [])]):
            if not self.can_have(a, k, pointer):
                continue
            schemas = self.key_schemas(b.get("properties", {}), b.get("patternProperties", {}), others, k, pointer)
            if names is not None and not names.accepts(strings.spelling(k).encode()):
                out.append(({"required": [k]}, {"properties": {k: False}}))
            elif not all(map(_trivial, schemas)):
                out.append(({"required": [k], "properties": {k: {"not": {"allOf": schemas}}}}, {"properties": {k: {"allOf": schemas}}}))
        if (a.get("patternProperties") or a["additionalProperties"] is not False) and (b.get("patternProperties") or not _trivial(others) or names is not None):
            raise _Irregular("the keys that neither schema names would need 'some member' constraints")
        return out

    def array_failures(self, a: dict, b: dict, pointer: str) -> list[tuple[dict, dict | None]]:
        """(fail, hold) pairs for `failures`; no hold for a ``contains`` (two cannot be merged)."""
        out = [({"maxItems": n - 1}, {"minItems": n}) for n in [max(_counts(b, "minItems", pointer) or [0])] if n]
        out += [({"minItems": n + 1}, {"maxItems": n}) for n in [min(_counts(b, "maxItems", pointer) or [-1])] if n >= 0]
        prefix = b.get("prefixItems", [])
        out += [({"minItems": i + 1, "prefixItems": [True] * i + [{"not": p}]}, {"prefixItems": [True] * i + [p]}) for i, p in enumerate(prefix) if not _trivial(p)]
        tail = self.items(b)
        if tail is False:
            out.append(({"minItems": len(prefix) + 1}, {"maxItems": len(prefix)}))
        elif not _trivial(tail):
            if prefix:
                raise _Irregular("items after prefixItems would need 'some later item' constraints")
            out.append(({"contains": {"not": tail}}, {"items": tail}))
        if "contains" in b:
            at_least, at_most = max(_counts(b, "minContains", pointer) or [1]), _counts(b, "maxContains", pointer)
            out += [({"contains": b["contains"], "minContains": 0, "maxContains": at_least - 1}, None)] if at_least else []
            out += [({"contains": b["contains"], "minContains": min(at_most) + 1}, None)] if at_most else []
        if "contains" in a and any("contains" in fail for fail, _ in out):
            raise _Irregular("two contains keywords")
        return out

    def can_have(self, a: dict, key: str, pointer: str) -> bool:
        """Whether objects of ``a`` (with explicit additionalProperties) may have ``key``."""
        return False not in self.key_schemas(a.get("properties", {}), a.get("patternProperties", {}), a["additionalProperties"], key, pointer)

    def disjoint(self, a: dict, b: dict, t: str, pointer: str) -> bool:
        """Whether no value of type ``t`` satisfies both flattened schemas, judged cheaply (False
        when unsure) by their types, enum and const values, and for objects the values of the
        properties both require (a discriminator)."""
        if t not in _types(a) & _types(b):
            return True
        va, vb = _values(a), _values(b)
        if va is not None and vb is not None and not any(_json_equal(x, y) for x in va for y in vb):
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

    def enum(self, s: dict, pointer: str, depth: int, declared: set[str]) -> dict[str, rx.Node]:
        values = [s["const"]] if "const" in s else s["enum"]
        if "const" in s and "enum" in s:
            values = [v for v in s["enum"] if _json_equal(v, s["const"])]
        rest = {k: v for k, v in s.items() if k not in ("enum", "const")}
        check = self.typed(rest, pointer, depth) if set(rest) - {"type"} else None
        out: dict[str, list[rx.Node]] = {}
        for v in values:
            t = _type_of(v)
            if t not in declared or (t == "number" and "integer" in s.get("type", ()) and not numbers.is_integral(v)):
                continue
            if check is not None:
                allowed = check.get(t)
                scalar = t not in ("array", "object")
                if allowed is None or (is_regular(allowed) and (scalar or not self.layout.depth_dependent) and not rx.to_dfa(allowed).accepts(_compact(v).encode())):
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
        number = _decimal(v, "enum", "#")
        return numbers.interval(number, False, number, False, integer=False)

    def number(self, s: dict, pointer: str, integer: bool) -> rx.Node:
        lo, lo_open, hi, hi_open = None, False, None, False
        for key, bound in (("minimum", False), ("exclusiveMinimum", True)):
            if key in s:
                v = _decimal(s[key], key, pointer)
                if lo is None or v > lo or (v == lo and bound):
                    lo, lo_open = v, bound
        for key, bound in (("maximum", False), ("exclusiveMaximum", True)):
            if key in s:
                v = _decimal(s[key], key, pointer)
                if hi is None or v < hi or (v == hi and bound):
                    hi, hi_open = v, bound
        node = numbers.interval(lo, lo_open, hi, hi_open, integer=integer)
        for m in _as_list(s.get("multipleOf", [])):
            d = _decimal(m, "multipleOf", pointer)
            if d <= 0:
                raise SchemaError("multipleOf must be greater than 0", keyword="multipleOf", pointer=pointer)
            multiples = numbers.multiple_of(d, integer=integer)
            if multiples is None:
                self.unsupported("multipleOf", f"the divisor {m} needs more than {numbers.MAX_MULTIPLE_OF} remainders", pointer)
                continue
            node = _automaton(rx.intersect(rx.to_dfa(node), multiples.dfa))
        return node

    def string_body(self, s: dict, pointer: str) -> rx.Node:
        values = []
        for p in _as_list(s.get("pattern", [])):
            values.append(pattern_node(p, pointer=pointer))
        for f in _as_list(s.get("format", [])):
            node = format_node(f)
            if node is None:
                self.unsupported("format", f"unknown format {f!r}", pointer)
            else:
                values.append(node)
        lo = max(_counts(s, "minLength", pointer) or [0])
        his = _counts(s, "maxLength", pointer)
        return strings.string_body(lo, min(his) if his else None, values)

    def items(self, s: dict):
        """The schema of the items after ``prefixItems``: ``items``, else closed after a prefix
        unless allow_additional is set."""
        return s.get("items", bool(self.allow_additional or not s.get("prefixItems")))

    def array(self, s: dict, pointer: str, depth: int) -> rx.Node:
        prefix = s.get("prefixItems", [])
        items_schema = self.items(s)
        tail = self.value(items_schema, child(pointer, "items"), depth + 1)
        items = [self.value(p, child(pointer, "prefixItems", i), depth + 1) for i, p in enumerate(prefix)]
        lo = max(_counts(s, "minItems", pointer) or [0])
        his = _counts(s, "maxItems", pointer)
        hi = min(his) if his else None
        comma = self.layout.comma(depth)

        def rest(i: int) -> rx.Node:  # elements i.. each after a comma
            if hi is not None and i >= hi:
                return rx.EMPTY
            if i >= len(items):
                return rx.repeat(rx.seq(comma, tail), max(lo - i, 0), None if hi is None else hi - i)
            element = rx.seq(comma, items[i], rest(i + 1))
            return element if i < lo else rx.optional(element)

        first = items[0] if items else tail
        nonempty = rx.seq(first, rest(1)) if hi != 0 else rx.NOTHING
        may_be_empty = lo == 0
        if "contains" in s:
            nonempty, may_be_empty = self.contains(s, pointer, depth, nonempty, may_be_empty, items_schema, comma)
        return self.layout.container("[]", nonempty, may_be_empty, depth)

    def contains(self, s, pointer, depth, nonempty, may_be_empty, items_schema, comma):
        """The element lists of ``array`` restricted to minContains..maxContains hits."""
        at_least = max(_counts(s, "minContains", pointer) or [1])
        his = _counts(s, "maxContains", pointer)
        at_most = min(his) if his else None
        where = child(pointer, "contains")
        hit = self.value({"allOf": [items_schema, s["contains"]]}, where, depth + 1)
        miss = self.value({"allOf": [items_schema, {"not": s["contains"]}]}, where, depth + 1)

        def after(a: int, b: int | None) -> rx.Node:  # comma-led elements with a..b hits
            if b is not None and b < 0:
                return rx.NOTHING
            misses = rx.star(rx.seq(comma, miss))
            return rx.seq(misses, rx.repeat(rx.seq(comma, hit, misses), max(a, 0), b))

        less = lambda b: None if b is None else b - 1
        counted = rx.alt(rx.seq(hit, after(at_least - 1, less(at_most))), rx.seq(miss, after(at_least, at_most)))
        may_be_empty = may_be_empty and at_least == 0
        if not ({"prefixItems", "minItems", "maxItems"} & set(s)):
            return counted, may_be_empty
        if not (is_regular(nonempty) and is_regular(counted)):
            self.unsupported("contains", "contains with item counts over recursive item schemas", pointer)
            return nonempty, may_be_empty
        return _automaton(rx.intersect(rx.to_dfa(nonempty), rx.to_dfa(counted))), may_be_empty

    def object(self, s: dict, pointer: str, depth: int) -> rx.Node:
        properties: dict = dict(s.get("properties", {}))
        required = list(dict.fromkeys(s.get("required", [])))
        for name in required:
            properties.setdefault(name, None)  # declared by `required` alone
        patterns = s.get("patternProperties", {})
        if len(patterns) > MAX_PATTERN_PROPERTIES:
            raise SchemaError(f"more than {MAX_PATTERN_PROPERTIES} patternProperties", keyword="patternProperties", pointer=pointer)
        additional = self.additional(s)
        names = self.key_names(s, pointer)
        colon, comma = self.layout.colon(), self.layout.comma(depth)

        def member(key_node: rx.Node, schemas: list, where: str) -> rx.Node:
            merged = self.merge([self.flatten(x, where) for x in schemas], where) if len(schemas) != 1 else schemas[0]
            return rx.seq(key_node, colon, self.value(merged, where, depth + 1))

        declared = []  # (member node, required)
        for name in properties:
            node = member(strings.literal(name), self.key_schemas(properties, patterns, additional, name, pointer), child(pointer, "properties", name))
            if names is not None and not names.accepts(strings.spelling(name).encode()):
                node = rx.NOTHING
            declared.append((node, name in required))
        extra = self.extra_members(pointer, properties, patterns, additional, names, member)
        lo = max(_counts(s, "minProperties", pointer) or [0])
        his = _counts(s, "maxProperties", pointer)
        hi = min(his) if his else None
        cap = hi + 1 if hi is not None else lo
        after_memo: dict = {}

        def after(i: int, count: int) -> rx.Node:  # members i.. once ``count`` are written
            count = min(count, cap)
            if hi is not None and count > hi:
                return rx.NOTHING
            key = (i, count)
            if key not in after_memo:
                if i == len(declared):
                    after_memo[key] = rx.repeat(rx.seq(comma, extra), max(lo - count, 0), None if hi is None else hi - count)
                else:
                    node, needed = declared[i]
                    if needed:
                        after_memo[key] = rx.seq(comma, node, after(i + 1, count + 1))
                    elif count == cap and hi is None:  # writing it counts for nothing more
                        after_memo[key] = rx.seq(rx.repeat(rx.seq(comma, node), 0, 1), after(i + 1, count))
                    else:
                        after_memo[key] = rx.alt(rx.seq(comma, node, after(i + 1, count + 1)), after(i + 1, count))
            return after_memo[key]

        def first(i: int) -> rx.Node:  # members i.. with none written yet, at least one to come
            if i == len(declared):
                return rx.seq(extra, after(i, 1))
            node, needed = declared[i]
            written = rx.seq(node, after(i + 1, 1))
            return written if needed else rx.alt(written, first(i + 1))

        may_be_empty = lo == 0 and not any(needed for _, needed in declared)
        return self.layout.container("{}", first(0), may_be_empty, depth)

    def additional(self, s: dict):
        """The schema of the members ``s`` does not name: ``additionalProperties``, else any value,
        but none where ``s`` describes its keys and allow_additional is not set."""
        described = "properties" in s or "patternProperties" in s or "required" in s
        return s.get("additionalProperties", self.allow_additional or not described)

    def key_names(self, s: dict, pointer: str):
        """The DFA of key spellings allowed by ``propertyNames`` (None: no constraint)."""
        if "propertyNames" not in s:
            return None
        where = child(pointer, "propertyNames")
        node = self.value({"allOf": [s["propertyNames"], {"type": "string"}]}, where, 0)
        if not is_regular(node):
            self.unsupported("propertyNames", "recursive key schemas", where)
            return None
        return rx.intersect(_unquoted(rx.to_dfa(node)), strings.any_key())

    def extra_members(self, pointer, properties, patterns, additional, names, member) -> rx.Node:
        """Members with undeclared keys: one region per combination of matching patterns."""
        if additional is False and not patterns:
            return rx.NOTHING
        keys = strings.any_key()
        if properties:
            keys = rx.difference(keys, rx.to_dfa(rx.alt(*[strings.spelled(rx.Text(n)) for n in properties])))
        if names is not None:
            keys = rx.intersect(keys, names)
        regions = []
        for chosen in itertools.product((False, True), repeat=len(patterns)):
            region = keys
            for p, inside in zip(patterns, chosen):
                dfa = self.key_pattern(p, pointer)
                region = rx.intersect(region, dfa) if inside else rx.difference(region, dfa)
            if not region.start:
                continue
            schemas = [patterns[p] for p, inside in zip(patterns, chosen) if inside] or [additional]
            if schemas == [False]:
                continue
            regions.append(member(strings.quoted(rx.Automaton(region)), schemas, child(pointer, "additionalProperties")))
        return rx.alt(*regions)

    def unsupported(self, keyword: str, why: str, pointer: str) -> None:
        if self._negating:
            raise _Irregular(f"{keyword!r} at {pointer}: {why}")
        if self.strict:
            raise SchemaError(f"cannot compile {keyword!r}: {why}", keyword=keyword, pointer=pointer)
        warnings.warn(f"{keyword!r} at {pointer} is ignored: {why}", stacklevel=4)


# --- keyword merging ---------------------------------------------------------------------------


def _merge_keyword(key: str, a, b, pointer: str):
    if key == "type":
        ta, tb = _type_set(a), _type_set(b)
        both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or ("number" in ta and "integer" in tb) else set())
        return sorted(both)
    if key == "required":
        return list(dict.fromkeys([*a, *b]))
    if key == "enum":
        return [x for x in a if any(_json_equal(x, y) for y in b)]
    if key == "const":
        if not _json_equal(a, b):
            raise SchemaError("allOf with two different const values accepts no value", keyword="const", pointer=pointer)
        return a
    if key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"):
        return max(a, b)
    if key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"):
        return min(a, b)
    if key in ("pattern", "format", "multipleOf"):
        return [*_as_list(a), *_as_list(b)]
    if key == "propertyNames":
        return {"allOf": [a, b]}
    if key in _NEGATIONS:
        return {"anyOf": [a, b]}
    if key == _ANY_OF:
        return [*a, *b]
    if key in _ANNOTATIONS or key not in _ASSERTIONS:
        return a
    raise SchemaError(f"cannot combine two {key!r} keywords in allOf", keyword=key, pointer=pointer)


def _merged_items(parts: list[dict]) -> dict:
    """``prefixItems`` and ``items`` of several schemas, position by position: each schema's
    ``items`` applies after its own ``prefixItems``."""
    arrays = [p for p in parts if "items" in p or "prefixItems" in p]
    if len(arrays) <= 1:
        return {k: v for p in arrays for k, v in p.items() if k in ("items", "prefixItems")}
    at = lambda p, i: p["prefixItems"][i] if i < len(p.get("prefixItems", ())) else p.get("items", True)
    n = max(len(p.get("prefixItems", ())) for p in arrays)
    out: dict = {"prefixItems": [{"allOf": [at(p, i) for p in arrays]} for i in range(n)]} if n else {}
    tails = [p["items"] for p in arrays if "items" in p]
    if tails:
        out["items"] = tails[0] if len(tails) == 1 else {"allOf": tails}
    return out


_TYPE_KEYWORDS = {
    "null": set(),
    "boolean": set(),
    "number": {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"},
    "string": {"minLength", "maxLength", "pattern", "format"},
    "array": {"items", "prefixItems", "minItems", "maxItems", "contains"},
    "object": {"properties", "required", "additionalProperties", "patternProperties", "propertyNames", "minProperties", "maxProperties"},
}


def _constrains(s: dict, t: str) -> bool:
    """Whether the flattened schema ``s`` rejects some values of type ``t`` that it does not
    exclude by ``type`` alone."""
    if {"enum", "const", *_NEGATIONS, _ANY_OF} & set(s) or _TYPE_KEYWORDS[t] & set(s):
        return True
    return t == "number" and "integer" in _type_set(s.get("type", ())) and "number" not in _type_set(s.get("type", ()))


def _types(s: dict) -> set[str]:
    """The JSON types of the values the flattened schema ``s`` may accept ("integer": "number")."""
    types = {"number" if t == "integer" else t for t in _type_set(s.get("type", TYPES))}
    values = _values(s)
    return types if values is None else types & {_type_of(v) for v in values}


def _values(s: dict) -> list | None:
    """The values ``s`` lists in ``const`` or ``enum`` (None: no list)."""
    return [s["const"]] if "const" in s else s.get("enum")


def _trivial(s) -> bool:
    """Whether the schema ``s`` holds every value, plainly (True, or no assertion)."""
    return s is True or (isinstance(s, dict) and not set(s) & _ASSERTIONS)


@functools.cache
def _canonical(t: str) -> ByteDFA:
    """The DFA of the canonical spellings of the scalars of type ``t``: one per value."""
    nodes = {"null": rx.Text("null"), "boolean": rx.alt(rx.Text("true"), rx.Text("false"))}
    nodes.update(number=numbers.CANONICAL, string=strings.quoted(rx.star(strings.CANONICAL_UNIT)))
    return rx.to_dfa(nodes[t])


def _type_set(t) -> set[str]:
    return {t} if isinstance(t, str) else set(t)


def _type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float, decimal.Decimal)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]


def _json_equal(a, b) -> bool:
    """JSON Schema equality: 1 == 1.0, but true != 1; objects unordered."""
    if _type_of(a) != _type_of(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_json_equal, a, b))
    return a == b


def _decimal(v, key: str, pointer: str) -> decimal.Decimal:
    if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
        raise SchemaError(f"{key} must be a number, got {json.dumps(v, default=str)}", keyword=key, pointer=pointer)
    return decimal.Decimal(str(v)) if isinstance(v, float) else decimal.Decimal(v)


def _counts(s: dict, key: str, pointer: str) -> list[int]:
    if key not in s:
        return []
    values = _as_list(s[key])
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, decimal.Decimal)) or v < 0 or v != int(v):
            raise SchemaError(f"{key} must be a non-negative integer, got {v}", keyword=key, pointer=pointer)
    return [int(v) for v in values]


def _compact(v) -> str:
    """Compact JSON text of ``v``; numbers in fixed-point notation, as `literal` spells them."""
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return format(_decimal(v, "enum", "#").normalize(), "f")
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + _compact(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(map(_compact, v)) + "]"
    return json.dumps(v, ensure_ascii=False)


def is_regular(node) -> bool:
    """No `Ref` inside ``node``."""
    return not any(isinstance(leaf, Ref) for leaf in rx.leaves(node))


def _automaton(dfa) -> rx.Node:
    return rx.Automaton(dfa) if dfa.start else rx.NOTHING


def _as_list(value) -> list:
    """Keywords that merging may have collected into lists (pattern, format, multipleOf...)."""
    return value if isinstance(value, list) else [value]


def _unquoted(dfa: ByteDFA) -> ByteDFA:
    """The minimal DFA of the strings s such that ``dfa`` accepts '"' + s + '"'."""
    quote = ord('"')
    accepting = dfa.accepting[dfa.transitions[:, quote]]
    accepting[DEAD] = False
    start = int(dfa.transitions[dfa.start, quote])
    return minimise(dfa.transitions, accepting, start=start, byte_class=np.arange(256, dtype=np.int32))
