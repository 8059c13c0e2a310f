"""Byte-level automata: a Thompson NFA builder, subset construction and DFA minimisation.

Everything here is host code (Python + numpy). A `ByteDFA` is complete over the 256 byte values
and keeps one dead state, number 0, that every non-co-accessible state collapses into, so "the
prefix can still be completed" is simply ``state != 0``.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
from collections.abc import Sequence

import numpy as np

from ananke_jax._src.compile import utf8
from ananke_jax._src.compile.arrays import hash_multipliers, unique_first_inverse
from ananke_jax._src.compile.budget import charge_dfa_states, charge_states, check_time

DEAD = 0
CHECK_EVERY = 4096  # states built between two checks of the compile budget


@dataclasses.dataclass(frozen=True)
class Fragment:
    """A piece of NFA with one entry and one exit state."""

    start: int
    end: int


class NFABuilder:
    """Builds a byte NFA with epsilon moves, fragment by fragment (Thompson's construction)."""

    def __init__(self):
        self.edges: list[list[tuple[int, int, int]]] = []  # state -> [(lo, hi, target)]
        self.epsilons: list[list[int]] = []
        self._moves: dict[int, tuple[ByteDFA, list]] = {}  # id -> (DFA, kept alive; its moves)
        self.copies: list[tuple[int, ByteDFA]] = []  # (offset, DFA) copied with its own moves: state s is s + offset

    def state(self) -> int:
        if len(self.edges) % CHECK_EVERY == 0:
            charge_states(len(self.edges) + 1, "an NFA")
            check_time()
        self.edges.append([])
        self.epsilons.append([])
        return len(self.edges) - 1

    def empty(self) -> Fragment:
        s = self.state()
        return Fragment(s, s)

    def byte_ranges(self, sequences: Sequence[utf8.ByteRangeSequence]) -> Fragment:
        """One fragment matching any of the byte-range sequences (the UTF-8 of a class).

        Sequences share the states of equal suffixes (most UTF-8 sequences end in the same
        continuation ranges), which keeps both this NFA and its subset automaton small.
        """
        start, end = self.state(), self.state()
        # suffix -> the state from which exactly that suffix leads to `end`
        tails: dict[tuple[tuple[int, int], ...], int] = {(): end}
        for seq in sequences:
            for i in range(len(seq) - 1, 0, -1):
                if seq[i:] not in tails:
                    tails[seq[i:]] = self.state()
                    self.edges[tails[seq[i:]]].append((*seq[i], tails[seq[i + 1 :]]))
            self.edges[start].append((*seq[0], tails[seq[1:]]))
        return Fragment(start, end)

    def code_points(self, ranges: Sequence[tuple[int, int]]) -> Fragment:
        """Match one code point in ``ranges`` (inclusive pairs), as its UTF-8 bytes."""
        return self.byte_ranges(_utf8_split(tuple(ranges)))

    def copy(self, dfa: ByteDFA, moves: list[list[tuple[int, int, int]]] | None = None) -> Fragment:
        """A copy of ``dfa``'s live states whose accepting states lead to the fragment's end
        (``moves``: others than its own, `dfa_moves`, listed once for all its copies)."""
        end = self.state()
        if dfa.start == DEAD:
            return Fragment(self.state(), end)
        offset = len(self.edges) - 1  # live state s becomes s + offset
        if moves is None:  # a repeated automaton's moves are listed once
            if id(dfa) not in self._moves:
                self._moves[id(dfa)] = (dfa, dfa_moves(dfa))
            moves = self._moves[id(dfa)][1]
            self.copies.append((offset, dfa))
        charge_states(offset + dfa.num_states, "an NFA")
        check_time()
        self.edges += [[(lo, hi, t + offset) for lo, hi, t in row] for row in moves]
        self.epsilons += [[end] if a else [] for a in dfa.accepting[1:].tolist()]
        return Fragment(dfa.start + offset, end)

    def literal(self, data: bytes) -> Fragment:
        return self.concat([self.byte_ranges([((b, b),)]) for b in data])

    def concat(self, parts: Sequence[Fragment]) -> Fragment:
        if not parts:
            return self.empty()
        for a, b in itertools.pairwise(parts):
            self.epsilons[a.end].append(b.start)
        return Fragment(parts[0].start, parts[-1].end)

    def alternation(self, parts: Sequence[Fragment]) -> Fragment:
        start, end = self.state(), self.state()
        for p in parts:
            self.epsilons[start].append(p.start)
            self.epsilons[p.end].append(end)
        return Fragment(start, end)


@dataclasses.dataclass(frozen=True)
class ByteDFA:
    """A complete deterministic automaton over bytes.

    Attributes:
      transitions: int32[S, 256], next state per byte; state 0 is the dead state.
      accepting: bool[S].
      start: the start state (0 when the language is empty).
    """

    transitions: np.ndarray
    accepting: np.ndarray
    start: int

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    def walk(self, state: int, data: bytes) -> int:
        """Run ``data`` from ``state``; the slow reference the token tables are checked against."""
        for b in data:
            state = int(self.transitions[state, b])
        return state

    def accepts(self, data: bytes) -> bool:
        """Whether ``data`` is in the language (state 0, dead, never accepts)."""
        return bool(self.accepting[self.walk(self.start, data)])


def dfa_moves(dfa: ByteDFA) -> list[list[tuple[int, int, int]]]:
    """Per live state ``s`` of ``dfa`` (1 to S-1, at index ``s - 1``), its moves to live states
    as ``(lo, hi, target)`` byte ranges."""
    rows = dfa.transitions[1:]
    change = np.ones(rows.shape, bool)
    change[:, 1:] = rows[:, 1:] != rows[:, :-1]  # where a run of equal targets begins
    state, lo = np.nonzero(change)
    hi = np.append(lo[1:], 0) - 1  # the next run's start, less one; 255 at a row's end
    hi[hi < lo] = 255
    target = rows[state, lo]
    live = target != DEAD
    state, runs = state[live], list(zip(lo[live].tolist(), hi[live].tolist(), target[live].tolist()))
    bounds = np.searchsorted(state, np.arange(len(rows) + 1)).tolist()
    return [runs[a:b] for a, b in itertools.pairwise(bounds)]


def concatenated(first: ByteDFA, second: ByteDFA) -> ByteDFA | None:
    """``first`` then ``second`` without a subset construction, where no accepting state of
    ``first`` reads a byte that ``second``'s start reads: there the split is forced, and the
    states of both, the accepting ones of ``first`` also reading on as ``second``'s start does,
    make a DFA (not minimised). None where they overlap.
    """
    if not first.start or not second.start:
        return ByteDFA(np.zeros((1, 256), np.int32), np.zeros(1, bool), DEAD)
    begins = np.flatnonzero(second.transitions[second.start] != DEAD)
    ends = np.flatnonzero(first.accepting)
    if (first.transitions[np.ix_(ends, begins)] != DEAD).any():
        return None
    # Second's live states follow first's, less its start where nothing enters it.
    kept = np.arange(1, second.num_states)
    if not (second.transitions == second.start).any():
        kept = kept[kept != second.start]
    index = np.zeros(second.num_states, np.int32)
    index[kept] = first.num_states + np.arange(len(kept))
    transitions = np.vstack([first.transitions, index[second.transitions[kept]]])
    transitions[np.ix_(ends, begins)] = index[second.transitions[second.start, begins]]
    accepting = np.concatenate([first.accepting & second.accepting[second.start], second.accepting[kept]])
    return ByteDFA(transitions, accepting, first.start)


def repeated(body: ByteDFA, lo: int, hi: int) -> ByteDFA | None:
    """``body{lo,hi}`` as ``hi`` chained copies of ``body``, without a subset construction, where
    the split between copies is forced: ``body`` rejects the empty string, nothing re-enters its
    start, and no accepting state reads a byte its start reads. A copy's accepting states read on
    as the next copy's start, and accept from the ``lo``-th copy on. Not minimised. None where
    the split is not forced.
    """
    start = body.start
    begins = np.flatnonzero(body.transitions[start] != DEAD)
    ends = np.flatnonzero(body.accepting)
    if not start or body.accepting[start] or (body.transitions == start).any() or (body.transitions[np.ix_(ends, begins)] != DEAD).any():
        return None
    others = np.flatnonzero((np.arange(body.num_states) != DEAD) & (np.arange(body.num_states) != start))
    charge_dfa_states(2 + hi * len(others), "a repeat's DFA")
    index = np.full(body.num_states, -1, np.int64)
    index[others] = np.arange(len(others))
    # State 1 is the start; copy k's states follow from 2 + k * len(others). Each copy's rows are
    # the body's moves plus the copy's first state, written in place (no per-copy gather).
    first = 2 + np.arange(hi, dtype=np.int32) * len(others)
    moves = index[body.transitions[others]]
    transitions = np.empty((2 + hi * len(others), 256), np.int32)
    transitions[0] = DEAD
    transitions[1] = np.where(index[body.transitions[start]] >= 0, 2 + index[body.transitions[start]], DEAD)
    copies = transitions[2:].reshape(hi, len(others), 256)
    np.multiply(first[:, None, None], moves[None] >= 0, out=copies)
    copies += np.maximum(moves, 0).astype(np.int32)[None]
    ending = index[ends]
    copies[:-1, ending[:, None], begins] = first[1:, None, None] + index[body.transitions[start, begins]]
    accepting = np.zeros((hi, len(others)), bool)
    accepting[max(lo, 1) - 1 :] = body.accepting[others]
    return ByteDFA(transitions, np.concatenate([[False, lo == 0], accepting.ravel()]), 1)


_DEAD_CONFIGURATION = -1  # `counted`'s move to no configuration


def counted(body: ByteDFA, lo: int, hi: int) -> ByteDFA | None:
    """``body{lo,hi}`` for ``lo`` <= 1 where the split between copies is not forced (`repeated`
    fails: ``((.|-+)?[a-z0-9]){0,252}``), without a subset construction over the copies, which
    is cubic in ``hi`` there (a subset holds states of many copies). Not minimised.

    A string may split into copies in several ways; under an upper bound alone, a split into
    fewer copies accepts whatever a split into more does. So a state keeps, per state of
    ``body`` (and the boundary between copies), the fewest copies that reach it: a
    *configuration*, kept relative to its least count, times that count, at most ``hi``.
    Configurations are found one by one over ``body``'s byte classes, and the counts chain them
    as `repeated` chains copies. Their pairs (state, count) are charged to the budget's
    ``max_states`` as they are found, and the DFA's states before it is built.

    Returns None where ``lo`` > 1, or ``body`` accepts the empty string or nothing.
    """
    if lo > 1 or not body.start or body.accepting[body.start]:
        return None
    byte_class, first_byte = byte_classes(body.transitions)
    table, accepting = body.transitions[:, first_byte].tolist(), body.accepting.tolist()
    boundary = -1  # between copies: reads as body's start
    ids: dict[tuple, int] = {((boundary, 0),): 0}
    order, entries = [((boundary, 0),)], 1  # the configurations, and the (state, count) pairs they hold
    moves: list[list[tuple[int, int]]] = []  # per configuration and class: (configuration, count added), or (DEAD_CONFIGURATION, 0)
    while len(moves) < len(order):
        # (a configuration's row takes time in proportion to its pairs: charged as states)
        charge_states(entries, "a repeat's configurations (the fewest copies reaching each state of its body)")
        charge_dfa_states(len(order) * (hi + 1), "a repeat's DFA")
        check_time()
        row = []
        for k in range(len(first_byte)):
            fewest: dict[int, int] = {}
            for state, count in order[len(moves)]:
                target = table[body.start if state == boundary else state][k]
                if target == DEAD:
                    continue
                fewest[target] = min(fewest.get(target, count), count)
                if accepting[target]:
                    fewest[boundary] = min(fewest.get(boundary, count + 1), count + 1)
            least = min(fewest.values(), default=0)
            # (a count past hi can never accept: dropped)
            configuration = tuple(sorted((state, count - least) for state, count in fewest.items() if count - least <= hi))
            if not configuration:
                row.append((_DEAD_CONFIGURATION, 0))
                continue
            row.append((ids.setdefault(configuration, len(order)), least))
            if ids[configuration] == len(order):
                order.append(configuration)
                entries += len(configuration)
        moves.append(row)
    charge_dfa_states(1 + len(order) * (hi + 1), "a repeat's DFA")
    target, added = (np.array([[m[i] for m in row] for row in moves], np.int64).reshape(len(order), -1) for i in (0, 1))
    # State 1 + count * C + c: configuration c, at least count copies read; 0: dead.
    count = np.arange(hi + 1)[:, None, None]
    after = count + added[None]
    rows = np.where((target[None] != _DEAD_CONFIGURATION) & (after <= hi), 1 + after * len(order) + target[None], DEAD)
    at_boundary = np.array([dict(c).get(boundary, hi + 1) for c in order])
    copies = count[:, :, 0] + at_boundary[None]
    accepts = (copies >= lo) & (copies <= hi)
    transitions = np.vstack([np.zeros((1, len(first_byte)), np.int64), rows.reshape(-1, len(first_byte))])
    return trimmed(
        transitions.astype(np.int32), np.concatenate([[False], accepts.ravel()]), start=1, byte_class=byte_class.astype(np.int32)
    )


_STACK_SECONDS_PER_STATE = 2e-6  # the DFAs' rows stacked and their byte classes found, foreseen
_CHUNK_ENTRIES = 1 << 22  # tuple entries (int32) of one lookup's successors: its memory, and the time between deadline checks


def product(dfas: Sequence[ByteDFA], starts: np.ndarray, what: str) -> tuple[np.ndarray, np.ndarray]:
    """The DFAs run side by side: the tuples of their states reachable from ``starts``.

    Breadth first, one level at a time, over the byte classes that all DFAs share: only the
    distinct tuples of a level are looked up one by one. A tuple with one live DFA is that DFA
    reading on alone: the states of that DFA reachable from such tuples are added as one block
    after the search (a length-bounded string's chain took a level a byte).

    Args:
      dfas: n DFAs.
      starts: int[K, n], the start tuples; they are states 1 to K, keyed apart from the tuples
        reached by bytes (reading back into a start's tuple is another state).
      what: the automaton, named where it goes over the compile budget.

    Returns:
      int32[S, 256], the transitions (state 0: every DFA dead), and int32[S, n], each state's
      tuple.
    """
    sizes = np.array([d.num_states for d in dfas])
    check_time(ahead=_STACK_SECONDS_PER_STATE * sizes.sum())
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    dfa_of = np.repeat(np.arange(len(dfas)), sizes)  # of each stacked state
    stacked = np.vstack([d.transitions for d in dfas])  # all DFAs' rows, stacked
    byte_class, first_byte = byte_classes(stacked)
    table = stacked[:, first_byte].astype(np.int32, copy=False)
    order = [np.zeros((1, len(dfas)), np.int32), np.asarray(starts, np.int32)]
    ids = {order[0][0].tobytes(): 0}
    rows, frontier, first, alone = [], order[1], 1, [np.zeros(0, np.int64)]
    chunk = max(1, _CHUNK_ENTRIES // (table.shape[1] * len(dfas)))  # frontier tuples looked up at once
    while len(frontier):
        following = first + len(frontier)  # the id of the next new tuple
        found_tuples = []
        for lo in range(0, len(frontier), chunk):
            check_time()
            successors = table[frontier[lo : lo + chunk] + offsets].transpose(0, 2, 1).reshape(-1, len(dfas))
            inverse = row_groups(successors)
            distinct = np.empty_like(successors[: int(inverse.max()) + 1])
            distinct[inverse] = successors
            live = (distinct != DEAD).sum(axis=1)
            solo = np.flatnonzero(live == 1)
            found, new = np.empty(len(distinct), np.int32), []
            alone.append((distinct + offsets)[solo, np.argmax(distinct[solo] != DEAD, axis=1)])
            found[solo] = -1 - alone[-1]  # a stacked state's block id, given below
            for j in np.flatnonzero(live != 1).tolist():
                key = distinct[j].tobytes()
                if key not in ids:
                    ids[key] = following
                    following += 1
                    new.append(j)
                found[j] = ids[key]
            rows.append(found[inverse].reshape(-1, len(first_byte)))
            found_tuples.append(distinct[new])
            charge_states(following, what)
        first += len(frontier)
        frontier = np.concatenate(found_tuples)
        order.append(frontier)
    # The block: the stacked states reachable from those reached alone, numbered after the rest.
    check_time()
    block = _reachable(table, offsets[dfa_of], np.concatenate(alone))
    charge_states(first + len(block), what)
    check_time()  # the steps below copy every state's row: some seconds on the largest lexers
    block_id = np.zeros(len(table), np.int32)
    block_id[block] = first + np.arange(len(block))
    # (a dead target is its DFA's state 0, never in the block: its id stays DEAD)
    block_rows = block_id[table[block] + offsets[dfa_of[block], None].astype(np.int32)]
    transitions = np.concatenate([np.zeros((1, len(first_byte)), np.int32), *rows, block_rows])
    in_block = transitions < 0
    transitions[in_block] = block_id[-1 - transitions[in_block]]
    check_time()
    block_tuples = np.zeros((len(block), len(dfas)), np.int32)
    block_tuples[np.arange(len(block)), dfa_of[block]] = block - offsets[dfa_of[block]]
    return transitions[:, byte_class], np.concatenate([*order, block_tuples])


def _reachable(table: np.ndarray, offset: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """int64[R], sorted: the stacked states reachable from ``sources`` in stacked DFAs
    (``table`` int32[S, C] of local targets, ``offset`` int64[S] of each state's DFA)."""
    reached, slot = np.zeros(len(table), bool), np.zeros(len(table), np.int64)
    frontier = np.unique(sources)
    while len(frontier):  # a level a byte along a long chain (thousands): kept distinct without a sort
        reached[frontier] = True
        targets = table[frontier]
        following = (targets + offset[frontier, None])[targets != DEAD]
        following = following[~reached[following]]
        slot[following] = np.arange(len(following))
        frontier = following[slot[following] == np.arange(len(following))]  # the last of each state
    return np.flatnonzero(reached)


def canonical_form(dfa: ByteDFA) -> bytes:
    """``dfa``'s transitions and accepting states with its states numbered in breadth-first order
    from the start (targets in byte order): equal for the minimal DFAs of one language."""
    number = np.zeros(dfa.num_states, np.int64)  # 0: the dead state, or not reached yet
    order = [dfa.start] if dfa.start != DEAD else []
    number[order] = 1
    for state in order:  # grows while it is read
        row = dfa.transitions[state]
        targets = row[np.sort(np.unique(row, return_index=True)[1])]
        new = [t for t in targets.tolist() if t != DEAD and not number[t]]
        number[new] = np.arange(len(order) + 1, len(order) + 1 + len(new))
        order += new
    return number[dfa.transitions[order]].tobytes() + dfa.accepting[order].tobytes()


def is_finite(dfa: ByteDFA) -> bool:
    """Whether ``dfa`` accepts finitely many strings: no cycle through its live states (all but
    the dead one, in a DFA from `minimise` or `trimmed`), found by peeling states without live
    successors."""
    live = np.ones(dfa.num_states, bool)
    live[DEAD] = False
    while True:
        peeled = live & live[dfa.transitions].any(axis=1)
        if (peeled == live).all():
            return not live.any()
        live = peeled


def pausing_gc(function):
    """Run ``function`` with Python's cyclic garbage collector paused (re-entrant).

    Building automata allocates millions of small containers (sets, lists, tuples) that are
    never cyclic: reference counting frees them, and the collector's passes over them cost about
    a third of the compile time.
    """

    @functools.wraps(function)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return function(*args, **kwargs)
        gc.disable()
        try:
            return function(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@functools.lru_cache(maxsize=4096)
def _utf8_split(ranges: tuple[tuple[int, int], ...]) -> tuple[utf8.ByteRangeSequence, ...]:
    """The UTF-8 byte-range sequences of a class, per process: repetitions and schemas build
    the same classes over and over."""
    return tuple(s for lo, hi in utf8.normalise(ranges) for s in utf8.utf8_sequences(lo, hi))


@pausing_gc
def determinise(builder: NFABuilder, fragment: Fragment) -> ByteDFA:
    """Subset construction over byte classes, then minimisation."""
    class_table, accepting, byte_class = subset_construction(builder, fragment)
    return minimise(class_table, accepting, start=1, byte_class=byte_class)


def subset_construction(builder: NFABuilder, fragment: Fragment) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The reachable subset automaton of ``fragment``, not minimised.

    A subset is kept as its kernel: the NFA states in its epsilon closure that have byte edges,
    plus ``fragment.end``. Those alone decide its moves and whether it accepts, so subsets with
    equal kernels are merged.

    Returns:
      ``(class_table, accepting, byte_class)``: int32[S, C] transitions per byte class, where
      state 0 is the empty subset (dead) and state 1 the start; bool[S]; int32[256], the class of
      each byte.
    """
    boundaries = sorted({0, 256} | {x for es in builder.edges for lo, hi, _ in es for x in (lo, hi + 1)})
    byte_class = np.zeros(256, np.int32)
    for i, (a, b) in enumerate(itertools.pairwise(boundaries)):
        byte_class[a:b] = i
    num_classes = len(boundaries) - 1
    class_of = byte_class.tolist()

    # Both caches are per NFA state: a DFA state's moves are unions of its members' cached moves,
    # so each closure is searched once rather than once per DFA state and byte class.
    kernels: dict[int, frozenset[int]] = {}
    moves: dict[int, list[tuple[int, frozenset[int]]]] = {}

    def kernel(state: int) -> frozenset[int]:
        if state not in kernels:
            seen, stack = {state}, [state]
            while stack:
                for t in builder.epsilons[stack.pop()]:
                    if t not in seen:
                        seen.add(t)
                        stack.append(t)
            kernels[state] = frozenset(s for s in seen if builder.edges[s] or s == fragment.end)
        return kernels[state]

    def move(state: int) -> list[tuple[int, frozenset[int]]]:
        """(byte class, kernel reached) pairs of one NFA state."""
        if state not in moves:
            targets: dict[int, list[frozenset[int]]] = {}
            for lo, hi, t in builder.edges[state]:
                for c in range(class_of[lo], class_of[hi] + 1):
                    targets.setdefault(c, []).append(kernel(t))
            moves[state] = [(c, _union(parts)) for c, parts in targets.items()]
        return moves[state]

    # A subset that is one non-accepting state inside a copied DFA moves as that DFA's state
    # does: such subsets are kept as the NFA state alone and stepped in batches by the DFA's
    # table (a copied automaton of 100,000 states took 100 us a state one by one).
    num_nfa = len(builder.edges)
    inside = np.full(num_nfa, -1, np.int64)  # the copy of each NFA state; -1: none or accepting
    copy_rows, copy_offset = [], []
    first_byte = np.searchsorted(byte_class, np.arange(num_classes))
    for k, (offset, dfa) in enumerate(builder.copies):
        live = np.arange(1, dfa.num_states)
        alone = live[~dfa.accepting[live]]
        inside[offset + alone[[not builder.epsilons[offset + q] for q in alone.tolist()]]] = k  # none wired elsewhere
        copy_rows.append(dfa.transitions[:, first_byte])
        copy_offset.append(offset)
    single_id = np.full(num_nfa, -1, np.int64)  # the id of the subset {s} of each such state

    start = kernel(fragment.start)
    ids: dict[frozenset[int], int] = {frozenset(): DEAD}
    order: list = [frozenset()]  # a kernel, or the NFA state of a subset kept alone

    next_charge = CHECK_EVERY  # the states numbered when the budget is next charged

    def numbered(state: frozenset[int] | int) -> int:
        """A new state's id, the budget charged every `CHECK_EVERY` states of either kind (the
        check of kernels alone missed whole runs of lone states: 126k states built past a cap of 87k)."""
        nonlocal next_charge
        if len(order) >= next_charge:
            charge_dfa_states(len(order) + 1, "a DFA")
            check_time()
            next_charge += CHECK_EVERY
        order.append(state)
        return len(order) - 1

    def state_id(kernel_: frozenset[int]) -> int:
        """The id of a kernel, numbered on first sight (a lone state inside a copy by `single_id`)."""
        if len(kernel_) == 1 and inside[(s := next(iter(kernel_)))] >= 0:
            if single_id[s] < 0:
                single_id[s] = numbered(s)
            return int(single_id[s])
        if kernel_ not in ids:
            ids[kernel_] = numbered(kernel_)
        return ids[kernel_]

    # An empty start kernel (an empty language) still gets its own state 1.
    ids[start] = 1
    order.append(start)
    rows: list[np.ndarray] = []  # blocks of rows, in order
    listed: list[list[int]] = [[DEAD] * num_classes]  # the rows since the last block
    i = 1
    while i < len(order):
        check_time()
        if isinstance(order[i], int):  # a batch of lone states inside copies
            j = i
            while j < len(order) and j - i < CHECK_EVERY and isinstance(order[j], int):
                j += 1
            rows += [np.asarray(listed, np.int64).reshape(-1, num_classes)]
            rows += [_lone_rows(np.asarray(order[i:j]), inside, copy_rows, copy_offset, single_id, state_id, kernel)]
            listed, i = [], j
            continue
        targets: dict[int, list[frozenset[int]]] = {}
        for s in order[i]:
            for c, ts in move(s):
                targets.setdefault(c, []).append(ts)
        row = [DEAD] * num_classes
        for c, parts in targets.items():
            row[c] = state_id(_union(parts))
        listed.append(row)
        i += 1
    rows.append(np.asarray(listed, np.int64).reshape(-1, num_classes))
    charge_dfa_states(len(order), "a DFA")
    accepting = np.array([not isinstance(s, int) and fragment.end in s for s in order])
    return np.concatenate(rows).astype(np.int32), accepting, byte_class


def _lone_rows(states, inside, copy_rows, copy_offset, single_id, state_id, kernel) -> np.ndarray:
    """int64[B, C], the subset-automaton rows of the subsets that are the lone NFA ``states``
    inside copies (`subset_construction`): each class leads to the copy's target, alone where
    that is a lone state too, else to its kernel (``kernel``, numbered by ``state_id``)."""
    out = np.zeros((len(states), copy_rows[0].shape[1] if copy_rows else 0), np.int64)
    copy_of = inside[states]
    for k in np.unique(copy_of).tolist():
        mine = np.flatnonzero(copy_of == k)
        local = copy_rows[k][states[mine] - copy_offset[k]]  # the targets, as the copied DFA's states
        target = local + copy_offset[k]
        lone = (local != DEAD) & (inside[target] >= 0)
        fresh = np.unique(target[lone][single_id[target[lone]] < 0])
        for t in fresh.tolist():  # numbered in order, as one by one
            state_id(frozenset((t,)))
        ids = np.where(lone, single_id[np.where(lone, target, 0)], DEAD)
        others = (local != DEAD) & ~lone  # accepting, or wired to from elsewhere
        kernels, kernel_of = np.unique(target[others], return_inverse=True)
        ids[others] = np.array([state_id(kernel(t)) for t in kernels.tolist()], np.int64)[kernel_of.reshape(-1)]
        out[mine] = ids
    return out


def _union(sets: list[frozenset[int]]) -> frozenset[int]:
    # Most unions have one part, which is then shared rather than copied.
    return sets[0] if len(sets) == 1 else frozenset().union(*sets)


def minimise(class_table: np.ndarray, accepting: np.ndarray, *, start: int, byte_class: np.ndarray) -> ByteDFA:
    """Hopcroft's partition refinement; states that cannot reach acceptance merge into state 0.

    Blocks are numbered by their lowest state, so the dead state stays 0 (and the start of a
    subset automaton stays 1, unless its language is empty).

    Args:
      class_table: int32[S, C] transitions per byte class, state 0 dead.
      accepting: bool[S].
      start: start state.
      byte_class: int32[256], the class of each byte.
    """
    predecessors = _predecessors(class_table)
    live = _co_accessible(class_table, accepting).tolist()
    _, first, block = np.unique(_hopcroft(predecessors, live, accepting), return_index=True, return_inverse=True)
    rank = np.empty(len(first), np.int32)
    rank[np.argsort(first)] = np.arange(len(first), dtype=np.int32)
    block = rank[block]
    table = block[class_table[np.sort(first)]]
    dfa_accepting = np.zeros(len(first), bool)
    dfa_accepting[block] = accepting
    return ByteDFA(table[:, byte_class].astype(np.int32), dfa_accepting, int(block[start]))


def trimmed(class_table: np.ndarray, accepting: np.ndarray, *, start: int, byte_class: np.ndarray) -> ByteDFA:
    """The DFA of ``class_table`` (int32[S, C], state 0 dead) not minimised: the states from which
    no accepting state is reachable merge into state 0, the others keep their order."""
    live = _co_accessible(class_table, accepting)
    live[DEAD] = False
    number = np.zeros(len(live), np.int32)
    number[live] = np.arange(1, int(live.sum()) + 1, dtype=np.int32)
    table = np.vstack([np.zeros((1, class_table.shape[1]), np.int32), number[class_table[live]]])
    return ByteDFA(table[:, byte_class], np.concatenate([[False], accepting[live]]), int(number[start]))


def _co_accessible(class_table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    """bool[S]: whether an accepting state is reachable, by a backward search one level at a
    time over the transitions grouped by target."""
    sources, classes = np.nonzero(class_table)
    targets = class_table[sources, classes]
    order = np.argsort(targets, kind="stable")
    sources = sources[order]
    bounds = np.searchsorted(targets[order], np.arange(len(class_table) + 1))
    live = accepting.copy()
    frontier = np.flatnonzero(live)
    while len(frontier):
        check_time()
        first, count = bounds[frontier], bounds[frontier + 1] - bounds[frontier]
        offsets = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count)
        found = sources[np.repeat(first, count) + offsets]
        frontier = np.unique(found[~live[found]])
        live[frontier] = True
    return live


_BLOCK_ROWS = 2048  # rows of a transition table taken at a time by `byte_classes`


def byte_classes(transitions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes that act alike in every state of ``transitions`` [S, 256] (stack several
    automata to share classes): int64[256], the class of each byte, and int64[K], one byte of
    each class (its lowest).

    Columns are grouped by a random linear hash (integer weights small enough that float64 sums
    are exact) and then checked equal to their class's first column; a collision falls back to
    sorting the columns.
    """
    bound = 2.0**52 / (len(transitions) * max(int(transitions.max(initial=0)), 1))
    weights = np.floor(hash_multipliers(len(transitions))[0] / 2.0**64 * bound) + 1
    blocks = [slice(i, i + _BLOCK_ROWS) for i in range(0, len(transitions), _BLOCK_ROWS)]  # in cache
    _, first_byte, byte_class = unique_first_inverse(sum(weights[b] @ transitions[b] for b in blocks))
    first = first_byte[byte_class]
    if any((transitions[b] != np.take(transitions[b], first, axis=1)).any() for b in blocks):
        byte_class = row_groups(np.ascontiguousarray(transitions.T))
        first_byte = np.zeros(int(byte_class.max()) + 1, np.int64)
        first_byte[byte_class[::-1]] = np.arange(len(byte_class) - 1, -1, -1)
    return byte_class, first_byte


def row_groups(rows: np.ndarray) -> np.ndarray:
    """int64[N]: equal rows of ``rows`` [N, K] get equal ids, numbered in lexicographic row order
    (of the values read as unsigned integers).

    Exact: one sort of the rows as big-endian byte strings, several times faster than a lexsort
    over the columns (or ``np.unique(axis=0)``); bool rows are packed to bits first (the same
    order, on keys 8 times shorter: a token DFA's 31k x 769 allowed classes 54 -> 19 ms).
    """
    if rows.shape[1] == 0:
        return np.zeros(len(rows), np.int64)
    if rows.dtype == bool:
        rows = np.packbits(rows, axis=1)
    keys = np.ascontiguousarray(rows.astype(f">u{rows.dtype.itemsize}"))
    _, ids = np.unique(keys.view(np.dtype((np.void, keys.itemsize * keys.shape[1]))).ravel(), return_inverse=True)
    return ids.reshape(-1).astype(np.int64)


def _predecessors(class_table: np.ndarray) -> list[list[tuple[int, list[int]]]]:
    """Per state ``t``, the ``(byte class, sources)`` of the transitions into ``t``.

    Transitions into state 0 are left out: they are most of all transitions, and neither search
    needs them (state 0 is dead, and never a splitter).
    """
    sources, classes = np.nonzero(class_table)
    targets = class_table[sources, classes]
    order = np.argsort(targets.astype(np.int64) * class_table.shape[1] + classes, kind="stable")  # twice lexsort's speed
    sources, classes, targets = sources[order], classes[order], targets[order]
    new_run = np.ones(len(targets), bool)
    new_run[1:] = (targets[1:] != targets[:-1]) | (classes[1:] != classes[:-1])
    starts = np.flatnonzero(new_run)
    bounds = np.append(starts, len(targets)).tolist()
    sources = sources.tolist()
    result: list[list[tuple[int, list[int]]]] = [[] for _ in range(len(class_table))]
    runs = zip(bounds, bounds[1:], targets[starts].tolist(), classes[starts].tolist())
    while chunk := list(itertools.islice(runs, CHECK_EVERY * 16)):
        check_time()
        for a, b, t, c in chunk:
            result[t].append((c, sources[a:b]))
    return result


def _hopcroft(predecessors: list[list[tuple[int, list[int]]]], live: list[bool], accepting: np.ndarray) -> list[int]:
    """Block per state: the coarsest stable refinement of {dead, live rejecting, live accepting}.

    Hopcroft's algorithm, O(k n log n) for k byte classes. Block 0, the dead states, is never a splitter: it is the complement of the live blocks, so
    stability with respect to all of them implies stability with respect to it. It is never split
    either, as only live states have transitions into live ones.
    """
    block = [(2 if a else 1) if alive else 0 for alive, a in zip(live, accepting.tolist())]
    members: list[set[int]] = [set(), set(), set()]
    for s, b in enumerate(block):
        members[b].add(s)
    pending = [b for b in (1, 2) if members[b]]
    queued = [b in pending for b in range(3)]
    while pending:
        check_time()
        splitter = pending.pop()
        queued[splitter] = False
        incoming: dict[int, list[int]] = {}
        for t in members[splitter]:
            for c, sources in predecessors[t]:
                incoming.setdefault(c, []).extend(sources)
        for sources in incoming.values():
            # Deterministic: a state has one successor per class, so ``sources`` has no repeats.
            touched: dict[int, list[int]] = {}
            for p in sources:
                touched.setdefault(block[p], []).append(p)
            for b, moving in touched.items():
                rest = members[b]
                if len(moving) == len(rest):
                    continue
                rest.difference_update(moving)
                new = len(members)
                members.append(set(moving))
                queued.append(False)
                for p in moving:
                    block[p] = new
                # A queued block must have both halves queued; otherwise one half suffices, as
                # stability with respect to the block and one half implies it for the other. The
                # smaller half gives the log n bound: a state is queued again only once its block
                # has at least halved.
                half = new if queued[b] or len(moving) <= len(rest) else b
                queued[half] = True
                pending.append(half)
    return block
