"""``ananke-jax serve``: the command's options, and the server started with them (uvicorn)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time

from ananke_jax._src.compile.budget import CompileBudget
from ananke_jax._src.server.limits import Limits

API_KEY_VARIABLE = "ANANKE_API_KEY"
_LIMITS = Limits()
_BUDGET = _LIMITS.compile.budget


def add_serve_command(commands) -> None:
    p = commands.add_parser("serve", help="an OpenAI-compatible server with structured outputs and tools")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--model", default="smollm2", help="smollm2 (default), tiny (random weights, for tests) or a Llama-style .gguf")
    p.add_argument("--served-model-name", help="the model's id in the API (default: from the model)")
    p.add_argument("--slots", type=int, default=8, help="requests decoded at once")
    p.add_argument("--max-len", type=int, default=1024, help="positions per slot: prompt plus reply")
    p.add_argument("--api-key", default=os.environ.get(API_KEY_VARIABLE), help=f"require this bearer key (default: ${API_KEY_VARIABLE})")
    p.add_argument("--tool-style", help="tool-call format (default: read from the chat template)")
    p.add_argument("--max-tokens", type=int, default=_LIMITS.max_tokens, help="the most tokens one request may generate")
    p.add_argument("--max-whitespace", type=int, help="the longest whitespace run between JSON tokens (default: the library's, 24)")
    p.add_argument("--max-body-bytes", type=int, default=_LIMITS.max_body_bytes, help="the largest request body")
    p.add_argument(
        "--max-grammar-bytes",
        type=int,
        default=_LIMITS.compile.max_spec_bytes,
        help="the largest constraint (schema, grammar, tools) in JSON bytes",
    )
    p.add_argument("--compile-seconds", type=float, default=_BUDGET.max_seconds, help="the compile budget of one constraint, in seconds")
    p.add_argument("--max-states", type=int, default=_BUDGET.max_states, help="the largest automaton one constraint's compile may build")
    p.add_argument("--max-table-bytes", type=int, default=_BUDGET.max_table_bytes, help="the largest compiled tables of one constraint")
    p.add_argument("--compile-workers", type=int, default=2, help="processes compiling grammars")
    p.add_argument("--cache-size", type=int, default=256, help="compiled constraints kept")
    p.add_argument("--pool", default="default", choices=("small", "default", "large"), help="grammar pool capacity preset")
    p.add_argument("--steps-per-call", type=int, default=1, help="decode steps per device call")
    p.add_argument(
        "--prefill-buckets", type=_lengths, help="prompt lengths compiled for prefill, e.g. 64,256 (default: 16, 32, ..., --max-len)"
    )
    p.add_argument(
        "--compilation-cache", default=os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "ananke-jax", "xla"),
        help="directory where XLA keeps the engine's compiled programs across restarts ('' for none)",
    )  # fmt: skip
    p.add_argument("--log-level", default="info")
    p.set_defaults(run=serve_command)


def _lengths(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers."""
    try:
        lengths = tuple(int(part) for part in text.split(","))
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got {text!r}")
    return lengths


def serve_command(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ananke_jax._src.server.app import create_app
        from ananke_jax._src.server.service import Service, load_model
    except ImportError as e:
        raise ImportError(f"the server needs its extra: pip install 'ananke-jax[serve]' ({e})") from None
    try:
        budget = CompileBudget(max_states=args.max_states, max_table_bytes=args.max_table_bytes, max_seconds=args.compile_seconds)
    except ValueError as e:
        print(f"ananke-jax serve: {e}", file=sys.stderr)
        return 2
    if args.compilation_cache:
        import jax

        jax.config.update("jax_compilation_cache_dir", args.compilation_cache)
        # Every program: a restart compiles the same ones, and the many small ones (the pool's
        # writes, the samplers) add up to seconds.
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    start = time.perf_counter()
    print(f"loading {args.model} and warming up {args.slots} slots of {args.max_len} positions ...", file=sys.stderr, flush=True)
    model = load_model(args.model, args.tool_style)
    if args.served_model_name:
        model.name = args.served_model_name
    compile_limits = dataclasses.replace(_LIMITS.compile, budget=budget, max_spec_bytes=args.max_grammar_bytes)
    service = Service(
        model,
        slots=args.slots,
        max_len=args.max_len,
        limits=dataclasses.replace(
            _LIMITS,
            max_tokens=args.max_tokens,
            max_whitespace=args.max_whitespace,
            max_body_bytes=args.max_body_bytes,
            compile=compile_limits,
        ),
        compile_workers=args.compile_workers,
        cache_size=args.cache_size,
        pool=args.pool,
        steps_per_call=args.steps_per_call,
        prefill_buckets=args.prefill_buckets,
    )
    print(f"ready in {time.perf_counter() - start:.1f} s: {model.name} on http://{args.host}:{args.port}/v1", file=sys.stderr, flush=True)
    uvicorn.run(create_app(service, args.api_key), host=args.host, port=args.port, log_level=args.log_level)
    return 0
