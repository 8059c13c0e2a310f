"""Phase tracking and deferred activation against brute-force byte searches, with both real
vocabularies: triggers split across tokens, several in one token, a trigger sharing its token
with the grammar's first bytes."""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.compile.cfg import compile_ir
from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax._src.fusion.triggers import aho_corasick, spell
from ananke_jax.fusion import FusionError, GenerationPhase, deferred, phase_tracker

from cfg_grammars import JSON, JSON_EXAMPLES
from earley import SharedEarley
from fusion_oracles import DeferredOracle, brute_phases, first_end, scripted_generation
from oracles import ReferenceMasks, random_member, unpack

R, S, T = GenerationPhase.REASONING, GenerationPhase.STRUCTURED_OUTPUT, GenerationPhase.TRANSITION
PHASE_TRIGGERS = {"<think>": R, "</think>": S, "think>": T, "```json": S, "```": T, "é\n": R}
PIECES = ["<", "</", "think", ">", "`", "``", "json", " ", "\n", "é", "hello", "I think", '{"a": 1}', "思考", ">>", "<<"]
DEFERRED_REGEXES = [r'\{"answer": "(yes|no)", "n": [0-9]{1,3}\}', r"\s*(yes|no)\."]


def random_text(rng, pieces, count) -> str:
    return "".join(rng.choice(pieces) for _ in range(count))


def test_aho_corasick_finds_the_longest_pattern_ending_at_each_byte():
    rng = np.random.default_rng(0)
    for _ in range(50):
        patterns = list(dict.fromkeys(bytes(rng.choice(list(b"ab<>"), rng.integers(1, 5))) for _ in range(rng.integers(1, 5))))
        transitions, match = aho_corasick(patterns)
        data = bytes(rng.choice(list(b"ab<>x"), 60))
        state = 1
        for end in range(1, len(data) + 1):
            state = int(transitions[state, data[end - 1]])
            hits = [i for i, p in enumerate(patterns) if data[:end].endswith(p)]
            expected = max(hits, key=lambda i: len(patterns[i])) if hits else -1
            assert int(match[state]) == expected, (patterns, data[:end])


@functools.cache
def _tracker(vocab):
    return phase_tracker(PHASE_TRIGGERS, vocab)


@jax.jit
def _phases(tracker, tokens):
    def body(state, token):
        state = tracker.advance(state, token)
        return state, tracker.phase(state)

    return jax.lax.scan(body, tracker.init_state(), tokens)[1]


def _check_phases(tracker, vocab, tokens):
    data = b"".join(vocab.token_bytes(t) for t in tokens)
    expected = brute_phases(data, {t.encode(): p for t, p in PHASE_TRIGGERS.items()}, S)
    got = np.asarray(_phases(tracker, jnp.asarray(tokens, jnp.int32)))
    ends = np.cumsum([len(vocab.token_bytes(t)) for t in tokens])
    np.testing.assert_array_equal(got, np.asarray(expected)[ends], err_msg=repr(data))


def test_phase_tracking_matches_a_brute_force_byte_search_on_tokenized_text(real_vocab):
    _, vocab, encode = real_vocab
    tracker = _tracker(vocab)
    rng = np.random.default_rng(1)
    pieces = PIECES + list(PHASE_TRIGGERS)
    for _ in range(40):
        tokens = encode(random_text(rng, pieces, int(rng.integers(5, 40))))
        _check_phases(tracker, vocab, tokens)


def test_phase_tracking_matches_a_brute_force_byte_search_on_random_token_ids(real_vocab):
    """Random ids, drawn mostly from tokens holding trigger bytes, so triggers are split and
    merged with other text in every way the vocabulary allows."""
    _, vocab, _ = real_vocab
    tracker = _tracker(vocab)
    rng = np.random.default_rng(2)
    special = vocab.special_token_ids
    ordinary = [i for i, t in enumerate(vocab.tokens) if t and i not in special]
    trigger_bytes = set(b"<>/thinkjso`\n\xc3\xa9")
    pool = [i for i in ordinary if len(vocab.tokens[i]) <= 8 and set(vocab.tokens[i]) <= trigger_bytes | {32}]
    assert len(pool) > 50
    for _ in range(40):
        tokens = [int(rng.choice(pool)) if rng.random() < 0.85 else int(rng.choice(ordinary)) for _ in range(60)]
        _check_phases(tracker, vocab, tokens)


