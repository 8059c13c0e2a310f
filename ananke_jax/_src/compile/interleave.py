"""Interleavings: items in any order, some of them at most once, as NFA fragments.

The language (an object's members in any order) is regular, but an automaton must remember which
of the once-only items were written: it has a state per subset of them, so it grows as 2^n. The
places between items are *hubs*, one per (items written, count); the NFA built here has, from
each hub, a copy of every item that may come next, each item's automaton compiled once and
copied, and the subset construction that follows yields the DFA directly (a regex tree of the
permutations would instead grow as n!). The same hubs give the grammar rules of interleavings
whose items recurse (`ananke_jax._src.json_schema.assemble`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from ananke_jax._src.compile.automaton import ByteDFA, Fragment, NFABuilder

Hub = tuple[int, int]  # (the members written, as a bit set; the items written, capped)


@dataclasses.dataclass(frozen=True)
class Hubs:
    """The hubs of an interleaving from which its items can still end; none when its language
    is empty. The start is ``(0, 0)``.

    Attributes:
      moves: ``(hub, item, next hub)`` per item that may follow ``hub``; ``item`` is a member's
        index, or the number of members for the extra item.
      accepting: the hubs where the items may end.
    """

    moves: list[tuple[Hub, int, Hub]]
    accepting: list[Hub]


def hubs(required: Sequence[bool], writable: Sequence[bool], extra: bool, lo: int, hi: int | None) -> Hubs:
    """The hubs of ``lo`` to ``hi`` items (None: no bound): each member at most once (never
    where not ``writable``; exactly once where ``required``), and the extra item, if ``extra``,
    any number of times."""
    n = len(required)
    needed = sum(1 << i for i, r in enumerate(required) if r)
    cap = hi if hi is not None else max(lo, 1)  # counts beyond it are alike; 0: no item yet
    moves: list[tuple[Hub, int, Hub]] = []
    accepting, seen, todo = [], {(0, 0)}, [(0, 0)]
    while todo:
        hub = todo.pop()
        written, count = hub
        if count >= lo and written & needed == needed:
            accepting.append(hub)
        if hi is not None and count >= hi:
            continue
        for i in [m for m in range(n) if writable[m] and not written >> m & 1] + ([n] if extra else []):
            after = (written | (1 << i if i < n else 0), min(count + 1, cap))
            moves.append((hub, i, after))
            if after not in seen:
                seen.add(after)
                todo.append(after)
    before: dict[Hub, list[Hub]] = {}
    for hub, _, after in moves:
        before.setdefault(after, []).append(hub)
    live, todo = set(accepting), list(accepting)
    while todo:
        for hub in before.get(todo.pop(), []):
            if hub not in live:
                live.add(hub)
                todo.append(hub)
    return Hubs([m for m in moves if m[0] in live and m[2] in live], accepting)


def interleave_fragment(
    b: NFABuilder,
    members: Sequence[ByteDFA],
    required: Sequence[bool],
    extra: ByteDFA,
    separator: ByteDFA,
    lo: int,
    hi: int | None,
) -> Fragment:
    """``lo`` to ``hi`` items joined by ``separator``: each of ``members`` at most once (exactly
    once where ``required``), in any order, and ``extra`` any number of times.

    Args:
      b: the builder the fragment is added to.
      members: the once-only items.
      required: per member, whether it must be written.
      extra: the item that may repeat (start 0: none).
      separator: what comes between two items.
      lo: the fewest items.
      hi: the most items (None: no bound).
    """
    items = [*members, extra, separator]
    graph = hubs(required, [bool(d.start) for d in members], bool(extra.start), lo, hi)
    end = b.state()
    states: dict[Hub, int] = {}
    entries: dict[Hub, int] = {}  # where the next item begins: after a separator but the first

    def state(hub: Hub) -> int:
        if hub not in states:
            states[hub] = b.state()
        return states[hub]

    start = entries[0, 0] = state((0, 0))
    for hub, i, after in graph.moves:
        if hub not in entries:
            sep = b.copy(separator)
            b.epsilons[state(hub)].append(sep.start)
            entries[hub] = sep.end
        copy = b.copy(items[i])
        b.epsilons[entries[hub]].append(copy.start)
        b.epsilons[copy.end].append(state(after))
    for hub in graph.accepting:
        b.epsilons[state(hub)].append(end)
    return Fragment(start, end)
