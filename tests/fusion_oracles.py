"""Brute-force references of the fusion tests (trigger searches with `bytes.find`, phases by
scanning every prefix, the deferred-activation mask token by token) and a scripted generator."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import ananke_jax as aj


def brute_phases(data: bytes, triggers: dict, initial: int) -> list[int]:
    """The phase after each prefix ``data[:n]``, n = 0..len: the phase of the last trigger (bytes)
    ending at or before n (the longest of those ending at the same byte), else ``initial``."""
    phases, phase = [int(initial)], int(initial)
    for end in range(1, len(data) + 1):
        hits = [t for t in triggers if data[:end].endswith(t)]
        if hits:
            phase = int(triggers[max(hits, key=len)])
        phases.append(phase)
    return phases


def first_end(data: bytes, triggers) -> int | None:
    """Where the first trigger to be completed ends in ``data``, or None."""
    ends = [data.find(t) + len(t) for t in triggers if t in data]
    return min(ends) if ends else None


class DeferredOracle:
    """The exact mask of "free text until the first trigger, then the grammar", by brute force:
    each ordinary token is appended to the text and searched for triggers with `bytes.find`;
    where the first trigger ends inside it, its remaining bytes must be viable in the grammar."""

    def __init__(self, vocab, triggers, viable, active_mask):
        self.vocab, self.triggers = vocab, [t.encode() for t in triggers]
        self.viable, self.active_mask = viable, active_mask
        ordinary = [(i, t) for i, t in enumerate(vocab.tokens) if t and i not in vocab.special_token_ids]
        self.free = np.zeros(vocab.logits_width, bool)
        self.free[[i for i, _ in ordinary]] = True
        # A trigger that ends inside a token ends on its last byte, which the token then holds.
        last_bytes = {t[-1] for t in self.triggers}
        self.candidates = [(i, t) for i, t in ordinary if last_bytes & set(t)]
        self.window = max(map(len, self.triggers)) - 1

    def mask(self, data: bytes) -> np.ndarray:
        end = first_end(data, self.triggers)
        if end is not None:
            return self.active_mask(data[end:])
        out = self.free.copy()
        tail = data[len(data) - self.window :] if self.window else b""
        for i, token in self.candidates:
            joined = tail + token
            inside = first_end(joined, self.triggers)
            out[i] = inside is None or self.viable(joined[inside:])
        return out

    def is_error(self, data: bytes) -> bool:
        """The text can no longer be completed: its first trigger is followed by bytes the
        grammar refuses."""
        end = first_end(data, self.triggers)
        return end is not None and not self.viable(data[end:])


def scripted_generation(constraint, script, vocab, keys, *, steps: int, eos_bonus: float):
    """Random-logit generation under ``constraint`` in a jitted, vmapped `lax.scan`, one row per
    key: the script's token ids get +60 while it lasts (so the text visits the phases), EOS gets
    ``eos_bonus`` throughout.

    Returns:
      ``(final states, done bool[B]), tokens int32[B, steps]`` (-1 after EOS).
    """
    eos = vocab.eos_token_ids[0]
    script = jnp.asarray(script, jnp.int32)
    params = aj.SamplingParams(temperature=1.0)

    def generate(constraint, key):
        base = jax.random.normal(key, (vocab.logits_width,)).at[eos].add(eos_bonus)

        def body(carry, t):
            state, done = carry
            boost = jnp.zeros(vocab.logits_width).at[script[jnp.minimum(t, len(script) - 1)]].set(60.0)
            logits = base + jnp.where(t < len(script), boost, 0.0)
            token, new = aj.constrained_step(constraint, state, logits, jax.random.fold_in(key, t), params)
            new = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new)
            return (new, done | (token == eos)), jnp.where(done, -1, token)

        return jax.lax.scan(body, (constraint.init_state(), jnp.bool_(False)), jnp.arange(steps))

    return jax.jit(jax.vmap(generate, in_axes=(None, 0)))(constraint, keys)
