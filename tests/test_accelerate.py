"""DOMINO's accelerations in `generate`: opportunistic masking and grammar-driven speculation give
the tokens (greedy) or the distribution (sampled) of plain constrained decoding; jump-forward's
forced tokens keep every continuation the grammar allows."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.drafts import propose, record
from ananke_jax._src.models.llama import init_cache
from ananke_jax._src.runtime.sampling import filter_logits

from test_generate import CONFIG, PARAMS, SCHEMA, STEP, TOKENS, VOCAB, _generate, _last_logits, _texts

GREEDY, HOT = aj.SamplingParams(temperature=0.0), aj.SamplingParams(temperature=1.0)
NESTED = 'root ::= "[" (item ("," item)*)? "]"\nitem ::= [0-9]+ | root'
CONSTRAINTS = {
    "regex": lambda: aj.compile_regex(r"[a-z]{3,8}( [a-z]{2,5}){0,3}", VOCAB),
    "schema": lambda: aj.compile_json_schema(SCHEMA, VOCAB, whitespace="compact"),
    "pushdown": lambda: aj.compile_gbnf(NESTED, VOCAB, stack_depth=16),
}


def _same(a, b):
    np.testing.assert_array_equal(np.asarray(a.tokens), np.asarray(b.tokens))
    assert a.finish_names() == b.finish_names()
    np.testing.assert_array_equal(np.asarray(a.interventions), np.asarray(b.interventions))


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, sampling",
    [
        pytest.param(name, sampling, id=f"{sid}-{name}")
        for sid, sampling in {"greedy": GREEDY, "hot": HOT, "top_k": aj.SamplingParams(temperature=0.8, top_k=5)}.items()
        for name in CONSTRAINTS
        if (sid, name) != ("hot", "pushdown")
    ],
)
def test_opportunistic_masking_gives_the_tokens_of_full_masking(name, sampling):
    """Same Gumbel noise: the unconstrained draw, when allowed, is the masked draw (filters fall
    back to whole masks). The whole mask is needed only for some steps. (The pushdown engine
    runs with the greedy draw and with a filter: a plain hot draw takes greedy's path there.)"""
    constraint, needed, steps = CONSTRAINTS[name](), 0, 0
    for seed in range(4):
        plain = _generate(constraint, batch=4, new=30, sampling=sampling, seed=seed)
        fast = _generate(constraint, batch=4, new=30, sampling=sampling, seed=seed, acceleration="opportunistic")
        _same(plain, fast)
        needed += int(np.asarray(fast.stats["full_masks"]).sum())
        steps += int(np.asarray(plain.stats["full_masks"]).sum())
    assert needed <= steps
    if not sampling.filters:
        assert needed < steps, "some drawn tokens are allowed without a mask"


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, draft_length",
    [pytest.param(name, k, id=f"{k}-{name}") for k in (1, 4) for name in CONSTRAINTS if (k, name) != (1, "pushdown")],
)
def test_greedy_speculation_gives_the_tokens_of_plain_decoding(name, draft_length):
    constraint = CONSTRAINTS[name]()
    drafts = aj.draft_tables(constraint, VOCAB)
    accepted = 0
    for seed in range(3):
        plain = _generate(constraint, batch=4, new=30, sampling=GREEDY, seed=seed)
        fast = _generate(
            constraint, batch=4, new=30, sampling=GREEDY, seed=seed, acceleration="speculative", draft_length=draft_length, drafts=drafts
        )
        _same(plain, fast)
        accepted += int(np.asarray(fast.stats["accepted"]).sum())
        assert int(fast.stats["model_calls"]) <= int(plain.stats["model_calls"])
        drafts = fast.drafts  # votes carry over
    if name == "schema":
        assert accepted > 0, "forced keys are accepted"


@pytest.mark.slow
def test_speculation_over_a_bank_with_free_rows_gives_plain_tokens():
    grammars = [
        CONSTRAINTS["pushdown"](),
        aj.compile_json_schema({"type": "array", "items": {"type": "integer"}, "maxItems": 3}, VOCAB, engine="pushdown"),
    ]
    bank, index = aj.stack_grammars(grammars), np.array([0, 1, -1, 1])
    plain = _generate(bank, batch=4, new=24, sampling=GREEDY, grammar_index=index)
    fast = _generate(bank, batch=4, new=24, sampling=GREEDY, grammar_index=index, acceleration="speculative")
    _same(plain, fast)


