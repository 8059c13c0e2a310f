"""compile_json_schema's options: any_order, max_whitespace, max_digits and max_string_length.

Texts are walked token by token (the 32k SentencePiece vocabulary's own tokenization) through the
compiled constraint with `aj.Matcher`: on the host for a token DFA, one jitted step per token for
the pushdown engine.
"""

import itertools
import json
import random
import re
import warnings

import jax
import jax.numpy as jnp
import jsonschema
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.json_schema.api import json_schema_rules
from ananke_jax._src.json_schema.assemble import recursive_rules, to_grammar
from ananke_jax._src.json_schema.objects import MAX_ANY_ORDER_PROPERTIES
from ananke_jax._src.json_schema.scalars import MAX_LENGTH_PRODUCT_STATES

from earley import EarleyRecogniser

NAMES = ["a", "ab", "b", "ba", "key", "k2", "x_y"]  # shared prefixes: a key is known only at its end
POOL = {"integer": [0, -7, 42], "string": ["", "ab", 'é"'], "boolean": [True, False], "null": [None]}
EXTRA = "zz"  # a key no schema declares


def _accepts(matcher: aj.Matcher, encode, text: str) -> bool:
    """Whether the constraint takes ``text``'s tokens one by one and is then complete."""
    matcher.reset()
    return all(matcher.accept_token(t) for t in encode(text)) and matcher.is_completed()


def _text(pairs, rng: random.Random) -> str:
    comma, colon = rng.choice([(",", ":"), (", ", ": "), (" ,\n  ", " : ")])
    return "{" + comma.join(json.dumps(k, ensure_ascii=False) + colon + json.dumps(v, ensure_ascii=False) for k, v in pairs) + "}"


def _valid(schema: dict, pairs) -> bool:
    """The permutation oracle: no key twice, and the object, members in any order, valid."""
    keys = [k for k, _ in pairs]
    return len(set(keys)) == len(keys) and jsonschema.Draft202012Validator(schema).is_valid(dict(pairs))


def _random_schema(rng: random.Random, n: int, additional) -> dict:
    types = {k: rng.choice(list(POOL)) for k in rng.sample(NAMES, n)}
    schema = {
        "type": "object",
        "properties": {k: {"type": t} for k, t in types.items()},
        "required": [k for k in types if rng.random() < 0.4],
        "additionalProperties": additional,
    }
    if rng.random() < 0.3:
        low = rng.randrange(n + 1)
        schema.update(minProperties=low, maxProperties=rng.randrange(low, n + 2))
    return schema


def _value(schema: dict, key: str, rng: random.Random, wrong: bool):
    """A value from the pool for ``key``: of its type, or (``wrong``) of another type."""
    declared = schema["properties"].get(key, {"type": "integer"})["type"]
    kind = rng.choice([t for t in POOL if t != declared]) if wrong else declared
    return rng.choice(POOL[kind])


