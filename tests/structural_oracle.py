"""An independent reference for structural tags: a backtracking matcher of each format's plain
language, written from the semantics stated in ananke_jax/_src/structural/formats.py's module
docstring (not from its code), and random near-members of a spec to compare the compiled
automaton with.

The matcher works on Python text (code points): ``Matcher(text).ends(format, i)`` is the set of
every ``j`` such that ``text[i:j]`` is in the format's language. The composite formats are first
rewritten into the small formulas of the docstring (``(W tag)* T`` and so on), so each case below
is one line of that definition:

* the *ends* of a tag (its non-empty end strings) reach every format of its content, inner tags
  aside (they have their own); an any_text may not contain them, nor may the free text of a
  triggered_tags (the first end closes the tag). A dispatch's free text is not stopped by them,
  but its rules' formats get them, with ``loop`` or without (XGrammar 0.2.8: in
  ``<r>(dispatch <t> any_text)</r>`` it refuses ``<r><t>a</r>zz</r>`` when ``zz`` is an exclude
  of the dispatch: the any_text stops before ``</r>``, and the dispatch's text reads on).
* T, the free text of triggered_tags and dispatch: text in which none of its stop strings occurs
  (triggers or patterns, excludes and, for triggered_tags, the ends).
* W, text read up to the first occurrence of a stop string, that is, the first position at which
  one of them has been read whole; there it must be a trigger (a pattern), and what that trigger
  begins is read next. Where several stop strings are completed at that one position, an exclude
  or an end among them refuses the text (XGrammar 0.2.8 reads it so; the docstring says "an
  exclude or an end there is refused"), and of several triggers the longest counts.

Special tokens (``token`` formats) have no text and are checked at the token level instead;
``grammar`` formats are not covered.
"""

from __future__ import annotations

import json
import re

import jsonschema
import numpy as np

UNBOUNDED = None


def accepts(fmt, text: str) -> bool:
    """Whether ``text`` is in the plain language of ``fmt`` (a format object, or a whole
    ``{"type": "structural_tag", "format": ...}``)."""
    if fmt.get("type") == "structural_tag":
        fmt = fmt["format"]
    return len(text) in Matcher(text).ends(fmt, 0)


class Matcher:
    """Every way a format matches a segment of one text, memoised per (format, start, ends)."""

    def __init__(self, text: str):
        self.text = text
        self._memo: dict = {}
        self._rewritten: dict = {}  # (id, ends) -> (original, rewritten): the original kept alive, so ids stay unique

    def ends(self, f: dict, i: int, closers: tuple[str, ...] = ()) -> frozenset[int]:
        """The ``j`` with ``text[i:j]`` in ``f``'s language; ``closers``: the end strings of the
        enclosing tag (they close the tag, so free text in its content may not contain them)."""
        key = (id(f), i, closers)
        if key not in self._memo:
            self._memo[key] = frozenset(self._ends(f, i, closers))
        return self._memo[key]

    def _ends(self, f: dict, i: int, closers: tuple[str, ...]) -> set[int]:
        s, kind = self.text, f["type"]
        if kind == "const_string":
            return {i + len(f["value"])} if s.startswith(f["value"], i) else set()
        if kind == "regex":
            return {j for j in range(i, len(s) + 1) if re.fullmatch(f["pattern"], s[i:j])}
        if kind == "json_schema":
            return {j for j in range(i + 1, len(s) + 1) if _is_instance(s[i:j], f["json_schema"])}
        if kind == "any_text":
            return self._free(i, [*f.get("excludes", []), *closers], f.get("max_chars"))
        if kind == "sequence":
            at = {i}
            for element in f["elements"]:
                at = {j for p in at for j in self.ends(element, p, closers)}
            return at
        if kind == "or":
            return {j for element in f["elements"] for j in self.ends(element, i, closers)}
        if kind in ("optional", "plus", "star", "repeat"):
            lo, hi = {"optional": (0, 1), "plus": (1, UNBOUNDED), "star": (0, UNBOUNDED)}.get(kind, (f.get("min"), f.get("max")))
            return self._repeat(f["content"], i, lo, UNBOUNDED if hi == -1 else hi, closers)
        if kind == "tag":
            end = f["end"]
            alternatives = end if isinstance(end, list) else [end]
            own = tuple(e for e in alternatives if e)
            content = self.ends(f["content"], i + len(f["begin"]), own) if s.startswith(f["begin"], i) else ()
            return {p + len(e) for p in content for e in alternatives if s.startswith(e, p)}
        if kind in ("triggered_tags", "tags_with_separator", "dispatch"):
            return set(self.ends(self._rewrite(f, closers), i))
        # The pieces of the rewritten formulas: their ends are spelled out in them, so they drop
        # the closers they are given.
        if kind == "_free":  # T
            return self._free(i, f["stops"], None)
        if kind == "_first":  # W, then what its trigger begins
            at = self._first(i, f["then"], f["refusers"])
            if at is None:
                return set()
            trigger, j = at
            return {k for g in f["then"][trigger] for k in self.ends(g, j - len(trigger))}
        if kind == "_closed":  # content that ends a tag's content: it gets the ends
            return set(self.ends(f["content"], i, tuple(f["closers"])))
        raise ValueError(f"the reference has no format {kind!r}")

    def _free(self, i: int, excluded, max_chars) -> set[int]:
        hi = len(self.text) if max_chars is None else min(len(self.text), i + max_chars)
        return {j for j in range(i, hi + 1) if not any(e in self.text[i:j] for e in excluded)}

    def _first(self, i: int, triggers, refusers) -> tuple[str, int] | None:
        """The trigger that text from ``i`` reads first, and the position just after it (None
        where no stop string occurs, or where one completed first is an exclude or an end)."""
        s = self.text
        for j in range(i + 1, len(s) + 1):
            done = [p for p in [*triggers, *refusers] if j - i >= len(p) and s.startswith(p, j - len(p))]
            if done:
                if any(p in refusers for p in done):
                    return None
                return max(done, key=len), j
        return None

    def _repeat(self, content, i, lo, hi, closers) -> set[int]:
        """Positions after n matches of ``content``, lo <= n <= hi."""
        level, out, seen, n = {i}, {i} if lo == 0 else set(), set(), 0
        while level and (hi is None or n < hi):
            n += 1
            level = {j for p in level for j in self.ends(content, p, closers)}
            if n >= lo:
                if hi is None:  # from a position already reached with >= lo matches, nothing new
                    level -= seen
                    seen |= level
                out |= level
        return out

    def _rewrite(self, f: dict, closers: tuple[str, ...]) -> dict:
        key = (id(f), closers)
        if key not in self._rewritten:
            self._rewritten[key] = (f, rewrite(f, closers))
        return self._rewritten[key][1]


