"""Rules over regex trees to one byte DFA (no recursion) or to the grammar IR (recursion).

Rules that are not on a cycle are inlined. Without cycles, the root is one regular language. With
cycles, the recursive rules stay nonterminals and every maximal piece without references becomes
one terminal, so the pushdown engine steps over few, large terminals.
"""

from __future__ import annotations

import re

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.errors import GrammarError, SchemaError
from ananke_jax._src.ir import Grammar, Rule, TerminalDef
from ananke_jax._src.json_schema.rules import Ref, Rules, is_regular


def recursive_rules(rules: Rules) -> set[str]:
    """Names of the rules reachable from the start that can reach themselves."""
    refs = {name: _refs(body) for name, body in rules.bodies.items()}
    reachable = _closure({rules.start}, refs) | {rules.start}
    return {n for n in reachable if n in _closure(refs[n], refs)}


def _closure(names: set[str], refs: dict[str, set[str]]) -> set[str]:
    seen, todo = set(names), list(names)
    while todo:
        for m in refs[todo.pop()]:
            if m not in seen:
                seen.add(m)
                todo.append(m)
    return seen


def _refs(node) -> set[str]:
    return {leaf.name for leaf in rx.leaves(node) if isinstance(leaf, Ref)}


def inline(rules: Rules, keep: set[str]) -> dict[str, rx.Node]:
    """Each kept rule's body (and the start's), with the other rules substituted."""
    done: dict[str, rx.Node] = {}

    def substitute(leaf):
        return done[leaf.name] if isinstance(leaf, Ref) and leaf.name not in keep else leaf

    # Rules are substituted after those they refer to, without recursion (``$ref`` chains may be
    # long); the inlined rules do not recurse, so this order exists.
    roots = keep | {rules.start}
    order, visited, stack = [], set(), [(name, False) for name in roots]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            order.append(name)
        elif name not in visited:
            visited.add(name)
            stack.append((name, True))
            stack += [(ref, False) for ref in _refs(rules.bodies[name]) - keep - visited]
    for name in order:
        if name not in roots:
            done[name] = rx.map_leaves(rules.bodies[name], substitute)
    return {name: rx.map_leaves(rules.bodies[name], substitute) for name in roots}


def to_grammar(rules: Rules, keep: set[str], *, printable: bool = False) -> Grammar:
    """The IR: kept rules as nonterminals, reference-free pieces as terminals (with DFAs).

    A terminal built from automata gets its regex text (by state elimination, which can be slow
    on large automata) only when ``printable``; otherwise the text just names its size.
    """
    bodies = inline(rules, keep)
    return _Writer(bodies, rules.start, printable).grammar()


class _Writer:
    def __init__(self, bodies: dict[str, rx.Node], start: str, printable: bool):
        self.bodies = bodies
        self.printable = printable
        self.names = _readable_names([start, *[n for n in bodies if n != start]], start)
        self.start = start
        self.rules: list[Rule] = []
        self.terminals: dict[rx.Node, TerminalDef] = {}
        self.helpers = 0

    def grammar(self) -> Grammar:
        for name, body in self.bodies.items():
            self.define(self.names[name], body)
        return Grammar(tuple(self.rules), tuple(self.terminals.values()), self.names[self.start])

    def define(self, name: str, node) -> None:
        for branch in node.parts if isinstance(node, rx.Alt) else [node]:
            self.rules.append(Rule(name, tuple(self.symbols(branch))))

    def symbols(self, node) -> list[str]:
        if isinstance(node, Ref):
            return [self.names[node.name]]
        if is_regular(node):
            return [] if node == rx.EMPTY else [self.terminal(node)]
        if isinstance(node, rx.Seq):
            out, run = [], []
            for part in node.parts:
                if is_regular(part):
                    run.append(part)
                    continue
                out += self.symbols(rx.seq(*run)) + self.symbols(part)
                run = []
            return out + self.symbols(rx.seq(*run))
        if isinstance(node, rx.Alt):
            helper = self.helper()
            self.define(helper, node)
            return [helper]
        if isinstance(node, rx.Interleave):
            return [self.interleaving(node)]
        if isinstance(node, rx.Repeat):
            body = self.symbols(node.body)
            out = body * node.lo
            if node.hi is None:
                loop = self.helper()
                self.rules += [Rule(loop, ()), Rule(loop, (loop, *body))]
                return out + [loop]
            tail: list[str] = []
            for _ in range(node.hi - node.lo):  # x? (x? (...)) from the inside out
                optional = self.helper()
                self.rules += [Rule(optional, ()), Rule(optional, (*body, *tail))]
                tail = [optional]
            return out + tail
        raise TypeError(f"not a rule body node: {node!r}")

    def interleaving(self, node: rx.Interleave) -> str:
        """A nonterminal of ``node`` whose items recurse: one helper per hub (`interleave.hubs`)
        for the items before it, left-recursive as loops are (``P(S+i) -> P(S) sep item_i``),
        so that the stack does not grow with the items."""
        graph = node.hubs()
        items = [*node.members, node.extra]
        names: dict = {}
        spelled: dict[tuple[int, bool], list[str]] = {}  # (item, after another) -> symbols

        def name(hub) -> str:
            if hub not in names:
                names[hub] = self.helper()
            return names[hub]

        def item(i: int, later: bool) -> list[str]:
            if (i, later) not in spelled:
                spelled[i, later] = self.symbols(rx.seq(node.separator, items[i]) if later else items[i])
            return spelled[i, later]

        whole = self.helper()
        self.rules.append(Rule(name((0, 0)), ()))
        for hub, i, after in graph.moves:
            self.rules.append(Rule(name(after), (name(hub), *item(i, hub[1] > 0))))
        self.rules += [Rule(whole, (name(hub),)) for hub in graph.accepting]
        return whole

    def terminal(self, node: rx.Node) -> str:
        if node not in self.terminals:
            dfa = rx.to_dfa(node)
            name = f"T{len(self.terminals)}"
            if self.printable or not _has_automaton(node):
                try:
                    text = rx.to_regex(node)
                except GrammarError as e:
                    raise SchemaError(f"cannot print terminal {name}: {e}") from None
            else:
                text = f"<automaton of {dfa.num_states} states>"
            self.terminals[node] = TerminalDef(name, text, dfa)
        return self.terminals[node].name

    def helper(self) -> str:
        self.helpers += 1
        return f"_h{self.helpers}"


def _has_automaton(node) -> bool:
    """Whether printing ``node`` turns an automaton into a regex (slow on large ones)."""
    if isinstance(node, rx.Automaton):
        return node.source is None
    if isinstance(node, rx.Interleave):
        return True
    if isinstance(node, rx.Repeat):
        return _has_automaton(node.body)
    return isinstance(node, (rx.Seq, rx.Alt)) and any(map(_has_automaton, node.parts))


def _readable_names(pointers: list[str], start: str) -> dict[str, str]:
    """Rule names from pointers: "#/$defs/node" -> "defs_node", the start -> "root"."""
    out, used = {}, set()
    for p in pointers:
        base = "root" if p == start else re.sub(r"[^0-9a-zA-Z]+", "_", p.lstrip("#/")).strip("_").lower() or "root"
        base = base if base[0].isalpha() else f"r_{base}"
        name, i = base, 2
        while name in used:
            name, i = f"{base}_{i}", i + 1
        used.add(name)
        out[p] = name
    return out
