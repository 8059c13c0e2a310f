"""A byte-level Earley prefix recogniser over the grammar IR: the slow, obviously-correct oracle
of the context-free engine.

Terminals are matched byte by byte with their byte DFAs (themselves checked against `re` in
test_regex.py). Ignored terminals are made explicit by rewriting: an optional run of ignored
terminals goes between every two adjacent symbols and around the start symbol. Nullable
nonterminals are handled by advancing over them at prediction time (Aycock and Horspool).

`EarleyRecogniser` is the textbook algorithm on a chart of numbered sets. `SharedEarley` is the
same algorithm with each set's items pointing at the set they started in instead of numbering it,
so that a set is a value (equal sets behave alike whatever their position) and `step` can be
memoised; its `allowed_tokens` computes whole token masks by walking a byte trie of the
vocabulary. Tests check the two against each other.
"""

from __future__ import annotations

import functools

import numpy as np

from ananke_jax._src.compile.lexer import terminal_dfa
from ananke_jax._src.ir import Grammar

_START = "<start>"
_IGNORED = "<ignored>"


class EarleyRecogniser:
    """Decide, for a byte string, whether it is in the language or a prefix of a member."""

    def __init__(self, grammar: Grammar):
        rules = [(str(r.origin), [str(s) for s in r.expansion]) for r in grammar.rules]
        if grammar.ignore:
            weave = lambda exp: [s for x in exp for s in (_IGNORED, x)] + [_IGNORED] if exp else [_IGNORED]
            rules = [(o, weave(e)[1:-1] if e else []) for o, e in rules]
            rules += [(_IGNORED, []), *[(_IGNORED, [_IGNORED, str(t)]) for t in grammar.ignore]]
            rules.append((_START, [_IGNORED, str(grammar.start), _IGNORED]))
        else:
            rules.append((_START, [str(grammar.start)]))
        self.rules = [(o, tuple(e)) for o, e in rules]
        self.by_origin: dict[str, list[int]] = {}
        for i, (o, _) in enumerate(self.rules):
            self.by_origin.setdefault(o, []).append(i)
        self.dfas = {str(t.name): terminal_dfa(t) for t in grammar.terminals}
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


class EarleySet:
    """One Earley set of `SharedEarley`. An item is (rule, dot, origin, dstate) as in
    `EarleyRecogniser`, except that its origin is the EarleySet it started in, or None for this
    set itself. Sets are interned: equal items, same object."""

    __slots__ = ("complete", "items", "next", "scanning", "waiting")

    def __init__(self, items: frozenset, complete: bool):
        self.items = items
        self.complete = complete
        self.waiting: dict[str, list] = {}  # symbol -> (rule, dot, origin) of the items before it
        self.scanning: list = []  # (DFA transitions, rule, dot, origin, dstate): inside a terminal
        self.next: dict[int, EarleySet] = {}  # memo of SharedEarley.step