def _candidates(schema: dict, rng: random.Random, limit: int) -> list:
    """Member lists: every order of every set of keys (declared ones and `EXTRA`), all of them
    when there are at most ``limit``, else a sample; each with pool values, a few with a value of
    the wrong type, and some with a declared key written twice (undeclared keys may repeat: no
    automaton remembers an unbounded set of keys)."""
    keys = [*schema["properties"], EXTRA]
    orders = [p for k in range(len(keys) + 1) for p in itertools.permutations(keys, k)]
    if len(orders) > limit:
        orders = rng.sample(orders, limit)
    out = [[(k, _value(schema, k, rng, wrong=rng.random() < 0.05)) for k in order] for order in orders]
    for pairs in rng.sample(out, min(len(out), limit // 8)):
        if declared := [(k, v) for k, v in pairs if k != EXTRA]:
            k, v = rng.choice(declared)
            out.append([*pairs, (k, v)] if rng.random() < 0.5 else [(k, v), *pairs])
    return out


def test_interleave_is_its_definition():
    """`rx.interleave` against its definition, on every list of up to five items: each member at
    most once (required ones once), the extra item any number of times, item counts within
    bounds; empty members (`rx.NOTHING`) never written."""
    for seed in range(120):
        rng = random.Random(seed)
        names = "abcd"[: rng.randint(0, 4)]
        members = [rx.NOTHING if rng.random() < 0.15 else rx.Text(m) for m in names]
        required = [rng.random() < 0.4 for _ in names]
        extra = rng.choice([rx.NOTHING, rx.Text("x")])
        lo, hi = rng.randint(0, 3), rng.choice([None, rng.randint(0, 5)])
        dfa = rx.to_dfa(rx.interleave(members, required, extra, rx.Text(","), lo, hi))
        for k in range(6):
            for items in itertools.product([*names, "x"], repeat=k):
                expected = (
                    lo <= k <= (k if hi is None else hi)
                    and all(items.count(m) <= 1 and (items.count(m) or not r) for m, r in zip(names, required))
                    and all((extra if i == "x" else members[names.index(i)]) != rx.NOTHING for i in items)
                )
                assert dfa.accepts(",".join(items).encode()) == expected, (names, required, extra, lo, hi, items)


def test_interleave_grammar_rules_are_its_language():
    """Open objects (``additionalProperties: true``) recurse: their interleavings become grammar
    rules, checked here with the Earley recogniser against the permutation oracle."""
    for seed in range(16):
        rng = random.Random(seed)
        schema = _random_schema(rng, 1 + seed % 4, True)
        rules = json_schema_rules(schema, any_order=True, whitespace="compact")
        recognise = EarleyRecogniser(to_grammar(rules, recursive_rules(rules))).accepts
        for pairs in _candidates(schema, rng, limit=100):
            text = "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + json.dumps(v, ensure_ascii=False) for k, v in pairs) + "}"
            assert recognise(text.encode()) == _valid(schema, pairs), (schema, text)


ANY_ORDER_CASES = [(seed, 1 + seed % 6, False) for seed in range(6)] + [(seed, 1 + seed % 6, {"type": "integer"}) for seed in range(6, 10)]


@pytest.mark.parametrize("seed, n, additional", ANY_ORDER_CASES)
def test_any_order_accepts_exactly_the_permutations(seed, n, additional, sentencepiece_vocab, sentencepiece_encode):
    """Every order of every allowed set of members is accepted; duplicates, missing required
    keys, undeclared keys where none are allowed, wrong values and counts are not."""
    rng = random.Random(seed)
    schema = _random_schema(rng, n, additional)
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, any_order=True)
    assert isinstance(cg, aj.RegularGrammar)
    matcher = aj.Matcher(cg, sentencepiece_vocab)
    verdicts = {False: 0, True: 0}
    for pairs in _candidates(schema, rng, limit=1500):
        expected = _valid(schema, pairs)
        verdicts[expected] += 1
        text = _text(pairs, rng)
        assert _accepts(matcher, sentencepiece_encode, text) == expected, (schema, text)
    assert verdicts[True] and verdicts[False]


def test_any_order_with_open_objects_on_the_pushdown_engine(sentencepiece_vocab, sentencepiece_encode):
    """``additionalProperties: true`` makes the members' values recursive (any JSON value): the
    interleaving becomes grammar rules, one nonterminal per set of members written."""
    rng = random.Random(0)
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "ab": {"type": "string"}, "b": {"type": "boolean"}},
        "required": ["b"],
        "additionalProperties": True,
    }
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, any_order=True)
    assert isinstance(cg, aj.PushdownGrammar)
    matcher = aj.Matcher(cg, sentencepiece_vocab, pool=False)
    for pairs in _candidates(schema, rng, limit=60):
        pairs = [(k, [v, {"n": v}] if k == EXTRA else v) for k, v in pairs]  # nested extra values
        text = _text(pairs, rng)
        assert _accepts(matcher, sentencepiece_encode, text) == _valid(schema, pairs), text