def test_phase_tracker_allows_everything_and_rejects_bad_triggers(sentencepiece_vocab):
    tracker = _tracker(sentencepiece_vocab)
    bits = unpack(aj.token_mask(tracker.matcher, tracker.init_state()))[: len(sentencepiece_vocab)]
    assert bits.sum() == len(sentencepiece_vocab) - len(sentencepiece_vocab.special_token_ids) + 1  # and EOS
    assert int(tracker.phase(tracker.init_state())) == S
    other = phase_tracker({"x": "reasoning"}, sentencepiece_vocab, initial="transition")
    assert int(other.phase(other.init_state())) == T
    for triggers, message in [
        ({}, "at least one trigger"),
        ({"": "reasoning"}, "non-empty"),
        ({"x": "thinking"}, "unknown phase"),
        ([("x", "reasoning"), ("x", "transition")], "two phases"),
    ]:
        with pytest.raises(FusionError, match=message):
            phase_tracker(triggers, sentencepiece_vocab)


@functools.cache
def _regex_case(pattern, vocab, triggers):
    dfa = regex_to_dfa(pattern)
    ref = ReferenceMasks(dfa, vocab)
    viable = lambda data: dfa.walk(dfa.start, data) != 0
    oracle = DeferredOracle(vocab, triggers, viable, lambda data: ref.allowed(dfa.walk(dfa.start, data)))
    return deferred(aj.compile_regex(pattern, vocab), triggers, vocab), dfa, oracle


_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)


def _walk_and_compare(dc, oracle, vocab, tokens, rng, explore: float):
    """Follow ``tokens`` (or, with probability ``explore`` per step, a random allowed token that
    ends a trigger when there is one), comparing whole masks with the oracle at every step.
    Returns the bytes generated and the final state."""
    state, data = dc.init_state(), b""
    for planned in tokens:
        expected = oracle.mask(data)
        got = unpack(_mask(dc, state))
        wrong = np.flatnonzero(got[: vocab.logits_width] != expected)
        assert not wrong.size, f"after {data!r}: " + "; ".join(f"{vocab.token_bytes(int(t))!r} got {got[t]}" for t in wrong[:6])
        assert not got[vocab.logits_width :].any()
        token = planned
        if rng.random() < explore:
            choices = np.flatnonzero(expected)
            enders = [t for t in choices if first_end(data + vocab.token_bytes(int(t)), oracle.triggers) is not None]
            token = int(rng.choice(enders if enders and first_end(data, oracle.triggers) is None else choices))
        assert expected[token], (data, vocab.token_bytes(token))
        state, data = _advance(dc, state, token), data + vocab.token_bytes(token)
        assert not bool(aj.is_error(dc, state))
        if token != planned:
            break
    return data, state


@pytest.mark.parametrize("pattern", DEFERRED_REGEXES)
def test_deferred_regex_equals_free_text_then_the_grammar(pattern, real_vocab):
    _, vocab, encode = real_vocab
    triggers = ("</think>", "\nAnswer:")
    dc, dfa, oracle = _regex_case(pattern, vocab, triggers)
    rng = np.random.default_rng(3)
    for walk in range(6):
        while True:
            free = random_text(rng, PIECES + ["</thin", "k>", "Answer", "\nAns"], int(rng.integers(2, 12)))
            trigger = triggers[walk % 2]
            if first_end((free + trigger).encode(), oracle.triggers) == len((free + trigger).encode()):
                break
        member = random_member(dfa, rng).decode()
        text = free + trigger + member
        data, state = _walk_and_compare(dc, oracle, vocab, encode(text), rng, explore=0.15 if walk >= 3 else 0.0)
        end = first_end(data, oracle.triggers)
        complete = end is not None and bool(dfa.accepting[dfa.walk(dfa.start, data[end:])])
        assert bool(aj.accepts(dc, state)) == complete
        if data == text.encode():
            assert complete and re.fullmatch(pattern, text[text.index(trigger) + len(trigger) :], re.ASCII)
            assert bool(aj.is_allowed(_mask(dc, state), vocab.eos_token_ids[0]))


@pytest.mark.slow
def test_deferred_context_free_grammar_matches_earley(real_vocab):
    """A recursive JSON grammar after ``</think>``: whole masks against the byte-level Earley
    oracle, at waiting states (tails) and active ones."""
    _, vocab, encode = real_vocab
    earley = SharedEarley(JSON)
    viable = lambda data: earley.is_viable(earley.feed(earley.initial(), data))
    active_mask = lambda data: earley.allowed_tokens(earley.feed(earley.initial(), data), vocab)
    oracle = DeferredOracle(vocab, ("</think>",), viable, active_mask)
    dc = deferred(compile_ir(JSON, vocab), "</think>", vocab)
    rng = np.random.default_rng(4)
    text = "hm </thin ok</think>" + JSON_EXAMPLES[0]
    tokens = encode(text)[:12]  # the free text, the trigger, the first JSON tokens
    data, _ = _walk_and_compare(dc, oracle, vocab, tokens, rng, explore=0.0)
    assert data == text.encode()[: len(data)] and b"</think>{" in data


