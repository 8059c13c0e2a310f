"""Slow, obviously-correct references that the compiled tables are checked against."""

from __future__ import annotations

import json
import pathlib

import numpy as np

# The regexes of the regular-language tests (grammars/regexes.json, shared with bench/): dates,
# emails, numbers, enumerations, strings, Unicode classes, alternations with shared prefixes,
# bounded repeats.
REGEXES = json.loads((pathlib.Path(__file__).resolve().parents[1] / "grammars/regexes.json").read_text(encoding="utf-8"))


def padded_tokens(tokens: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """uint8[N, L] token bytes (zero padded) and int64[N] lengths."""
    lengths = np.array([len(t) for t in tokens], np.int64)
    out = np.zeros((len(tokens), max(1, int(lengths.max(initial=0)))), np.uint8)
    for i, t in enumerate(tokens):
        out[i, : len(t)] = np.frombuffer(t, np.uint8)
    return out, lengths


class ReferenceMasks:
    """Masks and next states of every token from every DFA state, by walking each token's bytes
    through the byte DFA one position at a time (no trie, no classes, no hashing)."""

    def __init__(self, dfa, vocab):
        self.dfa, self.vocab = dfa, vocab
        ordinary = np.array([bool(t) and i not in vocab.special_token_ids for i, t in enumerate(vocab.tokens)])
        self.ordinary_ids = np.flatnonzero(ordinary)
        data, lengths = padded_tokens([vocab.tokens[i] for i in self.ordinary_ids])
        states = np.arange(dfa.num_states)
        cur = np.repeat(states[:, None], len(self.ordinary_ids), axis=1)
        for pos in range(data.shape[1]):
            moving = lengths > pos
            cur[:, moving] = dfa.transitions[cur[:, moving], data[moving, pos]]
        self.end_states = cur  # int32[S_dfa, N]

    def allowed(self, dfa_state: int) -> np.ndarray:
        """bool[logits_width]: tokens that keep the output a prefix of the language, and EOS
        iff the state accepts."""
        out = np.zeros(self.vocab.logits_width, bool)
        out[self.ordinary_ids] = self.end_states[dfa_state] != 0
        out[list(self.vocab.eos_token_ids)] = bool(self.dfa.accepting[dfa_state])
        return out


def random_member(dfa, rng: np.random.Generator, *, stop: float = 0.3, soft_limit: int = 40) -> bytes:
    """A random byte string of the DFA's language (random walk on live edges)."""
    distance = distances_to_accept(dfa)
    state, out = dfa.start, bytearray()
    while True:
        live = np.flatnonzero(dfa.transitions[state] != 0)
        if dfa.accepting[state] and (rng.random() < stop or len(out) >= soft_limit or not len(live)):
            return bytes(out)
        if len(out) >= soft_limit:  # head for acceptance
            live = live[distance[dfa.transitions[state, live]] < distance[state]]
        byte = int(rng.choice(live))
        out.append(byte)
        state = int(dfa.transitions[state, byte])


def distances_to_accept(dfa) -> np.ndarray:
    """int64[S]: fewest bytes from each state to an accepting one (large when none)."""
    dist = np.where(dfa.accepting, 0, 1 << 30)
    while True:
        new = np.minimum(dist, dist[dfa.transitions].min(axis=1) + 1)
        if (new == dist).all():
            return dist
        dist = new


def unpack(mask) -> np.ndarray:
    """bool[32 * W] from a packed uint32[W] mask, by plain integer arithmetic."""
    mask = np.asarray(mask, np.uint64)
    return ((mask[:, None] >> np.arange(32, dtype=np.uint64)) & 1).astype(bool).reshape(-1)
