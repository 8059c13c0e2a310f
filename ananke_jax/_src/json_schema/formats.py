"""The languages of the JSON Schema ``format`` values we assert, as regex trees.

Each tree is over the decoded string value (code points), not its JSON spelling. The grammars
follow RFC 3339 (date, time, date-time, duration), RFC 4122 (uuid), RFC 5321 (email), RFC 2673 /
RFC 4291 (ipv4, ipv6), RFC 1123 (hostname) and RFC 3986 (uri). Departures, chosen to keep the
automata small or because the exact rule is not regular:

* Leap seconds (``:60``) are accepted at 23:59 UTC, in local time under offsets whose minutes
  are 00, 30 or 45 (every offset in use today: ``15:59:60-08:00``, ``05:44:60+05:45``); under
  other offsets (``00:58:60+00:59``) they are rejected. The automaton must remember the local
  hour and minute up to the offset: with all 60 offset minutes its minimal DFA has 11,018 states
  (34 without leap seconds) and takes seconds to align with a 131k vocabulary; with these three,
  849 states.
* hostname: labels are 1-63 characters, but the total length of 253 is not checked (its product
  with the label bound is tens of thousands of states). Labels with ``--`` in the third and fourth
  positions are rejected, so IDNA A-labels (``xn--...``) are too: their validity depends on
  Punycode decoding, and rejecting them is sound.
* email: the domain is a hostname, an IPv4 literal ``[1.2.3.4]`` or an IPv6 literal
  ``[IPv6:...]``; general address literals and the 64/254 octet limits are not checked.
* duration: designators are upper case only, as ISO 8601 writes them.
"""

from __future__ import annotations

import functools

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.regex import parse_regex

_HEX = "[0-9A-Fa-f]"
_IPV4_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
_IPV4 = rf"{_IPV4_OCTET}(?:\.{_IPV4_OCTET}){{3}}"

# RFC 3339 full-date, with February 29 only in leap years (proleptic Gregorian, year 0000 leap).
_DAYS = (
    r"(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])"
    r"|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
    r"|02-(?:0[1-9]|1\d|2[0-8])"
)
_LEAP_YEAR = r"\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00"
_DATE = rf"\d{{4}}-(?:{_DAYS})|(?:{_LEAP_YEAR})-02-29"

_HOUR = r"(?:[01]\d|2[0-3])"
_FRACTION = r"(?:\.\d+)?"
LEAP_OFFSET_MINUTES = (0, 30, 45)  # offsets under which leap seconds are written (see above)


def _leap_seconds() -> str:
    """Each local ``hh:mm:60`` that is 23:59:60 UTC, with the offsets that make it so."""
    day, last = 24 * 60, 23 * 60 + 59
    offsets: dict[int, list[str]] = {last: ["[Zz]"]}
    for offset in range(day):
        if offset % 60 in LEAP_OFFSET_MINUTES:
            for sign in (1, -1):  # local time = UTC + offset
                local = (last + sign * offset) % day
                offsets.setdefault(local, []).append(f"{'[+]' if sign > 0 else '-'}{offset // 60:02d}:{offset % 60:02d}")
    return "|".join(f"{t // 60:02d}:{t % 60:02d}:60{_FRACTION}(?:{'|'.join(o)})" for t, o in sorted(offsets.items()))


_TIME = rf"{_HOUR}:[0-5]\d:[0-5]\d{_FRACTION}(?:[Zz]|[+-]{_HOUR}:[0-5]\d)|{_leap_seconds()}"

# RFC 3339 Appendix A: each unit may be followed only by the smaller ones, without gaps.
_DUR_TIME = r"T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)"
_DUR_DATE = r"(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)"
_DURATION = rf"P(?:{_DUR_DATE}(?:{_DUR_TIME})?|{_DUR_TIME}|\d+W)"

_UUID = "-".join(f"{_HEX}{{{n}}}" for n in (8, 4, 4, 4, 12))


def _ipv6() -> str:
    """RFC 3986 ``IPv6address``: nine forms by the number of groups around ``::``."""
    h16 = f"{_HEX}{{1,4}}"
    ls32 = f"(?:{h16}:{h16}|{_IPV4})"

    def head(most: int) -> str:  # up to `most` groups before "::"
        return f"(?:(?:{h16}:){{0,{most - 1}}}{h16})?" if most else ""

    forms = [f"(?:{h16}:){{6}}{ls32}"]
    forms += [f"{head(k)}::(?:{h16}:){{{5 - k}}}{ls32}" for k in range(6)]
    forms += [f"{head(6)}::{h16}", f"{head(7)}::"]
    return "|".join(f"(?:{f})" for f in forms)


_IPV6 = _ipv6()


# RFC 1123 labels of 1-63 letters, digits and inner hyphens, never "--" in positions 3-4.
_LD, _LDH = "[A-Za-z0-9]", "[A-Za-z0-9-]"
_LABEL = f"{_LD}(?:{_LDH}?{_LD})?|{_LD}{_LDH}{{2}}{_LD}|{_LD}{_LDH}(?:{_LD}{_LDH}|-{_LD}){_LDH}{{0,58}}{_LD}"
_HOSTNAME = rf"(?:{_LABEL})(?:\.(?:{_LABEL}))*"

# RFC 5321 Mailbox: dot-atom or quoted local part; quoted pairs escape printable ASCII.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~\-]"
_LOCAL = rf"{_ATEXT}+(?:\.{_ATEXT}+)*|\"(?:[ !#-\[\]-~]|\\[ -~])*\""
_EMAIL = rf"(?:{_LOCAL})@(?:{_HOSTNAME}|\[{_IPV4}\]|\[[Ii][Pp][Vv]6:(?:{_IPV6})\])"

# RFC 3986 URI; an IPv4address host is also a reg-name, so only IP-literals are spelt out.
_PCT = f"%{_HEX}{_HEX}"
_PLAIN = r"A-Za-z0-9._~!$&'()*+,;=\-"  # unreserved and sub-delims
_PCHAR = rf"(?:[{_PLAIN}:@]|{_PCT})"
_AUTHORITY = (
    rf"(?:(?:[{_PLAIN}:]|{_PCT})*@)?"
    rf"(?:\[(?:{_IPV6}|[Vv]{_HEX}+\.[{_PLAIN}:]+)\]|(?:[{_PLAIN}]|{_PCT})*)"
    r"(?::\d*)?"
)
_PATH = rf"//{_AUTHORITY}(?:/{_PCHAR}*)*|/(?:{_PCHAR}+(?:/{_PCHAR}*)*)?|{_PCHAR}+(?:/{_PCHAR}*)*|"
_URI = rf"[A-Za-z][A-Za-z0-9+.\-]*:(?:{_PATH})(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"

_FORMATS = {
    "date": _DATE,
    "time": _TIME,
    "date-time": rf"(?:{_DATE})[Tt](?:{_TIME})",
    "duration": _DURATION,
    "uuid": _UUID,
    "email": _EMAIL,
    "ipv4": _IPV4,
    "ipv6": _IPV6,
    "hostname": _HOSTNAME,
    "uri": _URI,
}


@functools.cache
def format_node(name: str) -> rx.Node | None:
    """The language of the strings that ``format: name`` accepts, or None for unknown formats."""
    pattern = _FORMATS.get(name)
    return None if pattern is None else parse_regex(pattern)
