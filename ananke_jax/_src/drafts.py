"""Draft tokens for grammar-driven speculation (DOMINO): forced tokens and count-based proposals.

From a constraint state reached by some token, the next draft token is the token most often
taken so far from the same state after the same token; else from the same state; else where the
grammar forced the same token; else the state's *forced* token when the grammar forces bytes
there (precomputed per state of a regular grammar, host side); else the token most often taken
after the same previous token. The four vote tables live on device and are updated as generation
proceeds. The state alone is a weak key where a token leaves it unchanged (inside a string of a
context-free grammar, or across ignored whitespace): the pair tells those positions apart. The
forced-token table learns how the model tokenizes forced text (the forced `"` that closes a key,
cut at the optional whitespace, is taken as `":`); the previous-token table generalises across
states (the whitespace after each `",`). A proposal the constraint forbids ends the draft.
Drafts only ever cost speed: the model verifies every one of them.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.arrays import pack_bits
from ananke_jax._src.engines.regular import RegularGrammar
from ananke_jax._src.runtime.constraint import advance, token_allowed
from ananke_jax._src.vocab import Vocabulary

DEFAULT_SLOTS = 4096
MAX_FORCED_BYTES = 64
NUM_TABLES = 4  # vote tables keyed by: the state and previous token, the state, the previous token, the forced token


@dataclasses.dataclass(frozen=True)
class DraftTables:
    """What drafts are made from (a pytree of device arrays).

    Attributes:
      forced: int32[S], per state of a regular grammar the first token of the byte string the
        grammar forces from there, tokenized greedily by longest match (-1: none); int32[1] of
        -1 for other constraints.
      candidate: int32[4, H], per key slot the token most often taken lately (-1: none); row 0
        is keyed by the constraint state and the previous token, row 1 by the state, row 2 by the
        previous token, row 3 by the forced token (states without one use no slot of it).
      votes: int32[4, H], its vote count (majority vote: a different token takes one vote away).
    """

    forced: jax.Array
    candidate: jax.Array
    votes: jax.Array


jax.tree_util.register_dataclass(DraftTables, data_fields=["forced", "candidate", "votes"], meta_fields=[])


def draft_tables(constraint=None, vocab: Vocabulary | None = None, *, slots: int = DEFAULT_SLOTS) -> DraftTables:
    """Draft tables for ``constraint``: forced tokens when it is a single regular grammar and
    ``vocab`` is given, and an empty vote table of ``slots`` entries."""
    forced = np.full(1, -1, np.int32)
    if isinstance(constraint, RegularGrammar) and vocab is not None and constraint.next_state.ndim == 2:
        forced = forced_tokens(constraint, vocab)
    empty = jnp.full((NUM_TABLES, slots), -1, jnp.int32)
    return DraftTables(forced=jnp.asarray(forced), candidate=empty, votes=jnp.zeros((NUM_TABLES, slots), jnp.int32))


def forced_tokens(cg: RegularGrammar, vocab: Vocabulary, max_bytes: int = MAX_FORCED_BYTES) -> np.ndarray:
    """int32[S]: per state, the longest token that is a prefix of the bytes the grammar forces
    from there (-1 when no byte is forced, or no such token is allowed).

    A byte is forced in a state that is not accepting when every allowed token starts with it;
    the forced string follows single-byte tokens through the token tables.
    """
    rows, row_of_state = np.asarray(cg.mask_rows), np.asarray(cg.row_of_state)
    tokens = [vocab.token_bytes(i) if i < len(vocab) else b"" for i in range(cg.logits_width)]
    words = rows.shape[1]
    text_ids = [i for i in range(len(vocab)) if i not in vocab.special_token_ids and tokens[i]]
    starts_with = np.zeros((256, 32 * words), bool)
    for i in text_ids:
        starts_with[tokens[i][0], i] = True
    packed = pack_bits(starts_with)  # [256, W]
    text_bits = np.zeros(32 * words, bool)
    text_bits[text_ids] = True
    text_rows = rows & pack_bits(text_bits)[None, :]
    # The first allowed token of each row names the only byte that may be forced.
    nonzero = text_rows != 0
    word = nonzero.argmax(axis=1)
    low = np.maximum(text_rows[np.arange(len(rows)), word], np.uint32(1))  # an empty row: token 0, checked below
    first = 32 * word + np.log2((low & (~low + np.uint32(1))).astype(np.float64)).astype(np.int64)
    byte = np.array([tokens[t][0] if n else -1 for t, n in zip(first.tolist(), nonzero.any(axis=1).tolist())])
    single = (text_rows & ~packed[np.maximum(byte, 0)]).any(axis=1) | (byte < 0)
    forced_byte = np.where(single, -1, byte)  # per row
    byte_token = {tokens[i][0]: i for i in text_ids if len(tokens[i]) == 1}
    accepting, next_state, class_of = np.asarray(cg.accepting), np.asarray(cg.next_state), np.asarray(cg.class_of_token)
    by_bytes = {tokens[i]: i for i in text_ids}
    longest = max(map(len, by_bytes), default=1)

    def forced_string(state: int) -> bytes:
        out = bytearray()
        while len(out) < max_bytes and not accepting[state]:
            b = forced_byte[row_of_state[state]]
            if b < 0 or b not in byte_token:
                break
            out.append(b)
            state = next_state[state, class_of[byte_token[b]]]
        return bytes(out)

    result = np.full(cg.num_states, -1, np.int32)
    for state in range(1, cg.num_states):
        text = forced_string(state)
        for n in range(min(len(text), longest), 0, -1):
            if text[:n] in by_bytes:
                result[state] = by_bytes[text[:n]]
                break
    return result


def state_key(state, slots: int) -> jax.Array:
    """int32[]: a slot for ``state`` (any constraint state pytree): a hash of all its leaves."""
    total = jnp.uint32(2166136261)
    for leaf in jax.tree_util.tree_leaves(state):
        flat = jnp.ravel(leaf).astype(jnp.uint32)
        weights = jnp.uint32(2654435761) * (jnp.arange(flat.shape[0], dtype=jnp.uint32) * jnp.uint32(2) + jnp.uint32(1))
        total = (total ^ (flat * weights).sum(dtype=jnp.uint32)) * jnp.uint32(16777619)
    return (total % jnp.uint32(slots)).astype(jnp.int32)


def propose(cg, state, previous, tables: DraftTables, grammar_index, eos_ids, length: int, forced_first: bool = False):
    """Up to ``length`` draft tokens from ``state``, reached by token ``previous`` (one row);
    ``forced_first``: a state's forced token before any voted one.

    Returns:
      drafts int32[length]; how many are usable (int32[]: drafts stop at the first state with
      nothing to propose, or whose proposal the constraint forbids or is EOS); whether each
      draft is its state's forced token (bool[length]); the states before
      each draft and after the last (a state pytree with a leading axis of length + 1), and
      their vote-table slots (int32[length + 1, NUM_TABLES]; a state without a forced token has
      slot H, out of range, in the last table).
    """
    slots = tables.candidate.shape[1]

    def keys(state, previous):
        forced = tables.forced[jnp.clip(getattr(state, "node", jnp.int32(0)), 0, tables.forced.shape[0] - 1)]
        by_forced = jnp.where(forced >= 0, state_key((forced, grammar_index), slots), slots)
        by = [(state, previous), state, previous]
        return jnp.stack([*[state_key((key, grammar_index), slots) for key in by], by_forced]), forced

    def step(carry, _):
        state, previous, going = carry
        slot, forced = keys(state, previous)
        by_pair, by_state, by_previous = (tables.candidate[i, slot[i]] for i in range(3))
        as_forced = jnp.where(forced >= 0, tables.candidate[3, jnp.minimum(slot[3], slots - 1)], -1)
        token = by_previous
        guesses = (as_forced, by_state, by_pair, forced) if forced_first else (forced, as_forced, by_state, by_pair)
        for better in guesses:  # the most specific known guess last
            token = jnp.where(better >= 0, better, token)
        going = going & (token >= 0) & ~(token == eos_ids).any() & token_allowed(cg, state, token)
        is_forced = going & (token == forced)
        token = jnp.maximum(token, 0)
        return (advance(cg, state, token), token, going), (token, going, is_forced, state, slot)

    (last, previous, _), (drafts, usable, is_forced, before, slots_of) = jax.lax.scan(
        step, (state, previous, jnp.bool_(True)), None, length=length
    )
    states = jax.tree_util.tree_map(lambda b, x: jnp.concatenate([b, x[None]]), before, last)
    slots_of = jnp.concatenate([slots_of, keys(last, previous)[0][None]])
    return drafts, usable.sum(dtype=jnp.int32), is_forced, states, slots_of


def record(tables: DraftTables, slots: jax.Array, tokens: jax.Array, taken: jax.Array) -> DraftTables:
    """Count ``tokens`` (int32[B, N]) taken from key ``slots`` (int32[B, N, NUM_TABLES])
    where ``taken`` (bool[B, N]): a majority vote per slot, position by position (rows that hit
    one slot at once leave one of their votes)."""
    candidate, votes = tables.candidate, tables.votes
    for table in range(candidate.shape[0]):
        for slot, token, on in zip(slots[:, :, table].T, tokens.T, taken.T):
            held_token, held_votes = candidate[table, slot], votes[table, slot]
            same, held = held_token == token, held_votes > 0
            new_votes = jnp.where(same, held_votes + 1, jnp.where(held, held_votes - 1, 1))
            new_candidate = jnp.where(same | held, held_token, token)
            slot = jnp.where(on, slot, candidate.shape[1])  # out of range: dropped
            candidate = candidate.at[table, slot].set(new_candidate, mode="drop")
            votes = votes.at[table, slot].set(new_votes, mode="drop")
    return dataclasses.replace(tables, candidate=candidate, votes=votes)
