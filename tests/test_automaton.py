"""Subset construction and Hopcroft minimisation against a direct NFA simulation and Moore's algorithm;
byte classes against a direct comparison of columns."""

import gc
import re

import hypothesis
import numpy as np
import pytest
from hypothesis import strategies as st

from ananke_jax._src.compile import automaton
from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.compile.arrays import stable_order
from ananke_jax._src.compile.automaton import Fragment, NFABuilder, byte_classes, minimise, pausing_gc, subset_construction
from ananke_jax._src.compile.regex import regex_to_dfa

# Code point ranges whose UTF-8 forms share lead bytes and continuation suffixes.
_CLASSES = [
    [(0x61, 0x63)],
    [(0x30, 0x39), (0x61, 0x61)],
    [(0xE9, 0xE9)],
    [(0x3B1, 0x3C9)],
    [(0x7F, 0x800)],
    [(0x4E00, 0x4E05), (0xFF00, 0x10010)],
    [(0x1F600, 0x1F602)],
    [(0x20, 0x10FFFF)],
]


def _moore_num_states(table: np.ndarray, accepting: np.ndarray) -> int:
    """Moore's refinement from {rejecting, accepting}: the number of Nerode classes of all states."""
    block = accepting.astype(np.int64)
    count = len(np.unique(block))
    while True:
        rows = np.concatenate([block[:, None], block[table]], axis=1)
        _, block = np.unique(rows, axis=0, return_inverse=True)
        block = block.reshape(-1)
        if block.max() + 1 == count:
            return count
        count = block.max() + 1


def _co_accessible(table: np.ndarray, accepting: np.ndarray) -> np.ndarray:
    live = accepting.copy()
    while (grown := live | live[table].any(axis=1)).sum() > live.sum():
        live = grown
    return live


def _nfa_accepts(builder: NFABuilder, fragment: Fragment, data: bytes) -> bool:
    def closure(states: set[int]) -> set[int]:
        stack = list(states)
        while stack:
            for t in builder.epsilons[stack.pop()]:
                if t not in states:
                    states.add(t)
                    stack.append(t)
        return states

    current = closure({fragment.start})
    for b in data:
        current = closure({t for s in current for lo, hi, t in builder.edges[s] if lo <= b <= hi})
    return fragment.end in current


def _random_node(rng: np.random.Generator, depth: int, pool: list) -> rx.Node:
    """A random regex tree that often reuses subtrees already made (shared objects, as the JSON
    Schema compiler's memos make them), so that `to_nfa` shares their states."""
    if pool and rng.random() < 0.25:
        return pool[int(rng.integers(len(pool)))]
    kind = int(rng.integers(5 if depth else 2))
    if kind == 0:
        node = rx.Text("".join(rng.choice(list("abc"), size=int(rng.integers(4))).tolist()))
    elif kind == 1:
        node = rx.Chars(tuple(_CLASSES[int(rng.integers(len(_CLASSES)))]))
    elif kind in (2, 3):
        parts = [_random_node(rng, depth - 1, pool) for _ in range(int(rng.integers(1, 4)))]
        node = rx.Seq(tuple(parts)) if kind == 2 else rx.Alt(tuple(parts))
    else:
        lo = int(rng.integers(3))
        node = rx.Repeat(_random_node(rng, depth - 1, pool), lo, None if rng.random() < 0.3 else lo + int(rng.integers(3)))
    pool.append(node)
    return node


def _python_regex(node: rx.Node) -> str:
    """The node as Python `re` syntax (written here, apart from the library's printer)."""
    if isinstance(node, rx.Text):
        return re.escape(node.text)
    if isinstance(node, rx.Chars):
        return "[" + "".join(f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in node.ranges) + "]"
    if isinstance(node, rx.Seq):
        return "".join(f"(?:{_python_regex(p)})" for p in node.parts)
    if isinstance(node, rx.Alt):
        return "(?:" + "|".join(_python_regex(p) for p in node.parts) + ")" if node.parts else "(?!)"
    return f"(?:{_python_regex(node.body)}){{{node.lo},{'' if node.hi is None else node.hi}}}"


