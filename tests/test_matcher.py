"""The host-driven matcher against the pure functions it wraps, and against XGrammar's layout."""

import functools
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj

from json_schemas import REGULAR
from oracles import unpack

_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)
_accepts = jax.jit(aj.accepts)

_GRAMMARS = pathlib.Path(__file__).parent.parent / "grammars"

# One constraint per kind: (compile, texts of its language). The JSON Schema one is regular, the
# GBNF one runs on the pushdown engine.
KINDS = {
    "regex": (
        lambda vocab: aj.compile_regex(r"[a-z0-9._%+-]+@[a-z0-9-]+(\.[a-z0-9-]+)*\.[a-z]{2,6}", vocab),
        ["john.doe@example.com", "a_b+c@mail.co.uk"],
    ),
    "json_schema": (
        lambda vocab: aj.compile_json_schema(REGULAR["weather_call"], vocab),
        ['{"location": "Paris", "unit": "celsius", "days": 3}', '{"location":"Ulm"}'],
    ),
    "gbnf": (
        lambda vocab: aj.compile_gbnf((_GRAMMARS / "json.gbnf").read_text(), vocab),
        ['{"a": [1, 2.5, true, null], "b": {"c": "d é"}}', "[]"],
    ),
}


@functools.cache
def _constraint(kind, vocab):
    return KINDS[kind][0](vocab)


def _fill(matcher, vocab):
    out = aj.allocate_token_bitmask(1, vocab.logits_width)
    matcher.fill_next_token_bitmask(out)
    return out[0]


def _fed(cg, vocab, tokens, **kwargs):
    """A fresh matcher that accepted ``tokens`` one by one."""
    matcher = aj.Matcher(cg, vocab, **kwargs)
    for token in tokens:
        assert matcher.accept_token(token), vocab.token_bytes(token)
    return matcher


def _string_fed(cg, vocab, text):
    """A fresh matcher that accepted ``text`` as a string."""
    matcher = aj.Matcher(cg, vocab)
    assert matcher.accept_string(text)
    return matcher


