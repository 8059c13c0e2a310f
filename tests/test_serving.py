"""The slot engine with the tiny Llama: a stream of distinct constraints of every kind with no
compilation after warm-up, outputs checked by independent parsers, greedy slots equal to
`generate`, slot reuse, and bad input."""

import json
import pathlib
import re
import subprocess
import sys
import textwrap

import jax
import jsonschema
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax import serving
from ananke_jax.models import LlamaConfig, init_params, make_step_fn

TOKENS = [b"<eos>"] + [bytes([c]) for c in range(32, 127)] + [b'{"', b'":', b'",', b"true", b"false", b"null", b"ab", b"12"]
VOCAB = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
CONFIG = LlamaConfig.tiny(len(TOKENS))
PARAMS = init_params(CONFIG, jax.random.key(0))
STEP = make_step_fn(CONFIG)
MAX_LEN = 96
CAPACITY = serving.PoolCapacity(
    regular_grammars=12, regular_states=8192, regular_transitions=1 << 16, regular_rows=1024, pushdown_grammars=6, lexer_states=512
)
JSON_GBNF = (pathlib.Path(__file__).resolve().parents[1] / "grammars" / "json.gbnf").read_text()


@pytest.fixture(scope="module")
def engine():
    pool = serving.GrammarPool(len(VOCAB), VOCAB.logits_width, VOCAB.eos_token_ids, CAPACITY)
    return serving.Engine(STEP, PARAMS, VOCAB, slots=4, max_len=MAX_LEN, pool=pool, prefill_buckets=(8, 16))


def _stream(rng, count):
    """``count`` distinct constraints of every kind, each with its independent validator."""
    out = []
    for i in range(count):
        kind = i % 5
        if kind == 0:
            pattern = f"[a-{'hjmpz'[i % 5]}]{{2,{3 + i % 6}}}( [0-9]{{1,{1 + i % 3}}}){{0,2}}"
            out.append((aj.compile_regex(pattern, VOCAB), lambda text, p=pattern: re.fullmatch(p, text) is not None))
        elif kind == 1:
            words = [f"w{i}x{j}" for j in range(2 + i % 4)]
            out.append((aj.compile_choices(words, VOCAB), lambda text, w=words: text in w))
        elif kind == 2:
            schema = {
                "type": "object",
                "properties": {f"k{i}": {"type": "integer", "maximum": 100 + i}, "flag": {"type": "boolean"}},
                "required": [f"k{i}"],
                "additionalProperties": False,
            }
            out.append((aj.compile_json_schema(schema, VOCAB, whitespace="compact"), lambda text, s=schema: _valid_json(text, s)))
        elif kind == 3:
            schema = {"type": "array", "items": {"$ref": "#"}, "maxItems": 1 + i % 3}  # recursive: nested lists
            out.append((aj.compile_json_schema(schema, VOCAB, whitespace="compact"), lambda text, s=schema: _valid_json(text, s)))
        else:
            grammar = f'root ::= "<" [a-z]{{1,{2 + i % 5}}} ">" (root | "{i}")'
            pattern = rf"(<[a-z]{{1,{2 + i % 5}}}>)+{i}"
            out.append((aj.compile_gbnf(grammar, VOCAB), lambda text, p=pattern: re.fullmatch(p, text) is not None))
    rng.shuffle(out)
    return out


def _valid_json(text, schema):
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def _run(engine, requests):
    """Submit every request, step until done; returns {id: (tokens, finish_reason)}."""
    ids = [engine.submit(*args, **kwargs) for args, kwargs in requests]
    out = {i: ([], None) for i in ids}
    while engine.has_work():
        for ev in engine.step():
            out[ev.request_id][0].extend(ev.tokens)
            if ev.finished:
                out[ev.request_id] = (out[ev.request_id][0], ev.finish_reason)
    return [out[i] for i in ids]


def _prompt(rng):
    return rng.integers(1, len(TOKENS), size=int(rng.integers(2, 15)))


