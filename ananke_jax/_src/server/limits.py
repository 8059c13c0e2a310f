"""What one request may ask of the server, with the defaults the command line documents."""

from __future__ import annotations

import dataclasses

from ananke_jax._src.compile.budget import CompileBudget


@dataclasses.dataclass(frozen=True)
class CompileLimits:
    """One constraint's compile: the library's ``budget`` (states, table bytes, seconds; a worker
    process still at work `KILL_GRACE_SECONDS` past its ``max_seconds`` is stopped),
    ``max_spec_bytes`` of request JSON (checked before any work), and ``max_queue`` compiles
    waiting for a worker (beyond it, 503)."""

    budget: CompileBudget = CompileBudget(max_seconds=10.0)
    max_spec_bytes: int = 64 << 10
    max_queue: int = 256

    KILL_GRACE_SECONDS = 5.0


@dataclasses.dataclass(frozen=True)
class Limits:
    """``max_tokens`` generated, ``max_body_bytes`` of request body, ``max_stops`` stop strings
    of at most ``max_stop_chars`` each, ``max_reasoning_chars`` in a reasoning block, the compile
    budget; and ``max_whitespace``, the longest whitespace run between JSON tokens (None: the
    library's default)."""

    max_tokens: int = 4096
    max_whitespace: int | None = None
    max_body_bytes: int = 1 << 20
    max_stops: int = 4
    max_stop_chars: int = 256
    max_reasoning_chars: int = 1 << 16
    compile: CompileLimits = CompileLimits()
