"""A Flax NNX model decoding under a JSON Schema, with the constraint state in a `lax.scan` carry.

    python examples/nnx_decode_loop.py [--seed 0] [--samples 3]

The model is a tiny NNX decoder (embedding, one recurrent dense layer, output layer) with random weights over a
small byte-level vocabulary: whatever it prefers, every output is a JSON value the schema
accepts. The decode loop is one jitted function; the model's weights, the compiled constraint
and the PRNG key are its arguments, so new seeds (and other grammars padded to the same table
shapes) reuse the compiled loop. A trained model plugs in the same way, through its logits.
"""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
from flax import nnx

import ananke_jax as aj

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "pattern": "^[A-Z][a-z]{2,7}$"},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "colour": {"enum": ["red", "green", "blue"]},
    },
    "required": ["name", "age", "colour"],
}
MAX_TOKENS = 64  # enough for every value of the schema (compact layout), then EOS
SAMPLING = aj.SamplingParams(temperature=1.0)


def byte_vocabulary() -> aj.Vocabulary:
    """Every single byte, a few multi-byte merges (bridge tokens such as ``","`` included) and an
    end-of-sequence token, as a byte-level BPE vocabulary would have them."""
    merges = ['{"', '":', '","', '"}', '":"', "name", "age", "colour", "red", "green", "blue", "an", "er"]
    tokens = [bytes([b]) for b in range(256)] + [m.encode() for m in merges] + [b"<|end|>"]
    return aj.Vocabulary.from_tokens(tokens, eos_token_ids=len(tokens) - 1)


class TinyDecoder(nnx.Module):
    """One token in, next-token logits out; the recurrent state stands in for a KV cache."""

    def __init__(self, vocab_size: int, width: int, *, rngs: nnx.Rngs):
        self.embed = nnx.Embed(vocab_size, width, rngs=rngs)
        self.mix = nnx.Linear(2 * width, width, rngs=rngs)
        self.head = nnx.Linear(width, vocab_size, rngs=rngs)
        self.width = width

    def __call__(self, hidden: jax.Array, token: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(float32[width], int32[]) -> (float32[width], float32[vocab_size])."""
        hidden = jnp.tanh(self.mix(jnp.concatenate([hidden, self.embed(token)])))
        return hidden, self.head(hidden)


# --- the constrained decode loop ---------------------------------------------------------------
def decode_loop(graphdef, weights, constraint, prompt, key, eos):
    """int32[MAX_TOKENS]: the tokens sampled after ``prompt`` (int32[P]), then -1 after EOS."""
    model = nnx.merge(graphdef, weights)
    hidden, _ = jax.lax.scan(model, jnp.zeros(model.width), prompt[:-1])  # prefill

    def body(carry, step_key):
        hidden, token, state, done = carry
        hidden, logits = model(hidden, token)
        new_token, new_state = aj.constrained_step(constraint, state, logits, step_key, SAMPLING)
        # After EOS the state stays put and -1 fills the remaining steps.
        state = jax.tree.map(lambda old, new: jnp.where(done, old, new), state, new_state)
        out = jnp.where(done, -1, new_token)
        return (hidden, new_token, state, done | (new_token == eos)), out

    carry = (hidden, prompt[-1], constraint.init_state(), jnp.bool_(False))
    _, tokens = jax.lax.scan(body, carry, jax.random.split(key, MAX_TOKENS))
    return tokens


decode = jax.jit(decode_loop, static_argnames="eos")  # traced once; weights, grammar, key are data


def detokenize(vocab: aj.Vocabulary, tokens) -> str:
    """The text of the tokens before EOS (or the end)."""
    ids = [int(t) for t in tokens]
    ids = ids[: ids.index(-1)] if -1 in ids else ids
    return b"".join(vocab.token_bytes(t) for t in ids if t not in vocab.eos_token_ids).decode("utf-8")


def setup(model_seed: int = 0):
    """The vocabulary, the compiled schema, and the model split into (graphdef, weights)."""
    vocab = byte_vocabulary()
    constraint = aj.compile_json_schema(SCHEMA, vocab, whitespace="compact")
    model = TinyDecoder(vocab.logits_width, 32, rngs=nnx.Rngs(model_seed))
    graphdef, weights = nnx.split(model)
    return vocab, constraint, graphdef, weights


def generate(seed: int, prepared=None) -> str:
    """One constrained sample from the tiny model, as text (``prepared``: `setup`'s result)."""
    vocab, constraint, graphdef, weights = prepared or setup()
    prompt = jnp.asarray(list(b"A person: "), jnp.int32)
    tokens = decode(graphdef, weights, constraint, prompt, jax.random.key(seed), eos=vocab.eos_token_ids[0])
    return detokenize(vocab, tokens)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--samples", type=int, default=3)
    args = parser.parse_args()
    prepared = setup()
    print(prepared[1])
    for seed in range(args.seed, args.seed + args.samples):
        text = generate(seed, prepared)
        print(text, "->", json.loads(text))


if __name__ == "__main__":
    main()