def test_any_order_recursive_members(sentencepiece_vocab, sentencepiece_encode):
    tree = {
        "type": "object",
        "properties": {"value": {"type": "integer"}, "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#"}}},
        "required": ["value"],
        "additionalProperties": False,
    }
    cg = aj.compile_json_schema(tree, sentencepiece_vocab, any_order=True)
    matcher = aj.Matcher(cg, sentencepiece_vocab, pool=False)
    child = '{"name": "c", "value": 2}'
    for text, expected in [
        ('{"children": [' + child + '], "value": 1}', True),
        ('{"name": "x", "value": 1, "children": []}', True),
        ('{"value": 1, "children": [{"children": [], "name": "d", "value": 3}], "name": "x"}', True),
        ('{"children": [], "name": "x"}', False),  # required value missing
        ('{"value": 1, "children": [{"name": "c"}]}', False),  # ... in a child
        ('{"value": 1, "name": "x", "value": 2}', False),
        ('{"children": [{"value": 2, "value": 2}], "value": 1}', False),
    ]:
        assert _accepts(matcher, sentencepiece_encode, text) == expected, text


@pytest.mark.xla_optimized
def test_any_order_outputs_are_valid_under_jit(sentencepiece_vocab):
    """Random constrained generation in a jitted scan: every finished output has no key twice and
    satisfies jsonschema; some outputs put the members out of declaration order."""
    schema = {
        "type": "object",
        "properties": {"a": {"type": "integer"}, "ab": {"type": "boolean"}, "b": {"type": "null"}, "key": {"enum": ["x", "y"]}},
        "required": ["a", "key"],
        "additionalProperties": False,
    }
    vocab = sentencepiece_vocab
    cg = aj.compile_json_schema(schema, vocab, any_order=True, whitespace="compact")
    bias = np.zeros(vocab.logits_width, np.float32)
    bias[[i for i, t in enumerate(vocab.tokens) if t in (b"{", b"}", b'"', b",", b":", b"1", b"null", b"true")]] = 4.0
    bias[list(vocab.eos_token_ids)] = 8.0

    def generate(key):
        def step(carry, key):
            state, done = carry
            k1, k2 = jax.random.split(key)
            logits = jax.random.normal(k1, (vocab.logits_width,)) + bias
            token, new_state = aj.constrained_step(cg, state, logits, k2, aj.SamplingParams(temperature=1.0))
            new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new_state)
            return (new_state, done | (token == cg.fallback_token)), jnp.where(done, -1, token)

        (_, done), tokens = jax.lax.scan(step, (cg.init_state(), jnp.bool_(False)), jax.random.split(key, 64))
        return tokens, done

    tokens, done = jax.jit(jax.vmap(generate))(jax.random.split(jax.random.key(0), 16))
    orders = set()
    for row, finished in zip(np.asarray(tokens), np.asarray(done)):
        if not finished:
            continue
        text = b"".join(vocab.token_bytes(int(t)) for t in row if t >= 0 and t not in vocab.eos_token_ids).decode()
        pairs = json.loads(text, object_pairs_hook=list)
        assert _valid(schema, pairs), text
        orders.add(tuple(k for k, _ in pairs))
    assert len(orders) > 1 and any(list(order) != sorted(order, key=list(schema["properties"]).index) for order in orders), orders


def test_any_order_refuses_objects_past_the_limit():
    n = MAX_ANY_ORDER_PROPERTIES + 1
    inner = {"type": "object", "properties": {f"p{i}": {"type": "integer"} for i in range(n)}}
    schema = {"type": "object", "properties": {"inner": inner}}
    with pytest.raises(aj.SchemaError) as e:
        aj.json_schema_to_grammar(schema, any_order=True)
    assert e.value.pointer == "#/properties/inner", str(e.value)
    assert f"{n} properties" in str(e.value) and f"limit of {MAX_ANY_ORDER_PROPERTIES}" in str(e.value)
    aj.json_schema_to_grammar(schema)  # in declaration order, any number


