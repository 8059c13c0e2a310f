"""Serving a live stream of requests, each with its own constraint, with no recompilation.

- `GrammarPool`: compiled grammars of both engines in device buffers of fixed capacity;
  ``add`` is a write (a `Handle` back), ``remove`` frees the space, identical tables are stored
  once. `PoolCapacity` and `PRESETS` size it.
- `Engine`: continuous batching over a model's ``step_fn``: requests join and leave at any
  step, new prompts are prefilled into free slots while the others keep decoding, and every
  slot's constraint state lives on the device.
"""

from ananke_jax._src.serving.engine import CompileCounter, Engine, Event
from ananke_jax._src.serving.pool import PRESETS, GrammarPool, Handle, PoolCapacity, PoolCapacityError

__all__ = ["PRESETS", "CompileCounter", "Engine", "Event", "GrammarPool", "Handle", "PoolCapacity", "PoolCapacityError"]