def test_forced_tokens_are_the_longest_tokens_every_allowed_token_agrees_with():
    """Where a token is forced, it is allowed and every allowed text token is a prefix of it or
    extends it; from the schema's start the forced string is '{"ok":', whose longest token is '{"'."""
    cg = CONSTRAINTS["schema"]()
    forced = np.asarray(aj.draft_tables(cg, VOCAB).forced)
    assert VOCAB.token_bytes(int(forced[int(cg.start_state)])) == b'{"'
    text = [i for i in range(len(VOCAB)) if i not in VOCAB.eos_token_ids]
    checked = 0
    for state in np.flatnonzero(forced >= 0):
        mask = np.asarray(aj.unpack_mask(aj.token_mask(cg, aj.RegularState(jnp.int32(state))), VOCAB.logits_width))
        t = VOCAB.token_bytes(int(forced[state]))
        assert mask[forced[state]] and not bool(cg.accepting[state])
        for u in (VOCAB.token_bytes(i) for i in text if mask[i]):
            assert u.startswith(t) or t.startswith(u), (state, t, u)
        checked += 1
    assert checked >= 3


def _byte_walker(cg, vocab):
    """``walk(state, data)``: the state after ``data`` fed one single-byte token at a time from
    ``state`` (None when a byte is refused), from the constraint's own tables."""
    masks = np.unpackbits(np.asarray(cg.mask_rows).view(np.uint8), axis=1, bitorder="little")[np.asarray(cg.row_of_state)]
    next_state, class_of = np.asarray(cg.next_state), np.asarray(cg.class_of_token)
    ids = {vocab.token_bytes(i): i for i in range(len(vocab))}

    def walk(state, data):
        for byte in data:
            token = ids[bytes([byte])]
            if not masks[state, token]:
                return None
            state = int(next_state[state, class_of[token]])
        return state

    return masks.astype(bool), walk


ORDERS = {
    "anyOf": [
        {"type": "object", "properties": {key: {"type": "integer"}}, "required": [key], "additionalProperties": False}
        for key in ("order", "orderId")
    ]
}
ORDER_VOCAB = aj.Vocabulary.from_tokens(TOKENS + [b"order", b"orderId", b'Id"'], eos_token_ids=[0])


@pytest.mark.slow
@pytest.mark.parametrize("name", ["schema", "regex", "orders"])
def test_a_forced_token_keeps_every_continuation_of_the_tokens_it_cuts(name):
    """Jump-forward's safety (the order / orderId problem): where `f` is forced, an allowed token
    `t` longer than `f` goes on, byte by byte, from the state after `f` to the state after `t`,
    and one shorter than `f` reaches the state after `f` through f's remaining bytes: emitting
    `f` loses no continuation. With keys `order` and `orderId`, `order` is forced and cuts
    `orderId`."""
    vocab = ORDER_VOCAB if name == "orders" else VOCAB
    cg = aj.compile_json_schema(ORDERS, vocab, whitespace="compact") if name == "orders" else CONSTRAINTS[name]()
    forced = np.asarray(aj.draft_tables(cg, vocab).forced)
    allowed, walk = _byte_walker(cg, vocab)
    next_state, class_of = np.asarray(cg.next_state), np.asarray(cg.class_of_token)
    cuts = set()
    for state in np.flatnonzero(forced >= 0).tolist():
        f = int(forced[state])
        after_f, text = int(next_state[state, class_of[f]]), vocab.token_bytes(f)
        for t in np.flatnonzero(allowed[state]).tolist():
            if t in vocab.eos_token_ids:
                continue
            after_t, word = int(next_state[state, class_of[t]]), vocab.token_bytes(t)
            if len(word) > len(text):
                assert word.startswith(text) and walk(after_f, word[len(text) :]) == after_t, (state, text, word)
                cuts.add((text, word))
            else:
                assert text.startswith(word) and walk(after_t, text[len(word) :]) == after_f, (state, text, word)
    if name == "orders":
        assert (b"order", b"orderId") in cuts


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("sampling", [GREEDY, HOT], ids=["greedy", "hot"])
def test_jump_forward_emits_forced_tokens_unasked_and_its_outputs_stay_valid(seed, sampling):
    """The random model rarely takes a forced key itself; jump-forward emits it anyway, in fewer
    model calls than plain decoding, and every finished row is valid JSON of the schema."""
    jsonschema = pytest.importorskip("jsonschema")
    cg = CONSTRAINTS["schema"]()
    drafts = aj.draft_tables(cg, VOCAB)
    options = {"batch": 4, "new": 48, "sampling": sampling, "seed": seed, "drafts": drafts}
    plain = _generate(cg, batch=4, new=48, sampling=sampling, seed=seed)
    speculative = _generate(cg, acceleration="speculative", **options)
    jump = _generate(cg, acceleration="jump_forward", **options)
    assert int(np.asarray(jump.stats["accepted"]).sum()) > int(np.asarray(speculative.stats["accepted"]).sum())
    assert int(jump.stats["model_calls"]) < int(plain.stats["model_calls"])
    finished = [text for text, reason in zip(_texts(jump), jump.finish_names()) if reason != "length"]
    assert finished
    for text in finished:
        jsonschema.validate(json.loads(text), SCHEMA)


