"""Strict refusals found before any automaton is built.

With ``strict=True`` an unsupported keyword (``uniqueItems``, ``dependencies``...) or an unknown
``format`` is a `SchemaError`, but the compiler meets it only when it reaches that subschema,
perhaps after seconds of automata for the properties before it. `Screening.screen` walks the
subschemas in the compiler's own way first (flattening them, splitting them by type, descending
into the members the compiler would compile) and raises the refusal at once.

The walk only refuses what compiling would refuse: where the compiler's choice of subschemas
depends on an automaton (``not``, the exclusions of ``oneOf``, members of pattern-matched or
name-restricted keys), it does not descend.
"""

from __future__ import annotations

import dataclasses

from ananke_jax._src.errors import SchemaError
from ananke_jax._src.json_schema.keywords import ANY_OF, ASSERTIONS, TYPES, type_set
from ananke_jax._src.json_schema.refs import child

MAX_SCREENED = 10_000  # subschemas visited before the walk leaves the rest to the compiler


class Screening:
    """The method of `SchemaCompiler` that screens a schema for strict refusals (it uses its
    resolver, `rule_name`, `flatten`, `branches`, `items`, `additional`, `key_schemas` and
    `formats`)."""

    def screen(self, schema) -> None:
        """Raise the `SchemaError` that compiling the root ``schema`` with ``strict=True`` would
        raise for an unsupported keyword or an unknown format, if the walk finds one. Malformed
        schemas are left to the compiler, whose errors name what is wrong."""
        self._screening = True
        try:
            self._screen(schema, "#", 0, _Walk())
        except SchemaError:
            raise
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError):
            pass
        finally:
            self._screening = False

    def _screen(self, schema, pointer: str, depth: int, walk: _Walk) -> None:
        """`screen` of the subschema at ``pointer``, compiled at nesting ``depth``."""
        walk.visits += 1
        if depth > self.max_depth or walk.visits > MAX_SCREENED or not isinstance(schema, dict):
            return
        if set(schema) & ASSERTIONS == {"$ref"}:  # a rule of its own, screened once
            target = self.resolver.resolve(schema["$ref"], pointer)
            rule = self.rule_name(target, depth)
            if rule not in walk.rules:
                walk.rules.add(rule)
                self._screen(self.resolver.get(target), target, depth, walk)
            return
        flat = self.flatten(schema, pointer)
        if flat is False or not set(flat) & (ASSERTIONS | {ANY_OF}):  # no value, or any value
            return
        alternatives = flat.get(ANY_OF, [])
        if len(alternatives) == 1 and not set(flat) & ASSERTIONS:
            for branch in alternatives[0]:
                self._screen(branch, pointer, depth, walk)
            return
        for branch in self.branches(flat, pointer):
            self._screen_typed(branch, pointer, depth, walk)

    def _screen_typed(self, s: dict, pointer: str, depth: int, walk: _Walk) -> None:
        """`screen` of a flattened branch, as `SchemaCompiler.typed` compiles it."""
        declared = type_set(s.get("type", TYPES))
        if "enum" in s or "const" in s:  # the listed values are checked against the rest
            s = {k: v for k, v in s.items() if k not in ("enum", "const")}
            if not set(s) - {"type"}:
                return
        if "string" in declared:
            self.formats(s, pointer)
        if "array" in declared:
            for i, item in enumerate(s.get("prefixItems", [])):
                self._screen(item, child(pointer, "prefixItems", i), depth + 1, walk)
            self._screen(self.items(s), child(pointer, "items"), depth + 1, walk)
            if "contains" in s:
                self._screen({"allOf": [self.items(s), s["contains"]]}, child(pointer, "contains"), depth + 1, walk)
        if "object" in declared:
            self._screen_members(s, pointer, depth, walk)

    def _screen_members(self, s: dict, pointer: str, depth: int, walk: _Walk) -> None:
        """`screen` of the member schemas that `Objects.object` compiles whatever its keys' DFAs."""
        properties = dict.fromkeys(s.get("required", []))
        properties.update(s.get("properties", {}))
        patterns, additional = s.get("patternProperties", {}), self.additional(s)
        if "propertyNames" in s:
            self._screen({"allOf": [s["propertyNames"], {"type": "string"}]}, child(pointer, "propertyNames"), 0, walk)
        for name in properties:
            schemas = self.key_schemas(properties, patterns, additional, name, pointer)
            self._screen(schemas[0] if len(schemas) == 1 else {"allOf": schemas}, child(pointer, "properties", name), depth + 1, walk)
        if not patterns and "propertyNames" not in s and self.max_string_length is None:  # other keys exist
            self._screen(additional, child(pointer, "additionalProperties"), depth + 1, walk)


@dataclasses.dataclass
class _Walk:
    """Where a screening walk is: the rules screened (by `SchemaCompiler.rule_name`), and the
    visits so far."""

    rules: set = dataclasses.field(default_factory=set)
    visits: int = 0