def test_deferred_tokens_that_end_the_trigger_and_begin_the_grammar():
    tokens = [b"<eos>", b"<", b"/", b"thin", b"think", b">", b"</think>", b">{", b"k>{", b"k>}", b"x", b"{", b"}"]
    tokens += [b"</think>{}", b"1", b"</think>x"]
    vocab = aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0], logits_width=40)
    dc = deferred(aj.compile_regex(r"\{1*\}", vocab), "</think>", vocab)
    ids = {t: i for i, t in enumerate(tokens)}

    def allowed(state):
        return {tokens[i] for i in np.flatnonzero(unpack(aj.token_mask(dc, state))[: len(vocab)])}

    def follow(*pieces, state=None):
        state = dc.init_state() if state is None else state
        for piece in pieces:
            state = aj.advance(dc, state, ids[piece])
        return state

    text = set(tokens[1:])
    assert allowed(dc.init_state()) == text - {b"</think>x"}  # its tail "x" cannot begin the grammar
    waiting = follow(b"<", b"/", b"thin")
    assert allowed(waiting) == text - {b"</think>x", b"k>}"}  # "k>}" would end the trigger, then "}"
    assert not bool(dc.is_active(waiting)) and not bool(aj.accepts(dc, waiting))
    for path in ([b"<", b"/", b"thin", b"k>{"], [b"<", b"/", b"think", b">{"], [b"x", b"</think>", b"{"]):
        state = follow(*path)
        assert bool(dc.is_active(state)) and allowed(state) == {b"1", b"}"}, path
    done = follow(b"1", b"}", state=state)
    assert allowed(done) == {b"<eos>"} and bool(aj.accepts(dc, done))
    assert bool(aj.accepts(dc, follow(b"</think>{}")))  # the trigger and a whole member in one token
    for bad in (follow(b"</think>x"), follow(b"<eos>"), follow(b"</think>", b"x")):  # EOS: not before the grammar
        assert bool(aj.is_error(dc, bad)) and not unpack(aj.token_mask(dc, bad)).any()


def test_deferred_refuses_bad_input(sentencepiece_vocab, tekken_vocab):
    cg = aj.compile_regex("a", sentencepiece_vocab)
    with pytest.raises(FusionError, match="not for this vocabulary"):
        deferred(cg, "</think>", tekken_vocab)
    for triggers in ([], "", [b""], [3]):
        with pytest.raises(FusionError, match="trigger"):
            deferred(cg, triggers, sentencepiece_vocab)


@pytest.mark.slow
def test_deferred_generation_under_jit_vmap_and_scan(real_vocab):
    """Random-logit generation: a script pushes the free text and the trigger, then the
    grammar takes over; every finished output is free text, the trigger, then a regex match."""
    _, vocab, encode = real_vocab
    pattern = DEFERRED_REGEXES[1]
    dc, dfa, _ = _regex_case(pattern, vocab, ("</think>", "\nAnswer:"))
    script = encode("Let me see <b> and </thin k>. So</think>")
    keys = jax.random.split(jax.random.key(5), 8)
    (states, done), tokens = scripted_generation(dc, script, vocab, keys, steps=48, eos_bonus=4.0)
    eos = vocab.eos_token_ids[0]
    for row, finished in zip(np.asarray(tokens), np.asarray(done)):
        ids = [int(t) for t in row if t >= 0]
        data = b"".join(vocab.token_bytes(t) for t in ids if t != eos)
        assert data.startswith(b"Let me see <b> and </thin k>. So</think>")
        answer = data.split(b"</think>", 1)[1]
        if finished:
            assert ids[-1] == eos and re.fullmatch(pattern, answer.decode(), re.ASCII), data
        else:
            assert dfa.walk(dfa.start, answer) != 0, data
    assert np.asarray(done).sum() >= 4
    assert not np.asarray(jax.vmap(lambda s: aj.is_error(dc, s))(states)).any()


def test_tails_are_spelled_by_the_fewest_ordinary_tokens():
    tokens = [b"<eos>", b"ab", b"abc", b"cd", b"a", b"b", b"<special>"]
    vocab = aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0], special_token_ids=[6])
    assert [tokens[i] for i in spell(b"abcd", vocab)] == [b"ab", b"cd"]  # longest-first would be stuck after "abc"
    assert [tokens[i] for i in spell(b"abab", vocab)] == [b"ab", b"ab"] and spell(b"", vocab) == []
    for data in (b"x", b"<special>"):
        with pytest.raises(FusionError, match="no sequence of ordinary tokens"):
            spell(data, vocab)