def test_a_stream_of_distinct_constraints_compiles_nothing_and_stays_valid(engine):
    rng = np.random.default_rng(0)
    stream = _stream(rng, 55)
    before = engine.compilations
    requests = [
        ((_prompt(rng), c), {"max_new_tokens": 48, "sampling": aj.SamplingParams(temperature=0.9), "seed": i})
        for i, (c, _) in enumerate(stream)
    ]
    results = _run(engine, requests)
    assert engine.compilations == before, "the stream compiled something after warm-up"
    complete = 0
    for (tokens, reason), (_, valid) in zip(results, stream):
        assert reason in aj.FINISH_REASONS and reason not in ("running", "constraint_error")
        if reason in ("grammar_complete", "eos"):
            complete += 1
            assert valid(VOCAB.decode(tokens)), (reason, VOCAB.decode(tokens))
    assert complete >= 30
    assert len(engine.pool) == 0  # every request released its grammar


@pytest.mark.parametrize("which", ["regex", "pushdown"])
def test_greedy_slot_equals_generate_and_slot_reuse_resets_state(engine, which):
    constraint = aj.compile_regex(r"[a-z]{3,9}( [0-9]{2}){1,3}", VOCAB) if which == "regex" else aj.compile_gbnf(JSON_GBNF, VOCAB)
    rng = np.random.default_rng(1)
    prompt = _prompt(rng)
    greedy = aj.SamplingParams(temperature=0.0)
    result = aj.generate(
        STEP, PARAMS, prompt[None], constraint, cache=aj.models.init_cache(CONFIG, 1, MAX_LEN), max_new_tokens=30,
        eos_token_ids=VOCAB.eos_token_ids, key=jax.random.key(0), sampling=greedy,
    )  # fmt: skip
    expected = np.asarray(result.tokens[0, : int(result.lengths[0])]).tolist()
    expected_reason = result.finish_names()[0]
    # Alone, then beside other requests in slots that earlier requests used.
    alone = _run(engine, [((prompt, constraint), {"max_new_tokens": 30, "sampling": greedy})])
    others = [((_prompt(rng), c), {"max_new_tokens": 20, "seed": i}) for i, (c, _) in enumerate(_stream(rng, 5))]
    crowded = _run(engine, [*others[:3], ((prompt, constraint), {"max_new_tokens": 30, "sampling": greedy}), *others[3:]])
    assert alone[0] == (expected, expected_reason)
    assert crowded[3] == (expected, expected_reason)


def test_per_slot_sampling_and_seeds(engine):
    rng = np.random.default_rng(2)
    prompt, constraint = _prompt(rng), aj.compile_regex(r"[a-z ]{5,40}", VOCAB)
    hot = {"max_new_tokens": 24, "sampling": aj.SamplingParams(temperature=1.5, top_p=0.9, top_k=20)}
    runs = _run(engine, [((prompt, constraint), {**hot, "seed": s}) for s in (0, 0, 1, 2)])
    assert runs[0] == runs[1]  # same seed, same tokens, whatever the slot
    assert len({tuple(t) for t, _ in runs}) >= 2
    for tokens, _ in runs:
        assert re.fullmatch(r"[a-z ]{0,40}", VOCAB.decode(tokens))


def test_bad_requests_are_refused_and_others_go_on(engine):
    rng = np.random.default_rng(3)
    good = engine.submit(_prompt(rng), aj.compile_regex("[0-9]{4}", VOCAB), max_new_tokens=8)
    with pytest.raises(ValueError, match="the prompt has 100 tokens"):
        engine.submit(np.ones(100, np.int32))
    with pytest.raises(ValueError, match=r"max_new_tokens=95 does not fit: the slot's cache holds 96 positions"):
        engine.submit(np.ones(4, np.int32), max_new_tokens=95)
    with pytest.raises(ValueError, match="another vocabulary"):
        engine.submit(np.ones(4, np.int32), aj.compile_regex("a", aj.Vocabulary.from_tokens([b"<eos>", b"a"], eos_token_ids=[0])))
    handle = engine.pool.add(aj.compile_regex("[xy]{3}", VOCAB))
    engine.pool.remove(handle)
    with pytest.raises(ValueError, match="not in the pool"):
        engine.submit(np.ones(4, np.int32), handle)
    with pytest.raises(ValueError, match="repetition_penalty"):
        engine.submit(np.ones(4, np.int32), sampling=aj.SamplingParams(repetition_penalty=1.2))
    big = aj.compile_regex("[a-z]{9000}", VOCAB)
    with pytest.raises(serving.PoolCapacityError, match="regular states"):
        engine.submit(np.ones(4, np.int32), big)
    out = {}
    while engine.has_work():
        for ev in engine.step():
            out.setdefault(ev.request_id, []).extend(ev.tokens)
    assert re.fullmatch("[0-9]{4}", VOCAB.decode(out[good]))


