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
* A cut happens only before a byte that no terminal of the context can read on with
  (`cfg._walk_outcomes`), and after an ignored terminal lexing resumes in the same context.
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np

from ananke_jax._src.compile.arrays import stack_padded
from ananke_jax._src.compile.automaton import DEAD, ByteDFA, row_groups
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
      lexer: the contexts' lexers side by side; ``starts[k]`` is context k's, the initial one first.
      column_terminal: int32[T], the lexer terminal of each LR column (-1 for the end of input).
      cut_columns: int32[Q, E], the LR columns a cut in each lexer state may emit: the refined
        columns of its winning terminal, or -1 for an ignored one; padded with ``NO_CUT``.
      column_start: int64[T + 1], the lexer start after LR column a (at a + 1; at 0 the initial).
      resume: int64[Q], the start where lexing goes on after an ignored terminal cut in each state.
      follow: bool[T, T], which refined column may come right after which.
    """

    lr: LRTables
    lexer: Lexer
    column_terminal: np.ndarray
    cut_columns: np.ndarray
    column_start: np.ndarray
    resume: np.ndarray
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
    _warn_where_lark_backs_up(lexer, winner, names, ignored, context_of_lexer_state, refined_terminal, refined_context)
    # States alike but for their context merge, unless an ignored terminal ends there.
    signature = np.column_stack([lexer.ends, lexer.alive, cut_columns, np.where(ignored[winner] & (winner >= 0), resume, -1)])
    signature = np.column_stack([signature, np.isin(np.arange(lexer.num_states), lexer.starts)])
    merged = _coarsest_partition(lexer.transitions, signature)
    keep = np.unique(merged, return_index=True)[1]  # one state of each block, block ids in order
    return ContextualLexing(
        lr=lr,
        lexer=Lexer(
            lexer.terminals,
            merged[lexer.transitions[keep]].astype(np.int32),
            lexer.ends[keep],
            lexer.alive[keep],
            merged[lexer.starts].astype(np.int32),
        ),
        column_terminal=np.append(refined_terminal, -1).astype(np.int32),
        cut_columns=cut_columns[keep],
        column_start=merged[np.concatenate([[lexer.starts[0]], lexer.starts[refined_context]])].astype(np.int64),
        resume=merged[resume[keep]],
        follow=follow[np.ix_(refined_base, refined_base)],
    )


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


def _warn_where_lark_backs_up(lexer, winner, names, ignored, context_of_state, refined_terminal, refined_context) -> None:
    """Warn where the lexer reads on past a complete lexeme into bytes that may end nowhere,
    while the byte it read could also begin the next lexeme: Lark backs up to the shorter match
    there, this lexer does not (a lexeme `WS_INLINE` followed by a `/` that might begin
    `COMMENT`, as in Lark's own grammar, refuses a `REGEXP` after the space)."""
    ends = lexer.ends.any(axis=1)
    q, byte = np.nonzero(ends[:, None] & (lexer.transitions != DEAD) & ~ends[lexer.transitions])
    begins = lexer.transitions[lexer.starts] != DEAD  # bool[K, 256]: a byte that begins some lexeme
    after = np.zeros((len(names), len(lexer.starts)), bool)  # the contexts lexing goes on in after a terminal
    after[refined_terminal, refined_context] = True
    after = np.where(ignored[winner[q], None], np.eye(len(lexer.starts), dtype=bool)[context_of_state[q]], after[winner[q]])
    backs_up = (after & begins[:, byte].T).any(axis=1)
    cases = sorted(
        {
            (
                names[winner[a]],
                chr(b) if 32 < b < 127 else f"\\x{b:02x}",
                " or ".join(names[i] for i in np.flatnonzero(lexer.alive[lexer.transitions[a, b]])),
            )
            for a, b in zip(q[backs_up], byte[backs_up])
        }
    )
    if cases:
        shown = "; ".join(f"after {x}, {b!r} reads on toward {t}" for x, b, t in cases[:3])
        warnings.warn(
            f"lexer='lark' does not back up to a shorter lexeme where Lark would: {shown}"
            f"{' and more' if len(cases) > 3 else ''}. A text where that byte begins the next lexeme instead is refused",
            stacklevel=5,
        )


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
