"""The lexer of the context-free engine: all terminal DFAs run side by side (numpy, host).

A lexer state is the tuple of every terminal's DFA state, so it knows which terminals the bytes
read since the last cut can still become (``alive``) and which they already are (``ends``). No
priorities: where a terminal ends, the engine may cut there or read on, and keeps both.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ananke_jax._src.compile.automaton import CHECK_EVERY, DEAD, ByteDFA
from ananke_jax._src.compile.budget import charge_states, check_time
from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.ir import Grammar, Rule, TerminalDef


@dataclasses.dataclass(frozen=True)
class Lexer:
    """Product automaton of the terminal DFAs.

    Attributes:
      terminals: terminal names, indexing the last axis of ``ends`` and ``alive``.
      transitions: int32[Q, 256]; state 0 is dead (no terminal possible), ``start`` is "nothing
        read since the last cut".
      ends: bool[Q, n], the bytes since the last cut form terminal i.
      alive: bool[Q, n], they are a prefix of terminal i.
      start: the state right after a cut.
    """

    terminals: tuple[str, ...]
    transitions: np.ndarray
    ends: np.ndarray
    alive: np.ndarray
    start: int

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]


def without_empty_terminals(grammar: Grammar) -> tuple[Grammar, dict[str, ByteDFA]]:
    """Rewrite the grammar so that no terminal matches the empty string; compile the terminals.

    A terminal T whose language holds the empty string becomes ``T_opt ::= ε | T`` with T
    matching only non-empty strings; a terminal matching only the empty string disappears.

    Returns:
      The rewritten grammar and the byte DFA of each remaining terminal.
    """
    dfas, optional_rules, terminals, replace = {}, [], [], {}
    for t in grammar.terminals:
        dfa = t.dfa if t.dfa is not None else regex_to_dfa(t.regex)
        if not dfa.accepting[dfa.start]:
            dfas[t.name] = dfa
            terminals.append(t)
            continue
        if t.name in grammar.ignore:
            raise GrammarError(f"ignored terminal {t.name} matches the empty string")
        nonempty = _without_empty_string(dfa)
        if nonempty.start == DEAD:
            replace[t.name] = ()
            continue
        dfas[t.name] = nonempty
        terminals.append(t)
        optional = f"{t.name}?"
        replace[t.name] = (optional,)
        optional_rules += [Rule(optional, ()), Rule(optional, (t.name,))]
    rules = [Rule(r.origin, tuple(x for s in r.expansion for x in replace.get(s, (s,)))) for r in grammar.rules]
    return Grammar(tuple(rules + optional_rules), tuple(terminals), grammar.start, grammar.ignore), dfas


def _without_empty_string(dfa: ByteDFA) -> ByteDFA:
    """The same language minus the empty string: a non-accepting copy of the start state."""
    fresh = dfa.num_states
    transitions = np.vstack([dfa.transitions, dfa.transitions[dfa.start]])
    accepting = np.append(dfa.accepting, False)
    if not (transitions[fresh] != DEAD).any():
        return ByteDFA(transitions, accepting, DEAD)
    return ByteDFA(transitions, accepting, fresh)


def build_lexer(terminals: tuple[TerminalDef, ...], dfas: dict[str, ByteDFA]) -> Lexer:
    """The product of the terminal DFAs, restricted to reachable tuples of states."""
    names = tuple(t.name for t in terminals)
    sizes = np.array([dfas[n].num_states for n in names])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    table = np.vstack([dfas[n].transitions for n in names])  # all terminals' rows, stacked
    accepting = np.concatenate([dfas[n].accepting for n in names])
    dead = tuple([DEAD] * len(names))
    start = tuple(dfas[n].start for n in names)
    # The start is keyed apart from its tuple: reading back into the start tuple is not a cut.
    ids = {dead: 0}
    order = [dead, start]
    rows = []
    i = 0
    while i < len(order):
        current = np.asarray(order[i]) + offsets
        successors = table[current].T  # [256, n]: the next tuple of local states per byte
        row = []
        for succ in map(tuple, successors.tolist()):
            if succ not in ids:
                if len(order) % CHECK_EVERY == 0:
                    charge_states(len(order) + 1, "the lexer (the terminals' product automaton)")
                    check_time()
                ids[succ] = len(order)
                order.append(succ)
            row.append(ids[succ])
        rows.append(row)
        i += 1
    states = np.asarray(order) + offsets
    return Lexer(
        terminals=names,
        transitions=np.asarray(rows, np.int32),
        ends=accepting[states],
        alive=(np.asarray(order) != DEAD),
        start=1,
    )
