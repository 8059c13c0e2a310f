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

# One realistic valid instance per schema, most optional fields filled; serialised with
# json.dumps (", " and ": " separators) they are the walks of bench/json_schema.py.
EXAMPLES = {
    "weather_call": {"location": "San Francisco", "unit": "fahrenheit", "days": 7},
    "search_call": {"query": "jax lax.scan", "top_k": 10, "safe": True},
    "tool_choice": {"tool": "calculator", "expression": "(17+25)*3"},
    "person": {"name": "Ada Lovelace", "age": 36, "email": "ada@example.org"},
    "address": {"street": "Main St 12", "zip": "10115", "country": "DE"},
    "nested_record": {"id": "9b2f0c1e-4a7d-4f3b-8e21-6c5d3a9f0b47", "owner": {"name": "ops-team", "admin": True}},
    "array_of_objects": [{"sku": "ABC-123", "qty": 2}, {"sku": "XYZ-042", "qty": 15}, {"sku": "KLM-900", "qty": 1}],
    "enum_only": "green",
    "const_object": {"ok": True, "code": 200},
    "date_event": {"title": "Launch", "date": "2024-09-11", "start": "09:30:00+02:00"},
    "timestamped": {"at": "2024-09-11T07:30:15.250Z", "level": "warn"},
    "network": {"ipv4": "192.168.10.254", "ipv6": "2001:db8::8a2e:370:7334", "host": "api.example.com"},
    "link": {"href": "https://example.com/docs?page=2", "rel": "next"},
    "duration_task": {"task": "code review", "estimate": "P1DT2H30M"},
    "prices": [9.99, 0, 120.5, 999.95],
    "percent": 0.375,
    "even_numbers": [2, -4, 100, 0, -100],
    "tuple": ["widget", 42, True],
    "tags": ["#infra", "#urgent", "#db"],
    "nullable_fields": {"nickname": None, "score": 17},
    "with_defs": {"price": {"amount": 120, "currency": "EUR"}, "tax": {"amount": 23, "currency": "EUR"}},
    "all_of_merge": {"a": -3, "b": False},
    "if_then_else": {"kind": "card", "last4": "4242"},
    "not_keyword": "guest",
    "pattern_properties": {"x-env": "prod", "x-tier": "gold"},
    "property_names": {"alpha": 1, "beta": -2, "gamma": 300},
    "min_properties": {"a": 1, "c": 3},
    "one_of_scalars": 7,
    "tree": {"value": 1, "children": [{"value": 2}, {"value": 3, "children": [{"value": 4, "children": []}, {"value": 5}]}]},
    "linked_list": {"head": "first", "tail": {"head": "second", "tail": {"head": "last", "tail": None}}},
    "any_json_metadata": {"id": 7, "meta": {"source": "import", "tags": ["a", "b"], "score": 0.5, "ok": True, "parent": None}},
}
