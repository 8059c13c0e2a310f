"""Rules over regex trees to one byte DFA (no recursion) or to the grammar IR (recursion).

Rules that are not on a cycle are inlined. Without cycles, the root is one regular language. With
cycles, the recursive rules stay nonterminals and every maximal piece without references becomes
one terminal, so the pushdown engine steps over few, large terminals. A language without cycles
too large for one automaton goes to the pushdown engine split along its tree into pieces of about
``max_terminal`` NFA states (a sequence into runs, a choice into groups of branches, a repeat into
loops). Either way, a large piece that several runs hold is a symbol of its own (`_Writer.shared`).
"""

from __future__ import annotations

import collections
import itertools
import math
import re
from collections.abc import Callable

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.automaton import ByteDFA
from ananke_jax._src.compile.budget import charge_states, check_time
from ananke_jax._src.compile.unit_loops import UnitLanguage, expand_unit_loops
from ananke_jax._src.errors import GrammarError, SchemaError
from ananke_jax._src.ir import Grammar, Rule, TerminalDef
from ananke_jax._src.json_schema import strings
from ananke_jax._src.json_schema.gaps import MixedGaps, expand_gaps, with_bounded_gaps
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
    # In the rules' own order, not a set's (string hashes vary by process: so would the grammar).
    roots = [name for name in rules.bodies if name in keep or name == rules.start]
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


_SPLIT = (rx.Seq, rx.Alt, rx.Repeat, rx.Interleave)  # nodes whose pieces can be rules
MAX_TERMINAL_STATES = 2_000  # the pieces of a language without recursion too large for one DFA
_COUNTED_BODY = 1 / 16  # of max_terminal: a bounded repeat of a larger body is counted by rules
SHARED_COPY_STATES = 1_024  # a piece held by several nodes whose copies would add this many NFA states is a symbol of its own
_SHARED_PIECE = 64  # NFA states: such a piece is larger (smaller ones, an integer, say, stay in each run)
SMALL_CLASS_UNIT = 32  # the most states of the loop of one set of code points whose runs keep their closing quote (`_is_unit_run`)


def to_grammar(
    rules: Rules,
    keep: set[str],
    *,
    printable: bool = False,
    max_terminal: float = math.inf,
    charge_total: bool = False,
    compiling: bool = False,
    gap_run: int | None = None,
) -> Grammar:
    """The IR: kept rules as nonterminals, reference-free pieces as terminals (with DFAs), each
    estimated (`rx.nfa_size`) within ``max_terminal`` NFA states unless it is one leaf or a
    bounded repeat of a small body; a repeat of a larger one, two or more times, is counted by
    rules (`_Writer.counted`); a large piece held by several runs is kept out of them
    (`_Writer.shared`).

    A terminal built from automata gets its regex text (by state elimination, which can be slow
    on large automata) only when ``printable``; otherwise the text just names its size. A grammar
    for the compiler (``compiling``) prints no text unless ``printable`` (printing large trees took
    seconds), and its terminals read their free and length-bounded strings as placeholder units
    where they can (`TerminalDef.units`); else a terminal's DFA spells them out. Its placeholder
    gaps (`gaps.GAP`), if ``gap_run`` is given, are expanded in each terminal's DFA into runs of at
    most ``gap_run`` whitespace bytes (as regexes they made subset construction several times
    slower).

    Raises:
      BudgetError: ``charge_total``, a finite ``max_terminal``, and the terminals' estimates add
        up over ``max_states`` (checked before any is built).
    """
    bodies = inline(rules, keep)
    return _Writer(bodies, rules.start, printable, max_terminal, compiling, gap_run).grammar(charge_total)


