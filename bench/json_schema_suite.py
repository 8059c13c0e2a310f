"""JSON Schema Test Suite conformance: per keyword group of draft 2020-12, the cases whose
verdict the compiled schema gets right ("pass"), gets wrong ("fail") or cannot give because the
schema is refused ("unsupported"); groups that test what is out of scope are counted apart.

The cases are run by tests/schema_suite.py, which the tests share: this script runs it as a
command (`python tests/schema_suite.py --json PATH`) and records its table. It needs the test
suite in ../shared/data/JSON-Schema-Test-Suite or at $JSON_SCHEMA_TEST_SUITE. The full run
takes seconds; ``--quick`` runs a few groups only.

    python bench/json_schema_suite.py [--quick] [--keywords type enum ...]
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import tempfile

from harness import ROOT, Table, headline, parse, parser, record

COLUMNS = {"keyword": "s", "cases": "d", "pass": "d", "fail": "d", "unsupported": "d", "out of scope (pass / fail)": "s"}


def run_suite(keywords: list[str] | None) -> dict:
    """The table of tests/schema_suite.py: ``{"source", "columns", "rows"}``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "suite.json"
        command = [
            sys.executable,
            str(ROOT / "tests" / "schema_suite.py"),
            "--json",
            str(out),
            *(["--keywords", *keywords] if keywords else []),
        ]
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text(encoding="utf-8"))


def headlines(total: list) -> list[dict]:
    """From the table's total row: the in-scope cases passed, of those whose schema compiles (a
    verdict given), and the share of in-scope cases whose schema compiles."""
    _, cases, passed, failed, _ = total[:5]
    compiled = passed + failed
    rows = []
    if compiled:
        rows.append(
            headline(
                "JSON Schema Test Suite (2020-12): in-scope cases passed, of those compiled",
                f"{passed / compiled:.1%} ({passed:,}/{compiled:,})",
            )
        )
    if cases:
        rows.append(
            headline(
                "JSON Schema Test Suite (2020-12): in-scope cases whose schema compiles", f"{compiled / cases:.1%} ({compiled:,}/{cases:,})"
            )
        )
    return rows


def main():
    p = parser(__doc__)
    p.add_argument("--keywords", nargs="+", help="only these keyword groups (all by default)")
    args = parse(p, keywords=["type", "properties", "anyOf", "format:date"])
    suite = run_suite(args.keywords)
    assert suite["columns"] == list(COLUMNS), suite["columns"]
    table = Table("cases per keyword group, draft 2020-12", COLUMNS, f"JSON Schema Test Suite {suite['source'] or '(source unknown)'}.")
    for row in suite["rows"]:
        table.add(*row)
    table.add("total", *(sum(row[i] for row in suite["rows"]) for i in range(1, 5)), None)
    record("json_schema_suite", args, {"tables": [table], "headline": headlines(table.rows[-1])})


if __name__ == "__main__":
    main()
