"""The demo a new user runs first: `python -m ananke_jax`."""

import re

from ananke_jax.__main__ import DEFAULT_REGEX, main


def test_demo_generates_outputs_that_match_the_default_regex(capsys):
    assert main(["--samples", "3", "--max-tokens", "96"]) == 0
    out = capsys.readouterr().out
    texts = re.findall(r"^\[matches, \d+ tokens\] (.*)$", out, re.M)
    assert texts and all(re.fullmatch(DEFAULT_REGEX, t, re.ASCII) for t in texts)
    assert "MISMATCH" not in out


def test_demo_with_a_real_tokenizer_and_choices(capsys, sentencepiece_model_path):
    assert main(["--sentencepiece", sentencepiece_model_path, "--choices", "alpha", "beta", "--samples", "2"]) == 0
    texts = re.findall(r"^\[matches, \d+ tokens\] (.*)$", capsys.readouterr().out, re.M)
    assert len(texts) == 2 and set(texts) <= {"alpha", "beta"}


def test_demo_reports_bad_input_clearly(capsys, tmp_path):
    assert main(["--regex", "(a"]) == 2
    assert "unterminated subpattern at position 0" in capsys.readouterr().err
    assert main(["--tekken", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
