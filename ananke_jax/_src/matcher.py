"""Host-driven matching for servers that keep their own decode loop (PyTorch or JAX).

`Matcher` follows XGrammar's ``GrammarMatcher`` and llguidance's matcher: a mutable host
object holding one sequence's constraint state, which fills packed ``int32`` bitmasks in their
layout (bit j of word i allows token ``32 * i + j``; ``W = ceil(logits_width / 32)`` words per
row) and accepts the tokens the server samples. It is a thin shell over the pure run-time
functions (`token_mask`, `advance`, `accepts`), jitted once at module level with the constraint
as an argument: constraints of equal shapes share every compilation. A pushdown grammar is
admitted to a `GrammarPool` shared by the matchers of its vocabulary, whose shapes never
change: a new grammar compiles nothing once the pool is warm, and `fill_bitmasks` runs every
pooled matcher in one call. A single regular grammar is stepped on the host instead, from numpy
views of its tables: its mask is one row and its advance one lookup, a few microseconds against
a device call's tens.
"""

from __future__ import annotations

import collections
import functools
import logging
import operator
import weakref
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.engines.masks import apply_mask
from ananke_jax._src.engines.pooled import Pooled
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar, RegularState
from ananke_jax._src.runtime.constraint import accepts, advance, init_state, token_mask
from ananke_jax._src.serving.pool import GrammarPool, PoolCapacityError
from ananke_jax._src.vocab import Vocabulary

log = logging.getLogger(__name__)

_token_mask = jax.jit(token_mask)
_batch_token_mask = jax.jit(jax.vmap(token_mask, in_axes=(None, 0)))
_pooled_token_masks = jax.jit(jax.vmap(token_mask, in_axes=(Pooled(None, 0), 0)))
_pooled_advance_and_mask = jax.jit(jax.vmap(lambda cg, state, token: _advance_and_mask(cg, state, token), in_axes=(Pooled(None, 0), 0, 0)))
_shared_pools: dict[str, GrammarPool] = {}


def shared_pool(vocab: Vocabulary) -> GrammarPool:
    """The `GrammarPool` (``"default"`` capacity) that matchers over ``vocab`` share; made, and
    its writes compiled, on first use."""
    if vocab.fingerprint not in _shared_pools:
        _shared_pools[vocab.fingerprint] = GrammarPool(len(vocab), vocab.logits_width, vocab.eos_token_ids)
    return _shared_pools[vocab.fingerprint]


_advance = jax.jit(advance)
_accepts = jax.jit(accepts)


@jax.jit
def _advance_and_mask(constraint, state, token):
    """The state after ``token`` and its mask in one call: a step's work is small beside the
    cost of launching a program (two calls cost about twice one)."""
    after = advance(constraint, state, token)
    return after, token_mask(constraint, after)