class _Writer:
    def __init__(self, bodies: dict[str, rx.Node], start: str, printable: bool, max_terminal: float, compiling: bool, gap_run: int | None):
        self.bodies = bodies
        self.printable = printable
        self.compiling = compiling
        self.gap_run = gap_run
        self.max_terminal = max_terminal
        self.sizes: dict[int, tuple[rx.Node, float]] = {}  # id -> (node, kept alive; NFA estimate)
        self.names = _readable_names([start, *[n for n in bodies if n != start]], start)
        self.start = start
        self.rules: list[Rule] = []
        self.terminals: dict[rx.Node, str] = {}  # node -> its terminal's name
        self.spelled: dict[rx.Node, list[str]] = {}  # node -> its symbols (`symbols`)
        self.helpers = 0
        self.holders = _holders(bodies.values())

    def grammar(self, charge_total: bool) -> Grammar:
        for name, body in self.bodies.items():
            self.define(self.names[name], body)
        if charge_total:
            charge_states(int(sum(map(_built_size, self.terminals))), "the grammar's terminals' NFAs, together,")
        terminals = tuple(self.terminal_def(node, name) for node, name in self.terminals.items())
        return Grammar(tuple(self.rules), terminals, self.names[self.start])

    def define(self, name: str, node) -> None:
        branches = self.runs(node.parts, rx.alt) if isinstance(node, rx.Alt) else [node]
        for branch in branches:
            self.rules.append(Rule(name, tuple(branch if isinstance(branch, list) else self.symbols(branch))))

    def runs(self, parts, join) -> list:
        """``parts``, where consecutive ones are small together, joined by ``join`` (`rx.seq`,
        `rx.alt`) into one terminal each, given as ``[its name]``; a `shared` part stands alone."""
        out, run, size = [], [], 0.0
        characters = None  # a string's characters too large for the run, until its closing quote
        for part in parts:
            if characters is not None:
                closed = isinstance(part, rx.Text) and part.text.startswith('"')
                out.append(self.as_terminal(rx.seq(characters, rx.Text('"'))) if closed else characters)  # (`_is_unit_run`)
                characters = None
                if closed and part.text == '"':
                    continue
                part = rx.Text(part.text[1:]) if closed else part
            if self.shared(part):
                out += [self.as_terminal(join(*run))] if run else []
                out.append(part)
                run, size = [], 0.0
                continue
            if run and not self.small(part, size):
                out.append(self.as_terminal(join(*run)))
                run, size = [], 0.0
            if self.small(part):
                run.append(part)
                size += self.size(part)
            elif join is rx.seq and _is_unit_run(part):
                characters = part
            else:
                out.append(part)
        out += [characters] if characters is not None else []
        return out + ([self.as_terminal(join(*run))] if run else [])

    def as_terminal(self, node) -> list[str]:
        """``node`` as the symbols of one terminal (none for the empty string)."""
        return [] if node == rx.EMPTY else [self.terminal(node)]

    def symbols(self, node) -> list[str]:
        """The symbols of ``node``'s language, once per distinct node: a subschema reached in
        several places (an array property beside optional ones, where each order of the
        properties reaches it) shares its helpers and the chains counting its repeats."""
        if node not in self.spelled:
            self.spelled[node] = self._symbols(node)
        return list(self.spelled[node])

    def _symbols(self, node) -> list[str]:
        if isinstance(node, Ref):
            return [self.names[node.name]]
        if self.whole(node):
            return self.as_terminal(node)
        if isinstance(node, rx.Seq):
            return [s for part in self.runs(node.parts, rx.seq) for s in (part if isinstance(part, list) else self.symbols(part))]
        if isinstance(node, rx.Alt):
            helper = self.helper()
            self.define(helper, node)
            return [helper]
        if isinstance(node, rx.Interleave):
            return [self.interleaving(node)]
        if isinstance(node, rx.Repeat):
            body = self.symbols(node.body)
            if node.hi is None and node.lo <= 1:  # x* or x x*
                loop = self.helper()
                self.rules += [Rule(loop, ()), Rule(loop, (loop, *body))]
                return body * node.lo + [loop]
            if node.hi is not None and node.hi <= 1:  # nothing, x or x?
                if node.lo == node.hi:
                    return body * node.lo
                optional = self.helper()
                self.rules += [Rule(optional, ()), Rule(optional, tuple(body))]
                return [optional]
            return [self.counted(body, node.lo, node.hi)]
        raise TypeError(f"not a rule body node: {node!r}")

    def counted(self, body: list[str], lo: int, hi: int | None) -> str:
        """A nonterminal of ``lo`` to ``hi`` (None: any number more) copies of ``body``, counted by
        a left-recursive chain (``C1 -> B``, ``C(k+1) -> Ck B``): the stack stays as deep as for
        one copy, where copies in a rule or nested optionals would take an entry each."""
        count = lo if hi is None else hi
        charge_states(3 * count, "the rules counting a repeat, as LR items,")
        check_time()
        if len(body) == 1:
            unit = body
        else:
            unit = [self.helper()]
            self.rules.append(Rule(unit[0], tuple(body)))
        chain = [self.helper() for _ in range(count)]
        self.rules.append(Rule(chain[0], tuple(unit)))
        self.rules += [Rule(after, (before, *unit)) for before, after in itertools.pairwise(chain)]
        whole = self.helper()
        if hi is None:
            self.rules += [Rule(whole, (chain[-1],)), Rule(whole, (whole, *unit))]
        else:
            self.rules += [Rule(whole, ())] if lo == 0 else []
            self.rules += [Rule(whole, (chain[k - 1],)) for k in range(max(lo, 1), hi + 1)]
        return whole

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

    def whole(self, node) -> bool:
        """Whether ``node`` is one terminal: it has no reference and is within ``max_terminal``,
        or cannot be split (a leaf), or it is a bounded repeat of a body so small (a string's
        characters, a pattern's pieces) that rules counting its copies (`counted`) would cost more
        than the copies in one automaton."""
        if self.small(node) or not isinstance(node, _SPLIT):
            return True
        return isinstance(node, rx.Repeat) and node.hi is not None and self.small(node.body, (1 - _COUNTED_BODY) * self.max_terminal)

    def shared(self, node) -> bool:
        """Whether ``node`` is a piece held by several nodes (an optional property after each of
        the ones before it, say) of more than `_SHARED_PIECE` NFA states, whose copies in their
        terminals would add `SHARED_COPY_STATES` or more: it is kept out of them, one terminal
        (or set of rules) for all. On a CloudFormation schema whose optional properties came in
        eight terminals each, the lexer took half the states, and the compile half the time. A run
        of one character set (whitespace, a string's characters) is never kept out: beside its
        neighbours in one terminal it makes no LR conflict, and a string's loop needs its quote."""
        if isinstance(node, rx.Repeat) and (node.body == strings.ANY_UNIT or not isinstance(node.body, _SPLIT)):
            return False
        size = self.size(node)
        return _SHARED_PIECE < size < math.inf and (self.holders[node] - 1) * size >= SHARED_COPY_STATES

    def small(self, node, beside: float = 0.0) -> bool:
        """Whether ``node`` has no reference and, with ``beside`` states more, is within
        ``max_terminal``."""
        return self.size(node) < math.inf and self.size(node) + beside <= self.max_terminal

    def size(self, node) -> float:
        """``node``'s NFA estimate, infinite when it holds a reference (memoised by identity, the
        node kept alive with it)."""
        if id(node) not in self.sizes:
            self.sizes[id(node)] = node, rx.nfa_size(node) if is_regular(node) else math.inf
        return self.sizes[id(node)][1]

    def terminal(self, node: rx.Node) -> str:
        """The name of ``node``'s terminal (built in `grammar`, once per distinct node)."""
        return self.terminals.setdefault(node, f"T{len(self.terminals)}")

    def terminal_def(self, node: rx.Node, name: str) -> TerminalDef:
        dfa, units = _terminal_automaton(node, self.gap_run) if self.compiling else (rx.to_dfa(node), None)
        if self.printable or not (self.compiling or _has_automaton(node)):
            try:
                text = rx.to_regex(node)
            except GrammarError as e:
                raise SchemaError(f"cannot print terminal {name}: {e}") from None
        else:
            text = f"<automaton of {dfa.num_states} states>"
        return TerminalDef(name, text, dfa, units)

    def helper(self) -> str:
        self.helpers += 1
        return f"_h{self.helpers}"


