"""`format` languages against the JSON Schema test suite and against Python's own parsers."""

import datetime
import functools
import ipaddress
import uuid

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke_jax._src.compile.regex_ast import to_dfa
from ananke_jax._src.json_schema.formats import LEAP_OFFSET_MINUTES, format_node

from schema_suite import parametrize_cases, require_suite, suite_cases

FORMATS = ["date", "time", "date-time", "duration", "uuid", "email", "ipv4", "ipv6", "hostname", "uri"]

_IDNA = "IDNA A-labels (xn--) are rejected: their validity needs Punycode decoding"
# (file, group description, test description) -> why our language differs from the suite.
DEPARTURES = {
    (
        "hostname.json",
        "validation of host names",
        "exceeds maximum overall length (256)",
    ): "the 253-character total is not checked (its product with the label bound is huge)",
    **{
        ("hostname.json", "validation of A-label (punycode) host names", test): _IDNA
        for test in [
            "a valid host name (example.test in Hangul)",
            "Exceptions that are PVALID, left-to-right chars",
            "Exceptions that are PVALID, right-to-left chars",
            "MIDDLE DOT with surrounding 'l's",
            "Greek KERAIA followed by Greek",
            "Hebrew GERESH preceded by Hebrew",
            "Hebrew GERSHAYIM preceded by Hebrew",
            "KATAKANA MIDDLE DOT with Hiragana",
            "KATAKANA MIDDLE DOT with Katakana",
            "KATAKANA MIDDLE DOT with Han",
            "Arabic-Indic digits not mixed with Extended Arabic-Indic digits",
            "Extended Arabic-Indic digits not mixed with Arabic-Indic digits",
            "ZERO WIDTH JOINER preceded by Virama",
            "ZERO WIDTH NON-JOINER preceded by Virama",
            "ZERO WIDTH NON-JOINER not preceded by Virama but matches regexp",
        ]
    },
}


def _cases() -> list[tuple]:
    """Suite cases of the format files whose instance is a string (the others are not strings)."""
    return [case for case in suite_cases("optional/format", [f"{fmt}.json" for fmt in FORMATS]) if isinstance(case[4], str)]


@functools.cache
def _dfa(fmt: str):
    return to_dfa(format_node(fmt))


def _accepts(fmt: str, text: str) -> bool:
    dfa = _dfa(fmt)
    return bool(dfa.accepting[dfa.walk(dfa.start, text.encode("utf-8", "surrogatepass"))])


@parametrize_cases("fmt, data, valid", _cases(), DEPARTURES, lambda case: (case[0].removesuffix(".json"), *case[4:]))
def test_format_matches_the_test_suite(fmt, data, valid):
    require_suite()
    assert _accepts(fmt, data) == valid


def test_departures_name_suite_cases():
    require_suite()
    assert set(DEPARTURES) <= {case[:3] for case in _cases()}


def test_unknown_formats_have_no_language():
    assert format_node("color") is None


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 9999), st.integers(0, 13), st.integers(0, 32))
def test_date_agrees_with_datetime(year, month, day):
    text = f"{year:04d}-{month:02d}-{day:02d}"
    try:  # year 0000 is a leap year in RFC 3339's proleptic calendar; 2000 shares its leap rule
        datetime.date(year or 2000, month, day)
        valid = True
    except ValueError:
        valid = False
    assert _accepts("date", text) == valid, text


def test_leap_seconds_are_23_59_60_utc_under_every_offset():
    """Every ``hh:mm:60`` (with and without a fraction) under every offset and ``Z``: accepted
    exactly when it is 23:59:60 UTC by datetime's zone arithmetic, and the offset's minutes are
    among the documented ones."""
    day = 24 * 60
    leap = datetime.datetime(1998, 12, 31, 23, 59, tzinfo=datetime.timezone.utc)
    for fmt, date in [("time", ""), ("date-time", "1998-12-31T")]:
        dfa = _dfa(fmt)
        for fraction in ["", ".25"]:
            states = np.asarray([dfa.walk(dfa.start, f"{date}{m // 60:02d}:{m % 60:02d}:60{fraction}".encode()) for m in range(day)])
            assert [m for m in range(day) if dfa.accepting[dfa.walk(states[m], b"Z")]] == [day - 1], fmt
            for sign in "+-":
                expected = np.zeros((day, day), bool)  # [local time, offset]
                for offset in range(day):
                    local = leap.astimezone(datetime.timezone(int(f"{sign}1") * datetime.timedelta(minutes=offset)))
                    expected[local.hour * 60 + local.minute, offset] = offset % 60 in LEAP_OFFSET_MINUTES
                spelt = np.array([f"{sign}{o // 60:02d}:{o % 60:02d}".encode() for o in range(day)]).view(np.uint8).reshape(day, -1)
                walked = np.broadcast_to(states[:, None], (day, day))
                for column in spelt.T:
                    walked = dfa.transitions[walked, column[None, :]]
                np.testing.assert_array_equal(dfa.accepting[walked], expected, err_msg=f"{fmt}, fraction {fraction!r}, sign {sign}")


_OCTET = st.one_of(st.integers(0, 300).map(str), st.text("0123456789", min_size=1, max_size=4))


@settings(max_examples=300, deadline=None)
@given(st.lists(_OCTET, min_size=3, max_size=5).map(".".join))
def test_ipv4_agrees_with_ipaddress(text):
    assert _accepts("ipv4", text) == _parses(ipaddress.IPv4Address, text), text


@st.composite
def _ipv6_spellings(draw):
    """Compressed, exploded and IPv4-tailed spellings of an address, sometimes with one edit."""
    address = draw(st.ip_addresses(v=6))
    low = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    head = address.exploded[:30]  # the first six groups and their colons
    text = draw(st.sampled_from([str(address), address.exploded, str(address).upper(), f"{head}{low}"]))
    if draw(st.booleans()):
        i = draw(st.integers(0, len(text)))
        text = text[:i] + draw(st.sampled_from(["", ":", "0", "f", ".", "::", "1.2"])) + text[i + 1 :]
    return text


@settings(max_examples=400, deadline=None)
@given(_ipv6_spellings())
def test_ipv6_agrees_with_ipaddress(text):
    assert _accepts("ipv6", text) == _parses(ipaddress.IPv6Address, text), text


@settings(max_examples=200, deadline=None)
@given(st.uuids(), st.integers(0, 35), st.sampled_from(["0", "a", "F", "g", "-", ""]))
def test_uuid_agrees_with_uuid_module(value, i, edit):
    text = str(value)[:i] + edit + str(value)[i + 1 :]
    dashes = len(text) == 36 and all(text[j] == "-" for j in (8, 13, 18, 23))
    assert _accepts("uuid", text) == (dashes and _parses(uuid.UUID, text)), text


def _parses(parse, text: str) -> bool:
    try:
        parse(text)
        return True
    except ValueError:
        return False
