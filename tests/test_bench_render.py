"""The benchmarks' records and their rendering (bench/harness.py, bench/render.py: the page and
the README's headline table), on small synthetic records: no timing, no peers. And the rules the
bench scripts keep: each takes ``--quick``, writes a record with headline rows, and none edits
``sys.path`` or imports from tests/."""

import argparse
import ast
import json
import pathlib
import sys

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.stem not in ("harness", "render", "stream"))  # render.MODULES


@pytest.fixture
def bench(monkeypatch):
    """The harness and the renderer, imported the way the scripts import them."""
    monkeypatch.syspath_prepend(str(BENCH))
    import render

    import harness

    return harness, render


@pytest.fixture
def record(bench, tmp_path) -> dict:
    harness, _ = bench
    table = harness.Table("demo (ms)", {"batch": "d", "engine": "s", "ms": ".2f", "ratio": ".3f"}, "A note.")
    table.add(1, "ours", 1.234, 0.5)
    table.add(8, "a|b", None, None)
    args = argparse.Namespace(quick=True, repeats=2)
    path = harness.record("demo", args, {"tables": [table], "notes": ["failure: none"]}, directory=tmp_path)
    assert path == tmp_path / "demo.json"
    return json.loads(path.read_text(encoding="utf-8"))


def test_record_has_the_metadata(record):
    assert {"name", "quick", "command", "args", "seconds", "date", "machine", "git", "versions", "results"} <= set(record)
    assert record["quick"] is True and record["args"] == {"quick": True, "repeats": 2}
    assert record["date"].endswith("+00:00")  # UTC, ISO 8601
    assert set(record["machine"]) == {"cpu", "cores", "os", "jax_backend", "device_kind"}
    assert set(record["git"]) == {"commit", "dirty"}
    assert {"python", "jax", "jaxlib", "numpy", "xgrammar", "llguidance", "outlines-core", "torch"} <= set(record["versions"])
    assert record["versions"]["jax"] and record["versions"]["numpy"]
    table = record["results"]["tables"][0]
    assert table["columns"] == ["batch", "engine", "ms", "ratio"] and table["rows"][1] == [8, "a|b", None, None]


def test_render_shows_tables_and_provenance(bench, record, tmp_path):
    _, render = bench
    docs = {"demo": ["What demo measures.", "How it measures it."]}
    page = render.render(render.load_records(tmp_path), docs)
    assert "- `bench/demo.py`: What demo measures." in page
    assert "How it measures it." in page
    assert "| batch | engine | ms | ratio |\n| ---: | --- | ---: | ---: |\n| 1 | ours | 1.23 | 0.500 |\n| 8 | a\\|b | - | - |" in page
    assert "**Quick run**" in page and "A note." in page and "- failure: none" in page


def test_an_accelerator_record_renders_beside_the_cpu_one(bench, record, tmp_path):
    _, render = bench
    gpu = json.loads(json.dumps(record))
    gpu["machine"] |= {"jax_backend": "gpu", "device_kind": "NVIDIA H200"}
    gpu["results"]["tables"][0]["rows"][0][2] = 0.042
    (tmp_path / "demo.gpu.json").write_text(json.dumps(gpu), encoding="utf-8")
    records = render.load_records(tmp_path)
    assert render.ordered([*records, "cfg", "step"]) == ["step", "cfg", "demo", "demo.gpu"]
    page = render.render(records, {"demo": ["What demo measures.", "How it measures it."]})
    cpu, accelerator = page.split("## demo: `python")[1:]
    assert "on NVIDIA H200" in accelerator.split("\n")[0] and "on NVIDIA" not in cpu.split("\n")[0]
    assert "| 1 | ours | 1.23 | 0.500 |" in cpu and "| 1 | ours | 0.04 | 0.500 |" in accelerator
    assert "How it measures it." in cpu and "How it measures it." in accelerator
    assert f"commit {record['git']['commit']}" in page and record["date"][:10] in page
    assert f"jax {record['versions']['jax']}" in page
    assert "## other: `python bench/other.py`" in render.render({}, {"other": ["What other measures."]})  # no record yet


README = """# Project

Intro.

<!-- headline:begin -->
stale figures
<!-- headline:end -->

After the table.
"""


@pytest.fixture
def headline_records(bench, tmp_path) -> pathlib.Path:
    """Records in ``tmp_path/results``: step (a full run, two headline rows), cfg (a quick run,
    one row), fusion (no headline rows)."""
    harness, _ = bench
    results = tmp_path / "results"
    rows = {
        "step": [
            harness.headline("decode step, batch 1", harness.ratio_figure(1.0123, "unconstrained")),
            harness.headline("a|b", harness.ratio_figure(12.34, "c")),
        ],
        "cfg": [harness.headline("mask + advance per token", f"{harness.ratio_figure(0.8, 'llguidance')} (JSON, 131k)")],
        "fusion": [],
    }
    for name, headline in rows.items():
        harness.record(
            name, argparse.Namespace(quick=name == "cfg"), {"tables": [], **({"headline": headline} if headline else {})}, directory=results
        )
    return results


