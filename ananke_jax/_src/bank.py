"""Padding compiled grammars to common shapes and stacking them into a bank for `jax.vmap`.

Padding adds unreachable states, unused classes and empty mask rows, so a padded grammar allows
exactly what the original does; grammars of equal padded shapes share every compiled step.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from ananke_jax._src.compiled import CompiledGrammar


def pad_grammar(cg: CompiledGrammar, *, states: int, classes: int, rows: int) -> CompiledGrammar:
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
    return CompiledGrammar(
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


def stack_grammars(grammars: Sequence[CompiledGrammar]) -> CompiledGrammar:
    """Pad grammars over one vocabulary to common shapes and stack them on a leading axis.

    The result is a bank: ``jax.vmap(fn, in_axes=(0, 0, ...))(bank, states, ...)`` runs each
    request against its own grammar.

    Raises:
      ValueError: no grammars, or grammars compiled for different vocabulary sizes.
    """
    if not grammars:
        raise ValueError("stack_grammars needs at least one grammar")
    widths = {(g.vocab_size, g.logits_width) for g in grammars}
    if len(widths) > 1:
        raise ValueError(f"grammars were compiled for different vocabularies (vocab_size, logits_width): {sorted(widths)}")
    states = max(g.num_states for g in grammars)
    classes = max(g.num_classes for g in grammars)
    rows = max(g.mask_rows.shape[0] for g in grammars)
    padded = [pad_grammar(g, states=states, classes=classes, rows=rows) for g in grammars]
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *padded)
