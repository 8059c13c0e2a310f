"""The benchmarks' shared harness: corpora, command line, timers, peers, tables and records.

Every script in bench/ parses its arguments with `parse` (so each has ``--quick``), prints its
results as `Table` rows while it measures, and ends with `record`, which writes
``bench/results/<name>.json``: the tables with the date, machine, commit and versions they were
measured with, and a script's `headline` rows. ``python bench/render.py`` turns those records into
docs/benchmarks.md and the README's headline table.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import pathlib
import platform
import shlex
import statistics
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

import ananke_jax as aj

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = pathlib.Path(os.environ.get("ANANKE_BENCH_RESULTS", ROOT / "bench" / "results"))
PEERS = ("xgrammar", "llguidance", "outlines-core", "torch")
_START = time.perf_counter()

# ---------------------------------------------------------------------------------------------
# Corpora and vocabularies


def corpus(name: str):
    """The data file ``grammars/<name>.json`` that the tests use too (json_schemas, examples,
    regexes)."""
    return json.loads((ROOT / "grammars" / f"{name}.json").read_text(encoding="utf-8"))


def grammar_text(filename: str) -> str:
    return (ROOT / "grammars" / filename).read_text(encoding="utf-8")


def mistral_data(name: str) -> str:
    import mistral_common  # from the `test` extra

    return os.path.join(os.path.dirname(mistral_common.__file__), "data", name)


def load_vocabularies() -> dict[str, aj.Vocabulary]:
    return {
        "sentencepiece-32k": aj.Vocabulary.from_sentencepiece(mistral_data("tokenizer.model.v1")),
        "tekken-131k": aj.Vocabulary.from_tekken(mistral_data("tekken_240911.json")),
    }


def encoders() -> dict:
    """Each real vocabulary's own tokenizer as it encodes text mid-stream: no BOS or EOS, and no
    SentencePiece dummy-prefix space."""
    import sentencepiece
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    proto.ParseFromString(pathlib.Path(mistral_data("tokenizer.model.v1")).read_bytes())
    proto.normalizer_spec.add_dummy_prefix = False
    sp = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
    tekken = Tekkenizer.from_file(mistral_data("tekken_240911.json"))
    return {"sentencepiece-32k": sp.encode, "tekken-131k": lambda t: tekken.encode(t, bos=False, eos=False)}


# ---------------------------------------------------------------------------------------------
# Command line


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the script's docstring, with ``--quick``."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small, fast run (fewer repeats, sizes or inputs) to check the script end to end")
    return p


def parse(p: argparse.ArgumentParser, **quick) -> argparse.Namespace:
    """Parse the command line; under ``--quick`` the defaults given here replace the full run's
    (an argument given on the command line still wins)."""
    args = p.parse_args()
    if args.quick:
        p.set_defaults(**quick)
        args = p.parse_args()
    print(f"# {machine()}")
    return args


# ---------------------------------------------------------------------------------------------
# Tables and records


def cell(value, spec: str) -> str:
    """A table cell as text: None is "-", a string stays as it is, a number takes ``spec``."""
    if value is None:
        return "-"
    return value if isinstance(value, str) else format(value, spec)


def percentile(values, q):
    """The ``q``-th percentile of ``values``, Nones left out (None when there are none)."""
    values = [v for v in values if v is not None]
    return float(np.percentile(values, q)) if values else None


def ratio(a, b):
    """``a / b``, or None when either is missing."""
    return a / b if a is not None and b else None


def ratio_figure(value, against: str) -> str | None:
    """A ratio as the text of a headline figure, e.g. ``"1.01x unconstrained"``; None when the
    ratio is missing."""
    if value is None:
        return None
    return f"{value:.{1 if value >= 10 else 2}f}x {against}"


def headline(what: str, figure: str) -> dict:
    """A row of the README's headline table: what is measured, in a few words, and the figure as
    short text (``"1.01x unconstrained"``, ``"0.80x llguidance (JSON, 131k)"``). A script lists
    its rows under ``"headline"`` in the results it records."""
    return {"what": what, "figure": figure}


class Table:
    """Rows of results under named columns, printed as they are added, stored in the record and
    rendered in docs/benchmarks.md.

    Args:
        title: what the table shows, with its units.
        columns: ``{name: format spec}``, e.g. ``{"batch": "d", "ratio": ".3f"}``; cells are
            numbers in the column's unit, strings, or None for a missing value.
        note: a sentence or two printed under the table in the docs.
    """

    def __init__(self, title: str, columns: dict[str, str], note: str = ""):
        self.title, self.columns, self.note, self.rows = title, dict(columns), note, []
        print(f"\n## {title}\n" + self._line(list(self.columns)), flush=True)

    def _line(self, texts: list[str]) -> str:
        widths = [max(len(name), 20 if spec == "s" else 8) for name, spec in self.columns.items()]
        return f"{texts[0]:<{widths[0]}}" + "".join(f" {t:>{w}}" for t, w in zip(texts[1:], widths[1:]))

    def add(self, *cells) -> None:
        assert len(cells) == len(self.columns), (cells, self.columns)
        self.rows.append(list(cells))
        print(self._line([cell(c, spec) for c, spec in zip(cells, self.columns.values())]), flush=True)

    def to_json(self) -> dict:
        return {
            "title": self.title,
            "note": self.note,
            "columns": list(self.columns),
            "formats": list(self.columns.values()),
            "rows": self.rows,
        }


def machine_info() -> dict:
    cpu = platform.processor() or platform.machine()
    cpuinfo = pathlib.Path("/proc/cpuinfo")  # Linux: the model's name, which platform does not give
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines() if line.startswith("model name")]
        cpu = names[0] if names else cpu
    device = jax.devices()[0]
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "os": platform.platform(),
        "jax_backend": jax.default_backend(),
        "device_kind": device.device_kind,
    }


def machine() -> str:
    m = machine_info()
    return f"{m['cpu']}, {m['cores']} cores, {m['os']}; jax {jax.__version__} on {m['jax_backend']} ({m['device_kind']})"


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=True).stdout.strip()


def git_info() -> dict:
    """The short commit hash, and whether tracked files other than the records in bench/results/
    (which earlier runs rewrite) differ from it."""
    if os.environ.get("ANANKE_BENCH_COMMIT"):  # a copy of a clean checkout, whose .git may be absent or stale
        return {"commit": os.environ["ANANKE_BENCH_COMMIT"], "dirty": False}
    try:
        changed = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)bench/results")
        return {"commit": _git("rev-parse", "--short", "HEAD"), "dirty": bool(changed)}
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}


def versions() -> dict:
    """Python's version and each package's, None where a peer is not installed."""
    found = {"python": platform.python_version()}
    for package in ("ananke-jax", "jax", "jaxlib", "numpy", *PEERS):
        try:
            found[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            found[package] = None
    return found


def metadata() -> dict:
    """What a record says about how it was measured."""
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "machine": machine_info(),
        "git": git_info(),
        "versions": versions(),
    }


def _dumps(value, indent: str = "") -> str:
    """JSON with one line per member of an object or a list of containers: a table row stays on
    one line, so a record reads (and diffs) row by row."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        members = [f"{inner}{json.dumps(k)}: {_dumps(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(members) + f"\n{indent}}}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        return "[\n" + ",\n".join(inner + _dumps(v, inner) for v in value) + f"\n{indent}]"
    return json.dumps(value, ensure_ascii=False)


def record(name: str, args: argparse.Namespace, results: dict, directory: pathlib.Path = RESULTS) -> pathlib.Path:
    """Write ``<directory>/<name>.json`` (``<name>.<backend>.json`` when jax runs on an
    accelerator, so that a GPU's record sits beside the CPU's): `metadata`, the command line and its arguments, the
    seconds since the script started, and ``results`` (its `Table` values as dicts).

    Args:
        name: the record's name, by convention the script's.
        args: the parsed command line (``args.quick`` marks a quick run).
        results: ``{"tables": [Table, ...]}`` and optionally ``"notes": [str, ...]`` and
            ``"headline": [headline(...), ...]`` (the rows bench/render.py puts in the README's
            headline table): lists, their `Table` values written as dicts.
    """
    seconds = time.perf_counter() - _START
    data = {
        "name": name,
        "quick": bool(getattr(args, "quick", False)),
        "command": shlex.join(["python", os.path.relpath(sys.argv[0], ROOT), *sys.argv[1:]]),
        "args": vars(args),
        "seconds": round(seconds, 1),
        **metadata(),
        "results": {key: [t.to_json() if isinstance(t, Table) else t for t in values] for key, values in results.items()},
    }
    directory.mkdir(parents=True, exist_ok=True)
    backend = data["machine"]["jax_backend"]
    path = directory / (f"{name}.json" if backend == "cpu" else f"{name}.{backend}.json")
    path.write_text(_dumps(data) + "\n", encoding="utf-8")
    for row in data["results"].get("headline", []):
        print(f"# headline: {row['what']}: {row['figure']}")
    print(f"\n# took {seconds:.0f} s; wrote {os.path.relpath(path)}")
    return path


# ---------------------------------------------------------------------------------------------
# Timers


def interleaved_medians(fns: dict, repeats: int) -> dict[str, float]:
    """Median seconds of each no-argument function, run in turn so drift hits all alike."""
    times = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def ours_scan(cg, tokens: list[int], repeat: int = 1):
    """A function that runs one jitted `lax.scan` of mask + advance along the walk, ``repeat``
    times over from the initial state, and returns its seconds per token (compiled and checked
    here). One pass of a short walk mostly times the scan's launch; many passes give the cost of
    a token inside a decode loop, where the launch is paid once per generation.

    Raises:
        AssertionError: if the walk is not accepted.
    """

    @jax.jit
    def walk(cg, tokens, restart):
        init = cg.init_state()

        def body(carry, step):
            state, acc = carry
            token, first = step
            if repeat > 1:
                state = jax.tree_util.tree_map(lambda a, b: jnp.where(first, a, b), init, state)
            acc = acc ^ aj.token_mask(cg, state)  # keeps the mask live
            return (aj.advance(cg, state, token), acc), None

        (state, acc), _ = jax.lax.scan(body, (init, jnp.zeros(cg.mask_words, jnp.uint32)), (tokens, restart))
        return acc, aj.accepts(cg, state)

    ids = jnp.asarray(np.tile(np.asarray(tokens, np.int32), repeat))
    restart = jnp.asarray(np.tile(np.arange(len(tokens)) == 0, repeat))
    assert bool(walk(cg, ids, restart)[1]), "the walk must be accepted"

    def run() -> float:
        start = time.perf_counter()
        walk(cg, ids, restart)[0].block_until_ready()
        return (time.perf_counter() - start) / len(ids)

    return run


def matcher_walk(matcher, bitmask, tokens: list[int]) -> list[float]:
    """Seconds per token of ``matcher.fill_next_token_bitmask(bitmask)`` + ``accept_token``
    along the walk (ours or XGrammar's matcher: they share these two methods)."""
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        matcher.fill_next_token_bitmask(bitmask)
        assert matcher.accept_token(token), f"token {token} refused"
        per_call.append(time.perf_counter() - start)
    return per_call


def matcher_per_call(cg, vocab: aj.Vocabulary, tokens: list[int]) -> list[float]:
    """The seconds of each token's `aj.Matcher` fill_next_token_bitmask + accept_token along the
    walk: what a server with its own decode loop calls, as the peers' walks do."""
    matcher, bitmask = aj.Matcher(cg, vocab), aj.allocate_token_bitmask(1, vocab.logits_width)
    matcher.fill_next_token_bitmask(bitmask)  # compiles the jitted calls of non-host constraints
    assert matcher.accept_token(tokens[0])
    matcher.fill_next_token_bitmask(bitmask)  # a pooled matcher applies the token here
    matcher.reset()
    return matcher_walk(matcher, bitmask, tokens)


def ours_per_token(cg, vocab: aj.Vocabulary, tokens: list[int], repeats: int = 15, loop_tokens: int = 2048) -> dict:
    """Seconds of mask + advance per token along a walk the constraint must accept.

    Returns:
        ``scan``: the median over ``repeats`` runs of `ours_scan` over the walk once; ``loop``:
        the same over the walk repeated to at least ``loop_tokens`` tokens (the launch spread
        out); ``call``: `matcher_per_call`.
    """
    once, looped = ours_scan(cg, tokens), ours_scan(cg, tokens, repeat=-(-loop_tokens // len(tokens)))
    return {
        "scan": statistics.median(once() for _ in range(repeats)),
        "loop": statistics.median(looped() for _ in range(repeats)),
        "call": matcher_per_call(cg, vocab, tokens),
    }


# ---------------------------------------------------------------------------------------------
# Peers: each one's per-vocabulary set-up and its per-call walk (fill a full bitmask, advance)


def xgrammar_info(vocab: aj.Vocabulary):
    import xgrammar as xgr

    return xgr.TokenizerInfo(list(vocab.tokens), xgr.VocabType.RAW, vocab_size=vocab.logits_width, stop_token_ids=list(vocab.eos_token_ids))


def xgrammar_walk(compiled, vocab: aj.Vocabulary, tokens: list[int]) -> list[float]:
    """Seconds per token of XGrammar's fill_next_token_bitmask + accept_token along the walk."""
    import xgrammar as xgr

    bitmask = xgr.allocate_token_bitmask(1, vocab.logits_width)
    xgr.GrammarMatcher(compiled).fill_next_token_bitmask(bitmask)  # warm up
    return matcher_walk(xgr.GrammarMatcher(compiled), bitmask, tokens)


class _Tokens:
    """The minimal tokenizer llguidance's TokenizerWrapper reads."""

    def __init__(self, vocab, encode):
        self.eos_token_id = vocab.eos_token_ids[0]
        self.bos_token_id = None
        self.tokens = list(vocab.tokens)
        self.special_token_ids = sorted(vocab.special_token_ids)
        self._encode = encode

    def __call__(self, text):
        return self._encode(text.decode("utf-8", "replace") if isinstance(text, bytes) else text)


def llguidance_tokenizer(vocab: aj.Vocabulary, encode):
    import llguidance

    return llguidance.LLTokenizer(llguidance.TokenizerWrapper(_Tokens(vocab, encode)))


def llguidance_walk(matcher, vocab_size: int, tokens: list[int]) -> list[float]:
    """Seconds per token of llguidance's fill_next_token_bitmask + consume_token along the walk."""
    import llguidance.numpy

    bitmask = llguidance.numpy.allocate_token_bitmask(1, vocab_size)
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        llguidance.numpy.fill_next_token_bitmask(matcher, bitmask, 0)
        assert matcher.consume_token(token), matcher.get_error()
        per_call.append(time.perf_counter() - start)
    return per_call


def outlines_vocabulary(vocab: aj.Vocabulary):
    import outlines_core

    ids: dict[bytes, list[int]] = {}
    for i, token in enumerate(vocab.tokens):
        if i not in vocab.special_token_ids:  # outlines-core keys text tokens by raw bytes; EOS apart
            ids.setdefault(token, []).append(i)
    return outlines_core.Vocabulary(vocab.eos_token_ids[0], ids)


def outlines_walk(index, vocab: aj.Vocabulary, tokens: list[int]) -> list[float]:
    """Seconds per token of outlines-core's write_mask_into + advance along the walk."""
    import outlines_core

    guide, mask = outlines_core.Guide(index), np.zeros(-(-vocab.logits_width // 32), np.int32)
    per_call = []
    for token in tokens:
        start = time.perf_counter()
        guide.write_mask_into(mask.ctypes.data, mask.size, mask.itemsize)
        guide.advance(token, return_tokens=False)  # raises on a refused token
        per_call.append(time.perf_counter() - start)
    return per_call
