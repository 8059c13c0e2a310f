"""LALR(1) tables against the Earley oracle, on terminal sequences."""

import numpy as np
import pytest

from ananke_jax import GrammarError
from ananke_jax._src.compile.lr import lr_tables
from ananke_jax._src.engines.lr import ACCEPT, ERROR, MAX_RULE_LENGTH, REDUCE, SHIFT
from ananke_jax._src.ir import grammar

from earley import EarleyRecogniser

ARITHMETIC = grammar(
    [("e", ["e", "PLUS", "t"]), ("e", ["t"]), ("t", ["t", "STAR", "f"]), ("t", ["f"]), ("f", ["LP", "e", "RP"]), ("f", ["NUM"])],
    {"PLUS": r"\+", "STAR": r"\*", "LP": r"\(", "RP": r"\)", "NUM": "n"},
    "e",
)
# Nullable rules, right recursion and a list with separators.
LISTS = grammar(
    [
        ("s", ["LB", "items", "RB"]),
        ("items", []),
        ("items", ["item", "more"]),
        ("more", []),
        ("more", ["COMMA", "item", "more"]),
        ("item", ["X"]),
        ("item", ["s"]),
    ],
    {"LB": r"\[", "RB": r"\]", "COMMA": ",", "X": "x"},
    "s",
)


def lr_parse(tables, terminals: list[str]) -> str:
    """'accept', 'viable' (a prefix the parser took without error) or 'error', by plain LR."""
    stack = [tables.start_state]
    column = {name: j for j, name in enumerate(tables.terminals)}
    for name in [*terminals, "$END"]:
        while True:
            kind, arg = tables.action_kind[stack[-1], column[name]], tables.action_arg[stack[-1], column[name]]
            if kind == SHIFT:
                stack.append(int(arg))
                break
            if kind == REDUCE:
                del stack[len(stack) - int(tables.rule_length[arg]) :]
                stack.append(int(tables.goto[stack[-1], tables.rule_lhs[arg]]))
                continue
            if kind == ACCEPT and name == "$END":
                return "accept"
            return "error" if name != "$END" else "viable"
    raise AssertionError("unreachable")


@pytest.mark.parametrize("g", [ARITHMETIC, LISTS], ids=["arithmetic", "lists"])
def test_lr_agrees_with_earley_on_random_terminal_sequences(g):
    tables = lr_tables(g.validate())
    earley = EarleyRecogniser(g)
    char = {t.name: t.regex.replace("\\", "") for t in g.terminals}
    names = list(char)
    rng = np.random.default_rng(0)
    seen = {"accept": 0, "viable": 0, "error": 0}
    for _ in range(2500):
        seq = [str(x) for x in rng.choice(names, size=int(rng.integers(0, 9)))]
        data = "".join(char[n] for n in seq).encode()
        result = lr_parse(tables, seq)
        seen[result] += 1
        assert (result == "accept") == earley.accepts(data), seq
        assert (result != "error") == earley.viable(data), seq
    assert min(seen.values()) >= 10  # every outcome is exercised


def test_conflicts_are_refused_naming_the_rules():
    ambiguous = grammar([("e", ["e", "PLUS", "e"]), ("e", ["NUM"])], {"PLUS": r"\+", "NUM": "[0-9]+"}, "e")
    with pytest.raises(GrammarError, match=r"shift/reduce conflict before terminal PLUS: reduce by e ::= e PLUS e"):
        lr_tables(ambiguous)
    assert ERROR == 0  # the zero of the action table is the error action


def test_an_alternative_longer_than_the_engine_takes_is_refused_naming_its_rule():
    long = grammar([("s", ["X"] * (MAX_RULE_LENGTH + 1))], {"X": "x"}, "s")
    with pytest.raises(GrammarError, match=rf"rule 's' has {MAX_RULE_LENGTH + 1} symbols; the engine takes at most {MAX_RULE_LENGTH}"):
        lr_tables(long)


@pytest.mark.slow
def test_tables_are_the_same_in_every_process():
    """lark keeps LR(0) states in a set, ordered by string hashes: the states are renumbered
    breadth first, so a grammar's tables do not depend on the process's hash seed."""
    import os
    import pathlib
    import subprocess
    import sys

    script = (
        "import hashlib, pathlib, sys; import numpy as np\n"
        "from ananke_jax import gbnf_to_ir\n"
        "from ananke_jax._src.compile.lr import lr_tables\n"
        "t = lr_tables(gbnf_to_ir(pathlib.Path(sys.argv[1]).read_text()))\n"
        "print(hashlib.sha256(b''.join(np.ascontiguousarray(a).tobytes() for a in (t.action_kind, t.action_arg, t.goto))).hexdigest())\n"
    )
    path = pathlib.Path(__file__).parent.parent / "grammars" / "c_subset.gbnf"
    digests = {
        subprocess.run(
            [sys.executable, "-c", script, str(path)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2", "3")
    }
    assert len(digests) == 1  # one digest from three hash seeds
