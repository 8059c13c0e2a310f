"""Context-free grammars: per-token mask + advance, compile time and table bytes, side by side
with XGrammar and llguidance (when installed) on the same token walk.

The walk is the longest example output (grammars/examples.json) of the JSON, C, calculator and
SQL grammars in grammars/ (the calculator's LR tables conflict: its parse forks; the SQL grammar
is Lark, read with ``lexer="lark"``, and XGrammar has no Lark front end), tokenised by each real
vocabulary's own tokenizer. ananke_jax is timed the way it is
used: inside one jitted `lax.scan` over the tokens ("scan"), inside one over the walk repeated to
2048 tokens from the initial state each time ("loop": the cost of a token in a jitted decode loop,
where the scan's launch is paid once per generation, not once per short walk), and per call from
the host through `aj.Matcher` (fill the bitmask, accept the token: "call"), as a server with its
own loop would; the peers are timed per call (their only mode). Our scans and loops,
llguidance's walks and, on the JSON walk, XGrammar's with its builtin JSON grammar (its fastest
JSON path) are taken in turn, and their medians compared; XGrammar on the grammar files, much
slower per call, walks once. The ratios are ours / the fastest peer on that walk. Compile time
is one cold compile per grammar; before any is timed, ours compiles an unrelated warm-up grammar
per vocabulary, so that per-vocabulary preprocessing (ours: the vocabulary's prefix tree; the
peers': XGrammar's TokenizerInfo, llguidance's tokenizer) is left out of every engine's time.

    pip install torch==2.13.0 && pip install xgrammar llguidance   # optional peers
    python bench/cfg.py [--quick] [--vocabs sentencepiece-32k tekken-131k] [--repeats 21]
"""

from __future__ import annotations

import contextlib
import statistics
import time

import ananke_jax as aj

from harness import (
    Table,
    corpus,
    encoders,
    grammar_text,
    headline,
    llguidance_tokenizer,
    llguidance_walk,
    load_vocabularies,
    matcher_per_call,
    ours_scan,
    parse,
    parser,
    ratio,
    ratio_figure,
    record,
    xgrammar_info,
    xgrammar_walk,
)

LOOP_TOKENS = 2048
GRAMMARS = ["json.gbnf", "c_subset.gbnf", "calculator.gbnf", "sql_select.lark"]  # the calculator forks: its LR tables conflict


WARM_UP = 'root ::= "(" root ")" | [a-z]+'  # recursive: the pushdown engine's per-vocabulary work


def compile_file(filename: str, text: str, vocab):
    """A file of grammars/: GBNF, or Lark read as Lark's own lexer reads it."""
    return aj.compile_gbnf(text, vocab) if filename.endswith(".gbnf") else aj.compile_lark(text, vocab, lexer="lark")


def xgrammar_compile(text: str | None, vocab):
    """XGrammar's compiled grammar and its compile seconds; ``text`` None: its builtin JSON
    grammar."""
    import xgrammar as xgr

    compiler = xgr.GrammarCompiler(xgrammar_info(vocab), cache_enabled=False)
    start = time.perf_counter()
    compiled = compiler.compile_builtin_json_grammar() if text is None else compiler.compile_grammar(text)
    return compiled, time.perf_counter() - start


def llguidance_matchers(text: str, vocab, encode):
    """llguidance's compile seconds, a function making a fresh matcher for the grammar, and the
    width of its bitmasks."""
    import llguidance
    from llguidance.gbnf_to_lark import any_to_lark

    tokenizer = llguidance_tokenizer(vocab, encode)
    grammar = llguidance.LLMatcher.grammar_from_lark(any_to_lark(text))

    def matcher():
        m = llguidance.LLMatcher(tokenizer, grammar)
        assert not m.is_error(), m.get_error()
        return m

    start = time.perf_counter()
    matcher()
    return time.perf_counter() - start, matcher, tokenizer.vocab_size


