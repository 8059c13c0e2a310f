"""Demo: constrained generation with a regex, a jitted `lax.scan` decode loop, no host round trip.

    python -m ananke_jax                       # embedded default vocabulary and regex
    python -m ananke_jax --tekken PATH         # a real tokenizer (also --sentencepiece, --tokenizer-json)
    python -m ananke_jax --regex '\\d{3}-\\d{4}' --samples 8

The "model" is a stand-in that emits random logits (a trained Flax model plugs in through
``step_fn`` in the generation API); the constraint guarantees every output matches the regex,
which the demo re-checks with Python's `re`.
"""

from __future__ import annotations

import argparse
import re
import string
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import ananke_jax as aj

DEFAULT_REGEX = (
    r'\{"date": "(19|20)\d\d-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])", '
    r'"rating": [1-5], "verdict": "(yes|no|maybe)", "tags": \[("[a-z]{2,8}"(, "[a-z]{2,8}"){0,2})?\]\}'
)
_WORDS = ["date", "rating", "verdict", "tags", "yes", "no", "maybe", "the", "and", "json", "model", "token", "grammar"]


def embedded_vocabulary() -> aj.Vocabulary:
    """A small byte-level vocabulary: EOS, all 256 bytes, and some multi-byte tokens that make
    bridge tokens such as ``", "`` and ``"}`` possible."""
    pieces = ['", "', '": "', '": ', '"}', '"]', '["', ', "', "{\"", "20", "19", "-0", "-1", "-2", "-3"]
    pieces += [w for w in _WORDS] + [f'"{w}"' for w in _WORDS] + [" " + w for w in _WORDS]
    pieces += [a + b for a in string.ascii_lowercase[:8] for b in "aeiou"]
    tokens = [b"<eos>"] + [bytes([b]) for b in range(256)] + [p.encode() for p in dict.fromkeys(pieces)]
    return aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0], special_token_ids=[0])


def generate(cg: aj.CompiledGrammar, key: jax.Array, batch: int, max_tokens: int, params: aj.SamplingParams):
    """Constrained sampling from random logits for a batch of sequences, in one jitted scan.

    Returns:
      tokens int32[batch, max_tokens] (-1 after the end) and done bool[batch].
    """
    step = jax.vmap(aj.constrained_step, in_axes=(None, 0, 0, 0, None))

    def body(carry, key):
        state, done = carry
        logits_key, sample_key = jax.random.split(key)
        logits = jax.random.normal(logits_key, (batch, cg.logits_width)) * 2.0
        logits = logits.at[:, cg.fallback_token].add(4.0)  # a model that likes to stop when it may
        token, new_state = step(cg, state, logits, jax.random.split(sample_key, batch), params)
        new_state = jax.tree_util.tree_map(lambda old, new: jnp.where(done, old, new), state, new_state)
        token = jnp.where(done, -1, token)
        return (new_state, done | (token == cg.fallback_token)), token

    states = jax.vmap(lambda _: cg.init_state())(jnp.arange(batch))
    (_, done), tokens = jax.lax.scan(body, (states, jnp.zeros(batch, bool)), jax.random.split(key, max_tokens))
    return tokens.T, done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ananke_jax", description=__doc__.split("\n")[0])
    parser.add_argument("--regex", default=DEFAULT_REGEX, help="pattern the output must fully match")
    parser.add_argument("--choices", nargs="+", help="constrain to one of these strings instead of a regex")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--tekken", help="Mistral Tekken tokenizer JSON")
    source.add_argument("--sentencepiece", help="SentencePiece .model file")
    source.add_argument("--tokenizer-json", help="Hugging Face tokenizer.json")
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    try:
        if args.tekken:
            vocab = aj.Vocabulary.from_tekken(args.tekken)
        elif args.sentencepiece:
            vocab = aj.Vocabulary.from_sentencepiece(args.sentencepiece)
        elif args.tokenizer_json:
            vocab = aj.Vocabulary.from_tokenizer_json(args.tokenizer_json)
        else:
            vocab = embedded_vocabulary()
        start = time.perf_counter()
        cg = aj.compile_choices(args.choices, vocab) if args.choices else aj.compile_regex(args.regex, vocab)
        compile_ms = (time.perf_counter() - start) * 1e3
    except aj.AnankeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"vocabulary: {vocab}")
    print(f"constraint: {'choices ' + repr(args.choices) if args.choices else 'regex ' + repr(args.regex)}")
    print(f"compiled in {compile_ms:.1f} ms: {cg}")

    params = aj.SamplingParams(temperature=args.temperature)
    run = jax.jit(generate, static_argnums=(2, 3, 4))
    tokens, done = run(cg, jax.random.key(args.seed), args.samples, args.max_tokens, params)
    tokens, done = np.asarray(tokens), np.asarray(done)
    matched = 0
    for row, finished in zip(tokens, done):
        ids = [int(t) for t in row if t >= 0 and t not in vocab.eos_token_ids]
        text = b"".join(vocab.token_bytes(t) for t in ids).decode("utf-8", "replace")
        ok = bool(finished) and (
            text in args.choices if args.choices else re.fullmatch(args.regex, text, re.ASCII) is not None
        )
        matched += ok
        status = "matches" if ok else ("unfinished" if not finished else "MISMATCH")
        print(f"[{status}, {len(ids)} tokens] {text}")
    print(f"{matched}/{len(tokens)} complete outputs match the constraint")
    return 0 if matched == int(done.sum()) else 1


if __name__ == "__main__":
    sys.exit(main())
