"""Shared helpers of the benchmarks: the real vocabularies and tokenizers, side-by-side timers,
and the token walks of ananke_jax and its peers (XGrammar, llguidance)."""

from __future__ import annotations

import os
import platform
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import ananke_jax as aj


def mistral_data(name: str) -> str:
    import mistral_common  # from the `test` extra

    return os.path.join(os.path.dirname(mistral_common.__file__), "data", name)


def load_vocabularies() -> dict[str, aj.Vocabulary]:
    return {
        "sentencepiece-32k": aj.Vocabulary.from_sentencepiece(mistral_data("tokenizer.model.v1")),
        "tekken-131k": aj.Vocabulary.from_tekken(mistral_data("tekken_240911.json")),
    }


def encoders() -> dict:
    """Each real vocabulary's own tokenizer as it encodes text mid-stream: no BOS or EOS, and no
    SentencePiece dummy-prefix space."""
    import sentencepiece
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(open(mistral_data("tokenizer.model.v1"), "rb").read())
    proto.normalizer_spec.add_dummy_prefix = False
    sp = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
    tekken = Tekkenizer.from_file(mistral_data("tekken_240911.json"))
    return {"sentencepiece-32k": sp.encode, "tekken-131k": lambda t: tekken.encode(t, bos=False, eos=False)}


def summary(seconds: list[float]) -> str:
    us = np.asarray(seconds) * 1e6
    return f"mean {us.mean():8.1f} us  p99 {np.percentile(us, 99):8.1f} us"


def ours_scan(cg, tokens: list[int], repeat: int = 1):
    """A function that runs one jitted `lax.scan` of mask + advance along the walk, ``repeat``
    times over from the initial state, and returns its seconds per token (compiled and checked
    here). One pass of a short walk mostly times the scan's launch; many passes give the cost of
    a token inside a decode loop, where the launch is paid once per generation.

    Raises:
        AssertionError: if the walk is not accepted.
    """

    @jax.jit
    def walk(cg, tokens, restart):
        init = cg.init_state()

        def body(carry, step):
            state, acc = carry
            token, first = step
            if repeat > 1:
                state = jax.tree_util.tree_map(lambda a, b: jnp.where(first, a, b), init, state)
            acc = acc ^ aj.token_mask(cg, state)  # keeps the mask live
            return (aj.advance(cg, state, token), acc), None

        (state, acc), _ = jax.lax.scan(body, (init, jnp.zeros(cg.mask_words, jnp.uint32)), (tokens, restart))
        return acc, aj.accepts(cg, state)

    ids = jnp.asarray(np.tile(np.asarray(tokens, np.int32), repeat))
    restart = jnp.asarray(np.tile(np.arange(len(tokens)) == 0, repeat))
    assert bool(walk(cg, ids, restart)[1]), "the walk must be accepted"

    def run() -> float:
        start = time.perf_counter()
        walk(cg, ids, restart)[0].block_until_ready()
        return (time.perf_counter() - start) / len(ids)

    return run


def matcher_per_call(cg, vocab: aj.Vocabulary, tokens: list[int]) -> list[float]:
    """The seconds of each token's `aj.Matcher` fill_next_token_bitmask + accept_token along the
    walk: what a server with its own decode loop calls, as the peers' walks do."""
    matcher, bitmask = aj.Matcher(cg, vocab), aj.allocate_token_bitmask(1, vocab.logits_width)
    matcher.fill_next_token_bitmask(bitmask)  # compiles the jitted calls of non-host constraints
    assert matcher.accept_token(tokens[0])
    matcher.reset()
    return matcher_walk(matcher, bitmask, tokens)


def matcher_walk(matcher, bitmask, tokens: list[int]) -> list[float]:
    """Seconds per token of ``matcher.fill_next_token_bitmask(bitmask)`` + ``accept_token``
    along the walk (ours or XGrammar's matcher: they share these two methods)."""
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token), f"token {token} refused"
        per_call.append(time.perf_counter() - start)
    return per_call


def ours_per_token(cg, vocab: aj.Vocabulary, tokens: list[int], repeats: int = 15, loop_tokens: int = 2048) -> dict:
    """Seconds of mask + advance per token along a walk the constraint must accept.

    Returns:
        ``scan``: the median over ``repeats`` runs of `ours_scan` over the walk once; ``loop``:
        the same over the walk repeated to at least ``loop_tokens`` tokens (the launch spread
        out); ``call``: `matcher_per_call`.
    """
    once, looped = ours_scan(cg, tokens), ours_scan(cg, tokens, repeat=-(-loop_tokens // len(tokens)))
    return {
        "scan": statistics.median(once() for _ in range(repeats)),
        "loop": statistics.median(looped() for _ in range(repeats)),
        "call": matcher_per_call(cg, vocab, tokens),
    }


def xgrammar_info(vocab: aj.Vocabulary):
    import xgrammar as xgr

    return xgr.TokenizerInfo(list(vocab.tokens), xgr.VocabType.RAW, vocab_size=vocab.logits_width, stop_token_ids=list(vocab.eos_token_ids))


def xgrammar_walk(compiled, vocab: aj.Vocabulary, tokens: list[int]) -> list[float]:
    """Seconds per token of XGrammar's fill_next_token_bitmask + accept_token along the walk."""
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(1, vocab.logits_width)
    xgr.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)  # warm up
    return matcher_walk(xgr.GrammarMatcher(compiled), bitmask, tokens)


class _Tokens:
    """The minimal tokenizer llguidance's TokenizerWrapper reads."""

    def __init__(self, vocab, encode):
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.tokens = list(vocab.tokens)
        self.special_token_ids = sorted(vocab.special_token_ids)
        self._encode = encode

    def __call__(self, text):
        return self._encode(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)


def llguidance_tokenizer(vocab: aj.Vocabulary, encode):
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tokens(vocab, encode)))


def llguidance_walk(matcher, vocab_size: int, tokens: list[int]) -> list[float]:
    """Seconds per token of llguidance's fill_next_token_bitmask + consume_token along the walk."""
    import llguidance.numpy

    bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, 0)
        assert matcher.consume_token(token), matcher.get_error()
        per_call.append(time.perf_counter() - start)
    return per_call


def interleaved_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each no-argument function, run in turn so drift hits all alike."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def machine() -> str:
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, jax {jax.__version__} on {jax.devices()[0].platform}"