@pytest.mark.slow
def test_a_token_taken_where_a_token_was_forced_is_drafted_where_that_token_is_forced_again():
    """The forced-token vote table: the model took another allowed token (here a prefix) where
    the grammar forced `f`; in another state forcing `f`, that token is drafted instead of `f`."""
    cg = CONSTRAINTS["schema"]()
    tables = aj.draft_tables(cg, VOCAB)
    forced = np.asarray(tables.forced)
    states = {}
    for state in np.flatnonzero(forced >= 0):
        states.setdefault(int(forced[state]), []).append(int(state))

    def others(f, state):  # the other tokens allowed where `f` is forced
        mask = np.asarray(aj.unpack_mask(aj.token_mask(cg, aj.RegularState(jnp.int32(state))), VOCAB.logits_width))
        return [int(t) for t in np.flatnonzero(mask) if t != f and t not in VOCAB.eos_token_ids]

    f, first, second, taken = next((f, a, b, others(f, b)[0]) for f, s in states.items() for a in s for b in s if a != b and others(f, b))
    eos = jnp.asarray(VOCAB.eos_token_ids, jnp.int32)

    def draft(tables, state):
        drafts, usable, _, _, slots = propose(cg, aj.RegularState(jnp.int32(state)), jnp.int32(0), tables, jnp.int32(0), eos, 1)
        return int(drafts[0]) if int(usable) else None, slots

    before, slots = draft(tables, first)
    assert before == f and draft(tables, second)[0] == f
    learned = record(tables, slots[None, :1], jnp.asarray([[taken]]), jnp.asarray([[True]]))
    assert draft(learned, second)[0] == taken


@pytest.mark.slow
def test_drafts_tell_apart_the_positions_of_a_state_that_tokens_leave_unchanged():
    """Inside a run of digits the pushdown state stays the same, so votes keyed by the state
    alone would draft one token everywhere in the run; keyed by the state and the previous
    token, each position drafts what followed its previous token there."""
    cg, eos = CONSTRAINTS["pushdown"](), jnp.asarray(VOCAB.eos_token_ids, jnp.int32)
    ids = {VOCAB.token_bytes(i): i for i in range(len(VOCAB))}
    a, b, c = (ids[d] for d in (b"1", b"2", b"3"))
    first = aj.advance(cg, aj.advance(cg, cg.init_state(), ids[b"["]), a)
    second = aj.advance(cg, first, b)
    assert all(bool((x == y).all()) for x, y in zip(first, second)), "the premise: digits leave the state as it is"

    def draft(tables, state, previous):
        drafts, usable, _, _, slots = propose(cg, state, jnp.int32(previous), tables, jnp.int32(0), eos, 1)
        return int(drafts[0]) if int(usable) else None, slots

    tables = aj.draft_tables(cg, VOCAB)
    for state, previous, taken in ((first, a, b), (second, b, c)):
        tables = record(tables, draft(tables, state, previous)[1][None, :1], jnp.asarray([[taken]]), jnp.asarray([[True]]))
    assert draft(tables, first, a)[0] == b and draft(tables, second, b)[0] == c


