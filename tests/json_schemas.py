"""Realistic JSON Schemas (tool calls, records, enums, formats, recursion) for round-trip tests.

The corpus lives in grammars/json_schemas.json, shared with bench/: ``REGULAR`` and
``RECURSIVE`` schemas by name, and ``EXAMPLES``, one realistic valid instance per schema, most
optional fields filled (serialised with json.dumps, ", " and ": " separators, they are the walks
of bench/json_schema.py).
"""

import json
import pathlib

_CORPUS = json.loads((pathlib.Path(__file__).resolve().parents[1] / "grammars/json_schemas.json").read_text(encoding="utf-8"))
REGULAR, RECURSIVE, EXAMPLES = _CORPUS["regular"], _CORPUS["recursive"], _CORPUS["examples"]