@pytest.mark.parametrize(
    "options, name",
    [
        ({"any_order": "yes"}, "any_order"),
        ({"max_whitespace": -1}, "max_whitespace"),
        ({"max_whitespace": True}, "max_whitespace"),
        ({"max_whitespace": 2.5}, "max_whitespace"),
        ({"max_digits": 0}, "max_digits"),
        ({"max_digits": "20"}, "max_digits"),
        ({"max_string_length": -1}, "max_string_length"),
    ],
)
def test_bad_option_values_are_refused(options, name, sentencepiece_vocab):
    with pytest.raises(aj.SchemaError, match=name):
        aj.compile_json_schema({"type": "object"}, sentencepiece_vocab, **options)


WHITESPACE_SCHEMAS = {
    "regular": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"type": "boolean"}}}},
    "recursive": {"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "array", "items": {"$ref": "#"}}}},
}


@pytest.mark.parametrize("name", sorted(WHITESPACE_SCHEMAS))
@pytest.mark.parametrize("run", [0, 1, 3])
def test_whitespace_runs_of_max_whitespace_and_no_longer(name, run, sentencepiece_vocab, sentencepiece_encode):
    cg = aj.compile_json_schema(WHITESPACE_SCHEMAS[name], sentencepiece_vocab, max_whitespace=run)
    matcher = aj.Matcher(cg, sentencepiece_vocab, pool=False)
    item = "true" if name == "regular" else '{"a":1}'
    for gap in (" ", "\n", "\t ", "\r\n "):
        for length, expected in ((run, True), (run + 1, False)):
            ws = (gap * length)[:length]
            for text in ("{" + ws + '"a":1}', '{"a"' + ws + ":1}", '{"a":' + ws + "1}", '{"a":1' + ws + "}", '{"b":[' + ws + item + "]}"):
                assert _accepts(matcher, sentencepiece_encode, text) == expected, (run, text)


def _walk_bytes(cg, text: str) -> bool:
    matcher = aj.Matcher(cg, _BYTES, pool=False)
    return all(matcher.accept_token(b) for b in text.encode()) and matcher.is_completed()


_BYTES = aj.Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])


@pytest.mark.parametrize(
    "schema, widths",
    [
        ({}, (4, 4, 4)),  # any JSON value: the pushdown engine
        ({"type": "number"}, (4, 4, 4)),
        ({"type": "integer"}, (4, None, None)),
        ({"type": "number", "minimum": 0}, (4, 4, None)),
        ({"type": "number", "exclusiveMinimum": -123456.5}, (7, 4, None)),  # a longer bound: one more
        ({"const": 1.5}, (None, 4, None)),  # trailing zeros: 1.5000
        ({"type": "number", "multipleOf": 0.5}, (4, 4, None)),
    ],
)
def test_max_digits_bounds_each_part_of_a_number_exactly(schema, widths):
    """With max_digits=4: ``widths`` are the most digits of the integer part, the fraction and
    the exponent (None: the part is fixed by the schema, or absent)."""
    cg = aj.compile_json_schema(schema, _BYTES, max_digits=4)
    whole, fraction, exponent = widths
    if whole is not None:
        assert _walk_bytes(cg, "9" * whole) and not _walk_bytes(cg, "9" * (whole + 1)), schema
        assert _walk_bytes(cg, "-" + "1" * whole) == jsonschema.Draft202012Validator(schema).is_valid(-int("1" * whole))
    if fraction is not None:
        assert _walk_bytes(cg, "1." + "5" + "0" * (fraction - 1)) and not _walk_bytes(cg, "1." + "5" + "0" * fraction), schema
    if exponent is not None:
        assert _walk_bytes(cg, "1e+" + "1" * exponent) and not _walk_bytes(cg, "1E" + "1" * (exponent + 1)), schema
    if exponent is None:
        assert not _walk_bytes(cg, "1e1")