def _holders(roots) -> collections.Counter:
    """How many distinct nodes under ``roots`` hold each node as a part (equal nodes are one)."""
    holders, seen = collections.Counter(), set()
    for root in roots:
        for node in rx.subtrees(root):
            if node in seen:
                continue
            seen.add(node)
            parts = node.parts if isinstance(node, (rx.Seq, rx.Alt, rx.Interleave)) else (node.body,) if isinstance(node, rx.Repeat) else ()
            holders.update(set(parts))
    return holders


def _is_unit_run(node) -> bool:
    """Whether ``node`` is a string's run of characters (`strings.ANY_UNIT`, or one set of code
    points, `strings.ClassUnit`, repeated). Too large for a small terminal, it is one with the
    closing quote: split from it, its terminal would end where it counts characters, and then
    the lexer steps over no loop per vocabulary (`cfg._lexer_with_loops`) but walks every
    loop's states (on 131k tokens, lexers of 40-65k states walked instead of 4-8k). A set
    whose character takes more than `SMALL_CLASS_UNIT` states (Unicode categories: hundreds)
    is left alone: its unit spliced into every counting state would outgrow the lexer that
    spells it out (120k states against 5k on a CloudFormation schema)."""
    if not isinstance(node, rx.Repeat):
        return False
    body = node.body
    return body == strings.ANY_UNIT or (isinstance(body, strings.ClassUnit) and body.language.dfa.num_states <= SMALL_CLASS_UNIT)