def test_cancelled_requests_free_their_slot_and_pool_space_and_others_go_on(engine):
    """One request cancelled while queued, one while running: no event comes for either after,
    their grammars leave the pool, and the request beside them equals its run alone."""
    rng = np.random.default_rng(4)
    greedy = {"max_new_tokens": 20, "sampling": aj.SamplingParams(temperature=0.0)}
    kept = (_prompt(rng), aj.compile_regex(r"[a-z]{4,12}( [0-9]{2}){1,3}", VOCAB))
    [alone] = _run(engine, [(kept, greedy)])
    before = engine.compilations
    long_runs = [engine.submit(_prompt(rng), aj.compile_regex("[a-z ]{40,60}", VOCAB), max_new_tokens=40, seed=i) for i in range(3)]
    kept_id = engine.submit(*kept, **greedy)
    queued = engine.submit(_prompt(rng), aj.compile_regex("[0-9]{30}", VOCAB), max_new_tokens=30)  # the fifth of four slots
    assert engine.cancel(queued) and engine.waiting == 4
    admitted = engine.step()  # the four others take the slots, each with its first token
    assert engine.running == 4 and engine.cancel(long_runs[0]) and engine.running == 3
    assert not engine.cancel(long_runs[0])  # already gone
    later = []
    while engine.has_work():
        later += engine.step()
    assert long_runs[0] not in {e.request_id for e in later} and queued not in {e.request_id for e in admitted + later}
    kept_events = [e for e in admitted + later if e.request_id == kept_id]
    assert ([t for e in kept_events for t in e.tokens], kept_events[-1].finish_reason) == alone
    assert len(engine.pool) == 0 and engine.compilations == before


def test_a_dead_end_ends_the_request_with_constraint_error(engine):
    # The vocabulary has no token for "~" after "ab": the token DFA reaches a state with an
    # empty mask (a dead end at the token level), and the request ends there.
    vocab = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
    constraint = aj.compile_regex("(ab|cd)\u00e9", vocab)
    (tokens, reason), = _run(engine, [((np.ones(3, np.int32), constraint), {"max_new_tokens": 10})])  # fmt: skip
    assert reason == "constraint_error"
    assert VOCAB.decode(tokens) in ("ab", "cd", "a", "c", "")


def _sharding_requests():
    return [
        ((np.arange(1, 4 + i % 3), aj.compile_regex(f"[a-z]{{2,{3 + i}}}", VOCAB)), {"max_new_tokens": 12, "seed": i}) for i in range(12)
    ]


@pytest.mark.slow
def test_engine_sharded_over_eight_devices_equals_one_device(engine):
    """Eight slots sharded over eight (host) devices, in a subprocess, write each request's
    tokens as this process's engine of four unsharded slots does: a request's tokens depend on
    its prompt, constraint and seed only."""
    script = textwrap.dedent(
        """
        import os
        os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"  # after tests/conftest.py's flags
        import json, sys
        sys.path.insert(0, sys.argv[1])
        import jax, numpy as np
        from ananke_jax import serving
        from test_serving import CAPACITY, MAX_LEN, PARAMS, STEP, VOCAB, _run, _sharding_requests
        assert len(jax.devices()) == 8
        mesh = jax.sharding.Mesh(np.array(jax.devices()), ("slots",))
        pool = serving.GrammarPool(len(VOCAB), VOCAB.logits_width, VOCAB.eos_token_ids, CAPACITY)
        engine = serving.Engine(STEP, PARAMS, VOCAB, slots=8, max_len=MAX_LEN, pool=pool, prefill_buckets=(8,), mesh=mesh)
        assert len(engine._slots.pending.sharding.device_set) == 8
        out = [[t, r] for t, r in _run(engine, _sharding_requests())]
        assert engine.compilations == 0
        print(json.dumps(out))
        """
    )
    run = subprocess.run([sys.executable, "-c", script, str(pathlib.Path(__file__).parent)], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    sharded = json.loads(run.stdout.strip().splitlines()[-1])
    assert [[t, r] for t, r in _run(engine, _sharding_requests())] == sharded
