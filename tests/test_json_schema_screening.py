"""Strict refusals come before any automaton (`Screening.screen`): on random schemas with
unsupported keywords and unknown formats here and there, every refusal of the screen is one that
compiling without it makes too, and inside the fragment the screen walks (no ``not``, ``oneOf``,
``patternProperties`` or ``if``, whose ``else`` negates the condition) it misses none."""

import json
import pathlib
import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ananke_jax as aj
from ananke_jax._src.compile.budget import metered
from ananke_jax._src.errors import SchemaError
from ananke_jax._src.json_schema.api import json_schema_rules
from ananke_jax._src.json_schema.compiler import SchemaCompiler

_REFUSED = ("format", "uniqueItems", "dependencies", "dependentRequired")  # the keywords strict mode refuses here


class _Compiled(Exception):
    """The screen let the schema through to the compiler."""


def _screened(schema, monkeypatch) -> SchemaError | None:
    """The screen's refusal of ``schema`` (None: it passes it to the compiler)."""
    with monkeypatch.context() as m:
        m.setattr(SchemaCompiler, "rule", lambda *a: (_ for _ in ()).throw(_Compiled()))
        try:
            json_schema_rules(schema)
        except _Compiled:
            return None
        except SchemaError as e:
            return e
    raise AssertionError("the compiler neither ran nor refused")


def _compiled(schema, monkeypatch) -> SchemaError | None:
    """The refusal of compiling ``schema`` with no screen first (None: it compiles)."""
    with monkeypatch.context() as m, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m.setattr(SchemaCompiler, "screen", lambda self, schema: None)
        try:
            json_schema_rules(schema)
        except SchemaError as e:
            return e
    return None


_LEAVES = st.sampled_from(
    [
        True,
        {"type": "integer"},
        {"type": "string", "maxLength": 3},
        {"enum": [1, "a", None]},
        {"type": "string", "format": "date"},
        {"type": "string", "format": "no-such-format"},
        {"format": "no-such-format"},  # any type: strings among them
        {"type": "number", "format": "no-such-format"},  # no strings: the format is moot
        {"type": ["string", "null"], "enum": ["a", None], "format": "no-such-format"},
        {"type": "array", "uniqueItems": True},
        {"type": "array", "uniqueItems": False},
        {"dependencies": {"a": ["b"]}},
        {"type": "object", "dependentRequired": {"a": ["b"]}},
        {"$ref": "#/$defs/odd"},
        {"$ref": "#/$defs/list"},
    ]
)


def _schemas(walked: bool):
    """Random schemas; ``walked``: only keywords whose subschemas the screen walks into."""

    def nested(children):
        kinds = [
            st.builds(
                lambda p, r: {"type": "object", "properties": p, "required": r},
                st.dictionaries(st.sampled_from("abc"), children, max_size=3),
                st.lists(st.sampled_from("abcd"), max_size=2),
            ),
            st.builds(
                lambda p, a: {"type": "object", "properties": p, "additionalProperties": a},
                st.dictionaries(st.sampled_from("ab"), children, max_size=2),
                children,
            ),
            st.builds(lambda i, p: {"type": "array", "items": i, "prefixItems": p}, children, st.lists(children, max_size=2)),
            st.builds(lambda xs: {"anyOf": xs}, st.lists(children, min_size=1, max_size=3)),
            st.builds(lambda xs: {"allOf": xs}, st.lists(children, min_size=1, max_size=3)),
            st.builds(lambda x: {"type": ["object", "string"], **x} if isinstance(x, dict) else x, children),
        ]
        if not walked:
            kinds += [
                # ``else`` holds the condition negated: the screen does not walk it, the compiler may.
                st.builds(lambda c, t, e: {"if": c, "then": t, "else": e}, children, children, children),
                st.builds(lambda xs: {"oneOf": xs}, st.lists(children, min_size=1, max_size=3)),
                st.builds(lambda x: {"not": x}, children),
                st.builds(lambda x: {"type": "object", "patternProperties": {"^a": x}}, children),
                st.builds(lambda x: {"type": "array", "contains": x, "minItems": 1}, children),
            ]
        return st.one_of(kinds)

    body = st.recursive(_LEAVES, nested, max_leaves=8)
    return st.builds(
        lambda root, odd: {
            **(root if isinstance(root, dict) else {}),
            "$defs": {"odd": odd, "list": {"type": "array", "items": {"$ref": "#/$defs/list"}}},
        },
        body,
        _LEAVES,
    )


@settings(max_examples=300, deadline=None)
@given(_schemas(walked=False))
def test_every_refusal_of_the_screen_is_one_compiling_makes(schema):
    with pytest.MonkeyPatch.context() as monkeypatch:
        screened = _screened(schema, monkeypatch)
        if screened is not None:
            assert _compiled(schema, monkeypatch) is not None, (json.dumps(schema), screened)


@settings(max_examples=300, deadline=None)
@given(_schemas(walked=True))
def test_the_screen_misses_no_refusal_where_it_walks(schema):
    with pytest.MonkeyPatch.context() as monkeypatch:
        compiled, screened = _compiled(schema, monkeypatch), _screened(schema, monkeypatch)
        if compiled is not None and compiled.keyword in _REFUSED:
            assert screened is not None and screened.keyword in _REFUSED, (json.dumps(schema), compiled)
        if screened is not None:
            assert compiled is not None, (json.dumps(schema), screened)


def test_a_late_refusal_comes_before_the_automata_of_the_members_before_it(monkeypatch):
    """A costly first property (a long-bounded pattern) does not delay the refusal of the last."""
    schema = {
        "type": "object",
        "properties": {
            "Arn": {"type": "string", "pattern": "^arn:aws[a-z-]*:[a-z0-9-]+:.{0,200}$", "maxLength": 2048},
            "Tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}, "uniqueItems": True},
        },
        "$defs": {"Tag": {"type": "object", "properties": {"Key": {"type": "string", "format": "no-such-format"}}}},
    }
    refusal = _screened(schema, monkeypatch)
    assert refusal is not None and (refusal.keyword, refusal.pointer) == ("uniqueItems", "#/properties/Tags"), refusal
    no_array = {**schema, "properties": {**schema["properties"], "Tags": {"type": "array", "items": {"$ref": "#/$defs/Tag"}}}}
    refusal = _screened(no_array, monkeypatch)
    assert refusal is not None and (refusal.keyword, refusal.pointer) == ("format", "#/$defs/Tag/properties/Key"), refusal
    assert _screened({**no_array, "$defs": {"Tag": {"type": "object"}}}, monkeypatch) is None


CORPUS = pathlib.Path(__file__).resolve().parents[1] / "bench" / "schema_corpus.json"


@pytest.mark.slow
def test_the_screen_refuses_real_schemas_only_where_compiling_does(monkeypatch):
    """On the real-world corpus: every schema the screen refuses, compiling refuses too (or
    runs past 2 s: one pattern of DataSync::LocationAzureBlob takes minutes before the refusal)."""
    refused = 0
    for entry in json.loads(CORPUS.read_text(encoding="utf-8"))["schemas"]:
        screened = _screened(entry["schema"], monkeypatch)
        if screened is not None:
            refused += 1
            with metered(aj.CompileBudget(max_seconds=2.0)):
                assert _compiled(entry["schema"], monkeypatch) is not None, (entry["name"], screened)
    assert refused >= 45, refused
