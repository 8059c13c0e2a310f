"""Padding compiled grammars to common shapes and stacking them into a bank for `jax.vmap`.

Padding adds unreachable states, unused classes, empty mask rows and (for the pushdown engine)
unused LR states, rules, outcomes, trie nodes and sets, so a padded grammar allows exactly what
the original does; grammars of equal padded shapes share every compiled step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.cfg import EMPTY_SET
from ananke_jax._src.compile.outcome_trie import NO_CHUNK, chunk_layout
from ananke_jax._src.engines.pushdown import STATIC_FIELDS, PushdownGrammar
from ananke_jax._src.engines.regular import RegularGrammar


def pad_grammar(cg: RegularGrammar, *, states: int, classes: int, rows: int) -> RegularGrammar:
    """Pad ``cg``'s tables to ``states`` states, ``classes`` token classes and ``rows`` mask rows.

    Raises:
      ValueError: a requested size is smaller than the grammar's.
    """
    have = {"states": cg.num_states, "classes": cg.num_classes, "rows": cg.mask_rows.shape[0]}
    want = {"states": states, "classes": classes, "rows": rows}
    for name, size in want.items():
        if size < have[name]:
            raise ValueError(f"cannot pad a grammar with {have[name]} {name} to {size}")
    extra_states, extra_classes = states - cg.num_states, classes - cg.num_classes
    return RegularGrammar(
        mask_rows=jnp.pad(cg.mask_rows, ((0, rows - have["rows"]), (0, 0))),
        row_of_state=jnp.pad(cg.row_of_state, (0, extra_states)),  # unreachable: any row will do
        class_of_token=cg.class_of_token,
        next_state=jnp.pad(cg.next_state, ((0, extra_states), (0, extra_classes))),  # to the dead state
        accepting=jnp.pad(cg.accepting, (0, extra_states)),
        start_state=cg.start_state,
        fallback_token=cg.fallback_token,
        vocab_size=cg.vocab_size,
        logits_width=cg.logits_width,
    )


# Each padded table of `PushdownGrammar`: its axes (named, shared between tables) and the fill of new
# entries. Fills make new entries inert: -1 is "no outcome / node / member", EMPTY_SET and 0 are
# the empty outcome set and the error action. The trie's node axis "N" and chunks are laid out
# again (`_pad_trie`), since the nodes per chunk (``lanes``) become the bank's largest.
_CFG_AXES = {
    "action_kind": (("S", "T", "A"), 0),
    "action_arg": (("S", "T", "A"), 0),
    "goto": (("S", "G"), 0),
    "rule_lhs": (("R",), 0),
    "rule_length": (("R",), 0),
    "lexer_row": (("Q",), 0),
    "outcome_start": (("Q1",), 0),  # (a padded state's run is empty, or reversed: it has no outcome)
    "state_outcomes": (("F",), -1),
    "outcome_terminals": (("O", "M"), 0),
    "outcome_length": (("O",), 0),
    "outcome_node": (("D", "P"), -1),
    "outcome_lookahead": (("D", "P", "L"), -1),
    "outcome_free": (("D", "P"), False),
    "outcome_lexer": (("F",), -1),
    "complete_node": (("D", "E"), -1),
    "set_members": (("NS", "Z"), -1),
    "class_set": (("D", "C"), EMPTY_SET),
    "state_sets": (("D", "NSQ"), EMPTY_SET),
    "mask_rows": (("ROWS", "W"), 0),
    "dense_row": (("D", "B"), 0),
    "dense_set": (("D", "B"), 0),
    "sparse_start": (("D1",), 0),
    "sparse_token": (("SF",), 0),
    "sparse_set": (("SF",), 0),
}


_TRIE_LAYOUT = ("node_parent", "node_column", "chunk_start", "num_chunks", "node_chunk")  # by row, laid out per bank


def per_lexer_state(cg: PushdownGrammar) -> dict[str, np.ndarray]:
    """``cg``'s tables on the host, those indexed by row (`PushdownGrammar.lexer_row`) gathered
    to one row per lexer state, and each state's run of outcomes made a row of P (padded with
    -1); int16 tables widened to int32 (ids are shifted on them)."""
    rows = np.asarray(cg.lexer_row)
    sparse = ("sparse_token", "sparse_set")
    by_row = {field for field, (axes, _) in _CFG_AXES.items() if axes[0] == "D"} | set(_TRIE_LAYOUT) | set(sparse)
    host = {f.name: _widened(np.asarray(getattr(cg, f.name))) for f in dataclasses.fields(cg) if f.name not in STATIC_FIELDS}
    start, width = host.pop("outcome_start"), cg.outcome_node.shape[1]
    host.update({name: rows_of_runs(start, host[name], width, -1) for name in ("state_outcomes", "outcome_lexer")})
    start = host.pop("sparse_start")
    host.update({name: rows_of_runs(start, host[name], cg.sparse_width, 0) for name in sparse})
    return {name: x[rows] if name in by_row else x for name, x in host.items()}


def rows_of_runs(start: np.ndarray, runs: np.ndarray, width: int, fill: int) -> np.ndarray:
    """int32[N, ``width``]: runs (row i's from ``start[i]`` to ``start[i + 1]``) as rows padded
    with ``fill``."""
    counts = np.diff(start)
    rows = np.full((len(counts), width), fill, np.int32)
    rows[np.repeat(np.arange(len(counts)), counts), np.arange(start[-1]) - np.repeat(start[:-1], counts)] = runs[: start[-1]]
    return rows


def _widened(x: np.ndarray) -> np.ndarray:
    return x.astype(np.int32) if x.dtype == np.int16 else x


def _axis_sizes(cg: PushdownGrammar) -> dict[str, int]:
    sizes = {}
    for field, (axes, _) in _CFG_AXES.items():
        sizes.update(zip(axes, getattr(cg, field).shape))
    return sizes


def trie_parents(cg: PushdownGrammar) -> list[np.ndarray]:
    """The trie nodes' parents of each row of ``cg``'s tables (`PushdownGrammar.lexer_row`). The
    last node (breadth first) is a leaf, and every leaf ends an outcome, a lookahead or a
    completion, so the highest node they name counts them."""
    named = np.concatenate(
        [np.asarray(cg.outcome_node), np.asarray(cg.outcome_lookahead).reshape(cg.outcome_node.shape[0], -1), np.asarray(cg.complete_node)],
        axis=1,
    )
    counts = named.max(axis=1, initial=-1) + 1
    return [row[:n] for row, n in zip(np.asarray(cg.node_parent), counts)]


def _pad_to(x, shape, fill) -> jax.Array:
    x = np.asarray(x)
    return jnp.asarray(np.pad(x, [(0, want - have) for have, want in zip(x.shape, shape)], constant_values=fill))


def _pad_cfgs(grammars: Sequence[PushdownGrammar]) -> list[PushdownGrammar]:
    """Pushdown grammars padded to common shapes and bounds: the bank's largest stack depth,
    configuration budget and trie lanes (larger bounds only refuse less)."""
    each = [_axis_sizes(g) for g in grammars]
    sizes = {axis: max(s[axis] for s in each) for axis in each[0]}
    bounds = {name: max(getattr(g, name) for g in grammars) for name in ("stack_depth", "max_configs", "lanes", "sparse_width")}
    # (every row's window of the bank's Z sparse entries stays inside its grammar's padded table)
    sizes["SF"] = max(int(g.sparse_start[-1]) for g in grammars) + bounds["sparse_width"]
    parents = [trie_parents(g) for g in grammars]
    nodes = max(len(p) for ps in parents for p in ps) + bounds["lanes"]
    layouts = [chunk_layout(ps, bounds["lanes"], nodes) for ps in parents]
    chunks = max(start.shape[1] for start, _, _ in layouts)
    padded = []
    for g, (start, count, node_chunk) in zip(grammars, layouts):
        tables = {field: _pad_to(getattr(g, field), [sizes[a] for a in axes], fill) for field, (axes, fill) in _CFG_AXES.items()}
        padded.append(
            dataclasses.replace(
                g,
                **tables,
                **bounds,
                node_parent=_pad_to(g.node_parent, (sizes["D"], nodes), -1),
                node_column=_pad_to(g.node_column, (sizes["D"], nodes), 0),
                chunk_start=_pad_to(start, (sizes["D"], chunks), 0),
                num_chunks=_pad_to(count, (sizes["D"],), 0),
                node_chunk=_pad_to(node_chunk, (sizes["D"], nodes), NO_CHUNK),
            )
        )
    return padded


def stack_grammars(grammars: Sequence[RegularGrammar] | Sequence[PushdownGrammar]):
    """Pad grammars of one engine over one vocabulary to common shapes and stack them on a
    leading axis.

    The result is a bank: ``jax.vmap(fn, in_axes=(0, 0, ...))(bank, states, ...)`` runs each
    request against its own grammar, and `ananke_jax.generate` takes it with a ``grammar_index``
    per row. A bank of pushdown grammars runs them all at its largest stack depth and
    configuration budget.

    Raises:
      ValueError: no grammars, grammars of both engines, or grammars compiled for different
        vocabularies.
    """
    if not grammars:
        raise ValueError("stack_grammars needs at least one grammar")
    widths = {(g.vocab_size, g.logits_width) for g in grammars}
    if len(widths) > 1:
        raise ValueError(f"grammars were compiled for different vocabularies (vocab_size, logits_width): {sorted(widths)}")
    kinds = {type(g) for g in grammars}
    if kinds == {PushdownGrammar}:
        padded = _pad_cfgs(grammars)
    elif kinds == {RegularGrammar}:
        states = max(g.num_states for g in grammars)
        classes = max(g.num_classes for g in grammars)
        rows = max(g.mask_rows.shape[0] for g in grammars)
        padded = [pad_grammar(g, states=states, classes=classes, rows=rows) for g in grammars]
    else:
        names = sorted(t.__name__ for t in kinds)
        raise ValueError(
            f"a bank holds grammars of one engine, got {names}: compile the regular ones for the pushdown "
            "engine too (compile_json_schema(..., engine='pushdown'), or a Lark/GBNF grammar)"
        )
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *padded)