def test_max_digits_none_is_unbounded_and_default_is_twenty():
    free = aj.compile_json_schema({"type": "number"}, _BYTES, max_digits=None)
    assert _walk_bytes(free, "1" * 100 + "." + "0" * 100 + "e" + "9" * 50)
    default = aj.compile_json_schema({"type": "number"}, _BYTES)
    assert _walk_bytes(default, "1" * 20 + "." + "0" * 20) and not _walk_bytes(default, "1" * 21)


@pytest.mark.parametrize(
    "schema, longest",
    [
        ({"type": "string"}, 5),
        ({"type": "string", "minLength": 7}, 7),  # at least minLength
        ({"type": "string", "maxLength": 9}, 9),  # the schema's own bound
        ({"type": "string", "pattern": "^a+$"}, 5),
        ({"type": "string", "pattern": "^a{8}$"}, 8),  # a finite pattern keeps its strings
        ({"type": "string", "format": "uuid"}, 36),
    ],
)
def test_max_string_length_bounds_strings_the_schema_leaves_unbounded(schema, longest):
    cg = aj.compile_json_schema(schema, _BYTES, max_string_length=5)
    text = "12345678-1234-1234-1234-123456789abc" if "format" in schema else "a" * longest
    assert _walk_bytes(cg, json.dumps(text))
    assert not _walk_bytes(cg, json.dumps(text + "a"))
    if schema == {"type": "string"}:
        assert _walk_bytes(cg, '"\\u00e9\\n\\"\\\\\u00e9"') and not _walk_bytes(cg, '"\\u00e9\\n\\"\\\\\u00e9x"')  # units, not bytes


@pytest.mark.parametrize(
    "string, inside, longer",
    [
        ({"type": "string", "maxLength": 1000}, "x" * 1000, "x" * 1001),  # a free string's chain
        ({"type": "string", "pattern": "^a[a-z]*z$", "maxLength": 2000}, "a" + "b" * 1998 + "z", "a" + "b" * 1999 + "z"),
    ],
)
def test_length_bounds_over_the_budget_are_refused_or_dropped_with_a_warning(string, inside, longer):
    schema = {"type": "object", "properties": {"s": string}, "required": ["s"]}
    budget = aj.CompileBudget(max_states=5_000)
    with pytest.raises(aj.SchemaError, match="max_states=5,000"):
        aj.compile_json_schema(schema, _BYTES, budget=budget)
    with pytest.warns(UserWarning, match="'maxLength' at #/properties/s is ignored: .*max_states=5,000"):
        cg = aj.compile_json_schema(schema, _BYTES, budget=budget, strict=False)
    assert _walk_bytes(cg, json.dumps({"s": inside})) and _walk_bytes(cg, json.dumps({"s": longer}))
    if "pattern" in string:  # the pattern still holds
        assert not _walk_bytes(cg, json.dumps({"s": longer + "a"}))


