"""The benchmarks' records and their rendering (bench/harness.py, bench/render.py), on a small
synthetic record: no timing, no peers. And the rules the bench scripts keep: each takes
``--quick`` and writes a record, none edits ``sys.path`` or imports from tests/."""

import argparse
import ast
import json
import pathlib

import pytest

BENCH = pathlib.Path(__file__).resolve().parent.parent / "bench"
SCRIPTS = sorted(p for p in BENCH.glob("*.py") if p.stem not in ("harness", "render"))


@pytest.fixture
def bench(monkeypatch):
    """The harness and the renderer, imported the way the scripts import them."""
    monkeypatch.syspath_prepend(str(BENCH))
    import harness
    import render

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
    assert f"commit {record['git']['commit']}" in page and record["date"][:10] in page
    assert f"jax {record['versions']['jax']}" in page
    assert "## other: `python bench/other.py`" in render.render({}, {"other": ["What other measures."]})  # no record yet


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
    calls = {n.func.id for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    assert {"parser", "parse", "record"} <= calls, f"{path.name} must parse its arguments with the harness (--quick) and record its results"