def _random_graph(rng: np.random.Generator) -> tuple[NFABuilder, Fragment]:
    """An unstructured NFA: epsilon cycles, overlapping ranges, states that reach nothing."""
    builder = NFABuilder()
    n = int(rng.integers(1, 9))
    for _ in range(n):
        builder.state()
    for s in range(n):
        for _ in range(int(rng.integers(4))):
            lo = int(rng.integers(97, 101))
            builder.edges[s].append((lo, lo + int(rng.integers(2)), int(rng.integers(n))))
        if rng.random() < 0.4:
            builder.epsilons[s].append(int(rng.integers(n)))
    return builder, Fragment(0, int(rng.integers(n)))


def _random_string(table, accepting, live, byte_class, rng: np.random.Generator) -> bytes:
    """Mostly bytes that keep the subset automaton live, often stopping on acceptance."""
    state, out = 1, []
    for _ in range(int(rng.integers(12))):
        if accepting[state] and rng.random() < 0.3:
            break
        keep_live = np.flatnonzero(live[table[state]])
        c = rng.choice(keep_live) if len(keep_live) and rng.random() < 0.9 else rng.integers(table.shape[1])
        out.append(int(rng.choice(np.flatnonzero(byte_class == c))))
        state = table[state, c]
    return bytes(out)


def _check(builder: NFABuilder, fragment: Fragment, rng: np.random.Generator):
    table, accepting, byte_class = subset_construction(builder, fragment)
    dfa = minimise(table, accepting, start=1, byte_class=byte_class)
    live = _co_accessible(table, accepting)
    kept = automaton.trimmed(table, accepting, start=1, byte_class=byte_class)  # dead ends merged only
    assert kept.num_states == 1 + int(live[1:].sum()) and kept.transitions.dtype == np.int32
    assert kept.transitions.shape == (kept.num_states, 256) and not kept.transitions[0].any() and not kept.accepting[0]

    assert dfa.transitions.dtype == np.int32 and dfa.transitions.shape == (dfa.num_states, 256)
    assert dfa.accepting.dtype == bool and dfa.accepting.shape == (dfa.num_states,)
    assert not dfa.accepting[0] and (dfa.transitions[0] == 0).all()
    assert dfa.num_states == _moore_num_states(table, accepting)

    for _ in range(60):
        data = _random_string(table, accepting, live, byte_class, rng)
        state, subset, trim = dfa.start, 1, kept.start
        for b in data:
            state, subset, trim = int(dfa.transitions[state, b]), int(table[subset, byte_class[b]]), int(kept.transitions[trim, b])
            assert (state != 0) == live[subset] == (trim != 0), data
        expected = _nfa_accepts(builder, fragment, data)
        assert bool(accepting[subset]) == expected == bool(dfa.accepting[state]) == bool(kept.accepting[trim]), data


def _tree_nfa(node: rx.Node) -> tuple[NFABuilder, Fragment]:
    builder = NFABuilder()
    end = builder.state()
    return builder, Fragment(rx.to_nfa(node, builder, end, {}), end)


@pytest.mark.parametrize("seed", range(200))
def test_structured_nfa(seed):
    rng = np.random.default_rng(seed)
    _check(*_tree_nfa(_random_node(rng, 3, [])), rng)


@pytest.mark.parametrize("seed", range(100))
def test_shared_subtrees_keep_the_language(seed):
    """`to_nfa` builds a subtree used twice with the same continuation once: the language of
    trees full of shared subtrees against Python's `re` on random strings."""
    rng = np.random.default_rng(seed)
    node = _random_node(rng, 4, [])
    builder, fragment = _tree_nfa(node)
    pattern = re.compile(_python_regex(node), re.DOTALL)
    alphabet = list("abc0é\u03b1\u4e01\U0001f600 ")
    for _ in range(150):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(10))).tolist())
        assert _nfa_accepts(builder, fragment, text.encode()) == (pattern.fullmatch(text) is not None), (text, pattern.pattern)
    assert rx.nfa_size(node) >= len(builder.edges) // 4  # the estimate the budget reads is of the right order


@pytest.mark.parametrize("seed", range(200))
def test_unstructured_nfa(seed):
    rng = np.random.default_rng(1000 + seed)
    _check(*_random_graph(rng), rng)