def test_not_strict_drops_length_bounds_that_make_a_pattern_large():
    """A pattern of some forty states under bounds of hundreds of code points takes an automaton
    of about their product: ``strict=True`` builds it, ``strict=False`` leaves the length
    unbounded with a warning past `MAX_LENGTH_PRODUCT_STATES` (XGrammar drops length
    bounds beside every pattern)."""
    arn = {"type": "string", "pattern": "^arn:aws:[a-z0-9-]+:[a-z0-9-]*:[0-9]{12}:.+$", "minLength": 30, "maxLength": 300}
    schema = {"type": "object", "properties": {"arn": arn}, "required": ["arn"]}
    inside, longer = "arn:aws:s3:eu-west-1:123456789012:" + "x" * 266, "arn:aws:s3:eu-west-1:123456789012:" + "x" * 267
    short, wrong = "arn:aws:s3::123456789012:x", "arn:aws:s3:eu-west-1:12345:" + "x" * 10
    exact = aj.compile_json_schema(schema, _BYTES)
    assert _walk_bytes(exact, json.dumps({"arn": inside})) and not _walk_bytes(exact, json.dumps({"arn": longer}))
    assert not _walk_bytes(exact, json.dumps({"arn": short}))
    with pytest.warns(UserWarning) as caught:
        relaxed = aj.compile_json_schema(schema, _BYTES, strict=False)
    for keyword in ("minLength", "maxLength"):
        pattern = rf"'{keyword}' at #/properties/arn is ignored: .* more than {MAX_LENGTH_PRODUCT_STATES:,} states"
        assert [w for w in caught if re.match(pattern, str(w.message))], keyword
    assert all(_walk_bytes(relaxed, json.dumps({"arn": text})) for text in (inside, longer, short))
    assert not _walk_bytes(relaxed, json.dumps({"arn": wrong}))  # the pattern still holds
    # Where the product stays small (a uuid's states each sit at one length), the bounds stay.
    uuid = {"type": "string", "format": "uuid", "minLength": 36, "maxLength": 255}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        kept = aj.compile_json_schema(uuid, _BYTES, strict=False)
    assert _walk_bytes(kept, json.dumps("12345678-1234-1234-1234-123456789abc"))
    assert not _walk_bytes(kept, json.dumps("12345678-1234-1234-1234-123456789abcd"))


def test_a_pattern_over_the_budget_is_refused_without_a_warning_about_its_length_bounds():
    schema = {"type": "string", "pattern": "^(ab{100}){100}$", "maxLength": 20_000}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(aj.SchemaError, match="max_states=5,000"):
            aj.compile_json_schema(schema, _BYTES, budget=aj.CompileBudget(max_states=5_000), strict=False)
    assert not [w for w in caught if "maxLength" in str(w.message)]


def test_max_string_length_bounds_undeclared_keys():
    schema = {"type": "object", "properties": {"declared_longer": {"type": "integer"}}, "additionalProperties": {"type": "integer"}}
    cg = aj.compile_json_schema(schema, _BYTES, max_string_length=3)
    assert _walk_bytes(cg, '{"declared_longer":1,"abc":2}')
    assert not _walk_bytes(cg, '{"abcd":2}')


@pytest.mark.parametrize(
    "schema, implied",
    [
        ({"properties": {"a": {"type": "string"}}, "required": ["a"], "additionalProperties": False}, "object"),
        ({"items": {"type": "integer"}, "maxItems": 2}, "array"),
        ({"maxLength": 2}, "string"),
        ({"properties": {"a": {"type": "string"}}, "maxLength": 2}, None),  # keywords of two types: every type
    ],
)
def test_a_root_without_type_takes_every_type_unless_not_strict_names_the_one_its_keywords_imply(schema, implied):
    """JSON Schema lets a schema without ``type`` take values of every type (``properties``
    constrain objects only): so does ``strict=True``. ``strict=False`` compiles a root whose
    keywords belong to one type as that type, with a warning, as XGrammar does. Values of every
    type, checked by `jsonschema` (and by their type)."""
    values = [None, True, 7, "x", "xyz", [], [1, 2], [1, 2, 3], {}, {"a": "x"}, {"a": 1}, {"a": "x", "b": 1}]
    exact = aj.compile_json_schema(schema, _BYTES, strict=True, allow_additional=True)  # members as JSON Schema says
    if implied is None:
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no inference, no warning
            relaxed = aj.compile_json_schema(schema, _BYTES, strict=False, allow_additional=True)
    else:
        with pytest.warns(UserWarning, match=f"compiled as type '{implied}'"):
            relaxed = aj.compile_json_schema(schema, _BYTES, strict=False, allow_additional=True)
    kinds = {"object": dict, "array": list, "string": str}
    for value in values:
        valid = jsonschema.Draft202012Validator(schema).is_valid(value)
        text = json.dumps(value)
        assert _walk_bytes(exact, text) == valid, text
        assert _walk_bytes(relaxed, text) == (valid and (implied is None or isinstance(value, kinds[implied]))), text
