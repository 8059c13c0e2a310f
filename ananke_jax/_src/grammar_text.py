"""The grammar IR printed as Lark or GBNF text (inspection, debugging, other engines)."""

from __future__ import annotations

import re

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.regex import parse_regex
from ananke_jax._src.errors import GrammarError
from ananke_jax._src.ir import Grammar


def to_lark(grammar: Grammar) -> str:
    """Lark text: rules keep names lark accepts (others become ``r<i>``), terminals ``T<i>``.

    A terminal that matches the empty string is used as ``T?``.
    """
    if any(t.token is not None for t in grammar.terminals):
        raise GrammarError("Lark has no token references: this grammar names tokens")
    names = lark_names(grammar)
    lines = []
    for n in grammar.nonterminals:
        alternatives = [" ".join(names[s] for s in r.expansion) for r in grammar.rules_of(n)]
        body = " | ".join(a for a in alternatives if a)
        lines.append(f"{names[n]}: " + (f"({body})?" if "" in alternatives and body else body or '""'))
    lines += [f"{names[t.name].rstrip('?')}: /{_lark_regex(t.regex)}/" for t in grammar.terminals]
    lines += [f"%ignore {names[name].rstrip('?')}" for name in grammar.ignore]
    return "\n".join(lines) + "\n"


def lark_names(grammar: Grammar) -> dict[str, str]:
    """The name of each rule and terminal in `to_lark`'s text (``T?`` for nullable terminals)."""
    names = {n: n if re.fullmatch(r"_?[a-z][a-z0-9_]*", n) else f"r{i}" for i, n in enumerate(grammar.nonterminals)}
    for i, t in enumerate(grammar.terminals):
        names[t.name] = f"T{i}" + ("?" if re.fullmatch(t.regex, "") else "")
    return names


def _lark_regex(regex: str) -> str:
    """Regex text inside lark's /.../: '/' escaped, '"' as \\x22 (lark unescapes ``\\"``)."""
    spelling = {"/": r"\/", '"': r"\x22", '\\"': r"\x22"}
    return re.sub(r'\\.|/|"', lambda m: spelling.get(m.group(0), m.group(0)), regex, flags=re.DOTALL)


def to_gbnf(grammar: Grammar) -> str:
    """GBNF text (llama.cpp): each rule and each terminal (``t<i>``) is one ``::=`` line."""
    names = {n: n.replace("_", "-") if re.fullmatch(r"[a-zA-Z][a-zA-Z0-9_]*", n) else f"r{i}" for i, n in enumerate(grammar.nonterminals)}
    names |= {t.name: f"t{i}" for i, t in enumerate(grammar.terminals)}
    lines = []
    for n in grammar.nonterminals:
        alternatives = [" ".join(names[s] for s in r.expansion) or '""' for r in grammar.rules_of(n)]
        lines.append(f"{names[n]} ::= " + " | ".join(alternatives))
    lines += [f"{names[t.name]} ::= {t.token.written if t.token else _gbnf(parse_regex(t.regex))}" for t in grammar.terminals]
    return "\n".join(lines) + "\n"


def _gbnf(node: rx.Node) -> str:
    if isinstance(node, rx.Chars):
        if len(node.ranges) == 1 and node.ranges[0][0] == node.ranges[0][1]:
            return _gbnf(rx.Text(chr(node.ranges[0][0])))
        return "[" + "".join(_gbnf_char(lo, "]-^\\") + ("" if lo == hi else "-" + _gbnf_char(hi, "]-^\\")) for lo, hi in node.ranges) + "]"
    if isinstance(node, rx.Text):
        return '"' + "".join(_gbnf_char(ord(c), '"\\') for c in node.text) + '"'
    if isinstance(node, rx.Seq):
        single = lambda p: isinstance(p, rx.Chars) and len(p.ranges) == 1 and p.ranges[0][0] == p.ranges[0][1]
        parts = [rx.Text(chr(p.ranges[0][0])) if single(p) else p for p in node.parts]
        merged = rx.seq(*parts)
        return " ".join(_gbnf(p) for p in merged.parts) if isinstance(merged, rx.Seq) else _gbnf(merged)
    if isinstance(node, rx.Alt):
        return "(" + " | ".join(_gbnf(p) for p in node.parts) + ")" if node.parts else "[^\\x00-\\U0010FFFF]"
    if isinstance(node, rx.Repeat):
        count = {(0, None): "*", (1, None): "+", (0, 1): "?"}.get((node.lo, node.hi))
        count = count or (f"{{{node.lo}}}" if node.lo == node.hi else f"{{{node.lo},{'' if node.hi is None else node.hi}}}")
        return f"({_gbnf(node.body)}){count}"
    raise TypeError(f"not a regex node: {node!r}")


def _gbnf_char(cp: int, special: str) -> str:
    c = chr(cp)
    if c in special:
        return "\\" + c
    if 0x20 <= cp < 0x7F:
        return c
    return f"\\x{cp:02X}" if cp < 0x80 else f"\\u{cp:04X}" if cp < 0x10000 else f"\\U{cp:08X}"