def _terminal_automaton(node: rx.Node, gap_run: int | None) -> tuple[ByteDFA, UnitLanguage | None]:
    """``node``'s DFA, with one placeholder byte for each character of its free and length-bounded
    strings (`strings.UNIT`) where it has such strings and they expand to loops, the string
    language then given with it; else spelled out (the lexer steps over loops per vocabulary).
    Placeholder gaps are expanded (runs of at most ``gap_run``: `gaps.expand_gaps`), or made
    regexes where a state reads both a gap and literal whitespace."""
    if gap_run is None:
        return _units_automaton(node, lambda dfa: dfa)
    try:
        return _units_automaton(node, lambda dfa: expand_gaps(dfa, gap_run))
    except MixedGaps:
        return _units_automaton(with_bounded_gaps(node, gap_run), lambda dfa: dfa)


def _units_automaton(node: rx.Node, expanded: Callable[[ByteDFA], ByteDFA]) -> tuple[ByteDFA, UnitLanguage | None]:
    """Free and length-bounded strings as placeholders (`strings.with_placeholder_units`), or the
    strings of one set of code points under length bounds (`strings.with_placeholder_class`),
    whichever leaves the smaller NFA and loops; the others, and all where neither loops, spelled
    out."""
    placeheld = strings.with_placeholder_units(node)
    candidates = [(placeheld, strings.string_units())] if placeheld != node else []
    if (classes := strings.with_placeholder_class(node)) is not None:
        candidates.append(classes)
    for tree, language in sorted(candidates, key=lambda candidate: rx.nfa_size(candidate[0])):  # the smaller first
        dfa = expanded(rx.to_dfa(tree))
        loops = expand_unit_loops(dfa, language)
        if loops is not None and loops[1] is not None:
            return dfa, language
    return expanded(rx.to_dfa(node)), None


def _built_size(node: rx.Node) -> float:
    """``node``'s NFA estimate as `_units_automaton` builds it: its strings' characters as
    placeholders where that is smaller."""
    trees = [node, strings.with_placeholder_units(node)]
    if (classes := strings.with_placeholder_class(node)) is not None:
        trees.append(classes[0])
    return min(map(rx.nfa_size, trees))


def _has_automaton(node) -> bool:
    """Whether printing ``node`` turns an automaton into a regex (slow on large ones)."""
    if isinstance(node, rx.Automaton):
        return node.source is None and not isinstance(node, strings.ClassUnit)  # one character: small
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
