"""Conformance with the official JSON Schema Test Suite (draft 2020-12); see schema_suite.py.

Every case of a keyword in scope either passes, is a listed departure (a known wrong verdict, with
its reason), or belongs to a listed group whose schema is refused with `SchemaError`. Groups out of
scope (`schema_suite.OUT_OF_SCOPE`) are pinned the same way, their wrong verdicts listed here. A
case that changes category fails the test, so the lists below are the whole truth.
"""

import pytest

from schema_suite import OUT_OF_SCOPE, require_suite, results, suite_files

# (keyword, group) or (keyword, group, test) -> why the verdict is wrong.
DEPARTURES = {
    (
        "format:hostname",
        "validation of host names",
        "exceeds maximum overall length (256)",
    ): "the 253-byte total is not checked (24k states)",
    # Out of scope: every xn-- label is refused, the 15 valid ones included.
    ("format:hostname", "validation of A-label (punycode) host names"): "Punycode (xn--) labels are refused: IDNA is not regular",
}
assert all(group in OUT_OF_SCOPE for group in DEPARTURES if len(group) == 2), "a whole group departs only when out of scope"
# (keyword, group) -> a fragment of the SchemaError message.
REFUSED = {
    ("additionalProperties", "dependentSchemas with additionalProperties"): "dependentSchemas",
    ("multipleOf", "float division = inf"): "remainders",
    ("ref", "ref creates new scope when adjacent to keywords"): "unevaluatedProperties",
    ("ref", "remote ref, containing refs itself"): "unresolvable $ref",
    ("defs", "validate definition against metaschema"): "unresolvable $ref",
    ("not", "collect annotations inside a 'not', even if collection is disabled"): "unevaluatedProperties",
}


def _departure(keyword, group, test):
    return DEPARTURES.get((keyword, group, test)) or DEPARTURES.get((keyword, group))


@pytest.mark.parametrize("keyword, path", suite_files(), ids=[k for k, _ in suite_files()])
def test_suite_cases_pass_or_are_listed(keyword, path):
    require_suite()
    wrong = []
    for group, test, outcome in results(path):
        if outcome.startswith("unsupported"):
            expected = REFUSED.get((keyword, group))
            if expected is None or expected not in outcome:
                wrong.append(f"{group} / {test}: refused unexpectedly: {outcome}")
        elif (outcome == "fail") != bool(_departure(keyword, group, test)) and not (outcome == "pass" and (keyword, group) in DEPARTURES):
            wrong.append(f"{group} / {test}: {outcome}" + (" (listed as a departure)" if outcome == "pass" else ""))
        elif (keyword, group) in REFUSED:
            wrong.append(f"{group} / {test}: listed as refused but compiled")
    assert not wrong, "\n".join(wrong)
