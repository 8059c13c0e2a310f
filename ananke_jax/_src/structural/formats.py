"""XGrammar's structural-tag formats to rules over regex trees (host code).

Each format object becomes the regex tree of its plain language; JSON Schemas and grammars
bring their rules along (renamed apart), so a recursive part keeps its rules and the whole tag
compiles like a JSON Schema: one token DFA, or the pushdown engine when a rule recurses.

The languages (XGrammar 0.2.8's, checked against it string by string). The *ends* of a tag are
its end strings; they reach every format of its content except inner tags (which have their own).

* ``const_string``: the string; ``regex``: its full matches; ``json_schema``: the JSON texts
  of the schema, no whitespace around the value; ``grammar``: a GBNF (``::=``) or Lark grammar.
* ``any_text``: text without ``excludes`` or the ends (the first end closes the tag);
  ``max_chars`` bounds its code points.
* ``sequence``, ``or``, ``optional``, ``plus``, ``star``, ``repeat`` (``max: -1`` unbounded).
* ``tag``: ``begin content end``; ``end`` may be a list of alternatives; ``begin`` and ``end``
  may be ``{"type": "token", ...}`` naming a special token.
* ``triggered_tags`` (each tag's begin starts with exactly one trigger, and each trigger begins
  some tag): free text runs until the first occurrence of a trigger, an exclude or an end; a
  trigger there must go on as one of its tags (an exclude or an end there, even one ending
  where a trigger does, is refused, or, for an end, closes the enclosing tag). So with T the text without triggers, excludes and ends:
  ``(W tag)* T`` where W tag is text whose first trigger begins the tag; with ``at_least_one``
  the output opens with a tag, ``tag (W tag)* T``; with ``stop_after_first`` ``T | W tag``;
  with both, one tag.
* ``tags_with_separator``: ``(tag (sep tag)*)?``; ``at_least_one`` drops the ``?``;
  ``stop_after_first`` keeps one tag at most.
* ``token_triggered_tags`` and ``token_dispatch``: the same with special tokens as triggers and
  patterns (text never writes one, so each is simply the next tag); ``exclude_tokens`` may name
  special tokens only.
* ``dispatch`` (``rules``: ``[pattern, format]`` pairs): ``(W pattern format)* T``, the free
  text running until its first pattern (not stopped by the ends, though the formats get them);
  without ``loop``, ``T | W pattern format``.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.lexer import terminal_dfa
from ananke_jax._src.compile.regex import choices_to_dfa, parse_regex
from ananke_jax._src.compile.token_refs import private_spelling
from ananke_jax._src.errors import GrammarError, SchemaError
from ananke_jax._src.frontends.api import grammar_to_ir
from ananke_jax._src.ir import Grammar
from ananke_jax._src.json_schema.api import json_schema_rules
from ananke_jax._src.json_schema.gaps import MAX_WHITESPACE_RUN
from ananke_jax._src.json_schema.layout import is_count
from ananke_jax._src.json_schema.rules import Ref, Rules
from ananke_jax._src.structural.text import free_text, until_first
from ananke_jax._src.vocab import Vocabulary

TOKEN_LEVEL = {
    "exclude_token": "a token-level exclusion",
    "any_tokens": "a token-level run",
    "qwen_xml_parameter": "the Qwen XML parameter style",
}


class StructuralCompiler:
    """Translates one structural tag; `rules` gives the result.

    Args:
      vocab: the vocabulary (for special tokens named by ``token`` formats).
      json_options: keyword options for every ``json_schema`` format (`json_schema_rules`'s).
    """

    def __init__(self, vocab: Vocabulary, **json_options):
        fixed = sorted({"whitespace", "placeholder_gaps"} & set(json_options))
        if fixed:
            raise GrammarError(
                f"{fixed[0]!r} is not an option here: JSON in a structural tag has flexible, bounded whitespace (max_whitespace)"
            )
        self.vocab = vocab
        self.json_options = json_options
        self.max_whitespace = json_options.get("max_whitespace", MAX_WHITESPACE_RUN)
        self.bodies: dict[str, rx.Node] = {}
        self.special_ids: list[int] = []  # in the order of their private spellings
        self._parts = 0
        self._formats: dict[str, Callable] = {
            "const_string": self.const_string,
            "json_schema": self.json_schema,
            "grammar": self.grammar,
            "regex": self.regex,
            "any_text": self.any_text,
            "sequence": self.sequence,
            "or": self.either,
            "optional": lambda f, p, ends: self.repeat({**f, "min": 0, "max": 1}, p, ends),
            "plus": lambda f, p, ends: self.repeat({**f, "min": 1, "max": -1}, p, ends),
            "star": lambda f, p, ends: self.repeat({**f, "min": 0, "max": -1}, p, ends),
            "repeat": self.repeat,
            "tag": self.tag,
            "triggered_tags": self.triggered_tags,
            "tags_with_separator": self.tags_with_separator,
            "dispatch": self.dispatch,
            "token": lambda f, p, ends: self.literal(f, p),
            "token_triggered_tags": self.token_triggered_tags,
            "token_dispatch": self.token_dispatch,
        }

    def rules(self, spec) -> Rules:
        """The rules of ``spec`` (see `root_format`)."""
        pointer, root = root_format(spec)
        self.bodies["#"] = self.format(root, pointer)
        return Rules("#", self.bodies)

    # --- formats -----------------------------------------------------------------------------

    def format(self, f, pointer: str, ends: Sequence[bytes] = ()) -> rx.Node:
        """The language of format ``f`` at ``pointer``; ``ends``: the end strings of the tag
        whose content ``f`` is part of (free text stops at them)."""
        if not isinstance(f, dict) or not isinstance(f.get("type"), str):
            raise GrammarError("a format must be an object with a string 'type'", pointer=pointer)
        kind = f["type"]
        if kind in TOKEN_LEVEL:
            raise GrammarError(f"format {kind!r} ({TOKEN_LEVEL[kind]}) is not supported", pointer=pointer)
        if kind not in self._formats:
            raise GrammarError(f"unknown format type {kind!r}", pointer=pointer)
        return self._formats[kind](f, pointer, ends)

    def const_string(self, f, pointer, ends) -> rx.Node:
        return rx.Text(_string(f, "value", pointer))

    def regex(self, f, pointer, ends) -> rx.Node:
        return _located(lambda: parse_regex(_string(f, "pattern", pointer)), pointer)

    def any_text(self, f, pointer, ends) -> rx.Node:
        if f.get("max_tokens") is not None:
            raise GrammarError(
                "'max_tokens' on any_text is not supported inside a structural tag; use 'max_chars', "
                "or a token budget on the reasoning prefix (ananke_jax.reasoning_constraint)",
                pointer=pointer,
            )
        max_chars = f.get("max_chars")
        if max_chars is not None and not is_count(max_chars):
            raise GrammarError(f"'max_chars' must be a non-negative integer, got {max_chars!r}", pointer=pointer)
        return _text([*_strings(f.get("excludes", []), f"{pointer}/excludes"), *ends], max_chars)

    def json_schema(self, f, pointer, ends) -> rx.Node:
        if f.get("style", "json") != "json":
            raise GrammarError(f"json_schema style {f['style']!r} is not supported (only 'json')", pointer=pointer)
        if f.get("excludes"):
            raise GrammarError("'excludes' in json_schema strings is not supported", pointer=pointer)
        if "json_schema" not in f:
            raise GrammarError("json_schema format needs 'json_schema'", pointer=pointer)
        options = dict(self.json_options)
        for field, option in (("any_order", "any_order"), ("max_whitespace_cnt", "max_whitespace")):
            if f.get(field) is not None:
                options[option] = f[field]
        # Placeholder gaps are expanded once for the whole tag, with its run: another run is a regex.
        placeholders = options.get("max_whitespace", MAX_WHITESPACE_RUN) == self.max_whitespace
        try:
            rules = json_schema_rules(f["json_schema"], whitespace="flexible", placeholder_gaps=placeholders, **options)
        except SchemaError as e:
            raise SchemaError(e.reason, keyword=e.keyword, pointer=f"{pointer}/json_schema{e.pointer[1:]}") from None
        return self._adopt(rules.bodies, rules.start)

    def grammar(self, f, pointer, ends) -> rx.Node:
        text = _string(f, "grammar", pointer)
        ir = _located(lambda: grammar_to_ir(text), f"{pointer}/grammar")
        named = [t.token for t in ir.terminals if t.token is not None]
        if named:
            raise GrammarError(
                f"{named[0]}: a grammar inside a structural tag names no tokens; tags name them in begin and end",
                pointer=f"{pointer}/grammar",
            )
        peeking = [t.name for t in ir.terminals if t.not_followed_by]
        if peeking:
            raise GrammarError(
                f"terminal {peeking[0]} reads the text after it (a trailing lookahead), which a tag's grammar cannot",
                pointer=f"{pointer}/grammar",
            )
        return self._adopt(*_grammar_bodies(ir))

    def sequence(self, f, pointer, ends) -> rx.Node:
        return rx.seq(*[self.format(e, f"{pointer}/elements/{i}", ends) for i, e in enumerate(_list(f, "elements", pointer))])

    def either(self, f, pointer, ends) -> rx.Node:
        return rx.alt(*[self.format(e, f"{pointer}/elements/{i}", ends) for i, e in enumerate(_list(f, "elements", pointer))])

    def repeat(self, f, pointer, ends) -> rx.Node:
        lo, hi = f.get("min"), f.get("max")
        if not (is_count(lo) and (hi == -1 or (is_count(hi) and lo <= hi))):
            raise GrammarError(f"repeat needs integers 0 <= min <= max (max -1: unbounded), got {lo!r}, {hi!r}", pointer=pointer)
        if "content" not in f:
            raise GrammarError(f"{f['type']} format needs 'content'", pointer=pointer)
        return rx.repeat(self.format(f["content"], f"{pointer}/content", ends), lo, None if hi == -1 else hi)

    def tag(self, f, pointer, ends=()) -> rx.Node:
        return rx.seq(self.literal(f.get("begin"), f"{pointer}/begin"), self._after_begin(f, pointer))

    def _after_begin(self, f, pointer: str) -> rx.Node:
        """A tag's content and end."""
        for field in ("begin", "content", "end"):
            if field not in f:
                raise GrammarError(f"tag format needs {field!r}", pointer=pointer)
        end = f["end"]
        alternatives = end if isinstance(end, list) and end else [end]
        closing = [self.literal(e, f"{pointer}/end") for e in alternatives]
        texts = tuple(e.encode("utf-8") for e in alternatives if isinstance(e, str) and e)
        return rx.seq(self.format(f["content"], f"{pointer}/content", texts), rx.alt(*closing))

    def triggered_tags(self, f, pointer, ends) -> rx.Node:
        triggers = _strings(_list(f, "triggers", pointer), f"{pointer}/triggers")
        tags = self._tags(f, pointer)
        by_trigger: dict[str, list[rx.Node]] = {t: [] for t in triggers}
        for i, (begin, after) in enumerate(tags):
            matched = [t for t in triggers if begin.startswith(t)]
            if len(matched) != 1:
                why = "does not start with any trigger" if not matched else f"starts with several triggers {matched}"
                raise GrammarError(f"the tag's begin {begin!r} {why}", pointer=f"{pointer}/tags/{i}/begin")
            by_trigger[matched[0]].append(rx.seq(rx.Text(begin[len(matched[0]) :]), after))
        for i, (trigger, after) in enumerate(by_trigger.items()):
            if not after:
                raise GrammarError(f"the trigger {trigger!r} begins no tag", pointer=f"{pointer}/triggers/{i}")
        excludes = _strings(f.get("excludes", []), f"{pointer}/excludes")
        lead = self._text_then(list(by_trigger.items()), excludes, ends)
        text = _text([*triggers, *excludes, *ends])
        one = rx.alt(*[rx.seq(rx.Text(begin), after) for begin, after in tags])
        at_least_one, stop = _flag(f, "at_least_one", pointer), _flag(f, "stop_after_first", pointer)
        if at_least_one and stop:
            return one
        if stop:
            return rx.alt(text, lead)
        rest = rx.seq(rx.star(lead), text)
        return rx.seq(one, rest) if at_least_one else rest

    def tags_with_separator(self, f, pointer, ends) -> rx.Node:
        separator = rx.Text(_string(f, "separator", pointer))
        one = rx.alt(*[rx.seq(rx.Text(begin), after) for begin, after in self._tags(f, pointer)])
        at_least_one, stop = _flag(f, "at_least_one", pointer), _flag(f, "stop_after_first", pointer)
        some = one if stop else rx.seq(one, rx.star(rx.seq(separator, one)))
        return some if at_least_one else rx.optional(some)

    def dispatch(self, f, pointer, ends) -> rx.Node:
        rules, loop = _list(f, "rules", pointer), _flag(f, "loop", pointer, default=True)
        branches = []
        for i, rule in enumerate(rules):
            where = f"{pointer}/rules/{i}"
            if not (isinstance(rule, (list, tuple)) and len(rule) == 2 and isinstance(rule[0], str) and rule[0]):
                raise GrammarError("a dispatch rule must be a [pattern, format] pair with a non-empty pattern", pointer=where)
            branches.append((rule[0], [self.format(rule[1], f"{where}/1", ends)]))
        _check_prefix_free([p for p, _ in branches], f"{pointer}/rules", "pattern", "/0")
        excludes = _strings(f.get("excludes", []), f"{pointer}/excludes")
        lead = self._text_then(branches, excludes, ())  # XGrammar's dispatch text reads on past the tag's end
        text = _text([*(p for p, _ in branches), *excludes])
        return rx.seq(rx.star(lead), text) if loop else rx.alt(text, lead)

    def token_triggered_tags(self, f, pointer, ends) -> rx.Node:
        """`triggered_tags` whose triggers are special tokens, each tag beginning with one."""
        self._special_excludes(f, pointer)
        triggers = [self._special_token(t, f"{pointer}/trigger_tokens/{i}") for i, t in enumerate(_list(f, "trigger_tokens", pointer))]
        used, tags = set(), []
        for i, t in enumerate(_list(f, "tags", pointer)):
            where = f"{pointer}/tags/{i}"
            begin = t.get("begin") if isinstance(t, dict) else None
            if not (isinstance(begin, dict) and begin.get("type") == "token"):
                raise GrammarError("a tag here needs a token format as its begin", pointer=f"{where}/begin")
            token = self._special_token(begin.get("token"), f"{where}/begin")
            if token not in triggers:
                raise GrammarError(f"the tag's begin token {token} is not among the trigger tokens", pointer=f"{where}/begin")
            used.add(token)
            tags.append(self.tag(t, where))
        for i, token in enumerate(triggers):
            if token not in used:
                raise GrammarError(f"the trigger token {token} begins no tag", pointer=f"{pointer}/trigger_tokens/{i}")
        # Text never holds a special token's spelling, so the first trigger is simply the next tag.
        text, one = _text(ends), rx.alt(*tags)
        at_least_one, stop = _flag(f, "at_least_one", pointer), _flag(f, "stop_after_first", pointer)
        if at_least_one and stop:
            return one
        if stop:
            return rx.seq(text, rx.optional(one))
        rest = rx.seq(rx.star(rx.seq(text, one)), text)
        return rx.seq(one, rest) if at_least_one else rest

    def token_dispatch(self, f, pointer, ends) -> rx.Node:
        """`dispatch` whose patterns are special tokens."""
        self._special_excludes(f, pointer)
        branches = []
        for i, rule in enumerate(_list(f, "rules", pointer)):
            where = f"{pointer}/rules/{i}"
            if not (isinstance(rule, (list, tuple)) and len(rule) == 2):
                raise GrammarError("a dispatch rule must be a [token, format] pair", pointer=where)
            token = self.literal({"type": "token", "token": rule[0]}, f"{where}/0")
            branches.append(rx.seq(token, self.format(rule[1], f"{where}/1", ends)))
        text, one = _text([]), rx.alt(*branches)
        return rx.seq(rx.star(rx.seq(text, one)), text) if _flag(f, "loop", pointer, default=True) else rx.seq(text, rx.optional(one))

    def _special_excludes(self, f, pointer: str) -> None:
        """``exclude_tokens`` may hold special tokens only, which free text never writes anyway."""
        for i, t in enumerate(f.get("exclude_tokens", [])):
            where = f"{pointer}/exclude_tokens/{i}"
            try:
                self._special_token(t, where)
            except GrammarError:
                raise GrammarError(
                    f"exclude_tokens may name special tokens only (free text never writes those), got {t!r}", pointer=where
                ) from None

    def _text_then(self, branches: list[tuple[str, list[rx.Node]]], excludes: list[str], ends: Sequence[bytes]) -> rx.Node:
        """Free text up to the first trigger, then what that trigger begins: ``branches`` pairs
        each trigger with the languages that may follow it; an exclude or an end of the enclosing
        tag may not come first, nor end where a trigger does."""
        triggers = tuple(p.encode("utf-8") for p, _ in branches)
        stops = tuple(dict.fromkeys([*(e.encode("utf-8") for e in excludes), *ends]))
        return rx.alt(*[rx.seq(until_first(triggers, stops, k), rx.alt(*after)) for k, (_, after) in enumerate(branches)])

    # --- pieces ------------------------------------------------------------------------------

    def literal(self, value, pointer: str) -> rx.Node:
        """A begin or end: a string, or a ``token`` format naming a special token."""
        if isinstance(value, str):
            return rx.Text(value)
        if not (isinstance(value, dict) and value.get("type") == "token"):
            raise GrammarError("expected a string or a token format", pointer=pointer)
        token = self._special_token(value.get("token"), pointer)
        if token not in self.special_ids:
            self.special_ids.append(token)
        return rx.Automaton(choices_to_dfa([private_spelling(self.special_ids.index(token))]))

    def _special_token(self, token, pointer: str) -> int:
        special = self.vocab.special_token_ids - set(self.vocab.eos_token_ids)
        if isinstance(token, int) and not isinstance(token, bool):
            if token in special:
                return token
            raise GrammarError(f"token {token} is not a special token of the vocabulary (EOS aside)", pointer=pointer)
        if isinstance(token, str):
            ids = [i for i in sorted(special) if self.vocab.tokens[i] == token.encode("utf-8")]
            if ids:
                return ids[0]
            raise GrammarError(f"{token!r} is not a special token of the vocabulary; write ordinary text as a string", pointer=pointer)
        raise GrammarError(f"'token' must be a token id or a token's text, got {token!r}", pointer=pointer)

    def _tags(self, f, pointer: str) -> list[tuple[str, rx.Node]]:
        """The begin (a string) and the rest of each tag of ``f["tags"]``, refusing ambiguous
        begins."""
        out = []
        for i, t in enumerate(_list(f, "tags", pointer)):
            where = f"{pointer}/tags/{i}"
            if not (isinstance(t, dict) and t.get("type", "tag") == "tag"):
                raise GrammarError("expected a tag format", pointer=where)
            if not isinstance(t.get("begin"), str):
                raise GrammarError("a tag here needs a string 'begin'", pointer=f"{where}/begin")
            out.append((t["begin"], self._after_begin(t, where)))
        _check_prefix_free([begin for begin, _ in out], f"{pointer}/tags", "begin", "/begin")
        return out

    def _adopt(self, bodies: dict[str, rx.Node], start: str) -> rx.Node:
        """Take rules in under fresh names; a `Ref` to the start."""
        self._parts += 1
        prefix = f"#{self._parts}/"

        def rename(leaf):
            return Ref(prefix + leaf.name) if isinstance(leaf, Ref) else leaf

        for name, body in bodies.items():
            self.bodies[prefix + name] = rx.map_leaves(body, rename)
        return Ref(prefix + start)


def _grammar_bodies(ir: Grammar) -> tuple[dict[str, rx.Node], str]:
    """A grammar IR as rule bodies: terminals as automata, each followed by the ignored ones (which
    may also open the text), under a start rule of a name no grammar rule can have."""
    automata = {t.name: rx.Automaton(terminal_dfa(t)) for t in ir.terminals}
    ignored = rx.star(rx.alt(*[automata[name] for name in ir.ignore]))
    terminals = {name: rx.seq(node, ignored) for name, node in automata.items()}
    bodies = {
        name: rx.alt(*[rx.seq(*[terminals[s] if s in terminals else Ref(s) for s in r.expansion]) for r in ir.rules_of(name)])
        for name in ir.nonterminals
    }
    bodies["^start"] = rx.seq(ignored, Ref(ir.start))
    return bodies, "^start"


def root_format(spec) -> tuple[str, dict]:
    """The JSON pointer and the root format of ``spec``: a dict or JSON text, ``{"type":
    "structural_tag", "format": ...}`` (or the older ``structures`` and ``triggers``) or a bare
    format object."""
    if isinstance(spec, (str, bytes)):
        try:
            spec = json.loads(spec)
        except json.JSONDecodeError as e:
            raise GrammarError(f"invalid JSON: {e.msg} at line {e.lineno}, column {e.colno}") from None
    if isinstance(spec, dict) and spec.get("type") == "structural_tag":
        return ("#/format", spec["format"]) if "format" in spec else ("#", _legacy_format(spec))
    return "#", spec


def _legacy_format(spec: dict) -> dict:
    """The older ``{"structures": [{"begin", "schema", "end"}], "triggers": [...]}`` form."""
    structures = spec.get("structures")
    if not isinstance(structures, list):
        raise GrammarError("a structural tag needs 'format' (or the older 'structures' and 'triggers')", pointer="#")
    tags = [
        {"type": "tag", "begin": s.get("begin"), "content": {"type": "json_schema", "json_schema": s.get("schema")}, "end": s.get("end")}
        for s in structures
    ]
    return {"type": "triggered_tags", "triggers": spec.get("triggers"), "tags": tags}


def _check_prefix_free(strings: list[str], pointer: str, what: str, suffix: str) -> None:
    for i, a in enumerate(strings):
        for j, b in enumerate(strings):
            if i != j and b.startswith(a) and (a != b or i < j):
                raise GrammarError(
                    f"the {what} {b!r} is ambiguous: it starts with the {what} {a!r} of {pointer}/{i}", pointer=f"{pointer}/{j}{suffix}"
                )


def _located(build: Callable, pointer: str):
    try:
        return build()
    except GrammarError as e:
        raise GrammarError(str(e), pointer=pointer) from None


def _string(f: dict, field: str, pointer: str) -> str:
    value = f.get(field)
    if not isinstance(value, str):
        raise GrammarError(f"{f['type']} format needs a string {field!r}", pointer=pointer)
    return value


def _list(f: dict, field: str, pointer: str) -> list:
    value = f.get(field)
    if not isinstance(value, list) or not value:
        raise GrammarError(f"{f['type']} format needs a non-empty list {field!r}", pointer=pointer)
    return value


def _strings(values, pointer: str) -> list[str]:
    if not isinstance(values, list) or not all(isinstance(v, str) and v for v in values):
        raise GrammarError("expected a list of non-empty strings", pointer=pointer)
    return values


def _text(excluded: Sequence[str | bytes], max_chars: int | None = None) -> rx.Node:
    """Free text without the ``excluded`` strings, of at most ``max_chars`` code points."""
    return free_text(tuple(dict.fromkeys(e.encode("utf-8") if isinstance(e, str) else e for e in excluded)), max_chars)


def _flag(f: dict, field: str, pointer: str, default: bool = False) -> bool:
    value = f.get(field, default)
    if not isinstance(value, bool):
        raise GrammarError(f"{field!r} must be true or false, got {value!r}", pointer=pointer)
    return value
