"""Regular languages as a small expression tree.

The regex parser and the JSON Schema compiler both build these trees; `to_dfa` compiles one to a
minimal byte DFA, `to_regex` prints it in Python regex syntax (for grammar text that people read),
and `intersect` / `difference` combine DFAs where a language is easier to describe by what it
excludes (object keys other than the declared ones, ``not``, ``allOf`` over patterns).

Nodes:
  `Chars`: one code point from a set of ranges. `Text`: a literal string. `Seq`, `Alt`:
  concatenation and union. `Repeat`: ``body{lo,hi}`` (``hi=None``: unbounded). `Automaton`: a
  byte DFA used as a node. `Interleave`: items in any order, some at most once (an object's
  members when their order is free).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import math
import operator
import re
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from ananke_jax._src.compile import utf8
from ananke_jax._src.compile.automaton import (
    DEAD,
    ByteDFA,
    Fragment,
    NFABuilder,
    byte_classes,
    concatenated,
    counted,
    determinise,
    dfa_moves,
    minimise,
    pausing_gc,
    repeated,
    trimmed,
)
from ananke_jax._src.compile.budget import charge_dfa_states, charge_states, check_time
from ananke_jax._src.compile.interleave import Hubs, hubs, interleave_fragment
from ananke_jax._src.errors import GrammarError


def _hash_once(node) -> int:
    """The hash of a node with parts, kept on it: trees share subtrees (a DAG), where a hash
    computed afresh each time would walk every path."""
    if "_hash" not in node.__dict__:
        node.__dict__["_hash"] = hash((type(node), *(getattr(node, f.name) for f in dataclasses.fields(node))))
    return node.__dict__["_hash"]


@dataclasses.dataclass(frozen=True)
class Chars:
    """One code point in ``ranges`` (inclusive ``(lo, hi)`` pairs)."""

    ranges: tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class Text:
    """The literal string ``text`` (as UTF-8)."""

    text: str


@dataclasses.dataclass(frozen=True)
class Seq:
    parts: tuple[Node, ...]

    __hash__ = _hash_once


@dataclasses.dataclass(frozen=True)
class Alt:
    parts: tuple[Node, ...]

    __hash__ = _hash_once


@dataclasses.dataclass(frozen=True)
class Repeat:
    body: Node
    lo: int
    hi: int | None

    __hash__ = _hash_once


@dataclasses.dataclass(frozen=True, eq=False)
class Automaton:
    """A byte DFA as a node (compared by identity); ``source``, a tree of the same language
    printed in its place (None: the DFA is printed)."""

    dfa: ByteDFA
    source: Node | None = None


@dataclasses.dataclass(frozen=True)
class Interleave:
    """``lo`` to ``hi`` items (``hi=None``: unbounded) joined by ``separator``: each of
    ``members`` at most once, in any order (exactly once where ``required`` says so), and
    ``extra`` any number of times."""

    members: tuple[Node, ...]
    required: tuple[bool, ...]
    extra: Node
    separator: Node
    lo: int
    hi: int | None

    __hash__ = _hash_once

    @property
    def parts(self) -> tuple[Node, ...]:
        return (*self.members, self.extra, self.separator)

    def hubs(self) -> Hubs:
        """The places between items (`interleave.hubs`); members that are `NOTHING` are never
        written."""
        return hubs(self.required, [m != NOTHING for m in self.members], self.extra != NOTHING, self.lo, self.hi)


Node = Chars | Text | Seq | Alt | Repeat | Automaton | Interleave

EMPTY = Seq(())  # the empty string
NOTHING = Alt(())  # the empty language


def chars(*ranges: tuple[int, int] | str) -> Chars:
    """``chars("az", (0x80, 0x10FFFF), "_")``: a two-character string is a range, one is a point."""
    out = []
    for r in ranges:
        if isinstance(r, str):
            out.append((ord(r[0]), ord(r[-1])))
        else:
            out.append(r)
    return Chars(tuple(utf8.normalise(out)))


def seq(*parts: Node) -> Node:
    """Concatenation, flattened; the empty language absorbs, the empty string vanishes."""
    flat: list[Node] = []
    for p in parts:
        if p == NOTHING:
            return NOTHING
        flat.extend(p.parts if isinstance(p, Seq) else [p])
    merged: list[Node] = []
    for p in flat:
        if merged and isinstance(p, Text) and isinstance(merged[-1], Text):
            merged[-1] = Text(merged[-1].text + p.text)
        elif p != Text(""):
            while merged and _unbounded_over(p, merged[-1]):  # x{a,b} y{k,} = x{a} y{k,} where x is in y
                last = merged.pop()
                if (fixed := repeat(last.body, last.lo, last.lo)) != EMPTY:
                    merged.append(fixed)
                    break
            if merged and _unbounded_over(merged[-1], p):  # y{k,} x{a,b} = y{k,} x{a}
                p = repeat(p.body, p.lo, p.lo)
            if p != EMPTY:
                merged.append(p)
    return merged[0] if len(merged) == 1 else Seq(tuple(merged))


def _unbounded_over(y: Node, x: Node) -> bool:
    """Whether ``y`` is ``Y{k,}`` and ``x`` is ``X{a,b}`` with ``b > a`` and X within Y, so that
    beside ``y`` the copies of X past ``a`` add no strings: their text may as well be Y's.
    (Unanchored patterns end such runs with any text: ``.*\\d{1,3}.*`` is ``.*\\d.*``.)"""
    if not (isinstance(y, Repeat) and y.hi is None and isinstance(x, Repeat) and x.hi != x.lo):
        return False
    if isinstance(x.body, Chars) and isinstance(y.body, Chars):
        return all(any(a <= lo and hi <= b for a, b in y.body.ranges) for lo, hi in x.body.ranges)
    return x.body == y.body


def alt(*parts: Node) -> Node:
    """Union, flattened and without repeated branches."""
    flat = tuple(dict.fromkeys(q for p in parts for q in (p.parts if isinstance(p, Alt) else [p])))
    return flat[0] if len(flat) == 1 else Alt(flat)


def repeat(body: Node, lo: int, hi: int | None) -> Node:
    """``body{lo,hi}`` (``hi=None``: unbounded; ``hi < lo``: the empty language)."""
    if hi is not None and hi < lo:
        return NOTHING
    if hi == 0 or body == EMPTY:
        return EMPTY
    if body == NOTHING:
        return EMPTY if lo == 0 else NOTHING
    if isinstance(body, Repeat) and body.hi is None and body.lo <= 1:
        # k copies of x* are x*, of x+ are x{k,}: (x*){lo,hi} = x*, (x+){lo,hi} = x{lo,} (hi >= 1).
        return repeat(body.body, body.lo * lo, None)
    return body if (lo, hi) == (1, 1) else Repeat(body, lo, hi)


def interleave(members: Sequence[Node], required: Sequence[bool], extra: Node, separator: Node, lo: int, hi: int | None) -> Node:
    """`Interleave` (the empty language when no count of the items is allowed)."""
    node = Interleave(tuple(members), tuple(required), extra, separator, lo, hi)
    return node if node.hubs().accepting else NOTHING


def optional(body: Node) -> Node:
    return repeat(body, 0, 1)


def star(body: Node) -> Node:
    return repeat(body, 0, None)


def subtrees(node) -> Iterator:
    """``node`` and the nodes under it, each node object visited once (trees share subtrees as
    DAGs)."""
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        yield n
        if isinstance(n, (Seq, Alt, Interleave)):
            todo += n.parts
        elif isinstance(n, Repeat):
            todo.append(n.body)


def leaves(node) -> Iterator:
    """The nodes under ``node`` that are not `Seq`, `Alt`, `Repeat` or `Interleave`, each node
    object visited once."""
    return (n for n in subtrees(node) if not isinstance(n, (Seq, Alt, Repeat, Interleave)))


def rewrite(node, fn: Callable) -> Node:
    """``node`` with each subtree for which ``fn`` gives a node replaced by it (outermost
    first; ``fn`` gives None to go on into the subtree's parts). A subtree shared in ``node``
    is rewritten once, and its rewrite shared alike (`to_nfa` builds shared subtrees once)."""
    done: dict[int, Node] = {}

    def go(n):
        if id(n) not in done:
            done[id(n)] = _rewritten(n, fn, go)
        return done[id(n)]

    return go(node)


def _rewritten(node, fn: Callable, go: Callable) -> Node:
    """``node`` rewritten; itself where none of its parts changes (rebuilding it, with the
    normalisation of `seq` and `alt` and a new hash, took most of a rewrite's time)."""
    out = fn(node)
    if out is not None:
        return out
    if isinstance(node, (Seq, Alt)):
        parts = tuple(map(go, node.parts))
        if all(map(operator.is_, parts, node.parts)):
            return node
        return seq(*parts) if isinstance(node, Seq) else alt(*parts)
    if isinstance(node, Repeat):
        body = go(node.body)
        return node if body is node.body else repeat(body, node.lo, node.hi)
    if isinstance(node, Interleave):
        members, extra, separator = list(map(go, node.members)), go(node.extra), go(node.separator)
        if all(map(operator.is_, [*members, extra, separator], [*node.members, node.extra, node.separator])):
            return node
        return interleave(members, node.required, extra, separator, node.lo, node.hi)
    return node


def map_leaves(node, fn: Callable) -> Node:
    """``node`` with every leaf (see `leaves`) replaced by ``fn(leaf)``."""
    return rewrite(node, lambda n: None if isinstance(n, (Seq, Alt, Repeat, Interleave)) else fn(n))


def join(items: list[Node], separator: Node) -> Node:
    """``items[0] separator items[1] separator ...``."""
    parts: list[Node] = []
    for i, item in enumerate(items):
        parts += [separator, item] if i else [item]
    return seq(*parts)


# --- compilation -----------------------------------------------------------------------------


class _Kept:
    """The latest automata built in this process, read-only, each with the states it is charged
    to the budget when it is taken again (as if built); at most ``max_entries`` of them and
    ``max_bytes`` of their tables, the least recently used dropped first."""

    def __init__(self, max_entries: float = math.inf, max_bytes: float = math.inf):
        self.max_entries, self.max_bytes, self.bytes = max_entries, max_bytes, 0
        self.kept: collections.OrderedDict[object, tuple[ByteDFA, int]] = collections.OrderedDict()

    def get(self, key) -> tuple[ByteDFA, int] | None:
        if (found := self.kept.pop(key, None)) is not None:  # one equality test of the keys, not two
            self.kept[key] = found  # the most recently used
        return found

    def put(self, key, dfa: ByteDFA, states: int) -> None:
        dfa.transitions.setflags(write=False)
        dfa.accepting.setflags(write=False)
        self.kept[key] = (dfa, states)
        self.bytes += dfa.transitions.nbytes
        while len(self.kept) > self.max_entries or self.bytes > self.max_bytes:
            self.bytes -= self.kept.popitem(last=False)[1][0].transitions.nbytes


_BUILT_MAX_STATES = 20_000  # the largest automata kept
_BUILT = _Kept(max_entries=512)  # by regex tree (see `to_dfa`)
_PRODUCTS = _Kept(max_bytes=32 << 20)  # by operation and operands' digests (see `_kept_product`)


@pausing_gc
def to_dfa(node: Node) -> ByteDFA:
    """The minimal byte DFA of ``node`` (start 0 when the language is empty); of a concatenation
    holding automata or long bounded repeats, one joined from its parts' (`_joined`), of a
    long bounded repeat, one chained from its body's (`automaton.repeated`, or
    `automaton.counted` where copies overlap), and of an
    `Automaton`, its own (a product may be only trimmed), not minimised.

    The DFAs of the last few hundred trees built in this process are kept (read-only), and a
    tree equal to one of them is not built again: grammars and schemas share their terminals
    (strings, numbers, whitespace, formats). A kept DFA is charged to the budget as if built.

    Raises:
      BudgetError: its NFA, estimated before it is built, or its DFA is over the compile budget.
    """
    if isinstance(node, Automaton):
        charge_dfa_states(node.dfa.num_states, "a regex's DFA")
        return node.dfa
    charge_states(nfa_size(node), "a regex's NFA")
    if (kept := _BUILT.get(node)) is not None:
        charge_dfa_states(kept[1], "a regex's DFA")
        return kept[0]
    dfa = _joined(node.parts) if isinstance(node, Seq) and any(map(_built_apart, node.parts)) else None
    if dfa is None and isinstance(node, Repeat):
        dfa = _chained(node)
    if dfa is None:
        builder = NFABuilder()
        end = builder.state()
        dfa = determinise(builder, Fragment(to_nfa(node, builder, end, {}), end))
    if dfa.num_states <= _BUILT_MAX_STATES:
        _BUILT.put(node, dfa, dfa.num_states)
    return dfa


_LONG_REPEAT = 16  # copies from which a bounded repeat is chained rather than determinised


def _is_long_repeat(node: Node) -> bool:
    return isinstance(node, Repeat) and node.hi is not None and node.hi >= _LONG_REPEAT


def _chained(node: Repeat) -> ByteDFA | None:
    """The DFA of a long bounded repeat chained from copies of its body's (`automaton.repeated`),
    or where they overlap, from the fewest copies that reach each state of its body
    (`automaton.counted`); None where the repeat is short, or its copies overlap and it must
    have more than one, or its body accepts the empty string or nothing."""
    if not _is_long_repeat(node):
        return None
    body = to_dfa(node.body)
    chained = repeated(body, node.lo, node.hi)
    return counted(body, node.lo, node.hi) if chained is None else chained


def _built_apart(node: Node) -> bool:
    """Whether ``node``'s DFA is built by itself rather than from an NFA of a tree around it."""
    return isinstance(node, Automaton) or _is_long_repeat(node)


def _joined(parts: tuple[Node, ...]) -> ByteDFA | None:
    """The DFA of a concatenation holding automata, joined part by part without taking the
    automata apart again (`automaton.concatenated`); None where two parts overlap at a join.
    Not minimised: a join may leave states that act alike (an automaton of thousands of states
    took seconds to take apart and build again, and as long to minimise)."""
    dfa = to_dfa(parts[0])
    for part in parts[1:]:
        if dfa is None:
            return None
        dfa = concatenated(dfa, to_dfa(part))
        if dfa is not None:
            charge_dfa_states(dfa.num_states, "a regex's DFA")
    return dfa


def nfa_size(node: Node, *, repeated: bool = True) -> int:
    """About how many states `to_nfa` builds for ``node``: a subtree counted once however often
    it is shared (`to_nfa` mostly builds it once), times the copies of the repeats around it
    (``repeated=False``: once, the least that pieces of ``node`` add up to)."""
    seen: set[int] = set()
    total = 0
    todo = [(node, 1)]
    while todo:
        n, copies = todo.pop()
        if id(n) in seen:
            continue
        seen.add(id(n))
        if isinstance(n, Repeat):
            each = n.lo + (1 if n.hi is None else n.hi - n.lo) if repeated else 1
            total += copies * (each + 1)
            todo.append((n.body, copies * each))
        elif isinstance(n, (Seq, Alt)):
            total += copies
            todo += [(p, copies) for p in n.parts]
        elif isinstance(n, Interleave):  # an item's copy per move between hubs
            items = [*n.members, n.extra]
            total += copies * sum(
                nfa_size(items[i], repeated=repeated) + nfa_size(n.separator, repeated=repeated) for _, i, _ in n.hubs().moves
            )
        else:
            total += copies * (
                n.dfa.num_states if isinstance(n, Automaton) else 2 if isinstance(n, Chars) else 2 * len(n.text.encode("utf-8"))
            )
    return total


def to_nfa(node: Node, b: NFABuilder, after: int, built: dict[tuple[int, int], int]) -> int:
    """The start of an NFA for ``node`` in ``b`` that leads to ``after`` when it has read a
    member of the language.

    Built back to front, each piece knowing where it goes next, so that a subtree used in
    several places that go on alike (an object's optional members, all followed by the rest of
    the object) is built once: ``built`` maps (subtree id, ``after``) to its start. States
    returned are never given new moves, which makes the sharing sound.
    """
    key = (id(node), after)
    if key in built:
        return built[key]
    if isinstance(node, Seq):
        start = after
        for part in reversed(node.parts):
            start = to_nfa(part, b, start, built)
    elif isinstance(node, Alt):
        start = b.state()
        b.epsilons[start] += [to_nfa(part, b, after, built) for part in node.parts]
    elif isinstance(node, Repeat) and (chained := _chained(node)) is None:
        start = _repeat(node, b, after, built)
    else:
        if isinstance(node, Repeat):
            piece = b.copy(chained)
        elif isinstance(node, Chars):
            piece = b.code_points(node.ranges) if node.ranges else Fragment(b.state(), b.state())
        elif isinstance(node, Text):
            piece = b.literal(node.text.encode("utf-8"))
        elif isinstance(node, Automaton):
            piece = b.copy(node.dfa)
        elif isinstance(node, Interleave):
            members = [to_dfa(m) for m in node.members]
            piece = interleave_fragment(b, members, node.required, to_dfa(node.extra), to_dfa(node.separator), node.lo, node.hi)
        else:
            raise TypeError(f"not a regex node: {node!r}")
        b.epsilons[piece.end].append(after)
        start = piece.start
    built[key] = start
    return start


def _repeat(node: Repeat, b: NFABuilder, after: int, built: dict[tuple[int, int], int]) -> int:
    """`to_nfa` of ``body{lo,hi}``: the optional copies (or the loop) first, from the back."""
    if node.hi is None:
        start = b.state()  # the loop's hub
        b.epsilons[start] += [to_nfa(node.body, b, start, built), after]
    else:
        start = after
        for _ in range(node.hi - node.lo):  # body? (body? (...)): each copy may end the repeat
            entry = b.state()
            b.epsilons[entry] += [to_nfa(node.body, b, start, built), after]
            start = entry
    for _ in range(node.lo):
        start = to_nfa(node.body, b, start, built)
    return start


def intersect(a: ByteDFA, b: ByteDFA, *, minimal: bool = True, at_most: int | None = None) -> ByteDFA | None:
    """The minimal DFA of the strings both ``a`` and ``b`` accept (reachable product); with
    ``minimal=False``, the product itself, only its dead ends merged (`automaton.trimmed`);
    None where the product passes ``at_most`` pairs (built no further)."""
    return _kept_product(a, b, "and", minimal, at_most)


def difference(a: ByteDFA, b: ByteDFA) -> ByteDFA:
    """The minimal DFA of the strings ``a`` accepts and ``b`` does not."""
    return _kept_product(a, b, "and not", True, None)


_ACCEPT = {"and": lambda x, y: x & y, "and not": lambda x, y: x & ~y}


def _kept_product(a: ByteDFA, b: ByteDFA, accept: str, minimal: bool, at_most: int | None) -> ByteDFA | None:
    """`_product` of ``a`` and ``b`` by ``accept`` (a key of `_ACCEPT`), kept in `_PRODUCTS` where
    both are small: the exclusions of a ``oneOf`` nested n deep take the same differences about
    2^n times."""
    if max(a.num_states, b.num_states) > _BUILT_MAX_STATES:
        return _product(a, b, _ACCEPT[accept], minimal, at_most)[0]
    key = (accept, minimal, _digest(a), _digest(b))
    if (kept := _PRODUCTS.get(key)) is not None:
        if at_most is not None and kept[1] > at_most:
            return None
        charge_dfa_states(kept[1], "a product of two automata")
        check_time()
        return kept[0]
    dfa, pairs = _product(a, b, _ACCEPT[accept], minimal, at_most)
    if dfa is not None:
        _PRODUCTS.put(key, dfa, pairs)
    return dfa


def _digest(dfa: ByteDFA) -> bytes:
    parts = (dfa.transitions.tobytes(), dfa.accepting.tobytes(), int(dfa.start).to_bytes(8, "little"))
    return hashlib.blake2b(b"".join(parts), digest_size=16).digest()


@pausing_gc
def _product(a: ByteDFA, b: ByteDFA, accept, minimal: bool, at_most: int | None = None) -> tuple[ByteDFA | None, int]:
    """The DFA of the reachable pairs of states, accepting per ``accept``, built one
    breadth-first level at a time over the byte classes of both automata, minimised or
    `trimmed` (None past ``at_most`` pairs); and the number of pairs (the states charged to the
    budget)."""
    byte_class, first_byte = byte_classes(np.vstack([a.transitions, b.transitions]))
    moves_a, moves_b = a.transitions[:, first_byte].astype(np.int64), b.transitions[:, first_byte].astype(np.int64)
    width = b.num_states
    # A pair is the key x * width + y; no string through x = DEAD is in a, so (DEAD, y) is DEAD.
    start = a.start * width + b.start if a.start != DEAD else DEAD
    ids = {DEAD: 0}
    ids.setdefault(start, 1)
    keys, rows = [DEAD, start], []
    done = 0
    while done < len(keys):
        level = np.asarray(keys[done:])
        x, y = level // width, level % width
        after = moves_a[x] * width + moves_b[y]
        after[moves_a[x] == DEAD] = DEAD
        targets, inverse = np.unique(after, return_inverse=True)
        fresh = [key for key in targets.tolist() if key not in ids]
        if at_most is not None and len(keys) + len(fresh) > at_most:
            return None, len(keys) + len(fresh)
        charge_dfa_states(len(keys) + len(fresh), "a product of two automata")  # before the level is kept
        check_time()
        ids.update(zip(fresh, range(len(keys), len(keys) + len(fresh))))
        keys += fresh
        rows.append(np.asarray([ids[key] for key in targets.tolist()], np.int32)[inverse.reshape(after.shape)])
        done = len(level) + done
    pairs = np.asarray(keys)
    accepting = accept(a.accepting[pairs // width], b.accepting[pairs % width])
    finish = minimise if minimal else trimmed
    return finish(np.concatenate(rows), accepting, start=1, byte_class=byte_class.astype(np.int32)), len(keys)


def substitute(dfa: ByteDFA, spellings: dict[int, bytes]) -> ByteDFA:
    """The minimal DFA of ``dfa``'s strings with each byte ``b`` in ``spellings`` written as
    ``spellings[b]`` (``b""`` erases it)."""
    builder = NFABuilder()
    moves = [[(a, b, t) for lo, hi, t in row for a, b in _without(lo, hi, spellings)] for row in dfa_moves(dfa)]
    fragment = builder.copy(dfa, moves)
    offset = fragment.start - dfa.start
    for byte, spelling in spellings.items():
        for s in np.flatnonzero(dfa.transitions[1:, byte] != DEAD) + 1:
            path = builder.literal(spelling)
            builder.epsilons[s + offset].append(path.start)
            builder.epsilons[path.end].append(int(dfa.transitions[s, byte]) + offset)
    return determinise(builder, fragment)


def _without(lo: int, hi: int, removed) -> list[tuple[int, int]]:
    """The pieces of the byte range ``[lo, hi]`` outside the bytes ``removed``."""
    out, start = [], lo
    for b in sorted(x for x in removed if lo <= x <= hi):
        if start < b:
            out.append((start, b - 1))
        start = b + 1
    return out + ([(start, hi)] if start <= hi else [])


def single_byte(byte: int) -> Automaton:
    """The automaton of the one-byte string ``byte`` (placeholders and markers: bytes UTF-8 never
    holds, standing for a unit or a place)."""
    transitions = np.zeros((3, 256), np.int32)
    transitions[1, byte] = 2
    return Automaton(ByteDFA(transitions, np.array([False, False, True]), start=1))


# State elimination can grow the regex exponentially; larger automata are not printed.
MAX_PRINTED_STATES = 256

# --- automata back to trees -------------------------------------------------------------------


def dfa_to_node(dfa: ByteDFA) -> Node:
    """A tree without `Automaton` nodes for the language of ``dfa`` (which must read UTF-8).

    Byte moves are first grouped into code-point moves, then states are eliminated one by one
    (fewest connections first), joining the paths through each into regexes.
    """
    if dfa.start == DEAD:
        return NOTHING
    if dfa.num_states > MAX_PRINTED_STATES:
        raise GrammarError(f"an automaton of {dfa.num_states} states is too large to write as a regex (at most {MAX_PRINTED_STATES})")
    edges: dict[int, dict[int, Node]] = {s: {} for s in range(1, dfa.num_states)}
    final = dfa.num_states  # a fresh accepting end; the start keeps its number
    continuations: dict[tuple[int, int], list[tuple[int, int, int]]] = {}
    for s in range(1, dfa.num_states):
        by_target: dict[int, list[tuple[int, int]]] = {}
        for lo, hi, t in _code_point_moves(dfa, s, continuations):
            by_target.setdefault(t, []).append((lo, hi))
        for t, ranges in by_target.items():
            edges[s][t] = Chars(tuple(utf8.normalise(ranges)))
        if dfa.accepting[s]:
            edges[s][final] = EMPTY
    edges[final] = {}
    entry = -1
    edges[entry] = {dfa.start: EMPTY}
    pending = set(range(1, dfa.num_states))
    while pending:
        incoming = {k: [p for p in edges if k in edges[p] and p != k] for k in pending}
        k = min(pending, key=lambda k: len(incoming[k]) * len(edges[k]))
        pending.remove(k)
        loop = star(edges[k].pop(k)) if k in edges[k] else EMPTY
        for p in incoming[k]:
            through = edges[p].pop(k)
            for q, out in edges[k].items():
                path = seq(through, loop, out)
                edges[p][q] = alt(edges[p][q], path) if q in edges[p] else path
        del edges[k]
    return edges[entry].get(final, NOTHING)


def _code_point_moves(dfa: ByteDFA, s: int, memo: dict) -> list[tuple[int, int, int]]:
    """``(lo, hi, target)``: the code points ``[lo, hi]`` lead from ``s`` to ``target``."""
    row = dfa.transitions[s]
    moves = [(b, b, int(row[b])) for b in range(0x80) if row[b] != DEAD]
    for lead_lo, lead_hi, extra, _base in ((0xC2, 0xDF, 1, 0x80), (0xE0, 0xEF, 2, 0x800), (0xF0, 0xF4, 3, 0x10000)):
        for lead in range(lead_lo, lead_hi + 1):
            q = int(row[lead])
            if q == DEAD:
                continue
            first = (lead & (0x3F >> extra)) << (6 * extra)
            for lo, hi, t in _continuations(dfa, q, extra, memo):
                moves.append((first + lo, first + hi, t))
    return _merged(moves)


def _continuations(dfa: ByteDFA, q: int, n: int, memo: dict) -> list[tuple[int, int, int]]:
    """``(lo, hi, target)`` over the values of ``n`` continuation bytes read from ``q``."""
    if n == 0:
        return [(0, 0, q)]
    if (q, n) not in memo:
        out = []
        for c in range(64):
            nxt = int(dfa.transitions[q, 0x80 + c])
            if nxt != DEAD:
                out += [(c << (6 * (n - 1)) | lo, c << (6 * (n - 1)) | hi, t) for lo, hi, t in _continuations(dfa, nxt, n - 1, memo)]
        memo[q, n] = _merged(out)
    return memo[q, n]


def _merged(moves: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    out: list[tuple[int, int, int]] = []
    for lo, hi, t in sorted(moves):
        if out and out[-1][2] == t and out[-1][1] + 1 == lo:
            out[-1] = (out[-1][0], hi, t)
        else:
            out.append((lo, hi, t))
    return out


# --- printing --------------------------------------------------------------------------------


def to_regex(node: Node) -> str:
    """Python regex text of ``node`` (full match); automata and interleavings are first turned
    into trees."""
    return _regex(_as_tree(node))


def _as_tree(node: Node) -> Node:
    """``node`` with interleavings and automata as trees: an automaton's source (itself made a
    tree), else its DFA by state elimination."""
    node = rewrite(node, lambda n: Automaton(to_dfa(n)) if isinstance(n, Interleave) else None)
    printed = lambda leaf: dfa_to_node(leaf.dfa) if leaf.source is None else _as_tree(leaf.source)
    return map_leaves(node, lambda leaf: printed(leaf) if isinstance(leaf, Automaton) else leaf)


def _regex(node: Node) -> str:
    if isinstance(node, Chars):
        if not node.ranges:
            return "[^\\x00-\\U0010ffff]"
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            return _escape(chr(node.ranges[0][0]))
        return "[" + "".join(_class_item(lo, hi) for lo, hi in node.ranges) + "]"
    if isinstance(node, Text):
        return "".join(_escape(c) for c in node.text)
    if isinstance(node, Seq):
        return "".join(f"(?:{_regex(p)})" if isinstance(p, Alt) else _regex(p) for p in node.parts)
    if isinstance(node, Alt):
        return "|".join(_regex(p) for p in node.parts) if node.parts else _regex(Chars(()))
    if isinstance(node, Repeat):
        body = _regex(node.body)
        atomic = isinstance(node.body, Chars) or (isinstance(node.body, Text) and len(node.body.text) == 1)
        body = body if atomic else f"(?:{body})"
        hi = "" if node.hi is None else node.hi
        count = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((node.lo, node.hi))
        return body + (count or (f"{{{node.lo}}}" if node.lo == node.hi else f"{{{node.lo},{hi}}}"))
    raise TypeError(f"not a regex node: {node!r}")


def _escape(c: str) -> str:
    if c.isprintable() and c != " ":
        return re.escape(c)
    return _code(ord(c))


def _code(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}" if cp < 0x10000 else f"\\U{cp:08x}"


def _class_item(lo: int, hi: int) -> str:
    def one(cp):
        c = chr(cp)
        return "\\" + c if c in "\\]^-[" else c if c.isprintable() and c != " " else _code(cp)

    return one(lo) if lo == hi else f"{one(lo)}-{one(hi)}"