@pytest.mark.parametrize("seed", range(50))
def test_code_points_match_exactly_their_utf8_forms(seed):
    # byte_ranges shares equal suffixes between UTF-8 sequences; that must add no other strings.
    rng = np.random.default_rng(2000 + seed)
    bounds = np.sort(rng.choice([0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF], 2, replace=False))
    lo, hi = (int(x) + int(rng.integers(-40, 41)) for x in bounds)
    lo, hi = max(lo, 0), min(hi, 0x10FFFF)
    builder = NFABuilder()
    fragment = builder.code_points([(lo, hi)])
    table, accepting, byte_class = subset_construction(builder, fragment)
    dfa = minimise(table, accepting, start=1, byte_class=byte_class)
    probes = np.concatenate([rng.integers(0, 0x110000, 300), np.arange(lo - 3, lo + 3), np.arange(hi - 3, hi + 3)])
    for cp in map(int, probes):
        if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF:
            assert bool(dfa.accepting[dfa.walk(dfa.start, chr(cp).encode())]) == (lo <= cp <= hi), (lo, hi, cp)
    _check(builder, fragment, rng)


def test_non_co_accessible_states_collapse_into_state_0():
    # Over byte classes x, y, z: 1 -x-> 2 (accepting), 1 -y-> 3, and 3, 4 loop into each other
    # without ever accepting; 5, unreachable, has 1's only live move, so it merges with 1.
    table = np.zeros((6, 3), np.int32)
    table[1, 0], table[1, 1], table[3, :], table[4, :], table[5, 0] = 2, 3, 4, 3, 2
    dfa = minimise(table, np.array([0, 0, 1, 0, 0, 0], bool), start=1, byte_class=np.arange(256) % 3)
    assert dfa.num_states == 3 and dfa.start == 1
    assert dfa.walk(dfa.start, b"\x00") == 2 and dfa.accepting[2]
    assert dfa.walk(dfa.start, b"\x01") == 0


def test_empty_language_is_the_dead_state_alone():
    dfa = minimise(np.zeros((3, 2), np.int32), np.zeros(3, bool), start=1, byte_class=np.zeros(256, np.int32))
    assert dfa.num_states == 1 and dfa.start == 0


def test_deep_bounded_repetition_is_minimal():
    # 1000 optional characters between quotes: 1001 "characters read" positions times the UTF-8
    # continuation states, which Moore's algorithm needs 1000 rounds to separate.
    dfa = regex_to_dfa(r'"[^"\\]{0,1000}"')
    assert dfa.num_states == 8004
    assert dfa.accepting[dfa.walk(dfa.start, ('"' + "é" * 1000 + '"').encode())]
    assert dfa.walk(dfa.start, ('"' + "a" * 1001).encode()) == 0


def test_pausing_gc_pauses_the_collector_and_restores_it_even_on_errors():
    seen = []

    @pausing_gc
    def inner():
        seen.append(gc.isenabled())

    @pausing_gc
    def outer(fail):
        inner()
        seen.append(gc.isenabled())
        if fail:
            raise ValueError("boom")

    assert gc.isenabled()
    outer(False)
    with pytest.raises(ValueError):
        outer(True)
    assert gc.isenabled() and seen == [False] * 4
    gc.disable()  # a caller that paused it already keeps it paused
    try:
        outer(False)
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("collide", [False, True], ids=["hashed", "every-hash-colliding"])
def test_byte_classes_group_exactly_the_equal_columns(seed, collide, monkeypatch):
    if collide:  # all-zero weights: every column hashes alike, so the exact fallback must sort them out
        monkeypatch.setattr(automaton, "hash_multipliers", lambda n: np.zeros((2, n), np.uint64))
    rng = np.random.default_rng(seed)
    num_states = int(rng.integers(1, 600) if seed % 2 else rng.integers(2 * automaton._BLOCK_ROWS, 3 * automaton._BLOCK_ROWS))
    kinds = rng.integers(0, num_states, (num_states, int(rng.integers(1, 40))), dtype=np.int32)
    table = kinds[:, rng.integers(0, kinds.shape[1], 256)]  # columns drawn from a few distinct ones
    if seed % 3 == 0:  # columns alike but for two states of the last block, swapped: equal sums
        table = np.repeat(table[:, :1], 256, axis=1)
        table[-2:, 0] = [0, num_states - 1]
        table[-2:, 1:9] = [[num_states - 1], [0]]
    byte_class, first_byte = byte_classes(table)
    column_kind = np.unique(table.T, axis=0, return_inverse=True)[1].reshape(-1)
    assert len(set(zip(byte_class.tolist(), column_kind.tolist()))) == len(set(byte_class.tolist())) == len(set(column_kind.tolist()))
    assert sorted(set(byte_class.tolist())) == list(range(len(first_byte)))
    assert first_byte.tolist() == [int(np.flatnonzero(byte_class == c)[0]) for c in range(len(first_byte))]  # lowest bytes