def measure(filename: str, vocab, encode, tokens: list[int], repeats: int) -> dict:
    """Seconds per token (ours in a scan, in a loop and per call, each installed peer per call,
    and on the JSON walk XGrammar's builtin JSON grammar) and compile seconds of each engine,
    None for a peer that is not installed or cannot read the grammar."""
    text = grammar_text(filename)
    start = time.perf_counter()
    cg = compile_file(filename, text, vocab)
    m = {"ours compile": time.perf_counter() - start, "tables MB": cg.table_bytes / 1e6}
    scan, loop = ours_scan(cg, tokens), ours_scan(cg, tokens, repeat=-(-LOOP_TOKENS // len(tokens)))
    try:
        m["llguidance compile"], matcher, width = llguidance_matchers(text, vocab, encode)
    except ImportError:
        matcher = None
    builtin = None
    if filename == "json.gbnf":
        with contextlib.suppress(ImportError):
            builtin, m["xgrammar builtin compile"] = xgrammar_compile(None, vocab)
    scans, loops, peer, builtin_walks = [], [], [], []
    for _ in range(repeats):  # taken in turn: this machine's timings drift
        scans.append(scan())
        loops.append(loop())
        if matcher is not None:
            peer.append(statistics.mean(llguidance_walk(matcher(), width, tokens)))
        if builtin is not None:
            builtin_walks.append(statistics.mean(xgrammar_walk(builtin, vocab, tokens)))
    m["scan"], m["loop"] = statistics.median(scans), statistics.median(loops)
    m["llguidance"] = statistics.median(peer) if peer else None
    if builtin_walks:
        m["xgrammar builtin"] = statistics.median(builtin_walks)
    m["call"] = statistics.mean(matcher_per_call(cg, vocab, tokens))
    if filename.endswith(".gbnf"):
        with contextlib.suppress(ImportError):
            compiled, m["xgrammar compile"] = xgrammar_compile(text, vocab)
            m["xgrammar"] = statistics.mean(xgrammar_walk(compiled, vocab, tokens))
    return m


GRAMMAR_NAMES = {
    "json.gbnf": "JSON",
    "c_subset.gbnf": "C",
    "calculator.gbnf": "calculator, forking",
    "sql_select.lark": "SQL, Lark's lexer",
}
PEER_NAMES = {"llguidance": "llguidance", "xgrammar": "XGrammar", "xgrammar builtin": "XGrammar's builtin JSON grammar"}
PEERS = tuple(PEER_NAMES)


def headlines(measured: dict) -> list[dict]:
    """Per grammar but the SQL one (its figure stays in docs/benchmarks.md), our time per token
    in a jitted decode loop over the fastest peer's, on the largest vocabulary measured; the row
    says so when no peer is installed."""
    rows = []
    for filename in GRAMMARS[:3]:
        runs = {name: m for (grammar, name), m in measured.items() if grammar == filename}
        if not runs:
            continue
        name = max(runs, key=lambda n: int(n.rsplit("-", 1)[-1].rstrip("k")))
        m, where = runs[name], f"({GRAMMAR_NAMES[filename]}, {name.rsplit('-', 1)[-1]})"
        peers = {e: m[e] for e in PEERS if m.get(e)}
        what = "context-free grammar: mask + advance per token in a jitted decode loop vs the fastest peer"
        if peers:
            fastest = min(peers, key=peers.get)
            rows.append(headline(what, f"{ratio_figure(m['loop'] / peers[fastest], PEER_NAMES[fastest])} {where}"))
        else:
            rows.append(headline(what, f"no peer installed {where}"))
    return rows


def main():
    vocabs, encode = load_vocabularies(), encoders()
    p = parser(__doc__)
    p.add_argument("--vocabs", nargs="+", choices=sorted(vocabs), default=sorted(vocabs))
    p.add_argument("--repeats", type=int, default=21, help="our scans and llguidance's walks, in turn")
    args = parse(p, vocabs=["sentencepiece-32k"], repeats=5)
    us = {f"{e} us": ".1f" for e in ("ours scan", "ours loop", "ours call", *PEERS)}
    per_token = Table(
        f"mask + advance per token along the example (us/token; scans, llguidance and XGrammar builtin: median of {args.repeats})",
        {"grammar": "s", "vocabulary": "s", "tokens": "d", **us, "loop/fastest peer": ".2f", "call/fastest peer": ".2f"},
    )
    rows, measured = [], {}
    for name in args.vocabs:
        aj.compile_gbnf(WARM_UP, vocabs[name])
    for filename in GRAMMARS:
        example = max(corpus("examples")[filename]["examples"], key=len)
        for name in args.vocabs:
            tokens = encode[name](example)
            m = measured[filename, name] = measure(filename, vocabs[name], encode[name], tokens, args.repeats)
            fastest = min((m[e] for e in PEERS if m.get(e)), default=None)
            us_cells = [None if m.get(e) is None else m[e] * 1e6 for e in ("scan", "loop", "call", *PEERS)]
            per_token.add(filename, name, len(tokens), *us_cells, ratio(m["loop"], fastest), ratio(m["call"], fastest))
            rows.append([filename, name, *(m.get(f"{e} compile") for e in ("ours", *PEERS)), m["tables MB"]])
    compiles = Table(
        "compile (seconds) and table bytes",
        {
            "grammar": "s",
            "vocabulary": "s",
            "ours s": ".2f",
            "llguidance s": ".2f",
            "xgrammar s": ".2f",
            "xgrammar builtin s": ".3f",
            "our tables MB": ".1f",
        },
    )
    for row in rows:
        compiles.add(*row)
    record("cfg", args, {"tables": [per_token, compiles], "headline": headlines(measured)})


if __name__ == "__main__":
    main()
