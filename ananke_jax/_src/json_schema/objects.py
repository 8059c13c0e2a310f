"""Objects: members declared by ``properties`` and ``required``, the others by
``patternProperties`` and ``additionalProperties``, key names, and member counts.

Members are written in the order of their declaration, or with the ``any_order`` option in any
order (an `rx.Interleave`); undeclared keys fall into one region per combination of the patterns
they match.
"""

from __future__ import annotations

import itertools

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, minimise
from ananke_jax._src.errors import SchemaError
from ananke_jax._src.json_schema import strings
from ananke_jax._src.json_schema.ecma_regex import pattern_node
from ananke_jax._src.json_schema.keywords import counts
from ananke_jax._src.json_schema.refs import child
from ananke_jax._src.json_schema.rules import is_regular

MAX_PATTERN_PROPERTIES = 6  # key regions are the 2**n combinations of pattern matches
MAX_ANY_ORDER_PROPERTIES = 10  # any_order: states double with each (costs in docs/guide.md)


class Objects:
    """The methods of `SchemaCompiler` for objects and their keys (they use its layout, its
    ``allow_additional``, ``any_order`` and ``max_string_length`` options, `flatten`, `merge`,
    `value` and `unsupported`)."""

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
            where = child(pointer, "patternProperties", pattern)
            node = pattern_node(pattern, pointer=where, keyword="patternProperties", python_anchors=not self.strict)
            self._key_patterns[pattern] = strings.spelled_dfa(node)
        return self._key_patterns[pattern]

    def object(self, s: dict, pointer: str, depth: int) -> rx.Node:
        """The objects ``s`` allows: its declared members in order (the required ones always),
        then members with other keys, within the member counts."""
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
            node = member(
                strings.literal(name), self.key_schemas(properties, patterns, additional, name, pointer), child(pointer, "properties", name)
            )
            if names is not None and not names.accepts(strings.spelling(name).encode()):
                node = rx.NOTHING
            declared.append((node, name in required))
        extra = self.extra_members(pointer, properties, patterns, additional, names, member)
        lo = max(counts(s, "minProperties", pointer) or [0])
        his = counts(s, "maxProperties", pointer)
        hi = min(his) if his else None
        may_be_empty = lo == 0 and not any(needed for _, needed in declared)
        if self.any_order and len(declared) + (extra != rx.NOTHING) > 1:
            if len(declared) > MAX_ANY_ORDER_PROPERTIES:
                raise SchemaError(
                    f"any_order: {len(declared)} properties, more than the limit of {MAX_ANY_ORDER_PROPERTIES}"
                    " (the constraint tracks which were written: its size doubles with each)",
                    keyword="properties",
                    pointer=pointer,
                )
            members, required = zip(*declared) if declared else ((), ())
            items = rx.interleave(members, required, extra, comma, max(lo, 1), hi)
            return self.layout.container("{}", items, may_be_empty, depth)
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
        keys = strings.any_key(self.max_string_length)
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


def _unquoted(dfa: ByteDFA) -> ByteDFA:
    """The minimal DFA of the strings s such that ``dfa`` accepts '"' + s + '"'."""
    quote = ord('"')
    accepting = dfa.accepting[dfa.transitions[:, quote]]
    accepting[DEAD] = False
    start = int(dfa.transitions[dfa.start, quote])
    return minimise(dfa.transitions, accepting, start=start, byte_class=np.arange(256, dtype=np.int32))