@pytest.mark.parametrize("seed", range(60))
def test_a_concatenation_of_automata_is_joined_without_subsets_and_keeps_the_language(seed):
    """`rx.to_dfa` joins a concatenation holding automata part by part (`concatenated`) where
    no accepting state of a part reads a first byte of the next. On random trees, the joined DFA
    agrees with Python's `re` on random strings and on finiteness, and has no unreachable state."""
    rng = np.random.default_rng(seed)
    parts = [_random_node(rng, 2, []) for _ in range(3)]
    joined = rx.to_dfa(rx.Seq(tuple(rx.Automaton(rx.to_dfa(p)) if i % 2 == 0 else p for i, p in enumerate(parts))))
    built = rx.to_dfa(rx.seq(*parts))  # through the NFA
    pattern = re.compile("".join(f"(?:{_python_regex(p)})" for p in parts), re.DOTALL)
    alphabet = list("abc0é\u03b1\u4e01\U0001f600 ")
    for _ in range(150):
        text = "".join(rng.choice(alphabet, size=int(rng.integers(8))).tolist())
        assert joined.accepts(text.encode()) == (pattern.fullmatch(text) is not None), (text, pattern.pattern)
    assert automaton.is_finite(joined) == automaton.is_finite(built)
    reached = np.zeros(joined.num_states, bool)
    reached[[joined.start, *joined.transitions.ravel().tolist()]] = True
    assert reached[1:].all() or not joined.start


def test_automata_that_overlap_at_a_join_are_built_through_the_nfa():
    """``a*`` then ``a``: an accepting state of the first reads the first byte of the second, so
    they cannot be joined, and the NFA's subsets build them."""
    first, second = regex_to_dfa("a*"), regex_to_dfa("ab")
    assert automaton.concatenated(first, second) is None
    dfa = rx.to_dfa(rx.Seq((rx.Automaton(first), rx.Automaton(second))))
    assert [dfa.accepts(t) for t in (b"ab", b"aaab", b"a", b"b")] == [True, True, False, False]


@pytest.mark.parametrize("seed", range(30))
def test_a_long_bounded_repeat_is_chained_from_copies_of_its_body(seed):
    """A repeat of 16 copies or more is chained from its body's DFA (`automaton.repeated`) where
    the split between copies is forced, and through the NFA otherwise; alone, joined in a
    concatenation or inside an alternation, its DFA agrees with Python's `re` on strings of
    about as many words as the bounds."""
    rng = np.random.default_rng(seed)
    words = ["ab", "c", "é", "ba", "a", "abc"]
    chosen = rng.choice(words, size=int(rng.integers(1, 4)), replace=False).tolist()
    lo, hi = int(rng.integers(0, 18)), None
    hi = lo + int(rng.integers(0, 4)) if lo >= 16 else 16 + int(rng.integers(0, 4))
    body = rx.Alt(tuple(rx.Text(w) for w in chosen)) if len(chosen) > 1 else rx.Text(chosen[0])
    repeat = rx.Repeat(body, lo, hi)
    forced = automaton.repeated(rx.to_dfa(body), lo, hi) is not None
    # Forced: no word goes on after another word with a byte some word begins with.
    assert forced == (not any(b.startswith(a + c[0]) for a in chosen for b in chosen for c in chosen))
    inner = f"(?:{'|'.join(map(re.escape, chosen))}){{{lo},{hi}}}"
    cases = [
        (repeat, inner),
        (rx.Seq((rx.Text("x"), repeat, rx.Text("y"))), f"x{inner}y"),
        (rx.Alt((rx.Seq((rx.Text("x"), repeat)), rx.Text("xz"))), f"x{inner}|xz"),
    ]
    for node, pattern in cases:
        dfa = rx.to_dfa(node)
        for _ in range(60):
            count = int(rng.integers(max(0, lo - 2), hi + 3))
            text = "".join(rng.choice([*words, "d"], size=count).tolist())
            text = rng.choice(["", "x"]) + text + rng.choice(["", "y", "z"])
            assert dfa.accepts(text.encode()) == (re.fullmatch(pattern, text) is not None), (text, pattern)


