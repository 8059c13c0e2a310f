"""Render docs/benchmarks.md from the records the benchmarks wrote in bench/results/*.json.

The page opens with the method and what each script measures (the first paragraph of its
docstring), then shows each record under the command that reproduces it: the date, machine,
commit and versions it was measured with, the rest of the script's docstring, and its tables.
Nothing on the page is typed by hand.

The README's headline table, between its lines `<!-- headline:begin -->` and
`<!-- headline:end -->`, is rendered too: the "headline" rows of each record, each with the date,
machine and commit it was measured at and the command that measures it.

    python bench/render.py [--results bench/results] [--out docs/benchmarks.md] [--readme README.md]
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import pathlib
import re
import shlex

from harness import RESULTS, ROOT, cell

# The order of the sections; a record of another name comes after these.
ORDER = ["step", "fusion", "cfg", "json_schema", "schema_corpus", "json_schema_suite", "generate", "domino"]
METHOD = """\
Every figure on this page is the output of a script in `bench/` that anyone can run. Each script
prints its tables while it measures and writes them to `bench/results/<name>.json` with the date
(UTC), the machine (CPU, cores, OS, jax backend and device), the git commit (and whether tracked
files differed from it), the versions of Python, jax, jaxlib, numpy and the peers, and its command
line; `python bench/render.py` turns those records into this page.

Ratios are measured side by side in one run: the things compared (a constrained and an
unconstrained step, this library and a peer) take turns inside one process, and the medians of
their turns are compared. Absolute times drift between minutes on a shared machine; ratios taken
this way drift much less, so quote ratios. Peers (XGrammar, llguidance, outlines-core) are timed
only where installed: `pip install ".[bench]"`, after a CPU build of torch (see that extra in
pyproject.toml). Every script takes `--quick`, a small run (fewer repeats,
sizes or inputs) that checks it end to end in a minute or two; a quick record is marked below and
is not a figure to quote. Each record says how long its run took.
"""


MODULES = ("harness", "render", "stream")  # shared code, not benchmarks


def script_docs(bench: pathlib.Path = ROOT / "bench") -> dict[str, list[str]]:
    """``{script name: paragraphs of its docstring}`` for the benchmarks in ``bench``, each
    paragraph on one line, the indented usage lines left out."""
    found = {}
    for path in sorted(bench.glob("*.py")):
        if path.stem not in MODULES:
            doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")), clean=False) or ""
            paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if not p.startswith("    ")]
            found[path.stem] = [p for p in paragraphs if p]
    return found


def load_records(directory: pathlib.Path) -> dict[str, dict]:
    """``{key: record}`` for the records in ``directory``, keyed by file name: the script's name,
    then ``.<backend>`` for a record measured on an accelerator (see `harness.record`)."""
    return {p.stem: json.loads(p.read_text(encoding="utf-8")) for p in sorted(directory.glob("*.json"))}


def script(key: str) -> str:
    """The script a record's key names (``serving.gpu`` -> ``serving``)."""
    return key.split(".")[0]


def ordered(keys) -> list[str]:
    """Record keys and script names in the order of the sections, a script's CPU record first."""
    rank = {name: i for i, name in enumerate(ORDER)}
    return sorted(set(keys), key=lambda key: (rank.get(script(key), len(ORDER)), script(key), key))


def provenance(r: dict) -> str:
    """One line: when, where, at which commit and with which versions the record was measured."""
    m, git = r["machine"], r["git"]
    commit = f"{git['commit']}{' (with uncommitted changes)' if git['dirty'] else ''}" if git["commit"] else "unknown"
    installed = ", ".join(f"{k} {v}" for k, v in r["versions"].items() if v)
    absent = ", ".join(k for k, v in r["versions"].items() if not v)
    date = datetime.datetime.fromisoformat(r["date"]).astimezone(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"{date} · {m['cpu']}, {m['cores']} cores, {m['os']}, jax on {m['jax_backend']} ({m['device_kind']}) · "
        f"commit {commit} · {installed}{f'; not installed: {absent}' if absent else ''} · run took {r['seconds']:.0f} s"
    )


def markdown_table(table: dict) -> str:
    right = [spec != "s" for spec in table["formats"]]
    lines = [
        "| " + " | ".join(table["columns"]) + " |",
        "| " + " | ".join("---:" if r else "---" for r in right) + " |",
        *("| " + " | ".join(cell(v, spec).replace("|", "\\|") for v, spec in zip(row, table["formats"])) + " |" for row in table["rows"]),
    ]
    return "\n".join(lines)