def _exact_distribution(prompt, constraint, sampling, length):
    """Probability of every token sequence the constraint completes within ``length`` tokens,
    from full forward passes of the model (the oracle)."""
    eos = VOCAB.eos_token_ids[0]
    probs, frontier = {}, [((), constraint.init_state(), 1.0)]
    while frontier:
        seq, state, p = frontier.pop()
        mask = aj.token_mask(constraint, state)
        tokens = jnp.asarray(list(prompt) + list(seq) + [0] * (length - len(seq)), jnp.int32)
        logits = aj.apply_mask(_last_logits(tokens, len(prompt) + len(seq)), mask)
        dist = np.asarray(jax.nn.softmax(filter_logits(logits, sampling)), np.float64)
        allowed = np.flatnonzero(np.asarray(aj.unpack_mask(mask, VOCAB.logits_width)))
        if set(allowed.tolist()) == {eos}:  # complete: generation ends here
            probs[seq] = probs.get(seq, 0.0) + p
            continue
        for t in allowed:
            if t == eos:
                probs[seq] = probs.get(seq, 0.0) + p * dist[t]
            elif dist[t] > 0:
                frontier.append((seq + (int(t),), aj.advance(constraint, state, int(t)), p * dist[t]))
    return probs


@pytest.mark.slow
@pytest.mark.parametrize("sampling", [HOT, aj.SamplingParams(temperature=1.3, top_k=3)], ids=["hot", "top_k"])
def test_sampled_speculation_has_the_distribution_of_plain_decoding(sampling):
    """Chi-square goodness of fit of 2048 sampled outputs (one prompt, one row each) against the
    exact distribution over token sequences, for plain and speculative decoding; drafts are both
    accepted and refused."""
    constraint = aj.compile_regex(r"[ab]{3}", VOCAB)
    prompt = [40, 41, 42]
    exact = _exact_distribution(prompt, constraint, sampling, 4)
    assert math.isclose(sum(exact.values()), 1.0, rel_tol=1e-4)
    batch = 2048
    for acceleration in ("none", "speculative"):
        result = aj.generate(
            STEP, PARAMS, np.tile(prompt, (batch, 1)), constraint, cache=init_cache(CONFIG, batch, 3 + 4 + 4),
            max_new_tokens=4, eos_token_ids=VOCAB.eos_token_ids, key=jax.random.key(7), sampling=sampling,
            acceleration=acceleration, draft_length=2,
        )  # fmt: skip
        rows = np.asarray(result.tokens)
        counts = {}
        for row, n in zip(rows, np.asarray(result.lengths)):
            counts[tuple(row[:n].tolist())] = counts.get(tuple(row[:n].tolist()), 0) + 1
        assert set(counts) <= set(exact), "every output is a sequence the oracle allows"
        cells = [seq for seq in exact if exact[seq] * batch >= 5]
        rest = 1.0 - sum(exact[s] for s in cells)
        observed = [counts.get(s, 0) for s in cells] + [batch - sum(counts.get(s, 0) for s in cells)]
        expected = [exact[s] * batch for s in cells] + [rest * batch]
        chi2 = sum((o - e) ** 2 / e for o, e in zip(observed, expected) if e > 0)
        dof = len([e for e in expected if e > 0]) - 1
        assert chi2 < _chi2_critical(dof), (acceleration, chi2, dof)
        if acceleration == "speculative":
            drafted, accepted = int(result.stats["drafted"].sum()), int(result.stats["accepted"].sum())
            assert 0 < accepted < drafted, (accepted, drafted)


def _chi2_critical(dof: int) -> float:
    """The chi-square value exceeded with probability about 1e-4 (Wilson-Hilferty)."""
    z = 3.719
    return dof * (1 - 2 / (9 * dof) + z * math.sqrt(2 / (9 * dof))) ** 3


@pytest.mark.slow
def test_bad_acceleration_arguments_are_refused_clearly():
    constraint = CONSTRAINTS["regex"]()
    with pytest.raises(ValueError, match="acceleration must be one of"):
        _generate(constraint, acceleration="turbo")
    with pytest.raises(ValueError, match="draft_length must be an int >= 1"):
        _generate(constraint, acceleration="speculative", draft_length=0)
    with pytest.raises(ValueError, match=r"jump_forward emits forced tokens: pass drafts=aj.draft_tables\(constraint, vocab\)"):
        _generate(constraint, acceleration="jump_forward")
    prompt = np.ones((1, 4), np.int32)
    with pytest.raises(ValueError, match=r"\+ draft_length=4 need 16 cache positions, but the cache holds 12"):
        aj.generate(STEP, PARAMS, prompt, constraint, cache=init_cache(CONFIG, 1, 12), max_new_tokens=8,
                    eos_token_ids=VOCAB.eos_token_ids, key=jax.random.key(0), acceleration="speculative")  # fmt: skip