def _words(width: int) -> int:
    return -(-width // 32)


def _bit(mask: np.ndarray, token: int) -> bool:
    """Bit ``token`` of a packed mask uint32[W]."""
    return bool((int(mask[token >> 5]) >> (token & 31)) & 1)


@functools.lru_cache(maxsize=4)
def _token_index(vocab: Vocabulary) -> tuple[dict[bytes, tuple[int, ...]], int]:
    """Ordinary (non-special, non-empty) token ids by their bytes, and the longest token's length."""
    index: dict[bytes, list[int]] = collections.defaultdict(list)
    for token, data in enumerate(vocab.tokens):
        if data and token not in vocab.special_token_ids:
            index[data].append(token)
    return {k: tuple(v) for k, v in index.items()}, max(map(len, index), default=0)


class _HostGrammar:
    """A single regular grammar's tables as numpy arrays: `token_mask`, `advance` and `accepts`
    on the host, with the same values as the pure functions."""

    def __init__(self, cg: RegularGrammar):
        self.mask_rows, self.row_of_state = np.asarray(cg.mask_rows), np.asarray(cg.row_of_state)
        self.next_state, self.class_of_token = np.asarray(cg.next_state), np.asarray(cg.class_of_token)
        self.accepting = np.asarray(cg.accepting)

    @staticmethod
    def of(constraint) -> _HostGrammar | None:
        """Host tables for a single (unstacked) `RegularGrammar`, else None."""
        if isinstance(constraint, RegularGrammar) and constraint.next_state.ndim == 2:
            return _HostGrammar(constraint)
        return None

    def token_mask(self, state: RegularState) -> np.ndarray:
        return self.mask_rows[self.row_of_state[state.node]]

    def advance(self, state: RegularState, token: int) -> RegularState:
        """The state after ``token``, an id in ``[0, logits_width)``."""
        return RegularState(node=self.next_state[state.node, self.class_of_token[token]])

    def accepts(self, state: RegularState) -> bool:
        return bool(self.accepting[state.node])


@jax.jit
def _start(constraint):
    """The initial state on a pool, jitted with the tables as an argument (every member shares it)."""
    return init_state(constraint)


class _Pending(NamedTuple):
    """A pooled matcher's state after an accepted token not yet applied: the step runs when the
    state or its mask is needed, or for many matchers at once in `fill_bitmasks`."""

    before: Any
    token: int


def _state_key(state) -> tuple[bytes, ...]:
    """A hashable copy of a state pytree, to remember where a search already failed."""
    return tuple(np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(state))


def _bitmask_rows(out: np.ndarray, words: int) -> np.ndarray:
    """``out`` as int32[B, words] (a view), after checking its type, dtype and shape.

    Raises:
      TypeError: ``out`` is not a numpy int32 array.
      ValueError: ``out`` is not [B, words] or [words].
    """
    if not isinstance(out, np.ndarray) or out.dtype != np.int32:
        got = out.dtype if isinstance(out, np.ndarray) else type(out).__name__
        raise TypeError(
            f"the bitmask must be a numpy int32 array (see allocate_token_bitmask), got {got}; for a torch CPU tensor pass tensor.numpy()"
        )
    if out.ndim not in (1, 2) or out.shape[-1] != words:
        raise ValueError(
            f"the bitmask has shape {out.shape}, expected [batch, {words}] or [{words}]: ceil(logits_width / 32) words for this vocabulary"
        )
    return out[None] if out.ndim == 1 else out


class Matcher:
    """One sequence's constraint state on the host, in the manner of XGrammar's GrammarMatcher.

    Typical loop: ``fill_next_token_bitmask(bitmask)``, mask and sample on the device,
    ``accept_token(token)``; stop when ``is_terminated()``. The last mask is kept on the host,
    so ``accept_token`` after a fill costs one jitted call, which also computes the next mask
    (none for a single regular grammar, stepped on the host). On a pool the call waits until the
    state or mask is needed, so `fill_bitmasks` steps every pooled matcher of a batch at once.
    """

    def __init__(self, constraint, vocab: Vocabulary, *, max_rollback: int = 16, pool: GrammarPool | bool | None = True):
        """Start a matcher at the constraint's initial state.

        Args:
          constraint: a compiled constraint (`RegularGrammar`, `PushdownGrammar` or a fused one).
          vocab: the vocabulary it was compiled against.
          max_rollback: how many steps `rollback` can undo (states kept on the host).
          pool: where a `PushdownGrammar` runs: True, the pool the matchers of ``vocab`` share
            (`shared_pool`); a `GrammarPool`; or False, its own tables (compiled for their
            shapes). A grammar the pool cannot take runs on its own tables. It leaves the pool
            when the matcher is garbage collected.

        Raises:
          ValueError: ``max_rollback`` is negative, or the constraint's masks do not have
            ``ceil(vocab.logits_width / 32)`` words (compiled for another vocabulary).
        """
        if max_rollback < 0:
            raise ValueError(f"max_rollback must be >= 0, got {max_rollback}")
        self._constraint, self._pool, self._handle = constraint, None, None
        if isinstance(constraint, PushdownGrammar) and pool is not False:
            self._pool = shared_pool(vocab) if pool is True else pool
            try:
                self._handle = self._pool.add(constraint)
            except PoolCapacityError as e:
                log.warning("the pushdown grammar runs on its own tables (compiled for their shapes): %s", e)
                self._pool = None
            else:
                weakref.finalize(self, self._pool.remove, self._handle)
        self._vocab = vocab
        self._words = _words(vocab.logits_width)
        self._eos = frozenset(vocab.eos_token_ids)
        self._host = _HostGrammar.of(constraint)
        self._init = init_state(constraint) if self._pool is None else _start(self.constraint)
        shape = jax.eval_shape(token_mask, self.constraint, self._init).shape
        if shape != (self._words,):
            raise ValueError(
                f"the constraint's masks have shape {shape} but the vocabulary's logits width "
                f"{vocab.logits_width} needs ({self._words},): compiled for another vocabulary?"
            )
        if self._host is not None:
            self._init = jax.tree_util.tree_map(np.asarray, self._init)
        self._history: collections.deque = collections.deque(maxlen=max_rollback)
        self.reset()

    @property
    def constraint(self):
        """The constraint the matcher steps: the one it was given, or its member of the pool."""
        return self._constraint if self._pool is None else self._pool.constraint(self._handle)

    @property
    def state(self):
        """The current state pytree, as the pure functions take it."""
        self._resolve()
        return self._state

    def _resolve(self) -> None:
        """Apply an accepted token left pending (one jitted call, which also gives the mask)."""
        if isinstance(self._state, _Pending):
            self._state, self._mask = _advance_and_mask(self.constraint, self._state.before, self._state.token)

    def reset(self) -> None:
        """Return to the initial state and forget the history."""
        self._state, self._terminated, self._mask = self._init, False, None
        self._history.clear()

    def _mask_of(self, state) -> np.ndarray:
        if self._host is not None:
            return self._host.token_mask(state)
        return np.asarray(_token_mask(self.constraint, state))

    def _advance(self, state, token: int):
        if self._host is not None:
            return self._host.advance(state, token)
        return _advance(self.constraint, state, token)

    def _current_mask(self) -> np.ndarray:
        """uint32[W], the mask of the current state (computed once per state, on the device
        by the step that reached it where there was one)."""
        if not isinstance(self._mask, np.ndarray):
            self._resolve()
            self._mask = self._mask_of(self._state) if self._mask is None else np.asarray(self._mask)
        return self._mask

    def _push(self, state, mask=None, *, terminated: bool = False) -> None:
        self._history.append((self._state, self._terminated, self._mask))
        self._state, self._terminated, self._mask = state, terminated, mask

    def fill_next_token_bitmask(self, out: np.ndarray, index: int = 0) -> None:
        """Write the allowed next tokens into row ``index`` of ``out``; the state is unchanged.

        After termination the row allows the EOS ids only (the constraint's own mask).

        Args:
          out: int32[B, W] or int32[W], ``W = ceil(vocab.logits_width / 32)``; bit j of word i
            allows token ``32 * i + j``. Padding ids and special tokens are always 0.
          index: the row to fill.

        Raises:
          TypeError, ValueError: ``out`` has the wrong type, dtype or shape.
          IndexError: ``index`` is not a row of ``out``.
        """
        rows = _bitmask_rows(out, self._words)
        if not 0 <= index < rows.shape[0]:
            raise IndexError(f"row {index} is outside a bitmask of {rows.shape[0]} rows")
        rows[index] = self._current_mask().view(np.int32)

    def accept_token(self, token: int) -> bool:
        """Advance by one token if the constraint allows it.

        Returns:
          True and the state advanced, or False and the state unchanged: the token is forbidden
          (special tokens always; EOS unless the output is complete), or the matcher has
          terminated. Accepting an EOS id terminates the matcher.

        Raises:
          ValueError: ``token`` is outside ``[0, vocab.logits_width)``.
        """
        token = operator.index(token)
        if not 0 <= token < self._vocab.logits_width:
            raise ValueError(f"token id {token} is outside [0, {self._vocab.logits_width}) (the logits width)")
        if self._terminated or not _bit(self._current_mask(), token):
            return False
        if self._host is not None:
            state, mask = self._host.advance(self._state, token), None
        elif self._pool is not None:
            state, mask = _Pending(self._state, token), None  # stepped when needed, batched in fill_bitmasks
        else:
            state, mask = _advance_and_mask(self.constraint, self._state, token)
        self._push(state, mask, terminated=token in self._eos)
        return True

    def accept_string(self, text: str | bytes) -> bool:
        """Advance by the bytes of ``text`` (UTF-8 for ``str``), as one rollback step.

        The bytes are split into ordinary tokens that the constraint allows one after another:
        a depth-first search that tries the longest token first and backtracks, never trying a
        (position, state) pair twice.

        Returns:
          True and the state advanced, or False and the state unchanged when no such split
          exists or the matcher has terminated.
        """
        if self._terminated:
            return False
        data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
        state = self._split(data)
        if state is None:
            return False
        self._push(state)
        return True

    def _candidates(self, data: bytes, start: int, state) -> Iterator[tuple[int, int]]:
        """(token, end): allowed tokens in ``state`` spelling ``data[start:end]``, longest first."""
        index, longest = _token_index(self._vocab)
        mask = self._mask_of(state)
        for end in range(min(len(data), start + longest), start, -1):
            for token in index.get(data[start:end], ()):
                if _bit(mask, token):
                    yield token, end

    def _split(self, data: bytes):
        """The state after ``data`` along some allowed tokenization, or None."""
        if not data:
            return self.state
        failed: set[tuple[int, tuple[bytes, ...]]] = set()
        frames = [(0, self.state, self._candidates(data, 0, self.state))]
        while frames:
            start, state, candidates = frames[-1]
            step = next(candidates, None)
            if step is None:
                failed.add((start, _state_key(state)))
                frames.pop()
                continue
            token, end = step
            after = self._advance(state, token)
            if end == len(data):
                return after
            if (end, _state_key(after)) not in failed:
                frames.append((end, after, self._candidates(data, end, after)))
        return None

    def rollback(self, n: int = 1) -> None:
        """Undo the last ``n`` steps (tokens or `accept_string` calls), termination included.

        Raises:
          ValueError: ``n`` is negative or more than the steps kept (at most ``max_rollback``).
        """
        if not 0 <= n <= len(self._history):
            raise ValueError(f"cannot roll back {n} steps: {len(self._history)} kept (max_rollback={self._history.maxlen})")
        if n:
            for _ in range(n - 1):
                self._history.pop()
            self._state, self._terminated, self._mask = self._history.pop()

    def is_terminated(self) -> bool:
        """An EOS id was accepted: nothing more is accepted until `rollback` or `reset`."""
        return self._terminated

    def is_completed(self) -> bool:
        """The output so far is in the language (the pure `accepts`: EOS is allowed now)."""
        if self._host is not None:
            return self._host.accepts(self._state)
        return bool(_accepts(self.constraint, self.state))


def fill_bitmasks(matchers: Sequence[Matcher], out: np.ndarray) -> None:
    """Fill row i of ``out`` for ``matchers[i]``, as each matcher's `fill_next_token_bitmask`.

    Matchers whose mask is known (a single regular grammar's rows on the host, or the mask their
    last `accept_token` computed) copy it; the others go through one vmapped jitted call per
    group on their stacked states: the matchers of one pool (whatever their grammars; those
    with an accepted token pending advance and mask in the same call), or of one constraint
    object. Groups are padded to a power of two so that batch sizes share compilations.

    Args:
      matchers: matchers over vocabularies of one logits width.
      out: int32[B, W] with ``B >= len(matchers)``; rows beyond are left alone.

    Raises:
      TypeError, ValueError: ``out`` has the wrong type, dtype or shape, or fewer rows than
        there are matchers; the matchers' logits widths differ.
    """
    if not matchers:
        return
    words = {m._words for m in matchers}
    if len(words) > 1:
        raise ValueError(f"the matchers' masks have different widths {sorted(words)} (words)")
    rows = _bitmask_rows(out, words.pop())
    if rows.shape[0] < len(matchers):
        raise ValueError(f"the bitmask has shape {out.shape}, expected at least {len(matchers)} rows")
    groups: dict[tuple[int, bool], list[int]] = collections.defaultdict(list)
    for i, m in enumerate(matchers):
        if m._host is not None or m._mask is not None:
            rows[i] = m._current_mask().view(np.int32)
        else:  # a pooled matcher with a token pending steps with the others of its pool
            groups[id(m._pool) if m._pool is not None else id(m._constraint), isinstance(m._state, _Pending)].append(i)
    pad = lambda xs: xs + xs[:1] * ((1 << (len(xs) - 1).bit_length()) - len(xs))
    # Stacked on the host: an eager jnp.stack would compile once per group size.
    stack = lambda states: jax.tree_util.tree_map(lambda *xs: np.stack(xs), *pad(jax.device_get(states)))
    for (_, pending), members in groups.items():
        first = matchers[members[0]]
        if pending:
            handles = np.asarray(pad([matchers[i]._handle.index for i in members]), np.int32)
            tokens = np.asarray(pad([matchers[i]._state.token for i in members]), np.int32)
            before = stack([matchers[i]._state.before for i in members])
            states, masks = jax.device_get(_pooled_advance_and_mask(Pooled(first._pool.tables, handles), before, tokens))
            for k, i in enumerate(members):
                matchers[i]._state = jax.tree_util.tree_map(lambda x, k=k: x[k], states)
        elif first._pool is None:
            masks = _batch_token_mask(first.constraint, stack([matchers[i].state for i in members]))
        else:
            handles = np.asarray(pad([matchers[i]._handle.index for i in members]), np.int32)
            masks = _pooled_token_masks(Pooled(first._pool.tables, handles), stack([matchers[i].state for i in members]))
        for i, mask in zip(members, np.asarray(masks)):
            matchers[i]._mask = mask
            rows[i] = mask.view(np.int32)


def allocate_token_bitmask(batch: int, vocab_size: int) -> np.ndarray:
    """int32[batch, ceil(vocab_size / 32)], every bit set (all tokens allowed), as XGrammar's.

    Pass ``vocab.logits_width`` as ``vocab_size`` for the rows a `Matcher` fills.
    """
    return np.full((batch, _words(vocab_size)), -1, np.int32)


def apply_token_bitmask(logits, bitmask):
    """Set the logits of tokens whose bit is 0 to -inf.

    Args:
      logits: float[..., V], a numpy or a jax array.
      bitmask: int32 or uint32 [..., W] with ``V <= 32 * W``, numpy or jax; its leading shape
        broadcasts to ``logits``' (``[W]`` masks every row). Bits beyond ``V`` are ignored.

    Returns:
      float[..., V], a new array of ``logits``' kind and dtype; a row whose bits are all 0 comes
      back all -inf.

    Raises:
      TypeError: ``bitmask`` is not int32 or uint32.
      ValueError: the shapes do not fit together.
    """
    width, words = logits.shape[-1], bitmask.shape[-1]
    if bitmask.dtype not in (np.int32, np.uint32):
        raise TypeError(f"the bitmask must be int32 or uint32, got {bitmask.dtype}")
    if width > 32 * words:
        raise ValueError(f"logits have {width} entries but the bitmask's {words} words cover only {32 * words}")
    try:
        batch = np.broadcast_shapes(bitmask.shape[:-1], logits.shape[:-1])
    except ValueError:
        batch = None
    if batch != logits.shape[:-1]:
        raise ValueError(
            f"a bitmask of shape {bitmask.shape} does not fit logits of shape {logits.shape}: "
            "its leading shape must broadcast to the logits'"
        )
    if isinstance(logits, np.ndarray):
        words_le = np.ascontiguousarray(bitmask).view(np.uint32).astype("<u4", copy=False)
        bits = np.unpackbits(words_le.view(np.uint8), axis=-1, count=width, bitorder="little")
        return np.where(bits.astype(bool), logits, np.asarray(-np.inf, logits.dtype))
    mask = jax.lax.bitcast_convert_type(jnp.asarray(bitmask), jnp.uint32)
    return apply_mask(logits, mask)
