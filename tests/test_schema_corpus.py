"""Real-world schemas (bench/schema_corpus.json, shipped in PyPI packages): each compiles within a
budget or is refused with a `SchemaError` (never another exception), and the documents a
compiled regular schema accepts are valid under `jsonschema` (random walks of its byte DFA)."""

import json
import pathlib
import random
import time
import warnings

import jsonschema
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile.lexer import terminal_dfa

CORPUS = json.loads((pathlib.Path(__file__).resolve().parents[1] / "bench" / "schema_corpus.json").read_text(encoding="utf-8"))
SCHEMAS = {e["name"]: e["schema"] for e in CORPUS["schemas"][::8]}  # an eighth: bench/schema_corpus.py runs them all
BUDGET = aj.CompileBudget(max_seconds=1.0)  # slower ones are refused, which the test allows
OVERRUN = 2.0  # seconds a compile may run past max_seconds: the step under way when the deadline passes


def _random_string(dfa, rng: random.Random, longest: int = 400) -> bytes | None:
    """A random string of ``dfa``'s language: live bytes at random, stopping at an accepting
    state with probability 1/4 (None if none ends within ``longest`` bytes)."""
    live = dfa.accepting.copy()
    while (grown := live | live[dfa.transitions].any(axis=1)).sum() > live.sum():
        live = grown
    state, out = dfa.start, bytearray()
    while len(out) < longest:
        moves = np.flatnonzero(live[dfa.transitions[state]]).tolist()
        if dfa.accepting[state] and (not moves or rng.random() < 0.25):
            return bytes(out)
        byte = rng.choice(moves)
        out.append(byte)
        state = int(dfa.transitions[state, byte])
    return None


def _random_document(grammar: aj.Grammar, rng: random.Random, deep: int = 6) -> bytes | None:
    """A random string of ``grammar``'s language: rules chosen at random, below ``deep`` levels
    the ones that end soonest (their fewest nonterminal expansions, a fixpoint), terminals by
    `_random_string`."""
    rules = {}
    for rule in grammar.rules:
        rules.setdefault(rule.origin, []).append(rule.expansion)
    dfas = {t.name: terminal_dfa(t) for t in grammar.terminals}
    cost = dict.fromkeys(rules, float("inf"))
    while any(cost[n] > (c := min(sum(cost.get(x, 0) for x in e) + 1 for e in rules[n])) and not cost.update({n: c}) for n in rules):
        pass
    out, todo = bytearray(), [(grammar.start, 0)]
    while todo:
        symbol, depth = todo.pop()
        if symbol in dfas:
            piece = _random_string(dfas[symbol], rng)
            if piece is None or len(out) > 5000:
                return None
            out += piece
            continue
        choices = rules[symbol] if depth < deep else [min(rules[symbol], key=lambda e: sum(cost.get(x, 0) for x in e))]
        todo += [(x, depth + 1) for x in reversed(rng.choice(choices))]
    return bytes(out)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(SCHEMAS))
def test_a_real_world_schema_compiles_soundly_or_is_refused(name, sentencepiece_vocab):
    schema = SCHEMAS[name]
    for strict in (True, False):
        start, cg = time.monotonic(), None
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cg = aj.compile_json_schema(schema, sentencepiece_vocab, strict=strict, budget=BUDGET)
        except aj.SchemaError as e:
            assert e.pointer.startswith("#"), e
        # A deadline is checked between steps: one step may run past it, not a whole phase.
        assert time.monotonic() - start < BUDGET.max_seconds + OVERRUN, f"strict={strict}"
        if cg is None:
            continue
        assert cg.vocab_size == len(sentencepiece_vocab)
        if strict:
            grammar = aj.json_schema_to_grammar(schema, whitespace="compact", max_depth=4)
            validator = jsonschema.validators.validator_for(schema)(schema)
            rng = random.Random(name)
            documents = [d for d in (_random_document(grammar, rng) for _ in range(20)) if d is not None]
            assert documents, "some random derivations end"
            for document in documents:
                assert validator.is_valid(json.loads(document)), document