def section(name: str, r: dict | None, doc: list[str]) -> str:
    """A benchmark's heading and command, the provenance of its record, the rest of its script's
    docstring, and the record's tables (a placeholder without a record)."""
    if r is None:
        return "\n\n".join([f"## {name}: `python bench/{name}.py`", *doc[1:], "_Not measured yet: no record in bench/results/._"])
    full = shlex.join(a for a in shlex.split(r["command"]) if a != "--quick")
    where = f" on {r['machine']['device_kind']}" if r["machine"]["jax_backend"] != "cpu" else ""
    parts = [f"## {name}: `{full}`{where}{' (quick run)' if r['quick'] else ''}", f"_{provenance(r)}_", *doc[1:]]
    if r["quick"]:
        parts.append(
            f"**Quick run** (`{r['command']}`): a check that the script works, not a figure to quote; `{full}` gives the full one."
        )
    elif full != r["command"]:
        parts.append(f"Command: `{r['command']}`")
    parts.extend(
        f"### {table['title']}\n\n{markdown_table(table)}" + (f"\n\n{table['note']}" if table["note"] else "")
        for table in r["results"].get("tables", [])
    )
    if r["results"].get("notes"):
        parts.append("\n".join(f"- {note}" for note in r["results"]["notes"]))
    return "\n\n".join(parts)


def render(records: dict[str, dict], docs: dict[str, list[str]]) -> str:
    """The page: the method and what each script measures, then one section per script or record."""
    method = "\n".join(f"- `bench/{name}.py`: {docs[name][0]}" for name in ordered(docs) if docs[name])
    sections = [section(script(key), records.get(key), docs.get(script(key), [])) for key in ordered([*docs, *records])]
    header = "# Benchmarks\n\nRendered by `python bench/render.py` from `bench/results/*.json`; do not edit by hand."
    return "\n\n".join([header, "## Method", METHOD.strip(), method, *sections]) + "\n"


BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
NO_HEADLINE = "_No benchmark has been recorded yet: run the scripts in bench/ and python bench/render.py._"
_ARCH = re.compile(r"x86_64|amd64|aarch64|arm64|i686|ppc64le|s390x", re.IGNORECASE)


def short_machine(m: dict) -> str:
    """The machine in a few words: the accelerator's name, or the CPU's architecture and cores."""
    if m["jax_backend"] != "cpu":
        return m["device_kind"]
    arch = _ARCH.search(m["os"])
    return f"{arch.group(0) if arch else m['cpu']} {m['cores']}-core CPU (jax cpu)"


def short_provenance(r: dict) -> str:
    """``date · machine · commit``, and "(quick run)" for a quick record."""
    git = r["git"]
    commit = f"{git['commit']}{' (modified)' if git['dirty'] else ''}" if git["commit"] else "commit unknown"
    date = datetime.datetime.fromisoformat(r["date"]).astimezone(datetime.timezone.utc).strftime("%Y-%m-%d")
    return f"{date} · {short_machine(r['machine'])} · {commit}{' (quick run)' if r['quick'] else ''}"


def headline_table(records: dict[str, dict]) -> str:
    """The README's headline table: the records' "headline" rows in the order of the sections, or
    a line saying that none is recorded."""
    rows = [
        "| "
        + " | ".join(
            [
                row["what"].replace("|", "\\|"),
                row["figure"].replace("|", "\\|"),
                short_provenance(r),
                f"`{r['command']}`".replace("|", "\\|"),
            ]
        )
        + " |"
        for r in (records[name] for name in ordered(records))
        for row in r["results"].get("headline", [])
    ]
    if not rows:
        return NO_HEADLINE
    return "\n".join(["| what | figure | measured (date · machine · commit) | command |", "| --- | --- | --- | --- |", *rows])


def with_headline(readme: str, records: dict[str, dict]) -> str:
    """``readme`` with the lines between its headline markers replaced by `headline_table`.

    Raises:
        ValueError: if the markers are not there, each on a line of its own, once and in order.
    """
    lines = readme.split("\n")
    if lines.count(BEGIN) != 1 or lines.count(END) != 1 or lines.index(BEGIN) > lines.index(END):
        raise ValueError(f"the README must have the lines {BEGIN} and {END}, once each and in this order")
    begin, end = lines.index(BEGIN), lines.index(END)
    return "\n".join([*lines[: begin + 1], "", headline_table(records), "", *lines[end:]])


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--results", type=pathlib.Path, default=RESULTS)
    p.add_argument("--out", type=pathlib.Path, default=ROOT / "docs" / "benchmarks.md")
    p.add_argument("--readme", type=pathlib.Path, default=ROOT / "README.md", help="the README whose headline table is rewritten")
    args = p.parse_args()
    records = load_records(args.results)
    args.out.write_text(render(records, script_docs()), encoding="utf-8")
    print(f"wrote {args.out}")
    readme = args.readme.read_text(encoding="utf-8")
    updated = with_headline(readme, records)
    if updated != readme:
        args.readme.write_text(updated, encoding="utf-8")
        print(f"wrote the headline table of {args.readme}")


if __name__ == "__main__":
    main()
