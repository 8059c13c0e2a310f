"""The official JSON Schema Test Suite (draft 2020-12) against compiled schemas.

Each group's schema is compiled with the specification's defaults (``allow_additional=True``).
An instance is walked token by token through the compiled tables of a byte-level vocabulary
(one token per byte, plus EOS) when the schema is regular; a recursive schema's grammar IR is
walked byte by byte with the Earley oracle (which the pushdown engine is checked against in
test_pushdown.py and test_grammar_files.py). Object members may come in any order in JSON, and
the compiled language fixes one, so every order of each object's keys is tried; numbers are
written in fixed-point notation, integral ones also without fraction. A valid instance must have
an accepted spelling after which EOS is allowed; an invalid one must have none.

Run ``python tests/schema_suite.py`` for the pass-rate table; ``python bench/json_schema_suite.py``
records it for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import decimal
import functools
import json
import os
import pathlib

import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.json_schema.api import json_schema_rules
from ananke_jax._src.json_schema.assemble import recursive_rules, to_grammar

from earley import EarleyRecogniser

SUITE = pathlib.Path(os.environ.get("JSON_SCHEMA_TEST_SUITE", pathlib.Path(__file__).parents[2] / "shared/data/JSON-Schema-Test-Suite"))
DRAFT = SUITE / "tests/draft2020-12"
KEYWORDS = [
    "type",
    "enum",
    "const",
    "boolean_schema",
    "properties",
    "required",
    "additionalProperties",
    "patternProperties",
    "propertyNames",
    "minProperties",
    "maxProperties",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "multipleOf",
    "items",
    "prefixItems",
    "minItems",
    "maxItems",
    "contains",
    "minContains",
    "maxContains",
    "anyOf",
    "oneOf",
    "allOf",
    "ref",
    "defs",
    "if-then-else",
    "not",
]
FORMATS = ["date", "time", "date-time", "duration", "uuid", "email", "ipv4", "ipv6", "hostname", "uri"]
# (keyword, group) -> why the group tests what is out of scope. Its cases are counted apart; their
# verdicts are still pinned by test_json_schema_suite.py.
OUT_OF_SCOPE = {
    ("format:hostname", "validation of A-label (punycode) host names"): (
        "IDNA A-labels: validity is Punycode decoding and RFC 5892's contextual rules over the decoded"
        " code points (what idn-hostname checks), which no regular language of workable size expresses;"
        " every xn-- label is refused, so no invalid one is generated"
    ),
}


def require_suite() -> None:
    """Skip the calling test when the suite is missing (fail under CI, where it must be there)."""
    if not DRAFT.is_dir():
        if os.environ.get("CI"):
            pytest.fail(f"JSON Schema Test Suite missing at {SUITE}")
        pytest.skip(f"JSON Schema Test Suite not found at {SUITE} (set JSON_SCHEMA_TEST_SUITE)")


def suite_cases(folder: str, files) -> list[tuple]:
    """``(file, group, test, schema, data, valid)`` per case of ``files`` in ``folder`` of the
    draft ([] without the suite)."""
    if not DRAFT.is_dir():
        return []
    return [
        (file, group["description"], case["description"], group["schema"], case["data"], case["valid"])
        for file in files
        for group in json.loads((DRAFT / folder / file).read_text(encoding="utf-8"))
        for case in group["tests"]
    ]


def parametrize_cases(argnames: str, cases: list[tuple], departures: dict, values):
    """``pytest.mark.parametrize`` over ``values(case)`` per case, a strict xfail where
    ``departures`` names the case's ``(file, group, test)``; one all-None case without the suite
    (the test then calls ``require_suite``)."""
    params = []
    for case in cases:
        reason = departures.get(case[:3])
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        params.append(pytest.param(*values(case), marks=marks, id=": ".join(case[:3])))
    width = len(argnames.split(","))
    return pytest.mark.parametrize(argnames, params or [pytest.param(*[None] * width, id="suite-missing")])


def suite_files() -> list[tuple[str, pathlib.Path]]:
    return [(k, DRAFT / f"{k}.json") for k in KEYWORDS] + [(f"format:{f}", DRAFT / "optional/format" / f"{f}.json") for f in FORMATS]


def load(path: pathlib.Path) -> list[dict]:
    return json.loads(path.read_text(), parse_float=decimal.Decimal)


@functools.lru_cache(maxsize=1)
def byte_vocab() -> aj.Vocabulary:
    return aj.Vocabulary.from_tokens([bytes([b]) for b in range(256)] + [b""], eos_token_ids=[256])


class Walker:
    """Sets of positions after spellings of a value: DFA states, or Earley charts."""

    def __init__(self, schema):
        rules = json_schema_rules(schema, allow_additional=True)
        recursive = recursive_rules(rules)
        self.earley = EarleyRecogniser(to_grammar(rules, recursive)) if recursive else None
        if self.earley is None:
            cg = aj.compile_json_schema(schema, byte_vocab(), allow_additional=True)
            self.next_state = np.asarray(cg.next_state)
            self.token_class = np.asarray(cg.class_of_token)
            self.accepting = np.asarray(cg.accepting)
            self.start = int(cg.start_state)
            masks = np.unpackbits(np.asarray(cg.mask_rows).view(np.uint8), axis=1, bitorder="little")
            self.allowed = masks[np.asarray(cg.row_of_state)].astype(bool)

    def initial(self) -> list:
        return [self.earley.initial()] if self.earley else [self.start]

    def feed(self, positions: list, text: str) -> list:
        out = []
        for p in positions:
            if self.earley:
                chart = self.earley.feed(p, text.encode())
                if self.earley.is_viable(chart):
                    out.append(chart)
                continue
            for b in text.encode():
                if not self.allowed[p, b]:
                    p = 0
                    break
                p = int(self.next_state[p, self.token_class[b]])
            if p:
                out.append(p)
        return out if self.earley else sorted(set(out))

    def complete(self, positions: list) -> bool:
        if self.earley:
            return any(self.earley.is_complete(c) for c in positions)
        return any(self.allowed[p, 256] and self.accepting[p] for p in positions)

    def value(self, positions: list, v) -> list:
        if not positions:
            return []
        if isinstance(v, dict):
            return self._members(self.feed(positions, "{"), v, set(v), True)
        if isinstance(v, list):
            positions = self.feed(positions, "[")
            for i, x in enumerate(v):
                positions = self.value(self.feed(positions, ",") if i else positions, x)
            return self.feed(positions, "]")
        if isinstance(v, (int, decimal.Decimal)) and not isinstance(v, bool):
            out = []
            for spelling in _number_spellings(v):
                out += self.feed(positions, spelling)
            return out
        return self.feed(positions, json.dumps(v, ensure_ascii=False))

    def _members(self, positions: list, v: dict, remaining: set, first: bool) -> list:
        if not positions:
            return []
        if not remaining:
            return self.feed(positions, "}")
        out = []
        for k in remaining:
            after_key = self.feed(positions, ("" if first else ",") + json.dumps(k, ensure_ascii=False) + ":")
            out += self._members(self.value(after_key, v[k]), v, remaining - {k}, False)
        return out

    def accepts(self, instance) -> bool:
        return self.complete(self.value(self.initial(), instance))


def _number_spellings(v) -> list[str]:
    d = decimal.Decimal(v)
    fixed = format(d, "f")
    spellings = [fixed]
    if d == d.to_integral_value():
        spellings.append(format(d.to_integral_value(), "f"))
    return list(dict.fromkeys("0" if decimal.Decimal(s) == 0 else s for s in spellings))


def results(path: pathlib.Path):
    """Yield ``(group, test, outcome)``: outcome is "pass", "fail" or "unsupported: <reason>"."""
    for group in load(path):
        try:
            walker = Walker(group["schema"])
        except aj.SchemaError as e:
            # A schema no value satisfies is refused at compile time: right for invalid instances.
            empty = "accepts no JSON value" in str(e)
            for test in group["tests"]:
                yield group["description"], test["description"], "pass" if empty and not test["valid"] else f"unsupported: {e}"
            continue
        for test in group["tests"]:
            ok = walker.accepts(test["data"]) == test["valid"]
            yield group["description"], test["description"], "pass" if ok else "fail"


COLUMNS = ["keyword", "cases", "pass", "fail", "unsupported", "out of scope (pass / fail)"]


def table_row(keyword: str, path: pathlib.Path) -> list:
    """The keyword group's row of the pass-rate table (``COLUMNS``)."""
    outcomes = [(o, (keyword, g) in OUT_OF_SCOPE) for g, _, o in results(path)]
    scoped = [o for o, out in outcomes if not out]
    counts = [sum(o == "pass" for o in scoped), sum(o == "fail" for o in scoped), sum(o.startswith("unsupported") for o in scoped)]
    out = [o for o, out in outcomes if out]
    apart = f"{len(out)} ({sum(o == 'pass' for o in out)} / {sum(o == 'fail' for o in out)})" if out else "0"
    return [keyword, len(scoped), *counts, apart]


def main() -> None:
    parser = argparse.ArgumentParser(description="Print the pass-rate table per keyword group.")
    parser.add_argument("--keywords", nargs="+", help="only these groups (e.g. type format:date)")
    parser.add_argument("--json", metavar="PATH", help="also write the table there as JSON (bench/json_schema_suite.py records it)")
    args = parser.parse_args()
    if not DRAFT.is_dir():
        parser.error(f"JSON Schema Test Suite not found at {SUITE} (set JSON_SCHEMA_TEST_SUITE)")
    print("| " + " | ".join(COLUMNS) + " |\n" + "| --- " * len(COLUMNS) + "|")
    rows = []
    for keyword, path in suite_files():
        if not args.keywords or keyword in args.keywords:
            rows.append(table_row(keyword, path))
            print("| " + " | ".join(map(str, rows[-1])) + " |", flush=True)
    if args.json:
        source = SUITE / "SOURCE.txt"
        source = source.read_text(encoding="utf-8").splitlines()[0] if source.exists() else None
        pathlib.Path(args.json).write_text(json.dumps({"source": source, "columns": COLUMNS, "rows": rows}), encoding="utf-8")


if __name__ == "__main__":
    main()
