"""The command line: ``python -m ananke_jax`` or ``ananke-jax``.

ananke-jax                                    # SmolLM2-135M-Instruct writes a person record (JSON Schema)
ananke-jax generate --regex '\\d{3}-\\d{4}' --prompt "A phone number, please."
ananke-jax generate --grammar grammars/json.gbnf --model tiny --tokenizer tekken --batch 4
ananke-jax compile --schema person.json --tokenizer smollm2 --out person.npz
ananke-jax inspect person.npz
ananke-jax serve --port 8000                  # an OpenAI-compatible server (pip install 'ananke-jax[serve]')
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import pathlib
import re
import sys
import time
from collections.abc import Callable

import jax
import numpy as np

import ananke_jax as aj
from ananke_jax import models
from ananke_jax._src.grammar_text import lark_names, to_lark
from ananke_jax._src.serialize import load_constraint, save_constraint
from ananke_jax._src.server.main import add_serve_command

DEFAULT_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "minLength": 2, "maxLength": 24},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "city": {"type": "string", "maxLength": 24},
        "hobbies": {"type": "array", "items": {"type": "string", "maxLength": 16}, "maxItems": 3},
    },
    "required": ["name", "age", "city", "hobbies"],
}
DEFAULT_PROMPT = "Describe a fictional person as a JSON object with name, age, city and hobbies."


def _progress(message: str) -> Callable[[], None]:
    """Print ``message`` now and its duration when the returned function is called."""
    print(f"{message} ...", end="", file=sys.stderr, flush=True)
    start = time.perf_counter()
    return lambda: print(f" {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def _vocabulary(name: str) -> aj.Vocabulary:
    """A vocabulary by name (smollm2, tekken, mistral-v1) or file (.json tokenizer, .model, .gguf)."""
    if name == "smollm2":
        return aj.Vocabulary.from_gguf(models.smollm2_path())
    if name in ("tekken", "mistral-v1"):
        try:
            import mistral_common
        except ImportError:
            raise ValueError(f"--tokenizer {name} needs mistral-common: pip install mistral-common") from None
        data = pathlib.Path(mistral_common.__file__).parent / "data"
        return (
            aj.Vocabulary.from_tekken(data / "tekken_240911.json")
            if name == "tekken"
            else aj.Vocabulary.from_sentencepiece(data / "tokenizer.model.v1")
        )
    path = pathlib.Path(name)
    if not path.is_file():
        raise ValueError(f"--tokenizer {name}: not smollm2, tekken, mistral-v1 or an existing file")
    if path.suffix == ".gguf":
        return aj.Vocabulary.from_gguf(path)
    if path.suffix == ".model":
        return aj.Vocabulary.from_sentencepiece(path)
    with _naming(path):
        is_tekken = {"config", "vocab"} <= json.loads(path.read_text(encoding="utf-8")).keys()
        return aj.Vocabulary.from_tekken(path) if is_tekken else aj.Vocabulary.from_tokenizer_json(path)


@contextlib.contextmanager
def _naming(path: pathlib.Path):
    """Errors raised while reading or compiling the file at ``path`` name it (and, for JSON, the
    line and column)."""
    try:
        yield
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}:{e.lineno}:{e.colno}: not valid JSON: {e.msg}") from None
    except (aj.AnankeError, ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: {e}") from e


def _constraint(args, vocab: aj.Vocabulary):
    """(compiled constraint, checker of an output text -> error message or None (None: no
    check), description)."""
    if args.regex:
        return (
            aj.compile_regex(args.regex, vocab),
            lambda t: None if re.fullmatch(args.regex, t) else "no full match",
            f"regex {args.regex!r}",
        )
    if args.grammar:
        path = pathlib.Path(args.grammar)
        with _naming(path):
            text = path.read_text(encoding="utf-8")
            ir = aj.gbnf_to_ir(text) if path.suffix == ".gbnf" else aj.lark_to_ir(text, lexer=args.lexer)
            cg = aj.compile_grammar(ir, vocab)
        if any(t.token is not None for t in ir.terminals):  # no text parser reads tokens
            return cg, None, f"grammar {path.name} (it names tokens: outputs are not parsed again)"
        import lark

        parser = None
        if ir.lexer == "lark":  # Lark's own lexer, where its LALR tables (which that lexer needs) build
            with contextlib.suppress(lark.exceptions.GrammarError):
                parser = lark.Lark(text, parser="lalr")
        if parser is None:
            parser = lark.Lark(to_lark(ir), start=lark_names(ir)[ir.start], parser="earley", lexer="dynamic")
        return cg, lambda t: _error(lambda: parser.parse(t)), f"grammar {path.name}"
    schema = DEFAULT_SCHEMA
    with _naming(pathlib.Path(args.schema or "(embedded person record)")):
        if args.schema:
            schema = json.loads(pathlib.Path(args.schema).read_text(encoding="utf-8"))
        cg = aj.compile_json_schema(schema, vocab)
    return cg, lambda t: _error(lambda: _validate(schema, json.loads(t))), f"schema {args.schema or '(embedded person record)'}"


def _validate(schema, value) -> None:
    try:
        import jsonschema
    except ImportError:
        return  # json.loads already checked the syntax
    jsonschema.validate(value, schema, format_checker=jsonschema.FormatChecker())


def _error(check: Callable[[], object]) -> str | None:
    try:
        check()
    except Exception as e:
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def _model(args):
    """(step_fn, params, config, vocab, encode)."""
    if args.model == "tiny":
        vocab = _vocabulary(args.tokenizer or "smollm2")
        config = models.LlamaConfig.tiny(vocab.logits_width)
        return models.make_step_fn(config), models.init_params(config, jax.random.key(args.seed)), config, vocab, _byte_encoder(vocab)
    path = models.smollm2_path() if args.model == "smollm2" else pathlib.Path(args.model)
    if args.tokenizer:
        raise ValueError("--tokenizer goes with --model tiny: a trained model brings its own vocabulary")
    config, params = models.load_gguf(path)
    tokenizer = models.gguf_tokenizer(path)
    encode = lambda text: tokenizer.encode(models.chat_prompt(text)).ids
    return models.make_step_fn(config), params, config, aj.Vocabulary.from_gguf(path), encode


def _byte_encoder(vocab: aj.Vocabulary) -> Callable[[str], list[int]]:
    """Greedy longest-match encoding through the vocabulary's tokens (for the random tiny model)."""
    pieces = {vocab.token_bytes(i): i for i in range(len(vocab)) if i not in vocab.special_token_ids}
    longest = max(map(len, pieces))

    def encode(text: str) -> list[int]:
        data, ids = text.encode(), []
        while data:
            size = next((n for n in range(min(longest, len(data)), 0, -1) if data[:n] in pieces), 0)
            if not size:
                raise ValueError(f"the vocabulary cannot spell the prompt at {data[:10]!r}")
            ids.append(pieces[data[:size]])
            data = data[size:]
        return ids

    return encode


