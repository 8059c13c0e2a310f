"""Compiled constraints on disk (one ``.npz`` file with the tables and their static sizes), and
their pytree types registered with `jax.export`, so exported steps take constraints and states."""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np

from ananke_jax._src.compile.cfg import outcome_runs, sparse_runs
from ananke_jax._src.engines.pushdown import PushdownGrammar, PushdownState
from ananke_jax._src.engines.regular import RegularGrammar, RegularState

_KINDS = {"regular": RegularGrammar, "pushdown": PushdownGrammar}
# Format 2: a pushdown table's action kinds may be SHIFT_REDUCE, which a reader of format 1 would
# misread. Files of format 1 hold none and load as they are. Format 3: a pushdown grammar's
# outcomes per lexer state and sparse tokens per row are runs (`PushdownGrammar.outcome_start`,
# `sparse_start`); the rows of older files are made runs when they load.
_FORMAT, _READABLE = 3, (1, 2, 3)


def save_constraint(constraint: RegularGrammar | PushdownGrammar, path: str | os.PathLike) -> None:
    """Write ``constraint``'s tables to ``path`` (an ``.npz`` file)."""
    kind = next((k for k, cls in _KINDS.items() if isinstance(constraint, cls)), None)
    if kind is None:
        raise TypeError(f"cannot save a {type(constraint).__name__}: expected a RegularGrammar or PushdownGrammar")
    arrays, static = {}, {}
    for field in dataclasses.fields(constraint):
        value = getattr(constraint, field.name)
        (static if isinstance(value, int) else arrays)[field.name] = value if isinstance(value, int) else np.asarray(value)
    header = json.dumps({"format": _FORMAT, "kind": kind, "static": static})
    with open(path, "wb") as f:
        np.savez_compressed(f, __header__=np.frombuffer(header.encode(), np.uint8), **arrays)


def load_constraint(path: str | os.PathLike) -> RegularGrammar | PushdownGrammar:
    """Read a constraint written by `save_constraint`.

    Raises:
      ValueError: the file is not a saved constraint, or of an unknown format version.
    """
    try:
        with np.load(path) as data:
            header = json.loads(data["__header__"].tobytes())
            arrays = {name: jnp.asarray(data[name]) for name in data.files if name != "__header__"}
    except (OSError, KeyError, ValueError) as e:
        raise ValueError(f"{path}: not a saved ananke_jax constraint ({e})") from e
    if header.get("format") not in _READABLE or header.get("kind") not in _KINDS:
        raise ValueError(f"{path}: unknown constraint file format {header.get('format')!r}, kind {header.get('kind')!r}")
    static = header["static"]
    if header["kind"] == "pushdown" and header["format"] < 3:
        rows = {name: np.asarray(arrays[name]) for name in ("state_outcomes", "outcome_lexer", "sparse_token", "sparse_set")}
        runs = [*outcome_runs(rows["state_outcomes"], rows["outcome_lexer"]), *sparse_runs(rows["sparse_token"], rows["sparse_set"])]
        names = ["outcome_start", "state_outcomes", "outcome_lexer", "sparse_start", "sparse_token", "sparse_set"]
        arrays.update(zip(names, map(jnp.asarray, runs)))
        static = {**static, "sparse_width": rows["sparse_token"].shape[1]}
    return _KINDS[header["kind"]](**arrays, **static)


for _cls in (RegularGrammar, PushdownGrammar):  # their static fields (ints) are the aux data
    jax.export.register_pytree_node_serialization(
        _cls,
        serialized_name=f"ananke_jax.{_cls.__name__}",
        serialize_auxdata=lambda aux: json.dumps(list(aux)).encode(),
        deserialize_auxdata=lambda data: tuple(json.loads(data)),
    )
for _cls in (RegularState, PushdownState):
    jax.export.register_namedtuple_serialization(_cls, serialized_name=f"ananke_jax.{_cls.__name__}")
