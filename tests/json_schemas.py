"""Realistic JSON Schemas (tool calls, records, enums, formats, recursion) for round-trip tests."""

_STR = {"type": "string", "maxLength": 12}
_NAME = {"type": "string", "minLength": 1, "maxLength": 16}

REGULAR = {
    "weather_call": {
        "type": "object",
        "properties": {"location": _NAME, "unit": {"enum": ["celsius", "fahrenheit"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
        "required": ["location"],
    },
    "search_call": {
        "type": "object",
        "properties": {"query": _STR, "top_k": {"type": "integer", "minimum": 1, "maximum": 50}, "safe": {"type": "boolean"}},
        "required": ["query", "top_k"],
        "additionalProperties": False,
    },
    "tool_choice": {
        "anyOf": [
            {"type": "object", "properties": {"tool": {"const": "calculator"}, "expression": _STR}, "required": ["tool", "expression"]},
            {"type": "object", "properties": {"tool": {"const": "clock"}, "timezone": {"enum": ["UTC", "CET", "PST"]}}, "required": ["tool"]},
        ]
    },
    "person": {
        "type": "object",
        "properties": {"name": _NAME, "age": {"type": "integer", "minimum": 0, "maximum": 130}, "email": {"type": "string", "format": "email", "maxLength": 24}},
        "required": ["name", "age"],
    },
    "address": {
        "type": "object",
        "properties": {"street": _STR, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "country": {"enum": ["DE", "FR", "US"]}},
        "required": ["zip", "country"],
    },
    "nested_record": {
        "type": "object",
        "properties": {
            "id": {"type": "string", "format": "uuid"},
            "owner": {"type": "object", "properties": {"name": _NAME, "admin": {"type": "boolean"}}, "required": ["name"]},
        },
        "required": ["id", "owner"],
    },
    "array_of_objects": {
        "type": "array",
        "items": {"type": "object", "properties": {"sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{3}$"}, "qty": {"type": "integer", "minimum": 1, "maximum": 99}}, "required": ["sku", "qty"]},
        "minItems": 1,
        "maxItems": 3,
    },
    "enum_only": {"enum": ["red", "green", "blue", 7, None, True]},
    "const_object": {"const": {"ok": True, "code": 200}},
    "date_event": {
        "type": "object",
        "properties": {"title": _STR, "date": {"type": "string", "format": "date"}, "start": {"type": "string", "format": "time"}},
        "required": ["title", "date"],
    },
    "timestamped": {"type": "object", "properties": {"at": {"type": "string", "format": "date-time"}, "level": {"enum": ["info", "warn", "error"]}}, "required": ["at", "level"]},
    "network": {"type": "object", "properties": {"ipv4": {"type": "string", "format": "ipv4"}, "ipv6": {"type": "string", "format": "ipv6"}, "host": {"type": "string", "format": "hostname"}}, "required": ["ipv4"]},
    "link": {"type": "object", "properties": {"href": {"type": "string", "format": "uri", "maxLength": 32}, "rel": {"enum": ["self", "next"]}}, "required": ["href"]},
    "duration_task": {"type": "object", "properties": {"task": _STR, "estimate": {"type": "string", "format": "duration"}}, "required": ["task", "estimate"]},
    "prices": {"type": "array", "items": {"type": "number", "minimum": 0, "exclusiveMaximum": 1000}, "maxItems": 4},
    "percent": {"type": "number", "minimum": 0, "maximum": 1},
    "even_numbers": {"type": "array", "items": {"type": "integer", "multipleOf": 2, "minimum": -100, "maximum": 100}, "maxItems": 5},
    "tuple": {"type": "array", "prefixItems": [{"type": "string", "maxLength": 8}, {"type": "integer"}, {"type": "boolean"}], "minItems": 2},
    "tags": {"type": "array", "items": {"type": "string", "pattern": "^#[a-z]+$", "maxLength": 10}, "contains": {"const": "#urgent"}, "maxItems": 4},
    "nullable_fields": {"type": "object", "properties": {"nickname": {"type": ["string", "null"], "maxLength": 10}, "score": {"type": ["integer", "null"]}}, "required": ["nickname", "score"]},
    "with_defs": {
        "$defs": {"money": {"type": "object", "properties": {"amount": {"type": "integer", "minimum": 0}, "currency": {"enum": ["EUR", "USD"]}}, "required": ["amount", "currency"]}},
        "type": "object",
        "properties": {"price": {"$ref": "#/$defs/money"}, "tax": {"$ref": "#/$defs/money"}},
        "required": ["price"],
    },
    "all_of_merge": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, {"properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
    "if_then_else": {
        "type": "object",
        "properties": {"kind": {"enum": ["card", "cash"]}, "last4": {"type": "string", "pattern": "^[0-9]{4}$"}},
        "required": ["kind"],
        "if": {"properties": {"kind": {"const": "card"}}},
        "then": {"required": ["last4"]},
    },
    "not_keyword": {"type": "string", "maxLength": 8, "not": {"enum": ["admin", "root"]}},
    "pattern_properties": {"type": "object", "patternProperties": {"^x-[a-z]+$": {"type": "string", "maxLength": 6}}, "maxProperties": 2},
    "property_names": {"type": "object", "propertyNames": {"pattern": "^[a-z]{1,6}$"}, "additionalProperties": {"type": "integer"}, "maxProperties": 3},
    "min_properties": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}, "minProperties": 2},
    "one_of_scalars": {"oneOf": [{"type": "integer", "maximum": 10}, {"type": "string", "enum": ["many"]}]},
}

RECURSIVE = {
    "tree": {
        "$defs": {"node": {"type": "object", "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 3}}, "required": ["value"]}},
        "$ref": "#/$defs/node",
    },
    "linked_list": {"$defs": {"cell": {"type": "object", "properties": {"head": {"type": "string", "maxLength": 6}, "tail": {"anyOf": [{"type": "null"}, {"$ref": "#/$defs/cell"}]}}, "required": ["head", "tail"]}}, "$ref": "#/$defs/cell"},
    "any_json_metadata": {"type": "object", "properties": {"id": {"type": "integer"}, "meta": {}}, "required": ["id", "meta"]},
}
