"""NULLABLE, FIRST and FOLLOW of a context-free grammar's symbols, by worklists (host).

The sets are those of lark's ``calculate_sets``, which passes over every rule until nothing
changes and took seconds on the grammars of large JSON Schemas (thousands of rules). Here each
set grows along the edges of a dependency graph, once per terminal it gains.
"""

from __future__ import annotations

import collections
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

Symbol = TypeVar("Symbol", bound=Hashable)


def grammar_sets(
    rules: Sequence[tuple[Symbol, Sequence[Symbol]]], is_terminal: Callable[[Symbol], bool]
) -> tuple[dict[Symbol, set[Symbol]], dict[Symbol, set[Symbol]], set[Symbol]]:
    """``(first, follow, nullable)`` of the symbols of ``rules`` ((origin, expansion) pairs).

    ``first[x]``: the terminals that may begin a derivation of ``x`` (a terminal's is itself);
    ``follow[x]``: those that may come right after ``x`` in a derivation from any origin;
    ``nullable``: the nonterminals that derive the empty string.
    """
    symbols = list(dict.fromkeys([s for origin, expansion in rules for s in (origin, *expansion)]))
    index = {s: i for i, s in enumerate(symbols)}
    terminals = [i for i, s in enumerate(symbols) if is_terminal(s)]
    coded = [(index[origin], [index[s] for s in expansion]) for origin, expansion in rules]

    # A rule's origin is nullable once all of its symbols are: count them down.
    nullable = [False] * len(symbols)
    left = [len(expansion) for _, expansion in coded]
    occurs = collections.defaultdict(list)  # symbol -> the rules it occurs in, once per occurrence
    for r, (_, expansion) in enumerate(coded):
        for s in expansion:
            occurs[s].append(r)
    found = [origin for origin, expansion in coded if not expansion]
    while found:
        s = found.pop()
        if nullable[s]:
            continue
        nullable[s] = True
        for r in occurs[s]:
            left[r] -= 1
            if not left[r]:
                found.append(coded[r][0])

    # Sets are bit sets over terminals, grown along "contains" edges until nothing changes.
    bit = {t: 1 << k for k, t in enumerate(terminals)}
    first = [bit.get(i, 0) for i in range(len(symbols))]
    into_first = collections.defaultdict(set)  # y -> the x with first[x] >= first[y]
    for origin, expansion in coded:
        for s in expansion:
            into_first[s].add(origin)
            if not nullable[s]:
                break
    _grow(first, into_first, terminals)

    follow = [0] * len(symbols)
    into_follow = collections.defaultdict(set)  # x -> the y with follow[y] >= follow[x]
    for origin, expansion in coded:
        after, rest_nullable = 0, True  # the first set of the symbols after s, and whether they may be empty
        for s in reversed(expansion):
            follow[s] |= after
            if rest_nullable:
                into_follow[origin].add(s)
            after = first[s] | (after if nullable[s] else 0)
            rest_nullable = rest_nullable and nullable[s]
    _grow(follow, into_follow, range(len(symbols)))

    def members(bits: int) -> set:
        out = set()
        while bits:
            low = bits & -bits
            out.add(symbols[terminals[low.bit_length() - 1]])
            bits ^= low
        return out

    return (
        {s: members(first[i]) for i, s in enumerate(symbols)},
        {s: members(follow[i]) for i, s in enumerate(symbols)},
        {s for i, s in enumerate(symbols) if nullable[i]},
    )


def _grow(sets: list[int], into: dict[int, set[int]], changed) -> None:
    """Close ``sets`` (bit sets) under ``into`` (y -> the x whose sets hold y's), from the
    symbols ``changed``."""
    pending = list(changed)
    while pending:
        y = pending.pop()
        for x in into.get(y, ()):
            grown = sets[x] | sets[y]
            if grown != sets[x]:
                sets[x] = grown
                pending.append(x)
