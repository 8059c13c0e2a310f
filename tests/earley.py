"""A byte-level Earley prefix recogniser over the grammar IR: the slow, obviously-correct oracle
of the context-free engine.

Terminals are matched byte by byte with their byte DFAs (themselves checked against `re` in
test_regex.py). Ignored terminals are made explicit by rewriting: an optional run of ignored
terminals goes between every two adjacent symbols and around the start symbol. Nullable
nonterminals are handled by advancing over them at prediction time (Aycock and Horspool).
"""

from __future__ import annotations

from ananke_jax._src.compile.regex import regex_to_dfa
from ananke_jax._src.ir import Grammar

_START = "<start>"
_IGNORED = "<ignored>"


class EarleyRecogniser:
    """Decide, for a byte string, whether it is in the language or a prefix of a member."""

    def __init__(self, grammar: Grammar):
        rules = [(r.origin, list(r.expansion)) for r in grammar.rules]
        if grammar.ignore:
            weave = lambda exp: [s for x in exp for s in (_IGNORED, x)] + [_IGNORED] if exp else [_IGNORED]
            rules = [(o, weave(e)[1:-1] if e else []) for o, e in rules]
            rules += [(_IGNORED, []), *[(_IGNORED, [_IGNORED, t]) for t in grammar.ignore]]
            rules.append((_START, [_IGNORED, grammar.start, _IGNORED]))
        else:
            rules.append((_START, [grammar.start]))
        self.rules = [(o, tuple(e)) for o, e in rules]
        self.by_origin: dict[str, list[int]] = {}
        for i, (o, _) in enumerate(self.rules):
            self.by_origin.setdefault(o, []).append(i)
        self.dfas = {t.name: regex_to_dfa(t.regex) for t in grammar.terminals}
        self.nullable = self._nullable()
        self.start_rule = len(self.rules) - 1

    def _nullable(self) -> set[str]:
        nullable = {name for name, dfa in self.dfas.items() if dfa.accepting[dfa.start]}
        changed = True
        while changed:
            changed = False
            for o, e in self.rules:
                if o not in nullable and all(s in nullable for s in e):
                    nullable.add(o)
                    changed = True
        return nullable

    # An item is (rule, dot, origin, dfa_state): dfa_state is -1 unless the item is inside the
    # terminal after its dot, in which case it is that terminal's DFA state.
    def initial(self) -> list[frozenset]:
        return [self._closure(0, {(self.start_rule, 0, 0, -1)}, [])]

    def _closure(self, position: int, items: set, chart: list[frozenset]) -> frozenset:
        todo = list(items)
        done = set(items)

        def add(item):
            if item not in done:
                done.add(item)
                todo.append(item)

        while todo:
            rule, dot, origin, dstate = todo.pop()
            _, expansion = self.rules[rule]
            if dstate >= 0:
                dfa = self.dfas[expansion[dot]]
                if dfa.accepting[dstate]:
                    add((rule, dot + 1, origin, -1))
                continue
            if dot == len(expansion):  # complete: advance the items waiting for this origin
                symbol = self.rules[rule][0]
                waiting = done if origin == position else chart[origin]
                for r2, d2, o2, s2 in list(waiting):
                    if s2 < 0 and d2 < len(self.rules[r2][1]) and self.rules[r2][1][d2] == symbol:
                        add((r2, d2 + 1, o2, -1))
                continue
            symbol = expansion[dot]
            if symbol in self.dfas:
                add((rule, dot, origin, self.dfas[symbol].start))
            else:
                for r2 in self.by_origin.get(symbol, ()):
                    add((r2, 0, position, -1))
                if symbol in self.nullable:
                    add((rule, dot + 1, origin, -1))
        return frozenset(done)

    def step(self, chart: list[frozenset], byte: int) -> list[frozenset]:
        """The chart after one more byte (its last set is empty when the prefix is dead)."""
        moved = set()
        for rule, dot, origin, dstate in chart[-1]:
            if dstate >= 0:
                nxt = int(self.dfas[self.rules[rule][1][dot]].transitions[dstate, byte])
                if nxt:
                    moved.add((rule, dot, origin, nxt))
        return chart + [self._closure(len(chart), moved, chart)]

    def feed(self, chart: list[frozenset], data: bytes) -> list[frozenset]:
        for b in data:
            if not chart[-1]:
                break
            chart = self.step(chart, b)
        return chart

    def is_viable(self, chart: list[frozenset]) -> bool:
        """The bytes fed so far are a prefix of some string of the language."""
        return bool(chart[-1])

    def is_complete(self, chart: list[frozenset]) -> bool:
        """The bytes fed so far are a string of the language."""
        return (self.start_rule, len(self.rules[self.start_rule][1]), 0, -1) in chart[-1]

    def accepts(self, data: bytes) -> bool:
        return self.is_complete(self.feed(self.initial(), data))

    def viable(self, data: bytes) -> bool:
        return self.is_viable(self.feed(self.initial(), data))