def rewrite(f: dict, closers: tuple[str, ...] = ()) -> dict:
    """triggered_tags, tags_with_separator and dispatch as the formulas of the docstring over the
    basic formats and three pieces: ``_free`` (T: text without its ``stops``), ``_first`` (W:
    text up to the first completed trigger, a key of ``then``, or one of its ``refusers``, which
    refuse; then one of that trigger's formats, read from the trigger's start) and ``_closed`` (a
    format given the ``closers``).
    ``closers``: the ends of the enclosing tag."""

    def seq(*elements):
        return {"type": "sequence", "elements": list(elements)}

    def star(content):
        return {"type": "star", "content": content}

    def opt(content):
        return {"type": "optional", "content": content}

    def either(*elements):
        return {"type": "or", "elements": list(elements)}

    at_least_one, stop = f.get("at_least_one", False), f.get("stop_after_first", False)
    if f["type"] == "triggered_tags":
        tags = [{"type": "tag", **t} for t in f["tags"]]
        one = either(*tags)
        stops = [*f["triggers"], *f.get("excludes", []), *closers]
        text = {"type": "_free", "stops": stops}
        then = {t: [g for g in tags if g["begin"].startswith(t)] for t in f["triggers"]}
        lead = {"type": "_first", "then": then, "refusers": [*f.get("excludes", []), *closers]}  # W tag
        if at_least_one and stop:
            return one  # one tag
        if stop:
            return either(text, lead)  # T | W tag
        if at_least_one:
            return seq(one, star(lead), text)  # tag (W tag)* T
        return seq(star(lead), text)  # (W tag)* T
    if f["type"] == "tags_with_separator":
        one = either(*[{"type": "tag", **t} for t in f["tags"]])
        some = one if stop else seq(one, star(seq({"type": "const_string", "value": f["separator"]}, one)))
        return some if at_least_one else opt(some)  # (tag (sep tag)*)?
    if f["type"] == "dispatch":
        stops = [*(p for p, _ in f["rules"]), *f.get("excludes", [])]  # not the ends
        text = {"type": "_free", "stops": stops}
        then: dict = {}
        for p, g in f["rules"]:
            then.setdefault(p, []).append(
                {"type": "_closed", "closers": list(closers), "content": seq({"type": "const_string", "value": p}, g)}
            )
        lead = {"type": "_first", "then": then, "refusers": f.get("excludes", [])}  # W pattern format
        return seq(star(lead), text) if f.get("loop", True) else either(text, lead)  # (W pattern format)* T, or T | W pattern format
    raise ValueError(f["type"])


