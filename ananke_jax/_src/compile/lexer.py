"""The lexer of the context-free engine: all terminal DFAs run side by side (numpy, host).

A lexer state is the tuple of every terminal's DFA state, so it knows which terminals the bytes
read since the last cut can still become (``alive``) and which they already are (``ends``). No
priorities: where a terminal ends, the engine may cut there or read on, and keeps both.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, row_groups
from ananke_jax._src.compile.budget import charge_states, check_time
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
    if terminal.dfa is None:
        return regex_to_dfa(terminal.regex)
    if terminal.units is None:
        return terminal.dfa
    return expand_unit_loops(terminal.dfa, terminal.units)[0]


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
    return dataclasses.replace(grammar, rules=tuple(rules + optional_rules), terminals=tuple(terminals)), dfas


def _without_empty_string(dfa: ByteDFA) -> ByteDFA:
    """The same language minus the empty string: a non-accepting copy of the start state."""
    fresh = dfa.num_states
    transitions = np.vstack([dfa.transitions, dfa.transitions[dfa.start]])
    accepting = np.append(dfa.accepting, False)
    if not (transitions[fresh] != DEAD).any():
        return ByteDFA(transitions, accepting, DEAD)
    return ByteDFA(transitions, accepting, fresh)


_CHUNK_ENTRIES = 1 << 22  # tuple entries (int32) of one lookup's successors: its memory, and the time between deadline checks


def _reachable(table: np.ndarray, offset: np.ndarray, sources: np.ndarray) -> np.ndarray:
    """int64[R], sorted: the stacked states reachable from ``sources`` in the stacked terminal
    DFAs (``table`` int32[S, C] of local targets, ``offset`` int64[S] of each state's DFA)."""
    reached = np.zeros(len(table), bool)
    frontier = np.unique(sources)
    while len(frontier):
        reached[frontier] = True
        targets = table[frontier]
        following = np.unique((targets + offset[frontier, None])[targets != DEAD])
        frontier = following[~reached[following]]
    return np.flatnonzero(reached)


def build_lexer(terminals: tuple[TerminalDef, ...], dfas: dict[str, ByteDFA], begins: np.ndarray | None = None) -> Lexer:
    """The product of the terminal DFAs, restricted to the tuples reachable from its starts.

    Breadth first, one level at a time, over the byte classes that all terminals share: only the
    distinct tuples of a level are looked up one by one. A tuple with one live terminal is that
    terminal reading on alone: the states of that terminal reachable from such tuples are added
    as one block after the search (a length-bounded string's chain took a level a byte).

    Args:
      terminals, dfas: the terminals and their DFAs.
      begins: bool[K, n], the terminals each start state may begin (None: one start, all of
        them). Starts that begin only the terminals the grammar lets follow the one just cut
        keep terminals that never meet in one place from running side by side.
    """
    names = tuple(t.name for t in terminals)
    begins = np.ones((1, len(names)), bool) if begins is None else begins
    sizes = np.array([dfas[n].num_states for n in names])
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    terminal_of = np.repeat(np.arange(len(names)), sizes)  # of each stacked state
    stacked = np.vstack([dfas[n].transitions for n in names])  # all terminals' rows, stacked
    byte_class, first_byte = byte_classes(stacked)
    table = stacked[:, first_byte].astype(np.int32)
    accepting = np.concatenate([dfas[n].accepting for n in names])
    local_starts = np.array([dfas[n].start for n in names])
    # Starts are keyed apart from their tuples: reading back into a start tuple is not a cut.
    order = [np.zeros((1, len(names)), np.int32), np.where(begins, local_starts, DEAD).astype(np.int32)]
    ids = {order[0][0].tobytes(): 0}
    rows, frontier, first, alone = [], order[1], 1, [np.zeros(0, np.int64)]
    chunk = max(1, _CHUNK_ENTRIES // (table.shape[1] * len(names)))  # frontier tuples looked up at once
    while len(frontier):
        following = first + len(frontier)  # the id of the next new tuple
        found_tuples = []
        for lo in range(0, len(frontier), chunk):
            check_time()
            successors = table[frontier[lo : lo + chunk] + offsets].transpose(0, 2, 1).reshape(-1, len(names))
            inverse = row_groups(successors)
            distinct = np.empty_like(successors[: int(inverse.max()) + 1])
            distinct[inverse] = successors
            live = distinct != DEAD
            solo = np.flatnonzero(live.sum(axis=1) == 1)
            found, new = np.empty(len(distinct), np.int64), []
            alone.append((distinct + offsets)[solo, np.argmax(live[solo], axis=1)])
            found[solo] = -1 - alone[-1]  # a stacked state's block id, given below
            for j in np.flatnonzero(live.sum(axis=1) != 1).tolist():
                key = distinct[j].tobytes()
                if key not in ids:
                    ids[key] = following
                    following += 1
                    new.append(j)
                found[j] = ids[key]
            rows.append(found[inverse].reshape(-1, len(first_byte)))
            found_tuples.append(distinct[new])
            charge_states(following, "the lexer (the terminals' product automaton)")
        first += len(frontier)
        frontier = np.concatenate(found_tuples)
        order.append(frontier)
    # The block: the stacked states reachable from those reached alone, numbered after the rest.
    block = _reachable(table, offsets[terminal_of], np.concatenate(alone))
    charge_states(first + len(block), "the lexer (the terminals' product automaton)")
    block_id = np.zeros(len(table), np.int64)
    block_id[block] = first + np.arange(len(block))
    block_rows = np.where(table[block] != DEAD, block_id[table[block] + offsets[terminal_of[block], None]], DEAD)
    transitions = np.concatenate([np.zeros((1, len(first_byte)), np.int64), *rows, block_rows])
    in_block = transitions < 0
    transitions[in_block] = block_id[-1 - transitions[in_block]]
    block_tuples = np.zeros((len(block), len(names)), np.int32)
    block_tuples[np.arange(len(block)), terminal_of[block]] = block - offsets[terminal_of[block]]
    local = np.concatenate([*order, block_tuples])
    states = local + offsets
    return Lexer(
        terminals=names,
        transitions=transitions[:, byte_class].astype(np.int32),
        ends=accepting[states] & (local != DEAD),
        alive=local != DEAD,
        starts=np.arange(1, 1 + len(begins), dtype=np.int32),
    )
