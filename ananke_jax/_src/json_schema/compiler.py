"""JSON Schema to rules over regex trees.

`SchemaCompiler` turns each subschema into the language of its JSON texts: a `regex_ast` tree in
which `Ref` nodes stand for other rules (``$ref`` targets, and the "any JSON value" rule). Rules
that are not recursive are inlined later, so a schema without recursion becomes one regular
language.

Keywords in a schema without ``type`` apply only to values of their own type, as the
specification says. The compiler's methods are grouped by what they translate, one module each:
`combinators` (``$ref``, ``allOf``, ``anyOf``, ``oneOf``, ``if``), `negation` (``not`` and the
exclusions of ``oneOf``), `scalars`, `arrays` and `objects`; this module holds the rules and the
split of a schema by JSON type.
"""

from __future__ import annotations

import json
import warnings

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import ByteDFA
from ananke_jax._src.errors import BudgetError, SchemaError
from ananke_jax._src.json_schema import strings
from ananke_jax._src.json_schema.arrays import Arrays
from ananke_jax._src.json_schema.combinators import Combinators
from ananke_jax._src.json_schema.keywords import ANY_OF, ASSERTIONS, NEGATIONS, TYPES
from ananke_jax._src.json_schema.layout import Layout
from ananke_jax._src.json_schema.negation import Irregular, Negation
from ananke_jax._src.json_schema.objects import Objects
from ananke_jax._src.json_schema.refs import Resolver
from ananke_jax._src.json_schema.rules import Ref
from ananke_jax._src.json_schema.scalars import Scalars
from ananke_jax._src.json_schema.screening import Screening

MAX_NESTING = 100  # values inside values; recursion through rules stops far earlier


class SchemaCompiler(Combinators, Negation, Scalars, Arrays, Objects, Screening):
    """Translates one schema document; use `ananke_jax._src.json_schema.api.json_schema_rules`."""

    def __init__(
        self,
        root,
        *,
        whitespace,
        strict: bool,
        allow_additional: bool,
        any_order: bool,
        max_depth: int,
        max_whitespace: int,
        max_digits: int | None,
        max_string_length: int | None,
        placeholder_gaps: bool = False,
    ):
        self.resolver = Resolver(root)
        self.layout = Layout(whitespace, placeholder_gaps=placeholder_gaps, max_whitespace=max_whitespace)
        self.strict = strict
        self.allow_additional = allow_additional
        self.any_order = any_order
        self.max_digits = max_digits
        self.max_string_length = max_string_length
        self.max_depth = max_depth
        self.bodies: dict[str, rx.Node | None] = {}
        self._key_patterns: dict[str, ByteDFA] = {}
        self._negating = 0  # nesting of the differences being compiled
        self._scalar_languages: dict[tuple, rx.Node] = {}  # `Negation.scalar_language`, by schema
        self._screening = False  # `Screening.screen` is walking: its warnings come again later

    # --- rules -------------------------------------------------------------------------------

    def rule(self, pointer: str, depth: int) -> rx.Node:
        """A `Ref` to the rule for the schema at ``pointer`` (compiled on first use)."""
        if self.layout.depth_dependent and depth > self.max_depth:
            return rx.NOTHING
        name = self.rule_name(pointer, depth)
        if name not in self.bodies:
            self.bodies[name] = None  # reserved: references from inside the body resolve to it
            self.bodies[name] = self.value(self.resolver.get(pointer), pointer, depth)
        return Ref(name)

    def rule_name(self, pointer: str, depth: int) -> str:
        """The name of the rule of the schema at ``pointer`` reached at nesting ``depth`` (one
        per depth where the layout depends on it)."""
        return pointer if not self.layout.depth_dependent else f"{pointer}@{depth}"

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
        """The JSON texts of the values valid under ``schema``.

        Raises:
          SchemaError: among others, a `BudgetError` met while compiling it, with ``pointer``
            (the innermost subschema's, as each level turns it into a `SchemaError`), and values
            nested more than `MAX_NESTING` deep.
        """
        if depth > max(MAX_NESTING, self.max_depth):
            raise SchemaError(
                f"values nested more than {MAX_NESTING} deep (a recursion that never reaches a bare $ref, as through 'not' or 'oneOf')",
                pointer=pointer,
            )
        try:
            return self._value(schema, pointer, depth)
        except BudgetError as e:
            raise SchemaError(str(e), pointer=pointer) from None

    def _value(self, schema, pointer: str, depth: int) -> rx.Node:
        if schema is True:
            return self.any_value(depth)
        if schema is False:
            return rx.NOTHING
        if not isinstance(schema, dict):
            raise SchemaError(f"a schema must be an object or a boolean, got {json.dumps(schema)[:40]}", pointer=pointer)
        if set(schema) & ASSERTIONS == {"$ref"}:
            return self.rule(self.resolver.resolve(schema["$ref"], pointer), depth)
        flat = self.flatten(schema, pointer)
        if flat is False:
            return rx.NOTHING
        if not set(flat) & ASSERTIONS and ANY_OF not in flat:  # nothing asserted: share the rule
            return self.any_value(depth)
        alternatives = flat.get(ANY_OF, [])
        if len(alternatives) == 1 and not set(flat) & ASSERTIONS:  # keep each branch's own rules
            return rx.alt(*[self.value(b, pointer, depth) for b in alternatives[0]])
        return rx.alt(*[node for b in self.branches(flat, pointer) for node in self.typed(b, pointer, depth).values()])

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
        if set(NEGATIONS) & set(s):
            out = {t: self.excluding(s, t, node, pointer, depth) for t, node in out.items()}
        return {t: node for t, node in out.items() if node != rx.NOTHING}

    def unsupported(self, keyword: str, why: str, pointer: str) -> None:
        """Refuse ``keyword`` (strict), or warn that it is ignored; inside a difference, fail that
        difference instead (`Irregular`)."""
        if self._negating:
            raise Irregular(f"{keyword!r} at {pointer}: {why}")
        if self.strict:
            raise SchemaError(f"cannot compile {keyword!r}: {why}", keyword=keyword, pointer=pointer)
        warnings.warn(f"{keyword!r} at {pointer} is ignored: {why}", stacklevel=4)