@pytest.mark.parametrize("seed", range(40))
def test_a_repeat_whose_copies_overlap_is_counted_by_the_fewest_copies(seed):
    """``body{lo,hi}`` (``lo`` <= 1) whose split between copies is not forced is built by
    `automaton.counted`: per state of the body, the fewest copies that reach it. On random
    bodies, its minimal DFA equals the one the NFA's subsets build (not long, so not chained),
    whatever the body."""
    rng = np.random.default_rng(seed)
    body = rx.seq(_random_node(rng, 2, []), rx.Chars(tuple(_CLASSES[int(rng.integers(len(_CLASSES)))])))  # (never empty)
    lo, hi = int(rng.integers(2)), 16 + int(rng.integers(6))
    body_dfa = rx.to_dfa(body)
    fast = automaton.counted(body_dfa, lo, hi)
    builder = NFABuilder()
    end = builder.state()
    start = end
    for copy in range(hi):  # body{lo,hi} written out: body? (body? (...)), the first lo required
        entry = builder.state()
        piece = builder.copy(body_dfa)
        builder.epsilons[piece.end].append(start)
        builder.epsilons[entry] += [piece.start] + ([end] if copy < hi - lo else [])
        start = entry
    slow = automaton.determinise(builder, Fragment(start, end))
    byte_class, first_byte = byte_classes(fast.transitions)
    minimal = minimise(fast.transitions[:, first_byte], fast.accepting, start=fast.start, byte_class=byte_class.astype(np.int32))
    assert automaton.canonical_form(minimal) == automaton.canonical_form(slow)


def test_an_ambiguous_repeat_of_hundreds_of_copies_is_counted_not_taken_apart():
    """``((.|-+)?[A-Za-z0-9]){0,252}`` (a CloudFormation pattern): a subset of its NFA holds
    states of many copies, and its subset construction took over a minute; counted, the DFA has
    a few states per copy and accepts as Python's `re` does."""
    dfa = regex_to_dfa("((.|-+)?[A-Za-z0-9]){0,252}")
    assert dfa.num_states < 20 * 253
    pattern = re.compile("((.|-+)?[A-Za-z0-9]){0,252}")
    rng = np.random.default_rng(0)
    for _ in range(200):
        text = "".join(rng.choice(list("a-.é/"), size=int(rng.integers(0, 520))).tolist())
        assert dfa.accepts(text.encode()) == (pattern.fullmatch(text) is not None)


@pytest.mark.parametrize("seed", range(12))
def test_the_lexer_product_tracks_every_terminal_and_numbers_each_tuple_once(seed):
    """`build_lexer` steps the terminals' DFAs side by side; tuples where one terminal reads on
    alone are added as a block after the search. From every start and on random strings, each
    lexer state says which terminals are alive and which end exactly as the terminals' own DFAs
    do, and there are as many states as distinct tuples reachable (a plain search, here)."""
    from ananke_jax._src.compile.lexer import build_lexer
    from ananke_jax._src.ir import TerminalDef

    rng = np.random.default_rng(seed)
    regexes = ["[a-c]{0,30}x", "ab", "[ab]+", "c[a-c]*", "(ab|ba){2,20}", "a{3}", "[^x]{1,25}"]
    chosen = sorted(rng.choice(len(regexes), size=int(rng.integers(2, 6)), replace=False).tolist())
    terminals = tuple(TerminalDef(f"T{i}", regexes[i]) for i in chosen)
    dfas = {t.name: regex_to_dfa(t.regex) for t in terminals}
    begins = rng.random((2, len(terminals))) < 0.7
    begins[:, 0] = True
    lexer = build_lexer(terminals, dfas, begins)
    starts = [[dfas[t.name].start if b else 0 for t, b in zip(terminals, row)] for row in begins]
    seen, todo = set(), [tuple(s) for s in starts]
    while todo:  # the tuples reachable by a byte from a start (starts are states of their own)
        states = todo.pop()
        for byte in range(256):
            after = tuple(int(dfas[t.name].transitions[q, byte]) for t, q in zip(terminals, states))
            if after not in seen:
                seen.add(after)
                todo.append(after)
    assert lexer.num_states == len(starts) + len(seen | {(0,) * len(terminals)})
    for _ in range(200):
        k = int(rng.integers(len(starts)))
        text = bytes(rng.choice(list(b"abcx"), size=int(rng.integers(0, 40))).tolist())
        q, states = int(lexer.starts[k]), list(starts[k])
        for byte in text:
            q = int(lexer.transitions[q, byte])
            states = [int(dfas[t.name].transitions[s, byte]) for t, s in zip(terminals, states)]
            assert lexer.alive[q].tolist() == [s != 0 for s in states]
            assert lexer.ends[q].tolist() == [bool(dfas[t.name].accepting[s]) for t, s in zip(terminals, states)]