def _acceleration(requested: str, constraint) -> str:
    """The acceleration to run. ``auto`` is speculative on a token DFA (faster than plain
    constrained decoding there in bench/domino.py) and none on the pushdown engine (slower)."""
    if constraint is None:
        return "none"
    if requested == "auto":
        return "speculative" if isinstance(constraint, aj.RegularGrammar) else "none"
    return requested


def _run(step_fn, params, config, prompt, constraint, vocab, args, drafts=None):
    batch = np.repeat(np.asarray([prompt], np.int32), args.batch, axis=0)
    acceleration = _acceleration(args.acceleration, constraint)
    cache = models.init_cache(config, args.batch, batch.shape[1] + args.max_tokens + args.draft_length)
    result = aj.generate(
        step_fn, params, batch, constraint, cache=cache, max_new_tokens=args.max_tokens, eos_token_ids=vocab.eos_token_ids,
        key=jax.random.key(args.seed), sampling=aj.SamplingParams(temperature=args.temperature),
        acceleration=acceleration, draft_length=args.draft_length, drafts=drafts,
    )  # fmt: skip
    return jax.block_until_ready(result)


def _timed(fn):
    """Run ``fn`` twice (the first compiles) and return its result and the second run's seconds."""
    fn()
    start = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - start


def generate_command(args) -> int:
    done = _progress(f"loading model {args.model}")
    step_fn, params, config, vocab, encode = _model(args)
    done()
    done = _progress("compiling the constraint")
    constraint, check, what = _constraint(args, vocab)
    done()
    print(f"constraint: {what}: {constraint}")
    acceleration = _acceleration(args.acceleration, constraint)
    print(f"acceleration: {acceleration}" + (" (auto)" if args.acceleration == "auto" else ""))
    prompt = encode(args.prompt)
    done = _progress(f"generating {args.batch} x up to {args.max_tokens} tokens, constrained and unconstrained")
    drafting = acceleration in ("speculative", "jump_forward")
    drafts = aj.draft_tables(constraint, vocab) if drafting else None  # host work, once
    result, seconds = _timed(lambda: _run(step_fn, params, config, prompt, constraint, vocab, args, drafts))
    free, free_seconds = _timed(lambda: _run(step_fn, params, config, prompt, None, vocab, args))
    done()
    valid, verdict = 0, "valid" if check else "complete"
    for row, (tokens, length, reason) in enumerate(zip(np.asarray(result.tokens), np.asarray(result.lengths), result.finish_names())):
        text = b"".join(vocab.token_bytes(int(t)) for t in tokens[:length]).decode("utf-8", "replace")
        finished = reason in ("eos", "grammar_complete")
        problem = (check(text) if check else None) if finished else f"unfinished ({reason})"
        valid += problem is None
        print(f"[{row}] {text}")
        print(f"    {verdict if problem is None else 'INVALID: ' + problem}, {length} tokens, finish: {reason}")
    rate = lambda r, s: int(np.asarray(r.lengths).sum()) / s
    constrained_rate, free_rate = rate(result, seconds), rate(free, free_seconds)
    print(f"{valid}/{args.batch} outputs {verdict}")
    print(f"tokens/s: constrained {constrained_rate:.1f}, unconstrained {free_rate:.1f} (ratio {constrained_rate / free_rate:.2f})")
    if drafting:
        drafted, accepted = int(np.asarray(result.stats["drafted"]).sum()), int(np.asarray(result.stats["accepted"]).sum())
        print(f"{acceleration}: {accepted}/{drafted} draft tokens accepted, {int(result.stats['model_calls'])} model calls")
    return 0 if valid == args.batch else 1