class SharedEarley(EarleyRecogniser):
    """`EarleyRecogniser` whose chart is its last set, an `EarleySet` (the earlier ones are reached
    through origins): `step` is then a function of that set and the byte, and is memoised."""

    def __init__(self, grammar: Grammar):
        super().__init__(grammar)
        self.transitions = {name: dfa.transitions.tolist() for name, dfa in self.dfas.items()}
        self.sets: dict[frozenset, EarleySet] = {}  # interning: equal sets share their memo
        self.start_set = self._closure({(self.start_rule, 0, None, -1)})

    def _closure(self, seeds: set) -> EarleySet:
        """The set holding ``seeds`` and everything predicted and completed from them, as in
        `EarleyRecogniser._closure`; the items waiting for a symbol are indexed by it."""
        todo = list(seeds)
        done = set(seeds)
        waiting: dict[str, list] = {}
        scanning = []

        def add(item):
            if item not in done:
                done.add(item)
                todo.append(item)

        while todo:
            rule, dot, origin, dstate = todo.pop()
            lhs, expansion = self.rules[rule]
            if dstate >= 0:
                scanning.append((self.transitions[expansion[dot]], rule, dot, origin, dstate))
                if self.dfas[expansion[dot]].accepting[dstate]:
                    add((rule, dot + 1, origin, -1))
                continue
            if dot == len(expansion):  # complete: advance the items waiting for lhs in its origin
                if origin is None:  # started here (lhs is nullable): scan this set, as the textbook one
                    for r2, d2, o2, s2 in list(done):
                        if s2 < 0 and d2 < len(self.rules[r2][1]) and self.rules[r2][1][d2] == lhs:
                            add((r2, d2 + 1, o2, -1))
                else:  # started in an earlier set: its items' origin None means that set
                    for r2, d2, o2 in origin.waiting.get(lhs, ()):
                        add((r2, d2 + 1, origin if o2 is None else o2, -1))
                continue
            symbol = expansion[dot]
            waiting.setdefault(symbol, []).append((rule, dot, origin))
            if symbol in self.dfas:
                add((rule, dot, origin, self.dfas[symbol].start))
            else:
                for r2 in self.by_origin.get(symbol, ()):
                    add((r2, 0, None, -1))
                if symbol in self.nullable:
                    add((rule, dot + 1, origin, -1))
        items = frozenset(done)
        found = self.sets.get(items)
        if found is None:
            # The start rule is predicted in the start set only, so a complete start item
            # started there: the input so far is in the language.
            end = len(self.rules[self.start_rule][1])
            complete = any(r == self.start_rule and d == end and s < 0 for r, d, _, s in items)
            found = self.sets[items] = EarleySet(items, complete)
            found.waiting, found.scanning = waiting, scanning
        return found

    def initial(self) -> EarleySet:
        return self.start_set

    def step(self, chart: EarleySet, byte: int) -> EarleySet:
        """The set after one more byte (empty when the prefix is dead)."""
        nxt = chart.next.get(byte)
        if nxt is None:
            moved = set()
            for transitions, rule, dot, origin, dstate in chart.scanning:
                target = transitions[dstate][byte]
                if target:
                    moved.add((rule, dot, chart if origin is None else origin, target))
            nxt = chart.next[byte] = self._closure(moved)
        return nxt

    def feed(self, chart: EarleySet, data: bytes) -> EarleySet:
        for b in data:
            if not chart.items:
                break
            chart = self.step(chart, b)
        return chart

    def is_viable(self, chart: EarleySet) -> bool:
        return bool(chart.items)

    def is_complete(self, chart: EarleySet) -> bool:
        return chart.complete

    def allowed_tokens(self, chart: EarleySet, vocab) -> np.ndarray:
        """The exact mask after the prefix of ``chart``: bool[len(vocab)], True for a token iff
        the prefix followed by its bytes is viable; EOS iff the prefix is complete; other special
        tokens never.

        A depth-first walk over the byte trie of the vocabulary: each trie edge is one `step`, the
        set of a trie prefix is shared by every token below it, and a subtree is pruned as soon
        as its set is empty (every extension of a dead prefix is dead).
        """
        viable = []
        if self.is_viable(chart):
            todo = [(token_trie(vocab), chart)]
            while todo:
                node, node_chart = todo.pop()  # node_chart is viable: so are the tokens ending here
                viable += node.ids
                for byte, child in node.children.items():
                    child_chart = self.step(node_chart, byte)
                    if self.is_viable(child_chart):
                        todo.append((child, child_chart))
        allowed = np.zeros(len(vocab), bool)
        allowed[viable] = True
        allowed[list(vocab.special_token_ids)] = False
        allowed[list(vocab.eos_token_ids)] = self.is_complete(chart)
        return allowed


class _TrieNode:
    __slots__ = ("children", "ids")

    def __init__(self):
        self.ids: list[int] = []  # the tokens whose bytes end at this node
        self.children: dict[int, _TrieNode] = {}


@functools.lru_cache(maxsize=8)
def token_trie(vocab) -> _TrieNode:
    """The byte trie of a vocabulary's non-special tokens (built once per vocabulary)."""
    root = _TrieNode()
    for i, token in enumerate(vocab.tokens):
        if i not in vocab.special_token_ids:
            node = root
            for byte in token:
                if byte not in node.children:
                    node.children[byte] = _TrieNode()
                node = node.children[byte]
            node.ids.append(i)
    return root
