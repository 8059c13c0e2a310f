"""``$ref``, ``allOf``, ``anyOf``, ``oneOf`` and ``if``/``then``/``else``: flattening a schema.

A schema is flattened into one dict of keywords (see `keywords`): ``allOf`` (and keywords beside
``$ref``) are merged keyword by keyword; ``anyOf`` is kept as a list of alternatives that
distributes over the rest of the schema (`Combinators.branches`); ``oneOf`` too, each branch
excluding the other branches it may share values with; ``if``/``then``/``else`` is ``(if and then)
or (not if and else)``.
"""

from __future__ import annotations

import itertools
import json
import warnings

from ananke_jax._src.errors import SchemaError
from ananke_jax._src.json_schema.keywords import ANY_OF, OTHERS, TYPES, merge_keyword, merged_items
from ananke_jax._src.json_schema.refs import child

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
}
_MEMBER_KEYWORDS = frozenset(("items", "prefixItems", "properties", "patternProperties", "additionalProperties"))
_RAW = frozenset(("$ref", "allOf", "anyOf", "oneOf", "if", "then", "else"))

# Expansions of anyOf branches within anyOf branches (through $ref) before a cycle is assumed.
MAX_ANY_OF_NESTING = 32


def tuple_items(schema: dict, pointer: str) -> dict:
    """``schema`` with the array form of ``items`` (drafts 4 to 2019-09) read as 2020-12's
    ``prefixItems``, and ``additionalItems`` as the ``items`` after them; beside an ``items``
    schema, or none, ``additionalItems`` asserts nothing, as those drafts say.

    Raises:
      SchemaError: ``items`` as an array beside ``prefixItems``.
    """
    if "additionalItems" not in schema and not isinstance(schema.get("items"), list):
        return schema
    out = {k: v for k, v in schema.items() if k not in ("items", "additionalItems")}
    if not isinstance(schema.get("items"), list):
        return out | ({"items": schema["items"]} if "items" in schema else {})
    if "prefixItems" in schema:
        raise SchemaError("'items' as an array (drafts 4 to 2019-09) beside 'prefixItems' (2020-12)", keyword="items", pointer=pointer)
    return out | {"prefixItems": schema["items"]} | ({"items": schema["additionalItems"]} if "additionalItems" in schema else {})


class Cycle(SchemaError):
    """A ``$ref`` cycle that consumes no input."""


class Combinators:
    """The methods of `SchemaCompiler` that flatten schemas (they use its resolver, ``strict``
    option, `merged_members` and `disjoint`)."""

    def branches(self, flat: dict, pointer: str, nesting: int = 0):
        """The conjunctions that the flattened ``flat`` is the union of: one per choice of a branch
        in each of its anyOf lists (flattened, without `ANY_OF`)."""
        if nesting > MAX_ANY_OF_NESTING:  # a branch that leads back to the schema keeps expanding
            raise Cycle(
                f"a $ref cycle that consumes no input (anyOf branches expand more than {MAX_ANY_OF_NESTING} levels deep)",
                keyword="$ref",
                pointer=pointer,
            )
        rest = {k: v for k, v in flat.items() if k != ANY_OF}
        choices = [[self.flatten(b, pointer) for b in alternatives] for alternatives in flat.get(ANY_OF, [])]
        for combo in itertools.product(*choices):
            merged = self.merge([rest, *combo], pointer)
            if merged is not False:
                yield from self.branches(merged, pointer, nesting + 1) if ANY_OF in merged else [merged]

    def flatten(self, schema, pointer: str, _seen=()):
        """``schema`` without ``$ref``, ``allOf``, ``anyOf``, ``oneOf`` and ``if``: one merged
        dict (the alternatives collected under `ANY_OF`), or False for no value."""
        if schema is True:
            return {}
        if schema is False:
            return False
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {json.dumps(schema, default=str)[:40]}", pointer=pointer)
        schema = tuple_items(schema, pointer)
        self.check_keywords(schema, pointer)
        parts = [{k: v for k, v in schema.items() if k not in _RAW}]
        ref = schema.get("$ref")
        if ref is not None:
            target = self.resolver.resolve(ref, pointer)
            if target in _seen:
                raise Cycle("a $ref cycle that consumes no input", keyword="$ref", pointer=pointer)
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
            parts.append({ANY_OF: any_of})
        return self.merge(parts, pointer)

    def exactly_one(self, branches: list, pointer: str, seen: tuple) -> list:
        """The ``oneOf`` ``branches`` as alternatives, each excluding the others it may overlap
        (see `disjoint`). A branch that leads back here without consuming input excludes
        nothing: that ``oneOf`` is compiled as ``anyOf``, with a warning."""
        try:
            flat = [self.flatten(b, child(pointer, "oneOf", i), seen) for i, b in enumerate(branches)]
        except Cycle:
            if not self._screening:
                warnings.warn(f"'oneOf' at {pointer} is compiled as 'anyOf': a branch refers back to it", stacklevel=5)
            return [*branches]
        out = []
        for i, b in enumerate(branches):
            others = [
                c
                for j, c in enumerate(branches)
                if j != i
                and flat[i] is not False
                and flat[j] is not False
                and not all(self.disjoint(flat[i], flat[j], t, pointer) for t in TYPES)
            ]
            out.append({"allOf": [b], OTHERS: {"anyOf": others}} if others else b)
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
        out: dict = {**merged_items(flat), **self.merged_members(flat, pointer)}
        for part in flat:
            for key, value in part.items():
                if key in _MEMBER_KEYWORDS:
                    continue
                if key not in out:
                    out[key] = value
                else:
                    out[key] = merge_keyword(key, out[key], value, pointer)
        return out
