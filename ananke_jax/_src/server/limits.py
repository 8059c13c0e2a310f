"""What one request may ask of the server, with the defaults the command line documents."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class CompileBudget:
    """One constraint's compile: ``max_seconds`` of work (then its worker process is stopped),
    ``max_table_bytes`` of tables, ``max_spec_bytes`` of request JSON (checked before any work),
    and ``max_queue`` compiles waiting for a worker (beyond it, 503)."""

    max_seconds: float = 10.0
    max_table_bytes: int = 256 << 20
    max_spec_bytes: int = 64 << 10
    max_queue: int = 256


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
    compile: CompileBudget = dataclasses.field(default_factory=CompileBudget)
