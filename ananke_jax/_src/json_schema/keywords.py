"""JSON Schema keywords: which ones there are, how two of them combine under ``allOf``, and small
questions about (flattened) schemas and JSON values that every part of the compiler asks.

A *flattened* schema is one dict of keywords without ``$ref``, ``allOf``, ``anyOf``, ``oneOf`` and
``if`` (see `combinators`): its alternatives are listed under `ANY_OF` and the ``oneOf`` branches it
excludes under `OTHERS`.
"""

from __future__ import annotations

import decimal
import json

from ananke_jax._src.errors import SchemaError

TYPES = ("null", "boolean", "number", "string", "array", "object")
ANY_OF = "anyOf*"  # in a flattened schema: a list of branch lists, one value of each applies
OTHERS = "oneOf others*"  # in a flattened schema: other oneOf branches, whose values it excludes
NEGATIONS = ("not", OTHERS)
_ANNOTATIONS = frozenset(
    [
        "$schema",
        "$id",
        "$anchor",
        "$comment",
        "$defs",
        "definitions",
        "$vocabulary",
        "$dynamicAnchor",
        "title",
        "description",
        "default",
        "examples",
        "deprecated",
        "readOnly",
        "writeOnly",
        "contentMediaType",
        "contentEncoding",
        "contentSchema",
    ]
)
ASSERTIONS = frozenset(
    [
        "type",
        "enum",
        "const",
        "properties",
        "required",
        "additionalProperties",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "contains",
        "minContains",
        "maxContains",
        "anyOf",
        "oneOf",
        "allOf",
        "not",
        "if",
        "then",
        "else",
        "$ref",
        OTHERS,
    ]
)


def merge_keyword(key: str, a, b, pointer: str):
    """The value of keyword ``key`` in the conjunction of two schemas that give it ``a`` and ``b``."""
    if key == "type":
        ta, tb = type_set(a), type_set(b)
        both = (ta & tb) | ({"integer"} if ("integer" in ta and "number" in tb) or ("number" in ta and "integer" in tb) else set())
        return sorted(both)
    if key == "required":
        return list(dict.fromkeys([*a, *b]))
    if key == "enum":
        return [x for x in a if any(json_equal(x, y) for y in b)]
    if key == "const":
        if not json_equal(a, b):
            raise SchemaError("allOf with two different const values accepts no value", keyword="const", pointer=pointer)
        return a
    if key in ("minimum", "exclusiveMinimum", "minLength", "minItems", "minProperties", "minContains"):
        return max(a, b)
    if key in ("maximum", "exclusiveMaximum", "maxLength", "maxItems", "maxProperties", "maxContains"):
        return min(a, b)
    if key in ("pattern", "format", "multipleOf"):
        return [*as_list(a), *as_list(b)]
    if key == "propertyNames":
        return {"allOf": [a, b]}
    if key in NEGATIONS:
        return {"anyOf": [a, b]}
    if key == ANY_OF:
        return [*a, *b]
    if key in _ANNOTATIONS or key not in ASSERTIONS:
        return a
    raise SchemaError(f"cannot combine two {key!r} keywords in allOf", keyword=key, pointer=pointer)


def merged_items(parts: list[dict]) -> dict:
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


def implied_type(s: dict) -> str | None:
    """The one JSON type whose keywords the schema ``s`` (a dict) uses, where it names no
    ``type``, ``enum`` or ``const`` (None: it does, or it uses keywords of no type or of several)."""
    if {"type", "enum", "const"} & set(s):
        return None
    used = [t for t, keywords in _TYPE_KEYWORDS.items() if keywords & set(s)]
    return used[0] if len(used) == 1 else None


def constrains(s: dict, t: str) -> bool:
    """Whether the flattened schema ``s`` rejects some values of type ``t`` that it does not
    exclude by ``type`` alone."""
    if {"enum", "const", *NEGATIONS, ANY_OF} & set(s) or _TYPE_KEYWORDS[t] & set(s):
        return True
    return t == "number" and "integer" in type_set(s.get("type", ())) and "number" not in type_set(s.get("type", ()))


def types_of(s: dict) -> set[str]:
    """The JSON types of the values the flattened schema ``s`` may accept ("integer": "number")."""
    types = {"number" if t == "integer" else t for t in type_set(s.get("type", TYPES))}
    values = listed_values(s)
    return types if values is None else types & {type_of(v) for v in values}


def listed_values(s: dict) -> list | None:
    """The values ``s`` lists in ``const`` or ``enum`` (None: no list)."""
    return [s["const"]] if "const" in s else s.get("enum")


def trivial(s) -> bool:
    """Whether the schema ``s`` holds every value, plainly (True, or no assertion)."""
    return s is True or (isinstance(s, dict) and not set(s) & ASSERTIONS)


def type_set(t) -> set[str]:
    return {t} if isinstance(t, str) else set(t)


def type_of(v) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, (int, float, decimal.Decimal)):
        return "number"
    return {str: "string", list: "array", dict: "object"}[type(v)]


def json_equal(a, b) -> bool:
    """JSON Schema equality: 1 == 1.0, but true != 1; objects unordered."""
    if type_of(a) != type_of(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(json_equal, a, b))
    return a == b


def to_decimal(v, key: str, pointer: str) -> decimal.Decimal:
    if isinstance(v, bool) or not isinstance(v, (int, float, decimal.Decimal)):
        raise SchemaError(f"{key} must be a number, got {json.dumps(v, default=str)}", keyword=key, pointer=pointer)
    return decimal.Decimal(str(v)) if isinstance(v, float) else decimal.Decimal(v)


def counts(s: dict, key: str, pointer: str) -> list[int]:
    if key not in s:
        return []
    values = as_list(s[key])
    for v in values:
        if isinstance(v, bool) or not isinstance(v, (int, decimal.Decimal)) or v < 0 or v != int(v):
            raise SchemaError(f"{key} must be a non-negative integer, got {v}", keyword=key, pointer=pointer)
    return [int(v) for v in values]


def compact(v) -> str:
    """Compact JSON text of ``v``; numbers in fixed-point notation, as `literal` spells them."""
    if isinstance(v, (int, float, decimal.Decimal)) and not isinstance(v, bool):
        return format(to_decimal(v, "enum", "#").normalize(), "f")
    if isinstance(v, dict):
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + compact(x) for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ",".join(map(compact, v)) + "]"
    return json.dumps(v, ensure_ascii=False)


def as_list(value) -> list:
    """Keywords that merging may have collected into lists (pattern, format, multipleOf...)."""
    return value if isinstance(value, list) else [value]
