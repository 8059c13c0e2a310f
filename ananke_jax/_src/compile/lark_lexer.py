"""Lark's lexer rules for the pushdown engine's tables, ``lexer="lark"`` (numpy, host).

Lark's LALR parser lexes contextually and greedily: after each terminal, only the terminals that
the parser's state has an action for (and the ignored ones) are matched; a lexeme runs on while
one of them can still continue it, and of the terminals matching it the one of highest
`TerminalDef.precedence` is taken. Here:

* a *context* is a distinct set of terminals that some LR state has an action for. Each context
  has its own product lexer (`build_lexer`), all side by side in one state space; a lexer state
  ends only its winning terminal, and is alive for the terminals it may still end as.
* The LR columns are refined by the context that follows the terminal: column ``(X, c)`` keeps
  the shifts of X into states of context c and every reduction before X. An outcome that cuts X
  and lexes on in context c names ``(X, c)``, so it parses only where the parser really is in
  context c after X. The device engine runs these tables unchanged.
* A lexeme is the longest text from its start that some terminal of the context matches, as
  a flex lexer reads it: the lexer may cut where a terminal ends even when the next byte reads
  on, and then keeps the cut lexeme's continuation as a *shadow*. A shadow that reaches the end
  of a terminal shows that the cut was not the longest match, and the reading dies; one that
  dies is forgotten. A lexer state here is a (state, shadows) pair, and its cut targets say
  where each cut goes before each byte. After an ignored terminal lexing resumes in the same
  context.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ananke_jax._src.compile.arrays import stack_padded
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, byte_classes, row_groups
from ananke_jax._src.compile.budget import charge_states, check_time
from ananke_jax._src.compile.lexer import Lexer, build_lexer
from ananke_jax._src.compile.lr import LRTables
from ananke_jax._src.engines.lr import ERROR, SHIFT
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.ir import Grammar

NO_CUT = -2  # padding of `ContextualLexing.cut_columns` (-1 is an ignored terminal's cut)


@dataclasses.dataclass(frozen=True)
class ContextualLexing:
    """The lexer and LR tables of a grammar read with ``lexer="lark"``.

    Attributes:
      lr: the LR tables, columns refined by the context after the terminal (the last column is
        still the end of input).
      lexer: the contexts' lexers side by side and minimised, over (state, shadows) pairs;
        ``starts[k]`` is context k's, the initial one first.
      column_terminal: int32[T], the lexer terminal of each LR column (-1 for the end of input).
      cut_columns: int32[Q, E], the LR columns a cut in each lexer state may emit: the refined
        columns of its winning terminal, or -1 for an ignored one; padded with ``NO_CUT``.
      cut_targets: int32[Q, E, 256], the lexer state after cut e before each byte (DEAD where
        that cut is not allowed there).
      follow: bool[T, T], which refined column may come right after which.
    """

    lr: LRTables
    lexer: Lexer
    column_terminal: np.ndarray
    cut_columns: np.ndarray
    cut_targets: np.ndarray
    follow: np.ndarray


def contextual_lexing(grammar: Grammar, dfas: dict[str, ByteDFA], lr: LRTables, follow: np.ndarray) -> ContextualLexing:
    """Lark's contextual longest-match lexer for ``grammar`` (no terminal matching the empty
    string) with its LR tables ``lr`` and their terminal ``follow`` relation (bool[T, T])."""
    if any(t.units is not None for t in grammar.terminals):
        raise GrammarError("lexer='lark' takes terminals given by regexes only")
    names = [t.name for t in grammar.terminals]
    ignored = np.array([n in grammar.ignore for n in names])
    lexer_terminal = np.array([names.index(n) for n in lr.terminals[:-1]], np.int64)
    accepts = (lr.action_kind[:, :-1] != ERROR).any(axis=2)  # bool[S, T]: Lark's contexts
    contexts, context_of_state = np.unique(accepts, axis=0, return_inverse=True)
    context_of_state = context_of_state.reshape(-1)
    initial = context_of_state[lr.start_state]
    swap = np.arange(len(contexts))  # the initial state's context first: a permutation, its own inverse
    swap[[0, initial]] = swap[[initial, 0]]
    contexts, context_of_state = contexts[swap], swap[context_of_state]

    lr, refined_base, refined_context = _refined_tables(lr, context_of_state)
    begins = ignored[None, :].repeat(len(contexts), axis=0)
    begins[:, lexer_terminal] |= contexts
    lexer, context_of_lexer_state = _side_by_side([build_lexer(grammar.terminals, dfas, row[None]) for row in begins])
    precedence = np.array([t.precedence for t in grammar.terminals])
    lexer = _longest_match(lexer, precedence)

    refined_terminal = lexer_terminal[refined_base]
    emitted = [[-1] if ignored[i] else np.flatnonzero(refined_terminal == i) for i in range(len(names))]
    winner = np.where(lexer.ends.any(axis=1), lexer.ends.argmax(axis=1), -1)
    cut_columns = stack_padded([emitted[w] if w >= 0 else [] for w in winner], NO_CUT, np.int32)
    resume = lexer.starts[context_of_lexer_state].astype(np.int64)
    # States alike but for their context merge, unless an ignored terminal ends there.
    signature = np.column_stack([lexer.ends, lexer.alive, cut_columns, np.where(ignored[winner] & (winner >= 0), resume, -1)])
    signature = np.column_stack([signature, np.isin(np.arange(lexer.num_states), lexer.starts)])
    merged = _coarsest_partition(lexer.transitions, signature)
    keep = np.unique(merged, return_index=True)[1]  # one state of each block, block ids in order
    # Where each cut goes: the start of the context after its LR column, or of the state's own
    # context after an ignored terminal.
    column_start = merged[lexer.starts[refined_context]]
    start_after = np.where(cut_columns == -1, merged[resume][:, None], column_start[np.maximum(cut_columns, 0)])
    start_after = np.where(cut_columns == NO_CUT, DEAD, start_after)[keep]
    base = Lexer(
        lexer.terminals, merged[lexer.transitions[keep]], lexer.ends[keep], lexer.alive[keep], merged[lexer.starts].astype(np.int32)
    )
    lexer, cut_columns, cut_targets = _with_shadows(base, cut_columns[keep], start_after)
    return ContextualLexing(
        lr=lr,
        lexer=lexer,
        column_terminal=np.append(refined_terminal, -1).astype(np.int32),
        cut_columns=cut_columns,
        cut_targets=cut_targets,
        follow=follow[np.ix_(refined_base, refined_base)],
    )


def _with_shadows(base: Lexer, cut_columns: np.ndarray, start_after: np.ndarray) -> tuple[Lexer, np.ndarray, np.ndarray]:
    """The lexer over (state, shadows) pairs reachable from ``base``'s states without shadows
    (which keep their numbers), its cut columns, and its cut targets int32[Q, E, 256].

    Before byte b, from (q, S): every shadow reads b, and the pair dies if one of them then ends
    a terminal (an earlier cut was not the longest match); shadows that die are dropped. Reading
    on goes to (q.b, S.b); cut e (q ends a terminal, `start_after` [Q, E] is where lexing goes
    on after it) is allowed unless q.b ends a terminal itself, and goes to (start.b, S.b + q.b).
    """
    ends = base.ends.any(axis=1)
    byte_class, first_byte = byte_classes(base.transitions)
    step = base.transitions[:, first_byte]  # [Q, C]: bytes of a class act alike on every state
    num_classes, slots = step.shape[1], cut_columns.shape[1]
    pairs = {(q, ()): q for q in range(base.num_states)}
    order = [(q, ()) for q in range(base.num_states)]

    def intern(q: int, shadows: tuple[int, ...]) -> int:
        if q == DEAD:
            return DEAD
        key = (q, shadows)
        if key not in pairs:
            pairs[key] = len(order)
            order.append(key)
            charge_states(len(order), "the lexer (states with the shadows of earlier cuts)")
        return pairs[key]

    reads, cuts = [], []
    for q, shadows in order:  # grows while it is walked
        check_time()
        moved = step[list(shadows)] if shadows else np.zeros((0, num_classes), np.int64)
        alive = ~ends[moved].any(axis=0)  # no shadow ends a terminal
        after = step[q]
        cut = np.zeros((slots, num_classes), np.int64)
        cut_allowed = alive & ~ends[after]
        targets = step[start_after[q]]  # [E, C]
        if not shadows:  # most states: the new shadow is q.b alone, or none
            read = np.where(alive, after, DEAD)
            for c in np.flatnonzero(cut_allowed):
                kept = () if after[c] == DEAD else (int(after[c]),)
                cut[:, c] = [intern(int(t), kept) for t in targets[:, c]]
        else:
            read = np.zeros(num_classes, np.int64)
            for c in np.flatnonzero(alive):
                kept = tuple(sorted({int(s) for s in moved[:, c]} - {DEAD}))
                read[c] = intern(int(after[c]), kept)
                if cut_allowed[c]:
                    kept = tuple(sorted(set(kept) | ({int(after[c])} - {DEAD})))
                    cut[:, c] = [intern(int(t), kept) for t in targets[:, c]]
        cut[cut_columns[q] == NO_CUT] = DEAD
        reads.append(read)
        cuts.append(cut)
    state = np.array([q for q, _ in order])
    lexer = Lexer(base.terminals, np.stack(reads)[:, byte_class].astype(np.int32), base.ends[state], base.alive[state], base.starts)
    return lexer, cut_columns[state], np.stack(cuts)[:, :, byte_class].astype(np.int32)


def _coarsest_partition(transitions: np.ndarray, signature: np.ndarray) -> np.ndarray:
    """int64[Q]: the block of each state in the coarsest partition that separates different
    ``signature`` rows and is stable under ``transitions`` (int[Q, 256]; Moore's refinement).
    Blocks are numbered in order of their first state, so the dead state 0 stays 0."""
    block = row_groups(signature)
    while True:
        refined = row_groups(np.column_stack([block, block[transitions]]))
        if refined.max() == block.max():
            break
        block = refined
    _, first, numbered = np.unique(block, return_index=True, return_inverse=True)
    return np.argsort(np.argsort(first))[numbered.reshape(-1)]


def _refined_tables(lr: LRTables, context_of_state: np.ndarray) -> tuple[LRTables, np.ndarray, np.ndarray]:
    """``lr`` with each terminal column split by the context of its shifts' targets; the refined
    columns' base column and context, int64[T'] each."""
    kind, arg = lr.action_kind[:, :-1], lr.action_arg[:, :-1]
    shift = kind == SHIFT
    target = np.where(shift, context_of_state[np.where(shift, arg, 0)], -1)
    base, context = [], []
    for j in range(kind.shape[1]):
        for c in np.unique(target[:, j][shift[:, j]]):
            base.append(j)
            context.append(int(c))
    base, context = np.array(base, np.int64), np.array(context, np.int64)
    keep = ~shift[:, base] | (target[:, base] == context[None, :, None])  # [S, T', A]
    refined_kind = np.where(keep, kind[:, base], ERROR)
    # The kept actions first, in their order, the ERROR padding after them.
    at = np.argsort(refined_kind == ERROR, axis=2, kind="stable")
    refined_kind = np.take_along_axis(refined_kind, at, axis=2)
    refined_arg = np.take_along_axis(np.where(keep, arg[:, base], 0), at, axis=2)
    tables = dataclasses.replace(
        lr,
        terminals=tuple(lr.terminals[j] for j in base) + lr.terminals[-1:],
        action_kind=np.concatenate([refined_kind, lr.action_kind[:, -1:]], axis=1).astype(np.int8),
        action_arg=np.concatenate([refined_arg, lr.action_arg[:, -1:]], axis=1).astype(np.int32),
    )
    return tables, base, context


def _side_by_side(lexers: list[Lexer]) -> tuple[Lexer, np.ndarray]:
    """One lexer holding ``lexers``' states apart (their dead states merged into state 0), and
    the index of the lexer each state comes from, int64[Q]."""
    transitions, ends, alive, starts, owner = [np.zeros((1, 256), np.int32)], [lexers[0].ends[:1]], [lexers[0].alive[:1]], [], [0]
    offset = 1
    for k, lexer in enumerate(lexers):
        own = lexer.transitions[1:]
        transitions.append(np.where(own == DEAD, DEAD, own - 1 + offset).astype(np.int32))
        ends.append(lexer.ends[1:])
        alive.append(lexer.alive[1:])
        starts.append(lexer.start - 1 + offset)
        owner += [k] * len(own)
        offset += len(own)
    combined = Lexer(
        lexers[0].terminals, np.concatenate(transitions), np.concatenate(ends), np.concatenate(alive), np.array(starts, np.int32)
    )
    return combined, np.array(owner, np.int64)


def _longest_match(lexer: Lexer, precedence: np.ndarray) -> Lexer:
    """``lexer`` with each state ending only its terminal of highest ``precedence`` (int[n]), and
    alive for the terminals that some state reachable from it ends that way."""
    rank = np.where(lexer.ends, precedence[None, :], np.iinfo(np.int64).min)
    ends = np.zeros_like(lexer.ends)
    has_end = lexer.ends.any(axis=1)
    ends[np.flatnonzero(has_end), rank.argmax(axis=1)[has_end]] = True
    bits = np.packbits(ends, axis=1, bitorder="little")
    successors = np.unique(lexer.transitions, axis=1)
    while True:
        grown = bits | np.bitwise_or.reduce(bits[successors], axis=1)
        if np.array_equal(grown, bits):
            break
        bits = grown
    alive = np.unpackbits(bits, axis=1, count=ends.shape[1], bitorder="little").astype(bool)
    alive[DEAD] = False
    return dataclasses.replace(lexer, ends=ends, alive=alive)