def test_headline_table_in_the_readme(bench, headline_records):
    _, render = bench
    records = render.load_records(headline_records)
    out = render.with_headline(README, records)
    before, rest = out.split("<!-- headline:begin -->\n")
    table, after = rest.split("<!-- headline:end -->")
    assert before == README.split("<!-- headline:begin -->")[0] and after == README.split("<!-- headline:end -->")[1]
    lines = table.strip().split("\n")
    assert lines[:2] == ["| what | figure | measured (date · machine · commit) | command |", "| --- | --- | --- | --- |"]
    step = records["step"]
    assert lines[2].startswith("| decode step, batch 1 | 1.01x unconstrained | " + step["date"][:10] + " · ")
    assert lines[3].startswith("| a\\|b | 12.3x c | ")
    assert lines[4].startswith("| mask + advance per token | 0.80x llguidance (JSON, 131k) | ") and lines[4].count("(quick run)") == 1
    assert "(quick run)" not in lines[2] and len(lines) == 5  # step before cfg (the sections' order); fusion has no rows
    commit = step["git"]["commit"] or "commit unknown"
    assert all(commit in line and f"`{records[name]['command']}`" in line for line, name in zip(lines[2:], ["step", "step", "cfg"]))
    assert render.with_headline(out, records) == out  # a second render changes nothing


def test_headline_table_without_records(bench):
    _, render = bench
    out = render.with_headline(README, {})
    assert "stale figures" not in out
    assert out.split("<!-- headline:begin -->")[1].split("<!-- headline:end -->")[0].strip() == render.NO_HEADLINE
    assert render.with_headline(out, {}) == out
    with pytest.raises(ValueError, match="headline:begin"):
        render.with_headline("# No markers\n", {})


def test_short_provenance(bench):
    _, render = bench
    r = {
        "date": "2025-03-04T23:30:00+00:00",
        "quick": False,
        "git": {"commit": "abc1234", "dirty": True},
        "machine": {
            "cpu": "Some CPU",
            "cores": 2,
            "os": "Linux-6.8.0-gcp-x86_64-with-glibc2.39",
            "jax_backend": "cpu",
            "device_kind": "cpu",
        },
    }
    assert render.short_provenance(r) == "2025-03-04 · x86_64 2-core CPU (jax cpu) · abc1234 (modified)"
    gpu = {
        **r,
        "quick": True,
        "git": {"commit": "abc1234", "dirty": False},
        "machine": {**r["machine"], "jax_backend": "gpu", "device_kind": "NVIDIA H100 80GB HBM3"},
    }
    assert render.short_provenance(gpu) == "2025-03-04 · NVIDIA H100 80GB HBM3 · abc1234 (quick run)"


def test_main_writes_the_page_and_the_readme(bench, headline_records, tmp_path, monkeypatch):
    _, render = bench
    readme, page = tmp_path / "README.md", tmp_path / "benchmarks.md"
    readme.write_text(README, encoding="utf-8")
    monkeypatch.setattr(sys, "argv", ["render.py", "--results", str(headline_records), "--out", str(page), "--readme", str(readme)])
    render.main()
    assert "| decode step, batch 1 | 1.01x unconstrained |" in readme.read_text(encoding="utf-8")
    assert page.read_text(encoding="utf-8").startswith("# Benchmarks")


def test_render_describes_every_script(bench):
    _, render = bench
    docs = render.script_docs()
    assert sorted(docs) == [p.stem for p in SCRIPTS]
    assert all(doc and not doc[0].startswith("python ") for doc in docs.values())


def _imported_modules(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", [*SCRIPTS, BENCH / "harness.py", BENCH / "render.py"], ids=lambda p: p.name)
def test_bench_leaves_sys_path_and_tests_alone(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    edits = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "path" and getattr(n.value, "id", None) == "sys"]
    assert not edits, f"{path.name} touches sys.path"
    test_modules = {p.stem for p in pathlib.Path(__file__).parent.glob("*.py")} | {"tests"}
    assert not _imported_modules(tree) & test_modules, f"{path.name} imports from tests/"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_takes_quick_and_records(path):
    calls = {
        n.func.id for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
    }
    assert {"parser", "parse", "record"} <= calls, f"{path.name} must parse its arguments with the harness (--quick) and record its results"


@pytest.mark.parametrize("path", SCRIPTS, ids=lambda p: p.name)
def test_bench_script_records_headline_rows(path):
    assert '"headline"' in path.read_text(encoding="utf-8"), f"{path.name} must record its headline rows (the README's table)"
