"""`GrammarPool`: compiled grammars of both engines admitted into device buffers of fixed
capacity, so a new grammar costs a few small writes and never an XLA compilation.

Admission is host work (numpy): the member's tables are padded to the pool's row widths, their
ids shifted by the ranges it gets, and its mask rows shared with the rows already held. The
writes go through one jitted, donating scatter per buffer, compiled when the pool is made.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import logging
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.bank import per_lexer_state, trie_parents
from ananke_jax._src.compile.arrays import pack_bits
from ananke_jax._src.compile.cfg import EMPTY_SET
from ananke_jax._src.compile.outcome_trie import NO_CHUNK, chunk_layout
from ananke_jax._src.engines.lr import SHIFT, pack_actions
from ananke_jax._src.engines.pooled import Pooled, PoolTables, PushdownPool, RegularPool
from ananke_jax._src.engines.pushdown import PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar
from ananke_jax._src.errors import AnankeError

log = logging.getLogger(__name__)


class PoolCapacityError(AnankeError):
    """A grammar does not fit the pool: ``axis`` needs ``needed`` entries, ``available`` are
    free of ``capacity``. ``permanent``: it would not fit an empty pool either."""

    def __init__(self, axis: str, needed: int, available: int, capacity: int):
        permanent = needed > capacity
        if permanent:
            message = f"the grammar needs {needed} {axis}, but the pool holds at most {capacity}: build it with a larger PoolCapacity"
        else:
            message = (
                f"the grammar needs {needed} {axis}, but the pool has {available} free of {capacity}: remove grammars no longer in use"
            )
        super().__init__(message)
        self.axis, self.needed, self.available, self.capacity, self.permanent = axis, needed, available, capacity, permanent


@dataclasses.dataclass(frozen=True)
class PoolCapacity:
    """The sizes of a pool's buffers (static: they fix the shapes of every step).

    Token-DFA members: ``regular_grammars`` of them, sharing ``regular_states`` states,
    ``regular_transitions`` (states x token classes) and ``regular_rows`` distinct mask rows.
    Pushdown members: ``pushdown_grammars`` of them, sharing ``lexer_states``, ``lr_states``,
    ``rules``, ``outcomes``, ``outcome_sets`` and ``pushdown_rows``; a member's widths must fit
    the per-row ones (``lr_columns``, ``nonterminals``, the per-lexer-state ``outcomes_per_state``,
    ``lookahead``, ``trie_nodes``, ``trie_chunks``, ``completions``, ``classes_per_state``,
    ``sets_per_state``, ``dense_rows``, ``sparse_tokens``, and ``outcome_terminals``,
    ``set_width``), and its ``stack_depth`` and ``max_configs`` those of the pool, which runs
    every member at its own (larger bounds only refuse less). ``lr_actions`` is the most actions
    an LR table cell may hold: 1 admits LALR(1) grammars only; more admits grammars whose
    tables conflict, and every member's parse then forks (up to ``max_configs``), which costs
    every step.
    """

    regular_grammars: int = 64
    regular_states: int = 65_536
    regular_transitions: int = 1 << 23
    regular_rows: int = 8192
    pushdown_grammars: int = 32
    lexer_states: int = 4096
    lr_states: int = 2048
    rules: int = 2048
    outcomes: int = 16_384
    outcome_sets: int = 8192
    pushdown_rows: int = 1024
    lr_columns: int = 64
    lr_actions: int = 1
    nonterminals: int = 64
    outcome_terminals: int = 64
    set_width: int = 16
    outcomes_per_state: int = 128
    lookahead: int = 8
    trie_nodes: int = 192
    trie_chunks: int = 128
    completions: int = 4
    classes_per_state: int = 512
    sets_per_state: int = 128
    dense_rows: int = 16
    sparse_tokens: int = 512
    lanes: int = 32
    stack_depth: int = 128
    max_configs: int = 4

    def table_bytes(self, logits_width: int) -> int:
        """Device bytes of a pool of this capacity for logits of ``logits_width``."""
        return sum(int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype, _ in _layout(self, logits_width).values())


PRESETS = {
    "small": PoolCapacity(
        regular_grammars=16,
        regular_states=8192,
        regular_transitions=1 << 19,
        regular_rows=1024,
        pushdown_grammars=8,
        lexer_states=512,
        lr_states=256,
        rules=256,
        outcomes=2048,
        outcome_sets=1024,
        pushdown_rows=128,
    ),
    "default": PoolCapacity(),
    "large": PoolCapacity(
        regular_grammars=256,
        regular_states=1 << 18,
        regular_transitions=1 << 24,
        regular_rows=32_768,
        pushdown_grammars=64,
        lexer_states=8192,
        lr_states=8192,
        rules=8192,
        outcomes=1 << 16,
        outcome_sets=1 << 16,
        pushdown_rows=4096,
        outcomes_per_state=512,
        lookahead=16,
        trie_nodes=1024,
        trie_chunks=256,
        classes_per_state=1024,
        sets_per_state=512,
        sparse_tokens=1024,
        dense_rows=32,
    ),
}


def _layout(cap: PoolCapacity, width: int) -> dict[tuple[str, str], tuple[tuple[int, ...], type, int]]:
    """(engine, field) -> (shape, dtype, fill) of every pool buffer. Fills are inert: the empty
    row, the error state or action, no outcome / node / set member, the empty outcome set."""
    words = -(-width // 32)
    q, p = cap.lexer_states, cap.outcomes_per_state
    i32, u32, b = np.int32, np.uint32, np.bool_
    regular = {
        "mask_rows": ((cap.regular_rows, words), u32, 0),
        "row_of_state": ((cap.regular_states,), i32, 0),
        "state_base": ((cap.regular_states,), i32, 0),
        "accepting": ((cap.regular_states,), b, False),
        "transitions": ((cap.regular_transitions,), i32, 0),
        "class_of_token": ((cap.regular_grammars, width), i32, 0),
        "start": ((cap.regular_grammars,), i32, 0),
    }
    pushdown = {
        "packed_action": ((cap.lr_states, cap.lr_columns, cap.lr_actions), i32, 0),
        "goto": ((cap.lr_states, cap.nonterminals), i32, 0),
        "lexer_row": ((q,), i32, 0),
        "node_parent": ((q, cap.trie_nodes), i32, -1),
        "node_column": ((q, cap.trie_nodes), i32, 0),
        "chunk_start": ((q, cap.trie_chunks), i32, 0),
        "num_chunks": ((q,), i32, 0),
        "node_chunk": ((q, cap.trie_nodes), i32, NO_CHUNK),
        "state_outcomes": ((q, p), i32, -1),
        "outcome_terminals": ((cap.outcomes, cap.outcome_terminals), i32, 0),
        "outcome_length": ((cap.outcomes,), i32, 0),
        "outcome_node": ((q, p), i32, -1),
        "outcome_lookahead": ((q, p, cap.lookahead), i32, -1),
        "outcome_free": ((q, p), b, False),
        "outcome_lexer": ((q, p), i32, -1),
        "complete_node": ((q, cap.completions), i32, -1),
        "set_members": ((cap.outcome_sets, cap.set_width), i32, -1),
        "class_set": ((q, cap.classes_per_state), i32, EMPTY_SET),
        "state_sets": ((q, cap.sets_per_state), i32, EMPTY_SET),
        "mask_rows": ((cap.pushdown_rows, words), u32, 0),
        "dense_row": ((q, cap.dense_rows), i32, 0),
        "dense_set": ((q, cap.dense_rows), i32, 0),
        "sparse_token": ((q, cap.sparse_tokens), i32, 0),
        "sparse_set": ((q, cap.sparse_tokens), i32, 0),
        "token_class": ((cap.pushdown_grammars, width), i32, 0),
        "lexer_member": ((q,), i32, 0),
        "lr_start": ((cap.pushdown_grammars,), i32, 0),
        "lexer_start": ((cap.pushdown_grammars,), i32, 0),
    }
    return {**{("regular", k): v for k, v in regular.items()}, **{("pushdown", k): v for k, v in pushdown.items()}}


@functools.partial(jax.jit, donate_argnums=0)
def _scatter(buffer: jax.Array, index: jax.Array, values: jax.Array) -> jax.Array:
    """``buffer`` with rows ``index`` (int32[N]; out of range: skipped) set to ``values``."""
    return buffer.at[index].set(values, mode="drop")


def _chunk_rows(shape) -> tuple[int, int]:
    """Rows written per scatter call into a buffer of ``shape``: a small chunk (about 16 KiB) and
    a large one (about 1 MiB). An admission sends what it writes, padded to chunks, to the
    device: small writes (most of them) go in small chunks, the bulk of large ones in large."""
    row = max(1, int(np.prod(shape[1:])))
    return max(1, min(shape[0], (1 << 12) // row)), max(1, min(shape[0], (1 << 18) // row))


class _Ranges:
    """First-fit allocation of contiguous ranges of ``[first, size)``."""

    def __init__(self, size: int, first: int = 0):
        self.size, self.free = size - first, [(first, size - first)]

    @property
    def available(self) -> int:
        return max((n for _, n in self.free), default=0)

    def take(self, n: int) -> int:
        for i, (start, length) in enumerate(self.free):
            if length >= n:
                self.free[i : i + 1] = [(start + n, length - n)] if length > n else []
                return start
        raise AssertionError("checked by fits()")

    def give(self, start: int, n: int) -> None:
        merged = sorted([*self.free, (start, n)])
        self.free = []
        for s, length in merged:
            if self.free and self.free[-1][0] + self.free[-1][1] == s:
                self.free[-1] = (self.free[-1][0], self.free[-1][1] + length)
            elif length:
                self.free.append((s, length))


class _Rows:
    """Mask rows shared between members: one buffer row per distinct row, reference counted."""

    def __init__(self, size: int):
        self.size, self.ids, self.count, self.unused = size, {}, {}, list(range(size - 1, 0, -1))  # row 0: empty

    def new(self, rows: np.ndarray) -> int:
        return len({r.tobytes() for r in rows} - self.ids.keys())

    def take(self, rows: np.ndarray) -> tuple[np.ndarray, list[int], list[np.ndarray]]:
        """The buffer row of each of ``rows`` and the rows to write (ids and contents)."""
        ids, written, contents = [], [], []
        for row in rows:
            key = row.tobytes()
            if not row.any():
                ids.append(0)
                continue
            if key not in self.ids:
                self.ids[key] = self.unused.pop()
                written.append(self.ids[key])
                contents.append(row)
            self.count[key] = self.count.get(key, 0) + 1
            ids.append(self.ids[key])
        return np.asarray(ids, np.int32), written, contents

    def give(self, rows: np.ndarray) -> None:
        for row in rows:
            key = row.tobytes()
            if key in self.count:
                self.count[key] -= 1
                if not self.count[key]:
                    del self.count[key]
                    self.unused.append(self.ids.pop(key))


class Handle(NamedTuple):
    """A member of a pool: ``index`` is the int32 the device step reads; ``generation`` tells
    a handle from an earlier one of the same index."""

    index: int
    generation: int


@dataclasses.dataclass
class _Member:
    handle: Handle
    fingerprint: str
    references: int
    ranges: dict  # axis -> (start, n)
    rows: np.ndarray  # the member's mask rows, to release


def fingerprint(constraint) -> str:
    """A digest of a compiled grammar's tables and static sizes: equal tables, equal digest."""
    digest = hashlib.sha1(type(constraint).__name__.encode())
    leaves, treedef = jax.tree_util.tree_flatten(constraint)
    digest.update(str(treedef).encode())
    for leaf in leaves:
        leaf = np.asarray(leaf)
        digest.update(f"{leaf.dtype}{leaf.shape}".encode())
        digest.update(np.ascontiguousarray(leaf).tobytes())
    return digest.hexdigest()


