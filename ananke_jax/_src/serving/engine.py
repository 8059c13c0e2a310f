"""`Engine`: continuous batching of constrained requests over a model's step function.

Each of ``slots`` rows holds one request: its KV cache row, its last token, its constraint
state on the pool (`PoolTables`) and its sampling parameters, all device arrays of fixed shape.
A step runs the model once over every slot's last token, then masks, samples and advances
every slot; a new request is prefilled into a free slot (prompt lengths bucketed) while the
others keep their state, and its first token is drawn right there. After
warm-up nothing compiles: grammars are pool writes, prompts fall into buckets, sampling
parameters and handles are arrays.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.engines.masks import apply_mask
from ananke_jax._src.engines.pooled import PooledState, PoolTables
from ananke_jax._src.generate import CONSTRAINT_ERROR, EOS, FINISH_REASONS, GRAMMAR_COMPLETE, LENGTH, RUNNING, cache_length
from ananke_jax._src.runtime.sampling import SamplingParams, SamplingRows, sample_rows
from ananke_jax._src.serving.pool import GrammarPool, Handle, PoolCapacityError


class Event(NamedTuple):
    """What one request did in one `Engine.step`: ``tokens`` (new ids), and once ``finished``
    its ``finish_reason`` (one of `ananke_jax.FINISH_REASONS`)."""

    request_id: int
    tokens: list[int]
    finished: bool
    finish_reason: str | None = None


class CompileCounter:
    """XLA backend compilations in this process, from `jax.monitoring` duration events."""

    EVENT = "/jax/core/compile/backend_compile_duration"
    count = 0
    _installed = False

    @classmethod
    def install(cls) -> None:
        if not cls._installed:
            jax.monitoring.register_event_duration_secs_listener(cls._listen)
            cls._installed = True

    @classmethod
    def _listen(cls, event: str, duration: float, **kwargs) -> None:
        if event == cls.EVENT:
            cls.count += 1


class _Slots(NamedTuple):
    """The device state of every slot (arrays with the slot axis first)."""

    cache: Any
    pending: jax.Array  # int32[S], the last token drawn, which the model reads next
    states: PooledState
    position: jax.Array  # int32[S], where the pending token goes in the cache
    generated: jax.Array  # int32[S]
    budget: jax.Array  # int32[S], max_new_tokens
    active: jax.Array  # bool[S]
    sampling: SamplingRows
    keys: jax.Array  # uint32[S, 2] raw PRNG keys


@dataclasses.dataclass
class _Request:
    id: int
    prompt: np.ndarray
    constraint: Any
    handle: Handle | None
    max_new_tokens: int
    sampling: SamplingParams
    seed: int


def _rows(flags, x):
    return flags.reshape(flags.shape + (1,) * (x.ndim - 1))


class Engine:
    """Continuous batching with every slot's constraint on the device.

    Args:
      step_fn: the model, ``(params, cache, tokens, positions) -> (logits, cache)`` as for
        `ananke_jax.generate` (batch, then position, leading every cache leaf).
      params: its parameters.
      vocab: the `Vocabulary` constraints are compiled for.
      slots: requests decoded at once (S).
      max_len: cache positions per slot: prompt plus generated tokens.
      init_cache: ``(batch, max_len) -> cache``; default ``step_fn.init_cache`` (set by
        `ananke_jax.models.make_step_fn`).
      pool: the `GrammarPool` (default: a new one of the ``"default"`` capacity).
      prefill_buckets: prompt lengths compiled for prefill (a prompt is padded to the next).
      steps_per_call: decode steps run per `step` call (one device loop, no host round trip).
      mesh: a `jax.sharding.Mesh`: slots are sharded over its first axis, tables replicated.
    """

    def __init__(
        self,
        step_fn: Callable,
        params: Any,
        vocab,
        slots: int = 8,
        max_len: int = 512,
        *,
        init_cache: Callable | None = None,
        pool: GrammarPool | None = None,
        prefill_buckets: Sequence[int] | None = None,
        steps_per_call: int = 1,
        mesh=None,
    ):
        CompileCounter.install()
        init_cache = init_cache or getattr(step_fn, "init_cache", None)
        if init_cache is None:
            raise ValueError("pass init_cache=(batch, max_len) -> cache, or a step_fn from ananke_jax.models.make_step_fn")
        self.vocab, self.slots, self.max_len, self.steps_per_call = vocab, slots, max_len, steps_per_call
        self.pool = pool if pool is not None else GrammarPool(len(vocab), vocab.logits_width, vocab.eos_token_ids)
        self.buckets = tuple(sorted(prefill_buckets or [b for b in (16, 32, 64, 128, 256, 512, 1024, 2048) if b < max_len] + [max_len]))
        self._eos = np.asarray(vocab.eos_token_ids, np.int32)
        cache = init_cache(slots, max_len)
        if cache_length(cache) != max_len:
            raise ValueError(f"init_cache made a cache of {cache_length(cache)} positions, not max_len={max_len}")
        tables = self.pool.tables
        self._slots = _Slots(
            cache=cache,
            pending=jnp.zeros(slots, jnp.int32),
            states=tables.batch_start(jnp.full(slots, -1, jnp.int32)),
            position=jnp.full(slots, max_len, jnp.int32),
            generated=jnp.zeros(slots, jnp.int32),
            budget=jnp.zeros(slots, jnp.int32),
            active=jnp.zeros(slots, bool),
            sampling=SamplingRows.of([SamplingParams()] * slots),
            keys=jnp.zeros((slots, 2), jnp.uint32),
        )
        self._decode, self._prefill, self._admit_row = _compiled(step_fn, self._eos, steps_per_call, mesh, self._slots)
        self._params = params if mesh is None else jax.device_put(params, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec()))
        if mesh is not None:
            self._slots = jax.device_put(self._slots, _slot_sharding(mesh, self._slots))
        self._queue: deque[_Request] = deque()
        self._running: dict[int, _Request] = {}  # slot -> request
        self._ids = itertools.count()
        self._done: list[Event] = []
        self._warm_up()
        self._start_count = CompileCounter.count  # compilations count from here: serving compiles nothing

    def _warm_up(self) -> None:
        """Compile prefill for every bucket and the decode step, on an unconstrained dummy request
        in slot 0 (left inactive), so that serving compiles nothing."""
        for bucket in self.buckets:
            self._start(0, _Request(-1, np.zeros(min(bucket, self.max_len - 1), np.int32), None, None, 1, SamplingParams(), 0))
        self._running.clear()
        self._done.clear()
        self._slots = self._slots._replace(active=self._slots.active & False)
        for decode in self._decode.values():
            self._slots = decode(self._params, self.pool.tables, self._slots)[0]
        self._slots = self._slots._replace(active=_deactivate(self._slots.active, jnp.int32(0)))

    @property
    def compilations(self) -> int:
        """XLA backend compilations in this process since the engine was made and warmed up."""
        return CompileCounter.count - self._start_count

    def submit(
        self,
        prompt_tokens: Sequence[int],
        constraint=None,
        max_new_tokens: int | None = None,
        sampling: SamplingParams = SamplingParams(),
        seed: int = 0,
    ) -> int:
        """Queue a request; returns its id. ``max_new_tokens``: default, the rest of the slot's
        cache. ``constraint``: a compiled grammar (admitted to the
        pool now, removed when the request ends), a `Handle` of the engine's pool, or None.

        Raises:
          ValueError: an empty or too long prompt, ``max_new_tokens`` beyond the cache, a
            removed handle, a constraint for another vocabulary, bad sampling parameters.
          PoolCapacityError: a grammar too large for the pool's capacity (``permanent``); one
            that only lacks free space waits in the queue.
        """
        prompt = np.asarray(prompt_tokens, np.int32).reshape(-1)
        if not 1 <= len(prompt) <= self.buckets[-1] or len(prompt) >= self.max_len:
            raise ValueError(f"the prompt has {len(prompt)} tokens; a slot holds prompts of 1 to {min(self.buckets[-1], self.max_len - 1)}")
        max_new_tokens = self.max_len - len(prompt) if max_new_tokens is None else max_new_tokens
        if not 1 <= max_new_tokens <= self.max_len - len(prompt):
            raise ValueError(
                f"max_new_tokens={max_new_tokens} does not fit: the slot's cache holds {self.max_len} positions "
                f"and the prompt takes {len(prompt)}, leaving {self.max_len - len(prompt)}"
            )
        SamplingRows.of([sampling])  # refuse what per-row sampling cannot do now, not at admission
        handle = None
        if isinstance(constraint, Handle):
            self.pool.check(constraint)
            handle = constraint
        elif constraint is not None:
            handle = self._admit(constraint, waiting_ok=True)
        request = _Request(next(self._ids), prompt, constraint, handle, max_new_tokens, sampling, seed)
        self._queue.append(request)
        return request.id

    def _admit(self, constraint, waiting_ok: bool) -> Handle | None:
        try:
            return self.pool.add(constraint)
        except PoolCapacityError as e:
            if e.permanent or not waiting_ok:
                raise
            return None  # admitted when space frees

    @property
    def free_slots(self) -> int:
        """Slots that a request submitted now would find free (not running, not claimed by the
        queue)."""
        return max(0, self.slots - len(self._running) - len(self._queue))

    @property
    def running(self) -> int:
        """Requests in slots."""
        return len(self._running)

    @property
    def waiting(self) -> int:
        """Requests queued for a slot (or for room in the pool)."""
        return len(self._queue)

    def has_work(self) -> bool:
        return bool(self._queue or self._running or self._done)

    def cancel(self, request_id: int) -> bool:
        """Stop a queued or running request (a client gone, a stop string met): its slot and pool
        space are freed, and no further event comes for it. Returns whether it was still live."""
        self._done = [e for e in self._done if e.request_id != request_id]
        for request in self._queue:
            if request.id == request_id:
                self._queue.remove(request)
                if request.handle is not None and not isinstance(request.constraint, Handle):
                    self.pool.remove(request.handle)
                return True
        for slot, request in self._running.items():
            if request.id == request_id:
                self._slots = self._slots._replace(active=_deactivate(self._slots.active, jnp.int32(slot)))
                self._release(slot)
                return True
        return False

    def step(self) -> list[Event]:
        """Admit queued requests to free slots: each is prefilled and its first token drawn,
        and those events come back at once. Otherwise decode ``steps_per_call`` tokens in every
        running slot. Returns the `Event`s of requests that produced tokens or finished."""
        self._fill_slots()
        events, self._done = self._done, []
        if events or not self._running:  # new requests' first tokens go out before the next decode
            return events
        pushdown = any(r.handle is not None and self.pool.engine(r.handle) == "pushdown" for r in self._running.values())
        self._slots, tokens, reasons = self._decode[pushdown](self._params, self.pool.tables, self._slots)
        tokens, reasons = np.asarray(tokens), np.asarray(reasons)  # [n, S]
        for slot, request in list(self._running.items()):
            emitted = [int(t) for t, r in zip(tokens[:, slot], reasons[:, slot]) if t >= 0]
            ended = [int(r) for r in reasons[:, slot] if r != RUNNING]
            if ended:
                self._release(slot)
            if emitted or ended:
                events.append(Event(request.id, emitted, bool(ended), FINISH_REASONS[ended[0]] if ended else None))
        return events

    def _release(self, slot: int) -> None:
        request = self._running.pop(slot)
        if request.handle is not None and not isinstance(request.constraint, Handle):
            self.pool.remove(request.handle)

    def _fill_slots(self) -> None:
        free = [s for s in range(self.slots) if s not in self._running]
        waiting = len(self._queue)
        for _ in range(waiting):
            if not free:
                break
            request = self._queue.popleft()
            if request.constraint is not None and request.handle is None:
                request.handle = self._admit(request.constraint, waiting_ok=True)
                if request.handle is None:
                    self._queue.append(request)  # still no room in the pool
                    continue
            self._start(free.pop(0), request)

    def _start(self, slot: int, request: _Request) -> None:
        bucket = next(b for b in self.buckets if b >= len(request.prompt))
        tokens = np.zeros((1, bucket), np.int32)
        tokens[0, : len(request.prompt)] = request.prompt
        handle = -1 if request.handle is None else request.handle.index
        length, at = jnp.int32(len(request.prompt)), jnp.int32(slot)
        cache, logits = self._prefill(self._params, self._slots.cache, jnp.asarray(tokens), length, at)
        tables, key = self.pool.tables, jax.random.key_data(jax.random.key(request.seed))
        start = _start_state(tables, jnp.int32(handle))
        row = (logits, length, at, jnp.int32(request.max_new_tokens), SamplingRows.of([request.sampling]), key)
        self._slots, token, reason = self._admit_row(tables, self._slots._replace(cache=cache), start, *row)
        self._running[slot] = request
        token, reason = int(token), int(reason)  # the first token, drawn from the prompt's logits
        if reason != RUNNING:
            self._release(slot)
        self._done.append(
            Event(request.id, [token] if token >= 0 else [], reason != RUNNING, FINISH_REASONS[reason] if reason != RUNNING else None)
        )


_start_state = jax.jit(PoolTables.start)
_deactivate = jax.jit(lambda active, slot: active.at[slot].set(False))


def _slot_sharding(mesh, slots: _Slots):
    axis = mesh.axis_names[0]
    spec = lambda x: jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(axis) if x.ndim else jax.sharding.PartitionSpec())
    return jax.tree_util.tree_map(spec, slots)


def _pick(tables: PoolTables, s: _Slots, logits, eos_ids, pushdown: bool | None):
    """Draw each row's next token from ``logits`` (float[B, V]) under its constraint and sampling
    parameters, and decide how the row goes on. ``pushdown`` (static): whether a row may be on a
    pushdown member (None: decide on the device). Returns (token int32[B] (-1: none emitted),
    finish reason int32[B] (`RUNNING` for rows still going or inactive), the slots with states
    advanced and the emitted tokens pending for the model)."""
    masks = tables.batch_token_mask(s.states, pushdown)
    keys = jax.vmap(lambda raw, n: jax.random.fold_in(jax.random.wrap_key_data(raw), n))(s.keys, s.generated)
    token = sample_rows(apply_mask(logits, masks), keys, s.sampling, eos_ids[0])
    is_eos = (token[:, None] == eos_ids[None, :]).any(axis=1)
    constrained = tables.kind(s.states.handle) != 0
    eos_bits = jnp.zeros(masks.shape[1], jnp.uint32).at[eos_ids >> 5].add(jnp.left_shift(jnp.uint32(1), (eos_ids & 31).astype(jnp.uint32)))
    empty = constrained & ~masks.any(axis=1)
    only_eos = constrained & ~empty & ~(masks & ~eos_bits[None, :]).any(axis=1)
    reason = jnp.select([empty, only_eos, is_eos], [CONSTRAINT_ERROR, GRAMMAR_COMPLETE, EOS], RUNNING)
    emits = s.active & (reason == RUNNING)
    reason = jnp.where(emits & (s.generated + 1 >= s.budget), LENGTH, reason)
    done = s.active & (reason != RUNNING)
    advanced = tables.batch_advance(s.states, jnp.where(emits, token, 0), pushdown)
    s = s._replace(
        states=jax.tree_util.tree_map(lambda new, old: jnp.where(_rows(emits, new), new, old), advanced, s.states),
        pending=jnp.where(emits, token, s.pending),
        generated=s.generated + emits,
        active=s.active & ~done,
    )
    return jnp.where(emits, token, -1), jnp.where(done, reason, RUNNING), s


def _put_row(rows: jax.Array, row: jax.Array, slot: jax.Array) -> jax.Array:
    """``rows`` with ``row`` (a leading axis of 1) written at ``slot``."""
    return jax.lax.dynamic_update_slice_in_dim(rows, row.astype(rows.dtype), slot, axis=0)


def _compiled(step_fn, eos: np.ndarray, steps: int, mesh, slots: _Slots):
    """The jitted decode functions (``steps`` tokens per slot), by whether a slot may be on a
    pushdown member (the host knows: no predicate is read on the device), the prefill of one
    slot's prompt and the admission of its request (its first token drawn); with a mesh, slot
    arrays stay sharded over its first axis."""
    eos_ids = jnp.asarray(eos)

    def decode_once(params, tables: PoolTables, s: _Slots, pushdown: bool):
        """The model over each active row's pending token, then the next token of every row."""
        logits, cache = step_fn(params, s.cache, s.pending[:, None], jnp.where(s.active, s.position, cache_length(s.cache))[:, None])
        s = s._replace(cache=cache, position=s.position + s.active)
        token, reason, s = _pick(tables, s, logits[:, 0], eos_ids, pushdown)
        return s, (token, reason)

    def decode(params, tables, s: _Slots, pushdown: bool):
        s, (tokens, reasons) = jax.lax.scan(lambda c, _: decode_once(params, tables, c, pushdown), s, None, length=steps)
        return s, tokens, reasons

    def prefill(params, cache, tokens, length, slot):
        """The model over one slot's prompt (``tokens``, padded to a bucket): the cache with that
        slot's row filled, and the logits (float[1, V]) after the prompt's last token."""
        row = jax.tree_util.tree_map(lambda c: jax.lax.dynamic_slice_in_dim(c, slot, 1, axis=0), cache)
        logits, row = step_fn(params, row, tokens, jnp.arange(tokens.shape[1], dtype=jnp.int32)[None, :])
        return jax.tree_util.tree_map(functools.partial(_put_row, slot=slot), cache, row), logits[:, length - 1]

    def admit(tables: PoolTables, s: _Slots, start: PooledState, logits, length, slot, budget, sampling, key):
        """Put a new request in ``slot`` and draw its first token from ``logits`` (one program for
        every prompt bucket: only the model's prefill depends on the prompt's length)."""
        one = _Slots(
            cache=None,
            pending=jnp.zeros(1, jnp.int32),
            states=jax.tree_util.tree_map(lambda x: x[None], start),
            position=length[None],
            generated=jnp.zeros(1, jnp.int32),
            budget=budget[None],
            active=jnp.ones(1, bool),
            sampling=sampling,
            keys=key[None],
        )
        token, reason, one = _pick(tables, one, logits, eos_ids, None)
        merged = jax.tree_util.tree_map(functools.partial(_put_row, slot=slot), s._replace(cache=None), one)
        return merged._replace(cache=s.cache), token[0], reason[0]

    shardings = {} if mesh is None else {"out_shardings": (_slot_sharding(mesh, slots), None, None)}
    cache_sharding = {} if mesh is None else {"out_shardings": (_slot_sharding(mesh, slots.cache), None)}
    decodes = {pushdown: jax.jit(functools.partial(decode, pushdown=pushdown), donate_argnums=2, **shardings) for pushdown in (False, True)}
    return decodes, jax.jit(prefill, donate_argnums=1, **cache_sharding), jax.jit(admit, donate_argnums=1, **shardings)