def _is_instance(segment: str, schema) -> bool:
    """A JSON text of ``schema``, with no whitespace around the value."""
    if not segment or segment != segment.strip(" \t\n\r"):
        return False
    try:
        value = json.loads(segment, parse_constant=_refuse)
    except ValueError:
        return False
    return jsonschema.Draft202012Validator(schema).is_valid(value)


def _refuse(name):
    raise ValueError(name)  # NaN and Infinity are not JSON


# --- random near-members -------------------------------------------------------------------------

EXTRA_CHARS = list("ab x<>/=,\n") + ["é", "€", "😀", "ß"]


def literals(fmt) -> list[str]:
    """Every string a spec names: values, begins, ends, triggers, separators, excludes, patterns."""
    out: list[str] = []

    def visit(x):
        if isinstance(x, dict):
            for key, value in x.items():
                if key in ("value", "begin", "separator") and isinstance(value, str):
                    out.append(value)
                elif key in ("end", "triggers", "excludes") and isinstance(value, (str, list)):
                    out.extend(v for v in ([value] if isinstance(value, str) else value) if isinstance(v, str))
                elif key == "rules":
                    out.extend(p for p, _ in value)
                    for _, g in value:
                        visit(g)
                elif key != "json_schema":
                    visit(value)
        elif isinstance(x, list):
            for v in x:
                visit(v)

    visit(fmt)
    return [s for s in dict.fromkeys(out) if s]


class NearMembers:
    """Random strings built along a spec's structure from its literals, fragments of them and
    single characters (non-ASCII included), then sometimes mutated: about half are members."""

    def __init__(self, fmt, rng: np.random.Generator, regex_sampler=None):
        self.fmt = fmt["format"] if fmt.get("type") == "structural_tag" else fmt
        self.rng = rng
        self.regex_sampler = regex_sampler  # pattern -> a random full match (for regex formats)
        lits = literals(self.fmt)
        fragments = [w[a:b] for w in lits for a in range(len(w)) for b in range(a + 1, len(w) + 1)]
        self.pieces = lits * 3 + fragments + EXTRA_CHARS * 2

    def __call__(self) -> str:
        text = self.build(self.fmt)
        for _ in range(self.rng.integers(0, 3) if self.rng.random() < 0.4 else 0):
            text = self.mutate(text)
        return text

    def piece(self) -> str:
        return self.pieces[self.rng.integers(len(self.pieces))]

    def text(self, most: int = 3) -> str:
        return "".join(self.piece() for _ in range(self.rng.integers(0, most + 1)))

    def mutate(self, text: str) -> str:
        a, b = sorted(self.rng.integers(0, len(text) + 1, 2))
        choice = self.rng.integers(3)
        if choice == 0:
            return text[:a] + self.piece() + text[a:]
        if choice == 1:
            return text[:a] + text[b:]
        return text[:a] + self.piece() + text[b:]

    def count(self, lo: int, hi) -> int:
        top = lo + 3 if hi is None or hi == -1 else hi
        return int(self.rng.integers(max(0, lo - 1), top + 2))  # one fewer or one more, sometimes

    def build(self, f) -> str:
        r, kind = self.rng, f["type"]
        if kind == "const_string":
            return f["value"]
        if kind == "regex":
            return self.regex_sampler(f["pattern"]) if self.regex_sampler else self.text()
        if kind == "any_text":
            return self.text()
        if kind == "sequence":
            return "".join(self.build(e) for e in f["elements"])
        if kind == "or":
            return self.build(f["elements"][r.integers(len(f["elements"]))])
        if kind in ("optional", "plus", "star", "repeat"):
            lo, hi = {"optional": (0, 1), "plus": (1, -1), "star": (0, -1)}.get(kind, (f.get("min"), f.get("max")))
            return "".join(self.build(f["content"]) for _ in range(self.count(lo, hi)))
        if kind == "tag":
            end = f["end"]
            alternatives = end if isinstance(end, list) else [end]
            return f["begin"] + self.build(f["content"]) + alternatives[r.integers(len(alternatives))]
        if kind in ("triggered_tags", "tags_with_separator", "dispatch"):
            return self.build(rewrite(f))
        if kind == "_free":
            return self.text()
        if kind == "_first":  # text, then one trigger's continuation (its tag, or its pattern and format)
            after = [g for gs in f["then"].values() for g in gs]
            return self.text() + self.build(after[r.integers(len(after))])
        if kind == "_closed":
            return self.build(f["content"])
        raise ValueError(kind)