class GrammarPool:
    """Compiled grammars of both engines, held at once in device buffers of fixed capacity.

    ``add`` admits a `RegularGrammar` or `PushdownGrammar` compiled for the pool's vocabulary
    and returns its `Handle`; identical tables are stored once (and counted). ``remove`` frees
    the space. ``tables`` is the current `PoolTables` pytree (buffers are donated to each
    write: read it again after ``add``). Every shape is fixed by the `PoolCapacity`, so no
    admission compiles anything; a grammar that does not fit raises `PoolCapacityError`
    naming the axis and both sizes (the pool never grows).

    Memory: ``capacity.table_bytes(logits_width)``; see docs/guide.md (Serving) for the presets.
    """

    def __init__(self, vocab_size: int, logits_width: int, eos_token_ids, capacity: PoolCapacity | str = "default"):
        self.capacity = PRESETS[capacity] if isinstance(capacity, str) else capacity
        self.vocab_size, self.logits_width = vocab_size, logits_width
        self._eos = tuple(int(t) for t in eos_token_ids)
        self._layout = _layout(self.capacity, logits_width)
        # Filled on the host: an eager jnp.full (or jnp.asarray) compiles a program per shape.
        self._buffers = {key: jax.device_put(np.full(shape, fill, dtype)) for key, (shape, dtype, fill) in self._layout.items()}
        eos_bits = np.zeros(32 * -(-logits_width // 32), bool)
        eos_bits[list(self._eos)] = True
        self._eos_mask = jnp.asarray(pack_bits(eos_bits[:logits_width]))
        free_bits = np.zeros(logits_width, bool)
        free_bits[:vocab_size] = True
        self._free_mask = jnp.asarray(pack_bits(free_bits))
        self._rows_in_turn = self._free_mask.devices().pop().platform == "cpu"  # see `PushdownPool`
        cap = self.capacity
        self._ranges = {
            "regular grammars": _Ranges(cap.regular_grammars),
            "regular states": _Ranges(cap.regular_states, first=1),  # state 0: the shared error state
            "regular transitions": _Ranges(cap.regular_transitions),
            "pushdown grammars": _Ranges(cap.pushdown_grammars),
            "lexer states": _Ranges(cap.lexer_states),
            "LR states": _Ranges(cap.lr_states),
            "rules": _Ranges(cap.rules),
            "outcomes": _Ranges(cap.outcomes),
            "outcome sets": _Ranges(cap.outcome_sets),
        }
        self._rows = {"regular": _Rows(cap.regular_rows), "pushdown": _Rows(cap.pushdown_rows)}
        self._members: dict[int, _Member] = {}
        self._by_fingerprint: dict[str, int] = {}
        self._generation = 0
        self._tables: PoolTables | None = None  # the view of the buffers, made again after a write
        for key, buffer in self._buffers.items():  # compile every write now, not on the first add
            for chunk in set(_chunk_rows(buffer.shape)):
                buffer = _scatter(buffer, np.full(chunk, buffer.shape[0], np.int32), np.zeros((chunk, *buffer.shape[1:]), buffer.dtype))
            self._buffers[key] = buffer

    # --- the device view ------------------------------------------------------------------------

    @property
    def tables(self) -> PoolTables:
        """The pool's `PoolTables` (valid until the next ``add``)."""
        if self._tables is None:
            self._tables = self._view()
        return self._tables

    def _view(self) -> PoolTables:
        part = lambda engine: {field: x for (e, field), x in self._buffers.items() if e == engine}
        return PoolTables(
            regular=RegularPool(**part("regular")),
            pushdown=PushdownPool(
                **part("pushdown"),
                eos_mask=self._eos_mask,
                logits_width=self.logits_width,
                stack_depth=self.capacity.stack_depth,
                max_configs=self.capacity.max_configs,
                lanes=self.capacity.lanes,
                rows_in_turn=self._rows_in_turn,
            ),
            free_mask=self._free_mask,
            fallback_token=np.int32(self._eos[0]),
            vocab_size=self.vocab_size,
            logits_width=self.logits_width,
            regular_members=self.capacity.regular_grammars,
        )

    def constraint(self, handle: Handle) -> Pooled:
        """Member ``handle`` as a `Constraint` (for `constrained_step`, `generate`, `Matcher`)."""
        self.check(handle)
        return Pooled(self.tables, np.int32(handle.index))

    @property
    def table_bytes(self) -> int:
        return self.capacity.table_bytes(self.logits_width)

    def __len__(self) -> int:
        return len(self._members)

    def occupancy(self) -> dict[str, float]:
        """The used fraction of each axis of the pool."""
        used = {axis: 1 - sum(n for _, n in r.free) / r.size for axis, r in self._ranges.items()}
        used.update({f"{engine} mask rows": len(rows.ids) / (rows.size - 1) for engine, rows in self._rows.items()})
        return used

    # --- admission ------------------------------------------------------------------------------

    def check(self, handle: Handle) -> None:
        """Raise ValueError unless ``handle`` names a member still in the pool."""
        member = self._members.get(handle.index) if isinstance(handle, Handle) else None
        if member is None or member.handle != handle:
            raise ValueError(f"{handle!r} is not in the pool (it was removed, or comes from another pool)")

    def engine(self, handle: Handle) -> str:
        """``"regular"`` or ``"pushdown"``: the engine of the member ``handle`` names."""
        return "regular" if handle.index < self.capacity.regular_grammars else "pushdown"

    def add(self, constraint) -> Handle:
        """Admit a compiled grammar (a write into the pool's buffers; nothing compiles).

        Raises:
          PoolCapacityError: it does not fit (the axis and both sizes are named).
          ValueError: a constraint compiled for another vocabulary, or of a kind the pool does
            not hold (fusion composites: admit their grammars).
        """
        admit = {RegularGrammar: self._admit_regular, PushdownGrammar: self._admit_pushdown}.get(type(constraint))
        if admit is None:
            raise ValueError(f"a GrammarPool holds RegularGrammar and PushdownGrammar members, not {type(constraint).__name__}")
        if jnp.ndim(constraint.fallback_token) != 0:
            raise ValueError("add the grammars of a bank one by one: a pool member is one grammar")
        sizes = (constraint.vocab_size, constraint.logits_width, int(constraint.fallback_token))
        if sizes != (self.vocab_size, self.logits_width, self._eos[0]):
            raise ValueError(
                f"the constraint was compiled for another vocabulary (vocab_size, logits_width, first EOS) = {sizes}; "
                f"the pool holds {(self.vocab_size, self.logits_width, self._eos[0])}"
            )
        key = fingerprint(constraint)
        if key in self._by_fingerprint:
            member = self._members[self._by_fingerprint[key]]
            member.references += 1
            return member.handle
        member = admit(constraint)
        member.fingerprint = key
        self._members[member.handle.index] = member
        self._by_fingerprint[key] = member.handle.index
        return member.handle

    def remove(self, handle: Handle) -> None:
        """Release one reference to ``handle``; its space is freed with the last one."""
        self.check(handle)
        member = self._members[handle.index]
        member.references -= 1
        if member.references:
            return
        del self._members[handle.index], self._by_fingerprint[member.fingerprint]
        for axis, (start, n) in member.ranges.items():
            self._ranges[axis].give(start, n)
        self._rows[self.engine(handle)].give(member.rows)

    def _fit(self, needs: dict[str, int], widths: dict[str, tuple[int, int]], engine: str, rows: np.ndarray) -> None:
        """Raise `PoolCapacityError` unless every need and width fits (checked before any write)."""
        for axis, (needed, capacity) in widths.items():
            if needed > capacity:
                raise PoolCapacityError(axis, needed, capacity, capacity)
        for axis, needed in needs.items():
            ranges = self._ranges[axis]
            if needed > ranges.available:
                raise PoolCapacityError(axis, needed, ranges.available, ranges.size)
        table = self._rows[engine]
        if table.new(rows) > len(table.unused):
            raise PoolCapacityError(f"{engine} mask rows", table.new(rows), len(table.unused), table.size - 1)

    def _take(self, needs: dict[str, int]) -> dict[str, tuple[int, int]]:
        return {axis: (self._ranges[axis].take(n), n) for axis, n in needs.items()}

    def _write(self, engine: str, field: str, index: np.ndarray, values: np.ndarray) -> None:
        """Set rows ``index`` of a buffer to ``values``, in chunks of the two fixed sizes: large
        ones while more than 4 small ones remain, then small ones."""
        key = (engine, field)
        buffer = self._buffers[key]
        small, large = _chunk_rows(buffer.shape)
        values = np.asarray(values, buffer.dtype).reshape(len(index), *buffer.shape[1:])
        at = 0
        while at < len(index):
            chunk = large if len(index) - at > 4 * small else small
            part_index = np.full(chunk, buffer.shape[0], np.int32)
            part_values = np.zeros((chunk, *buffer.shape[1:]), buffer.dtype)
            n = min(chunk, len(index) - at)
            part_index[:n], part_values[:n] = index[at : at + n], values[at : at + n]
            buffer, at = _scatter(buffer, part_index, part_values), at + n
        self._buffers[key], self._tables = buffer, None

    def _handle(self, index: int) -> Handle:
        self._generation += 1
        return Handle(index, self._generation)

    def _admit_regular(self, g: RegularGrammar) -> _Member:
        next_state = np.asarray(g.next_state)
        states, classes = next_state.shape
        rows = np.asarray(g.mask_rows)
        needs = {"regular grammars": 1, "regular states": states - 1, "regular transitions": (states - 1) * classes}
        self._fit(needs, {}, "regular", rows)
        ranges = self._take(needs)
        base, first = ranges["regular states"][0] - 1, ranges["regular transitions"][0]
        row_ids, written, contents = self._rows["regular"].take(rows)
        if written:
            self._write("regular", "mask_rows", np.asarray(written, np.int32), np.stack(contents))
        live = np.arange(1, states)
        self._write("regular", "row_of_state", base + live, row_ids[np.asarray(g.row_of_state)[live]])
        self._write("regular", "state_base", base + live, first + (live - 1) * classes)
        self._write("regular", "accepting", base + live, np.asarray(g.accepting)[live])
        self._write(
            "regular", "transitions", first + np.arange(len(live) * classes), np.where(next_state[live] > 0, next_state[live] + base, 0)
        )
        member = ranges["regular grammars"][0]
        self._write("regular", "class_of_token", np.asarray([member]), np.asarray(g.class_of_token)[None])
        start = int(g.start_state)
        self._write("regular", "start", np.asarray([member]), np.asarray([base + start if start else 0]))
        return _Member(self._handle(member), "", 1, ranges, rows)

    def _admit_pushdown(self, g: PushdownGrammar) -> _Member:
        cap, host = self.capacity, per_lexer_state(g)  # each state its own row: the pool's layout
        lexer_states, lr_states = host["class_set"].shape[0], host["action_kind"].shape[0]
        parents = trie_parents(g)
        nodes = max((len(p) for p in parents), default=0) + cap.lanes
        layout = chunk_layout(parents, cap.lanes, max(nodes, cap.trie_nodes))  # of g's rows; checked below
        chunk_start, num_chunks, node_chunk = (x[np.asarray(g.lexer_row)] for x in layout)
        widths = {
            "LR columns": (host["action_kind"].shape[1], cap.lr_columns),
            "LR actions a cell": (host["action_kind"].shape[2], cap.lr_actions),
            "nonterminals": (host["goto"].shape[1], cap.nonterminals),
            "outcome terminals": (host["outcome_terminals"].shape[1], cap.outcome_terminals),
            "outcome set width": (host["set_members"].shape[1], cap.set_width),
            "outcomes per lexer state": (host["state_outcomes"].shape[1], cap.outcomes_per_state),
            "lookahead terminals": (host["outcome_lookahead"].shape[2], cap.lookahead),
            "trie nodes (with lanes)": (nodes, cap.trie_nodes),
            "trie chunks": (chunk_start.shape[1], cap.trie_chunks),
            "completions": (host["complete_node"].shape[1], cap.completions),
            "token classes per lexer state": (host["class_set"].shape[1], cap.classes_per_state),
            "outcome sets per lexer state": (host["state_sets"].shape[1], cap.sets_per_state),
            "dense mask rows per lexer state": (host["dense_row"].shape[1], cap.dense_rows),
            "sparse tokens per lexer state": (host["sparse_token"].shape[1], cap.sparse_tokens),
            "stack depth": (g.stack_depth, cap.stack_depth),
            "parse configurations": (g.max_configs, cap.max_configs),
        }
        needs = {
            "pushdown grammars": 1,
            "lexer states": lexer_states,
            "LR states": lr_states,
            "rules": len(host["rule_lhs"]),
            "outcomes": len(host["outcome_length"]),
            "outcome sets": len(host["set_members"]),
        }
        self._fit(needs, widths, "pushdown", host["mask_rows"])
        ranges = self._take(needs)
        base = {axis: start for axis, (start, _) in ranges.items()}
        row_ids, written, contents = self._rows["pushdown"].take(host["mask_rows"])
        if written:
            self._write("pushdown", "mask_rows", np.asarray(written, np.int32), np.stack(contents))
        shift = lambda x, by: np.where(x >= 0, x + by, x)
        kind, arg = host["action_kind"], host["action_arg"]
        arg = np.where(kind == SHIFT, arg + base["LR states"], arg)
        rows = {
            "packed_action": pack_actions(kind, arg, host["rule_lhs"], host["rule_length"]),
            "goto": host["goto"] + base["LR states"],
            "lexer_row": base["lexer states"] + np.arange(lexer_states),
            "node_parent": host["node_parent"][:, : cap.trie_nodes],  # past its last node + lanes: padding
            "node_column": host["node_column"][:, : cap.trie_nodes],
            "chunk_start": chunk_start,
            "num_chunks": num_chunks,
            "node_chunk": node_chunk,
            "state_outcomes": shift(host["state_outcomes"], base["outcomes"]),
            "outcome_terminals": host["outcome_terminals"],
            "outcome_length": host["outcome_length"],
            "outcome_node": host["outcome_node"],
            "outcome_lookahead": host["outcome_lookahead"],
            "outcome_free": host["outcome_free"],
            "outcome_lexer": shift(host["outcome_lexer"], base["lexer states"]),
            "complete_node": host["complete_node"],
            "set_members": host["set_members"],
            "class_set": host["class_set"] + base["outcome sets"],
            "state_sets": host["state_sets"] + base["outcome sets"],
            "dense_row": row_ids[host["dense_row"]],
            "dense_set": host["dense_set"],
            "sparse_token": host["sparse_token"],
            "sparse_set": host["sparse_set"],
            "lexer_member": np.full(lexer_states, ranges["pushdown grammars"][0]),
        }
        axis_of = {
            "packed_action": "LR states",
            "goto": "LR states",
            "outcome_terminals": "outcomes",
            "outcome_length": "outcomes",
            "set_members": "outcome sets",
        }
        for field, values in rows.items():
            axis = axis_of.get(field, "lexer states")
            shape, _, fill = self._layout["pushdown", field]
            values = _pad(values, shape[1:], fill)
            self._write("pushdown", field, base[axis] + np.arange(len(values)), values)
        member = ranges["pushdown grammars"][0]
        self._write("pushdown", "token_class", np.asarray([member]), host["token_class"][None])
        self._write("pushdown", "lr_start", np.asarray([member]), np.asarray([int(host["lr_start"]) + base["LR states"]]))
        self._write("pushdown", "lexer_start", np.asarray([member]), np.asarray([int(host["lexer_start"]) + base["lexer states"]]))
        log.debug("admitted a pushdown grammar: %s", {a: n for a, (_, n) in ranges.items()})
        return _Member(self._handle(cap.regular_grammars + member), "", 1, ranges, host["mask_rows"])


def _pad(x: np.ndarray, row_shape: tuple[int, ...], fill) -> np.ndarray:
    """``x`` (leading axis kept) padded with ``fill`` to rows of ``row_shape``."""
    return np.pad(x, [(0, 0)] + [(0, want - have) for have, want in zip(x.shape[1:], row_shape)], constant_values=fill)
