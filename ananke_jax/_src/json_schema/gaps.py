"""Flexible whitespace gaps as placeholders, expanded after determinisation.

A flexible gap as a regex, ``[ \t\n\r]{0,24}`` by default, costs 25 automaton states in every
place it appears, and most states of a schema's automaton are such counters: building them
through an NFA, subset construction and minimisation took about half of a compile. So a regular schema is
compiled with `GAP`, an unbounded loop on one placeholder byte, in their place, and the small
automaton then gets its whitespace bytes and run counters directly (`expand_gaps`).
"""

from __future__ import annotations

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import DEAD, ByteDFA
from ananke_jax._src.json_schema.rules import Rules

MAX_WHITESPACE_RUN = 24  # default longest whitespace run in "flexible" mode; the model cannot loop on it
WHITESPACE = b" \t\n\r"
GAP_BYTE = 0xFF  # never in UTF-8 text, and so free to stand for the whitespace of a gap


class MixedGaps(ValueError):
    """A state reads both a placeholder gap and literal whitespace (a JSON value beside free
    text), so the gaps cannot be expanded after determinisation: compile them as regexes."""


def bounded_gap(run: int = MAX_WHITESPACE_RUN) -> rx.Node:
    """Flexible whitespace: any run of at most ``run`` whitespace bytes."""
    return rx.repeat(rx.chars(*WHITESPACE.decode()), 0, run)


def _gap_loop() -> ByteDFA:
    transitions = np.zeros((2, 256), np.int32)
    transitions[1, GAP_BYTE] = 1
    return ByteDFA(transitions, np.array([False, True]), start=1)


GAP = rx.Automaton(_gap_loop())  # GAP_BYTE*, a placeholder for `bounded_gap`


def with_bounded_gaps(node: rx.Node, run: int = MAX_WHITESPACE_RUN) -> rx.Node:
    """``node`` with its placeholder gaps, `GAP` or inside automata, made runs of at most
    ``run`` whitespace bytes."""
    gap = bounded_gap(run)

    def bound(leaf):
        if leaf is GAP:
            return gap
        if isinstance(leaf, rx.Automaton) and leaf.dfa.transitions[:, GAP_BYTE].any():
            return rx.Automaton(expand_gaps(leaf.dfa, run))
        return leaf

    return rx.map_leaves(node, bound)


def rules_with_bounded_gaps(rules: Rules, run: int = MAX_WHITESPACE_RUN) -> Rules:
    """`with_bounded_gaps` over every rule's body."""
    return Rules(rules.start, {name: with_bounded_gaps(body, run) for name, body in rules.bodies.items()})


def expand_gaps(dfa: ByteDFA, run: int = MAX_WHITESPACE_RUN) -> ByteDFA:
    """``dfa`` with each `GAP_BYTE` read as any whitespace byte, at most ``run`` in a row.

    The states a gap byte leads to (each loops on it: the gap is ``GAP_BYTE*``) get ``run``
    copies, one per count of whitespace bytes read since the last other byte; a state only
    entered through a gap keeps its copies alone. Gaps stand outside strings and whitespace bytes
    inside them, so no state reads both. The result of a minimal ``dfa`` is minimal (tests check
    it against the automaton of `bounded_gap`).
    """
    t = dfa.transitions
    after_gap = t[:, GAP_BYTE]
    counted = np.unique(after_gap[after_gap != DEAD])
    entered = np.zeros(dfa.num_states, bool)
    entered[t[:, :GAP_BYTE]] = True
    entered[t[:, GAP_BYTE + 1 :]] = True
    entered[dfa.start] = True  # DEAD stays 0: every automaton has transitions into it
    first = int(entered.sum())
    # ids[state, count]: the expanded state (DEAD for none, and in the last column: past run).
    ids = np.zeros((dfa.num_states, run + 2), np.int64)
    ids[entered, 0] = np.arange(first)
    ids[counted, 1 : run + 1] = first + np.arange(run * len(counted)).reshape(run, len(counted)).T
    state = np.concatenate([np.flatnonzero(entered), np.tile(counted, run)])
    count = np.concatenate([np.zeros(first, np.int64), np.repeat(np.arange(1, run + 1), len(counted))])
    whitespace = np.frombuffer(WHITESPACE, np.uint8)
    in_gap = np.flatnonzero(after_gap[state])
    if t[np.ix_(state[in_gap], whitespace)].any():
        raise MixedGaps("a state reads both a gap and literal whitespace")
    table = ids[:, 0].astype(np.int32)[t[state]]  # a column gathered alone: 5x faster than ids[t[state], 0]
    table[np.ix_(in_gap, whitespace)] = ids[after_gap[state[in_gap]], count[in_gap] + 1][:, None]
    table[:, GAP_BYTE] = DEAD
    return ByteDFA(table, dfa.accepting[state], int(ids[dfa.start, 0]))
