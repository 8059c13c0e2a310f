"""The lexer of the context-free engine: all terminal DFAs run side by side (numpy, host).

A lexer state is the tuple of every terminal's DFA state, so it knows which terminals the bytes
read since the last cut can still become (``alive``) and which they already are (``ends``). No
priorities: where a terminal ends, the engine may cut there or read on, and keeps both.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile import utf8
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, product, trimmed
from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax._src.compile.unit_loops import expand_unit_loops
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
      starts: int32[K], the start states, one per set of terminals that may begin after a cut;
        the first is the state before any input (``start``).
    """

    terminals: tuple[str, ...]
    transitions: np.ndarray
    ends: np.ndarray
    alive: np.ndarray
    starts: np.ndarray

    @property
    def num_states(self) -> int:
        return self.transitions.shape[0]

    @property
    def start(self) -> int:
        return int(self.starts[0])


def terminal_dfa(terminal: TerminalDef) -> ByteDFA:
    """The byte DFA of a terminal's language, its units spelled out."""
    dfa = _read(terminal)
    return dfa if terminal.units is None else expand_unit_loops(dfa, terminal.units)[0]


def _read(terminal: TerminalDef) -> ByteDFA:
    """The terminal's ``dfa``, or its regex's (units read as placeholders)."""
    if terminal.token is not None and terminal.dfa is None:
        raise GrammarError(f"{terminal.token} is read only against a vocabulary (compile the grammar)")
    return regex_to_dfa(terminal.regex) if terminal.dfa is None else terminal.dfa


def without_empty_terminals(grammar: Grammar) -> tuple[Grammar, dict[str, ByteDFA]]:
    """Rewrite the grammar so that no terminal matches the empty string; compile the terminals.

    A terminal T whose language holds the empty string becomes ``T_opt ::= ε | T`` with T
    matching only non-empty strings; a terminal matching only the empty string disappears.

    Returns:
      The rewritten grammar and the byte DFA of each remaining terminal (reading its ``units``'
      placeholder where it has them).
    """
    dfas, optional_rules, terminals, replace = {}, [], [], {}
    for t in grammar.terminals:
        dfa = _read(t)
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
    return dataclasses.replace(grammar, rules=tuple(rules + optional_rules), terminals=tuple(terminals)), dfas


def _without_empty_string(dfa: ByteDFA) -> ByteDFA:
    """The same language minus the empty string: a non-accepting copy of the start state."""
    fresh = dfa.num_states
    transitions = np.vstack([dfa.transitions, dfa.transitions[dfa.start]])
    accepting = np.append(dfa.accepting, False)
    if not (transitions[fresh] != DEAD).any():
        return ByteDFA(transitions, accepting, DEAD)
    return ByteDFA(transitions, accepting, fresh)


def build_lexer(
    terminals: tuple[TerminalDef, ...],
    dfas: dict[str, ByteDFA],
    begins: np.ndarray | None = None,
    excluded: tuple[tuple, ...] | None = None,
) -> Lexer:
    """The product of the terminal DFAs, restricted to the tuples reachable from its starts
    (`automaton.product`).

    Args:
      terminals, dfas: the terminals and their DFAs.
      begins: bool[K, n], the terminals each start state may begin (None: one start, all of
        them). Starts that begin only the terminals the grammar lets follow the one just cut
        keep terminals that never meet in one place from running side by side.
      excluded: per start, the code point ranges its text may not begin with (a cut terminal's
        `TerminalDef.not_followed_by`; () or None: none).
    """
    names = tuple(t.name for t in terminals)
    begins = np.ones((1, len(names)), bool) if begins is None else begins
    excluded = excluded or ((),) * len(begins)
    classes = sorted({c for c in excluded if c})
    firsts = [_first_character_outside(c) for c in classes]
    ordered, restricted = [], []
    for name in names:
        dfa, first = _with_first_characters(dfas[name], firsts)
        ordered.append(dfa)
        restricted.append([dfa.start, *first])
    which = [classes.index(c) + 1 if c else 0 for c in excluded]
    starts = np.where(begins, np.array(restricted)[:, which].T, DEAD)
    transitions, local = product(ordered, starts, "the lexer (the terminals' product automaton)")
    offsets = np.cumsum([0, *(d.num_states for d in ordered[:-1])])
    accepting = np.concatenate([d.accepting for d in ordered])
    return Lexer(
        terminals=names,
        transitions=transitions,
        ends=accepting[local + offsets] & (local != DEAD),
        alive=local != DEAD,
        starts=np.arange(1, 1 + len(begins), dtype=np.int32),
    )


def begins_outside(dfa: ByteDFA, ranges: tuple) -> bool:
    """Whether some string of ``dfa`` begins with a character outside the code point ``ranges``."""
    restricted, (start,) = _with_first_characters(dfa, [_first_character_outside(ranges)])
    return trimmed(restricted.transitions, restricted.accepting, start=start, byte_class=np.arange(256)).start != DEAD


def _first_character_outside(ranges: tuple) -> ByteDFA:
    """The DFA of one character outside the code point ``ranges``."""
    return rx.to_dfa(rx.Chars(tuple(utf8.normalise(utf8.complement(list(ranges))))))


def _with_first_characters(dfa: ByteDFA, firsts: list[ByteDFA]) -> tuple[ByteDFA, list[int]]:
    """``dfa`` with one more start per automaton of ``firsts`` (one character each), reading
    first a character it accepts; once that is read, the states are ``dfa``'s own. Returns the
    DFA and the new starts."""
    if not firsts:
        return dfa, []
    pairs, rows, starts = [], [dfa.transitions], []  # the new states: (state of dfa, of the first character)
    for first in firsts:
        ids: dict[tuple[int, int], int] = {}

        def state(pair, ids=ids):
            if pair not in ids:
                ids[pair] = dfa.num_states + len(pairs)
                pairs.append(pair)
            return ids[pair]

        starts.append(state((dfa.start, first.start)))
        while len(rows) - 1 < len(pairs):  # pairs grows while it is read
            q, f = pairs[len(rows) - 1]
            q_next, f_next = dfa.transitions[q], first.transitions[f]
            row = np.where(first.accepting[f_next], q_next, DEAD).astype(np.int32)
            for b in np.flatnonzero((q_next != DEAD) & (f_next != DEAD) & ~first.accepting[f_next]):
                row[b] = state((int(q_next[b]), int(f_next[b])))  # inside the first character
            rows.append(row)
    transitions = np.vstack(rows)
    accepting = np.append(dfa.accepting, np.zeros(len(transitions) - dfa.num_states, bool))
    return ByteDFA(transitions, accepting, dfa.start), starts