@pytest.mark.parametrize("seed", range(30))
def test_states_alone_inside_copied_automata_step_by_the_copied_table(seed):
    """The subset construction steps a subset that is one non-accepting state of a copied DFA by
    that DFA's table, in batches. NFAs of copies joined and alternated, some wired to from
    outside their entries, determinise to the language of the same NFA built with the moves
    listed by hand (which the construction steps one subset at a time)."""
    rng = np.random.default_rng(seed)
    dfas = [rx.to_dfa(_random_node(rng, 2, [])) for _ in range(3)]
    inward = int(rng.integers(0, 3))

    def built(fast: bool) -> automaton.ByteDFA:
        b = NFABuilder()
        copy = lambda d: b.copy(d) if fast else b.copy(d, automaton.dfa_moves(d))
        pieces = [copy(d) for d in dfas]
        joined = b.concat([pieces[0], b.alternation([pieces[1], copy(dfas[2])]), pieces[2]])
        # An edge into the middle of the second copy from outside it.
        entry = b.state()
        b.epsilons[entry] += [joined.start, pieces[1].start + inward]
        return automaton.determinise(b, Fragment(entry, joined.end))

    fast, slow = built(True), built(False)
    assert rx.difference(fast, slow).start == 0 and rx.difference(slow, fast).start == 0
    assert fast.num_states == slow.num_states  # both minimal


@pytest.mark.parametrize("seed", range(20))
def test_dfa_moves_are_the_maximal_byte_runs_of_each_live_transition(seed):
    """Per live state, the moves are sorted, disjoint, maximal runs of equal targets, and cover
    exactly the bytes whose target is not the dead state."""
    rng = np.random.default_rng(seed)
    num_states, run = int(rng.integers(1, 12)), int(rng.integers(1, 40))
    table = np.repeat(rng.integers(0, num_states, (num_states, 256 // run + 1)), run, axis=1)[:, :256]
    table[0] = 0
    moves = automaton.dfa_moves(automaton.ByteDFA(table.astype(np.int32), np.zeros(num_states, bool), min(1, num_states - 1)))
    assert len(moves) == num_states - 1
    for row, state_moves in zip(table[1:], moves):
        covered = np.zeros(256, np.int64)
        for (lo, hi, target), after in zip(state_moves, [*state_moves[1:], None]):
            assert 0 <= lo <= hi <= 255 and target != 0 and (row[lo : hi + 1] == target).all()
            assert lo == 0 or row[lo - 1] != target  # maximal on the left
            assert hi == 255 or row[hi + 1] != target  # and on the right
            assert after is None or after[0] > hi
            covered[lo : hi + 1] = target
        np.testing.assert_array_equal(covered, row)


@hypothesis.settings(max_examples=200, deadline=None)
@hypothesis.given(
    st.lists(st.integers(0, 2**62), max_size=300)
    | st.lists(st.integers(0, 40), max_size=300)
    | st.lists(st.integers(-(2**40), 2**40), max_size=50),
    st.sampled_from([np.int64, np.uint64, np.int32]),
)
def test_stable_order_is_numpys_stable_argsort(values, dtype):
    """The helper's digit-by-digit radix sort orders as numpy's stable argsort does, ties included."""
    if dtype is not np.int64 and any(v < 0 or v >= np.iinfo(dtype).max for v in values):
        values = [abs(v) % 2**31 for v in values]
    x = np.array(values, dtype)
    np.testing.assert_array_equal(stable_order(x), np.argsort(x, kind="stable"))


@pytest.mark.parametrize("seed", range(4))
def test_row_groups_number_distinct_rows_in_lexicographic_order(seed):
    """Equal rows get equal ids, numbered as the distinct rows sort (bool rows, packed to bits
    inside, as unsigned bytes and wider integers alike)."""
    rng = np.random.default_rng(seed)
    width = int(rng.integers(1, 40))
    distinct = rng.random((int(rng.integers(1, 30)), width)) < 0.4
    rows = distinct[rng.integers(0, len(distinct), 200)]
    for typed in (rows, rows.astype(np.uint8), rows.astype(np.int32) * 7):
        ids = automaton.row_groups(typed)
        expected = np.unique(rows.astype(np.uint8), axis=0, return_inverse=True)[1].reshape(-1)
        np.testing.assert_array_equal(ids, expected)