def _same_state(a, b):
    return all(np.array_equal(x, y) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def _pick(rng, allowed, vocab, eos_rate=0.5):
    """A random allowed token; EOS (when allowed) with probability ``eos_rate``."""
    eos = np.isin(allowed, vocab.eos_token_ids)
    if eos.any() and (eos.all() or rng.random() < eos_rate):
        return int(allowed[eos][0])
    return int(rng.choice(allowed[~eos]))


def _starts(kind, encode, rng):
    """Token ids of each example text and of a random prefix of it: random walks from there
    reach complete outputs and EOS, which walks from the start over a large vocabulary rarely do."""
    texts = KINDS[kind][1]
    return [encode(t[:cut]) for t in texts for cut in (len(t), int(rng.integers(1, len(t))))]


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k == "gbnf" else k for k in KINDS])
def test_bitmasks_equal_the_pure_token_mask_along_random_walks(kind, real_vocab):
    _, vocab, encode = real_vocab
    cg = _constraint(kind, vocab)
    rng = np.random.default_rng(0)
    ids = np.arange(32 * -(-vocab.logits_width // 32))
    for start in [[], *_starts(kind, encode, rng)]:
        matcher, state = _fed(cg, vocab, start), cg.init_state()
        for token in start:
            state = _advance(cg, state, token)
        for _ in range(12):
            filled = _fill(matcher, vocab)
            expected = np.asarray(_mask(cg, state))
            assert filled.dtype == np.int32 and np.array_equal(filled.view(np.uint32), expected)
            assert matcher.is_completed() == bool(_accepts(cg, state))
            allowed = unpack(expected)
            refused = ids[~allowed & (ids < vocab.logits_width)]
            special = np.asarray(sorted(vocab.special_token_ids))
            before = matcher.state  # a pushdown matcher's state lives on the pool, in its own layout
            for forbidden in [*rng.choice(refused, size=min(24, len(refused)), replace=False), *special[~allowed[special]]]:
                assert not matcher.accept_token(int(forbidden))
            assert _same_state(matcher.state, before) and np.array_equal(_fill(matcher, vocab), filled)
            if matcher.is_terminated():
                assert not allowed.any() or np.isin(ids[allowed], vocab.eos_token_ids).all()
                break
            token = _pick(rng, ids[allowed], vocab)
            assert matcher.accept_token(token)
            state = _advance(cg, state, token)
            assert matcher.is_terminated() == (token in vocab.eos_token_ids)


@pytest.mark.parametrize("kind", KINDS)
def test_rollback_and_reset_restore_exactly(kind, real_vocab):
    _, vocab, encode = real_vocab
    cg = _constraint(kind, vocab)
    rng = np.random.default_rng(1)
    tokens = encode(KINDS[kind][1][0])
    matcher, kept = _fed(cg, vocab, tokens, max_rollback=6), min(len(tokens), 6)
    for _ in range(40):
        if kept and rng.random() < 0.3:
            n = int(rng.integers(1, kept + 1))
            matcher.rollback(n)
            del tokens[-n:]
            kept -= n
        else:
            allowed = np.flatnonzero(unpack(_fill(matcher, vocab).view(np.uint32)))
            if matcher.is_terminated():
                assert not matcher.accept_token(int(allowed[0]))
                matcher.rollback(1)
                tokens.pop()
                kept -= 1
                continue
            tokens.append(_pick(rng, allowed, vocab))
            assert matcher.accept_token(tokens[-1])
            kept = min(kept + 1, 6)
        replay = _fed(cg, vocab, tokens)
        assert np.array_equal(_fill(matcher, vocab), _fill(replay, vocab)), tokens
        assert _same_state(matcher.state, replay.state)
        assert matcher.is_terminated() == replay.is_terminated()
        assert matcher.is_completed() == replay.is_completed()
    matcher.reset()
    assert np.array_equal(_fill(matcher, vocab), _fill(aj.Matcher(cg, vocab), vocab))
    assert not matcher.is_terminated()
    with pytest.raises(ValueError, match="cannot roll back 1 steps: 0 kept"):
        matcher.rollback(1)


def test_rollback_is_bounded_by_the_history(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    matcher = aj.Matcher(_constraint("regex", vocab), vocab, max_rollback=2)
    assert matcher.accept_string("ab") and matcher.accept_string("c") and matcher.accept_string("@")
    with pytest.raises(ValueError, match=r"cannot roll back 3 steps: 2 kept \(max_rollback=2\)"):
        matcher.rollback(3)
    with pytest.raises(ValueError, match="cannot roll back -1 steps"):
        matcher.rollback(-1)
    matcher.rollback(2)  # accept_string is one step each
    assert np.array_equal(_fill(matcher, vocab), _fill(_string_fed(matcher.constraint, vocab, "ab"), vocab))


@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k == "gbnf" else k for k in KINDS])
def test_accept_string_equals_feeding_the_tokenizers_tokens(kind, real_vocab):
    _, vocab, encode = real_vocab
    cg = _constraint(kind, vocab)
    rng = np.random.default_rng(2)
    for text in KINDS[kind][1]:
        for cut in sorted({len(text), *rng.integers(1, len(text), 3).tolist()}):
            prefix = text[:cut]
            tokens = encode(prefix)
            assert b"".join(map(vocab.token_bytes, tokens)) == prefix.encode()
            by_string, by_tokens = _string_fed(cg, vocab, prefix), _fed(cg, vocab, tokens)
            assert np.array_equal(_fill(by_string, vocab), _fill(by_tokens, vocab)), prefix
            assert by_string.is_completed() == by_tokens.is_completed()
        assert by_string.is_completed() and by_string.accept_token(vocab.eos_token_ids[0]) and by_string.is_terminated()
        assert not by_string.accept_string("")


def _abc():
    """The regex "abc" over a vocabulary without "c": "ab" is allowed first but leads nowhere."""
    vocab = aj.Vocabulary.from_tokens(["<eos>", "a", "ab", "bc", "x"], eos_token_ids=0, logits_width=40)
    return aj.compile_regex("abc", vocab), vocab


def test_accept_string_backtracks_when_the_longest_token_leads_nowhere():
    cg, vocab = _abc()
    matcher = _string_fed(cg, vocab, "abc")  # "ab" first, then "a" "bc"
    assert _same_state(matcher.state, _fed(cg, vocab, [1, 3]).state) and matcher.is_completed()
    assert _same_state(_string_fed(cg, vocab, "ab").state, _fed(cg, vocab, [2]).state)


@pytest.mark.parametrize("text", ["abx", "abcab", "c"])
def test_accept_string_outside_the_language_leaves_the_state_alone(text):
    cg, vocab = _abc()
    matcher = aj.Matcher(cg, vocab)
    assert matcher.accept_token(1)
    before = (matcher.state, _fill(matcher, vocab))
    assert not matcher.accept_string(text)
    assert _same_state(matcher.state, before[0]) and np.array_equal(_fill(matcher, vocab), before[1])
    matcher.rollback(1)  # the failed call pushed no step
    assert _same_state(matcher.state, aj.Matcher(matcher.constraint, vocab).state)


@pytest.mark.slow
def test_fill_bitmasks_equals_per_matcher_fills(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    rx, schema, gbnf = (_constraint(kind, vocab) for kind in KINDS)
    matchers = [
        aj.Matcher(gbnf, vocab),
        _string_fed(rx, vocab, "joe@x"),
        _string_fed(gbnf, vocab, '{"a": [1, '),
        _string_fed(schema, vocab, '{"location": "Ro'),
        _string_fed(rx, vocab, "joe@x.org"),
        _string_fed(gbnf, vocab, "[true]"),
        aj.Matcher(rx, vocab),
    ]
    assert matchers[5].accept_token(vocab.eos_token_ids[0])
    out = aj.allocate_token_bitmask(len(matchers) + 2, vocab.logits_width)
    aj.fill_bitmasks(matchers, out)
    for i, matcher in enumerate(matchers):
        assert np.array_equal(out[i], _fill(matcher, vocab)), i
    assert (out[len(matchers) :] == -1).all()
    # The batched fill is the mask accept_token checks next.
    token = int(np.flatnonzero(unpack(out[2].view(np.uint32)))[0])
    assert matchers[2].accept_token(token)
    assert np.array_equal(_fill(matchers[2], vocab), np.asarray(_mask(matchers[2].constraint, matchers[2].state)).view(np.int32))


def test_a_regular_grammar_is_matched_on_the_host_without_device_calls(sentencepiece_vocab, monkeypatch):
    """Masks, steps, string splits, completion and batched fills of a regex or a regular schema
    read numpy tables (their values are checked against the pure functions above)."""
    from ananke_jax._src import matcher as matcher_module

    def device_call(*args):
        raise AssertionError("a jitted call for a regular grammar")

    for name in ("_token_mask", "_batch_token_mask", "_advance", "_advance_and_mask", "_accepts"):
        monkeypatch.setattr(matcher_module, name, device_call)
    vocab = sentencepiece_vocab
    for kind in ("regex", "json_schema"):
        text = KINDS[kind][1][0]
        matcher = _string_fed(_constraint(kind, vocab), vocab, text[:-4])
        assert not matcher.is_completed()
        out = aj.allocate_token_bitmask(2, vocab.logits_width)
        aj.fill_bitmasks([matcher], out)
        assert matcher.accept_string(text[-4:]) and matcher.is_completed()
        assert matcher.accept_token(vocab.eos_token_ids[0]) and matcher.is_terminated()
        matcher.rollback(2)
        assert np.array_equal(_fill(matcher, vocab), out[0])


def test_fill_bitmasks_refuses_mixed_widths_and_short_bitmasks(sentencepiece_vocab, tekken_vocab):
    small = aj.Matcher(_constraint("regex", sentencepiece_vocab), sentencepiece_vocab)
    large = aj.Matcher(_constraint("regex", tekken_vocab), tekken_vocab)
    with pytest.raises(ValueError, match="different widths"):
        aj.fill_bitmasks([small, large], aj.allocate_token_bitmask(2, tekken_vocab.logits_width))
    with pytest.raises(ValueError, match="at least 2 rows"):
        aj.fill_bitmasks([small, small], aj.allocate_token_bitmask(1, sentencepiece_vocab.logits_width))


def test_bad_bitmasks_tokens_and_vocabularies_are_refused(sentencepiece_vocab, tekken_vocab):
    vocab = sentencepiece_vocab
    cg = _constraint("regex", vocab)
    matcher = aj.Matcher(cg, vocab)
    words = vocab.logits_width // 32
    with pytest.raises(TypeError, match="numpy int32 array"):
        matcher.fill_next_token_bitmask(np.zeros((1, words), np.uint32))
    with pytest.raises(TypeError, match="got list"):
        matcher.fill_next_token_bitmask([0] * words)
    with pytest.raises(ValueError, match=rf"expected \[batch, {words}\]"):
        matcher.fill_next_token_bitmask(np.zeros((1, words + 1), np.int32))
    with pytest.raises(IndexError, match="row 2 is outside a bitmask of 2 rows"):
        matcher.fill_next_token_bitmask(np.zeros((2, words), np.int32), index=2)
    for token in (-1, vocab.logits_width):
        with pytest.raises(ValueError, match=f"token id {token} is outside"):
            matcher.accept_token(token)
    with pytest.raises(ValueError, match="compiled for another vocabulary"):
        aj.Matcher(cg, tekken_vocab)
    with pytest.raises(ValueError, match="max_rollback must be >= 0"):
        aj.Matcher(cg, vocab, max_rollback=-1)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("batch", [(), (3,), (2, 3)])
def test_apply_token_bitmask_on_numpy_and_jax_equals_apply_mask(batch, dtype):
    rng = np.random.default_rng(3)
    width, words = 100, 4
    logits = rng.standard_normal((*batch, width)).astype(dtype)
    for mask_batch in {batch, batch[-1:], ()}:
        bitmask = rng.integers(-(2**31), 2**31, (*mask_batch, words), dtype=np.int64).astype(np.int32)
        on_numpy = aj.apply_token_bitmask(logits, bitmask)
        on_jax = aj.apply_token_bitmask(jnp.asarray(logits), jnp.asarray(bitmask))
        rows = [unpack(row)[:width] for row in bitmask.view(np.uint32).reshape(-1, words)]
        expected = np.where(np.reshape(rows, (*mask_batch, width)), logits, dtype(-np.inf))
        assert isinstance(on_numpy, np.ndarray) and on_numpy.dtype == dtype
        assert isinstance(on_jax, jax.Array) and on_jax.dtype == dtype
        np.testing.assert_array_equal(on_numpy, expected)
        np.testing.assert_array_equal(np.asarray(on_jax), expected)
        on_device = aj.apply_mask(jnp.asarray(logits), jnp.asarray(bitmask.view(np.uint32)))
        np.testing.assert_array_equal(np.asarray(on_device), expected)


def test_apply_token_bitmask_refuses_shapes_and_dtypes_that_do_not_fit():
    logits = np.zeros((3, 100), np.float32)
    with pytest.raises(ValueError, match="cover only 96"):
        aj.apply_token_bitmask(logits, np.zeros((3, 3), np.int32))
    with pytest.raises(ValueError, match=r"shape \(2, 4\) does not fit logits of shape \(3, 100\)"):
        aj.apply_token_bitmask(logits, np.zeros((2, 4), np.int32))
    with pytest.raises(ValueError, match="does not fit"):
        aj.apply_token_bitmask(logits[0], np.zeros((3, 4), np.int32))
    with pytest.raises(TypeError, match="int32 or uint32, got int64"):
        aj.apply_token_bitmask(logits, np.zeros((3, 4), np.int64))


@pytest.fixture(scope="module")
def xgrammar():
    pytest.importorskip("torch", reason="torch is not installed: no XGrammar comparison")
    return pytest.importorskip("xgrammar", reason="xgrammar is not installed: no layout comparison")


def test_bitmask_layout_matches_xgrammar(xgrammar):
    import torch

    rng = np.random.default_rng(4)
    width = 32 * 5 - 7
    bitmask = rng.integers(-(2**31), 2**31, (4, 5), dtype=np.int64).astype(np.int32)
    logits = rng.standard_normal((4, width)).astype(np.float32)
    theirs = torch.from_numpy(logits.copy())
    xgrammar.apply_token_bitmask_inplace(theirs, torch.from_numpy(bitmask))
    np.testing.assert_array_equal(aj.apply_token_bitmask(logits, bitmask), theirs.numpy())
    np.testing.assert_array_equal(aj.allocate_token_bitmask(4, width), xgrammar.allocate_token_bitmask(4, width).numpy())


@pytest.mark.parametrize("pattern", [r"[0-9]{4}-[0-9]{2}-[0-9]{2}", r"(cat|car|cart|carton|dog)s?", r'"[^"\\]*"'])
def test_masks_equal_xgrammars_own_matcher(xgrammar, pattern, real_vocab):
    """XGrammar's GrammarMatcher on the same regex and token bytes (special tokens as empty
    strings, which XGrammar never allows) fills the same words as ours along a random walk."""
    _, vocab, _ = real_vocab
    encoded = [b"" if i in vocab.special_token_ids else t for i, t in enumerate(vocab.tokens)]
    info = xgrammar.TokenizerInfo(encoded, vocab_size=vocab.logits_width, stop_token_ids=list(vocab.eos_token_ids))
    theirs = xgrammar.GrammarMatcher(xgrammar.GrammarCompiler(info).compile_regex(pattern))
    ours = aj.Matcher(aj.compile_regex(pattern, vocab), vocab)
    their_bitmask = xgrammar.allocate_token_bitmask(1, vocab.logits_width)
    rng = np.random.default_rng(5)
    for _ in range(24):
        theirs.fill_next_token_bitmask(their_bitmask)
        filled = _fill(ours, vocab)
        np.testing.assert_array_equal(filled, their_bitmask.numpy()[0])
        token = _pick(rng, np.flatnonzero(unpack(filled.view(np.uint32))), vocab)
        assert ours.accept_token(token) and theirs.accept_token(token)
        assert ours.is_terminated() == theirs.is_terminated()
        if ours.is_terminated():
            break