def compile_command(args) -> int:
    vocab = _vocabulary(args.tokenizer or "smollm2")
    done = _progress("compiling")
    start = time.perf_counter()
    constraint, _, what = _constraint(args, vocab)
    seconds = time.perf_counter() - start
    done()
    save_constraint(constraint, args.out)
    print(f"{what}: {constraint}")
    print(f"compiled in {seconds * 1e3:.0f} ms, written to {args.out}")
    return 0


def inspect_command(args) -> int:
    print(load_constraint(args.file))
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ananke-jax", description="Constrained generation on device with ananke_jax.")
    commands = parser.add_subparsers(dest="command")

    def add_constraint(p):
        group = p.add_mutually_exclusive_group()
        group.add_argument("--schema", help="JSON Schema file (default: an embedded person record)")
        group.add_argument("--regex", help="regular expression the output must fully match")
        group.add_argument("--grammar", help="Lark (.lark) or GBNF (.gbnf) grammar file")
        p.add_argument(
            "--lexer",
            choices=("context_free", "lark"),
            default="context_free",
            help="how a Lark grammar is lexed: context_free (default) or lark (as Lark's LALR parser lexes it)",
        )
        p.add_argument("--tokenizer", help="smollm2, tekken, mistral-v1, or a tokenizer file (.json, .model, .gguf)")

    gen = commands.add_parser("generate", help="generate text under a constraint")
    add_constraint(gen)
    gen.add_argument("--prompt", default=DEFAULT_PROMPT)
    gen.add_argument("--model", default="smollm2", help="smollm2 (default), tiny (random, for tests) or a Llama-style .gguf")
    gen.add_argument("--max-tokens", type=int, default=96)
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--seed", type=int, default=0)
    gen.add_argument("--batch", type=int, default=1)
    gen.add_argument(
        "--acceleration", choices=("auto", *aj.ACCELERATIONS), default="auto",
        help="DOMINO's accelerations (default: auto, speculative on a token DFA, none on the pushdown engine)",
    )  # fmt: skip
    gen.add_argument("--draft-length", type=int, default=4, help="draft tokens verified per model call (speculative)")
    gen.set_defaults(run=generate_command)
    comp = commands.add_parser("compile", help="compile a constraint and save its tables")
    add_constraint(comp)
    comp.add_argument("--out", required=True, help="output .npz file")
    comp.set_defaults(run=compile_command)
    insp = commands.add_parser("inspect", help="describe a saved constraint")
    insp.add_argument("file")
    insp.set_defaults(run=inspect_command)
    add_serve_command(commands)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Tracing jax programs allocates many short-lived objects: at Python's default thresholds the
    # collector runs thousands of times while `generate` or `serve` traces (about 8% of a run).
    gc.set_threshold(100_000, 50, 1_000)
    parser = _parser()
    args = parser.parse_args(["generate"] if argv == [] or (argv is None and len(sys.argv) == 1) else argv)
    if args.command == "generate" and (args.batch < 1 or args.max_tokens < 1):
        parser.error("--batch and --max-tokens must be at least 1")
    try:
        return args.run(args)
    except (aj.AnankeError, ValueError, OSError, ImportError) as e:
        print(f"\nerror: {e}", file=sys.stderr)
        return 2
