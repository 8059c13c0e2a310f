"""The pushdown engine against the byte-level Earley oracle."""

import dataclasses
import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.bank import trie_parents
from ananke_jax._src.compile.cfg import _narrowed, cfg_tables, compile_ir
from ananke_jax._src.compile.lark_lexer import NO_CUT
from ananke_jax._src.compile.outcome_trie import _chunks, chunk_layout
from ananke_jax._src.engines import lr as lr_engine
from ananke_jax._src.engines.lr import paths_of
from ananke_jax._src.ir import grammar

from cfg_grammars import (
    AMBIGUOUS,
    ARITHMETIC,
    ARITHMETIC_TOKENS,
    DANGLING_ELSE,
    DATES,
    DATES_TOKENS,
    JSON,
    JSON_EXAMPLES,
    OPTIONAL_SEPARATORS,
    OPTIONAL_SPACES,
    WORDS,
    WORDS_TOKENS,
)
from earley import EarleyRecogniser, SharedEarley
from oracles import unpack

_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)
_accepts = jax.jit(aj.accepts)


def _follow(cg, tokens):
    state = cg.init_state()
    for token in tokens:
        state = _advance(cg, state, token)
    return state


def _assert_same(got, expected, vocab, message):
    wrong = np.flatnonzero(got != expected)
    assert not wrong.size, f"{message}: {wrong.size} tokens differ: " + "; ".join(
        f"id {t} {vocab.token_bytes(t)!r} engine {got[t]} Earley {expected[t]}" for t in wrong[:8]
    )


def with_larger_bounds(cg):
    """The same tables with larger static bounds: a deeper stack and more parse configurations."""
    return dataclasses.replace(cg, stack_depth=256, max_configs=2 * cg.max_configs)


def random_walk_check(cg, earley, vocab, rng, *, walks, steps, prefixes=()):
    """Compare whole masks with Earley's (every token id; EOS iff the prefix is complete; special
    and padding ids never) along random walks of allowed tokens; walk i starts after the token ids
    ``prefixes[i]`` when there is one. Returns (states compared, states that overflowed).

    A state that reports overflow may refuse tokens for lack of stack or configurations (DESIGN.md
    section 2), never allow a wrong one: its mask must be inside Earley's, and the same tables with
    larger bounds, fed the same tokens, must match Earley exactly there without overflowing."""
    not_eos = ~np.isin(np.arange(len(vocab)), vocab.eos_token_ids)
    larger = with_larger_bounds(cg)
    checked = overflowed = 0
    for walk in range(walks):
        tokens, state, chart, data = [], cg.init_state(), earley.initial(), b""
        larger_state = None  # followed from the first state that overflows

        def advance(token):
            nonlocal state, chart, data, larger_state
            piece = vocab.token_bytes(token)
            tokens.append(token)  # noqa: B023 (called within this walk only)
            state, chart, data = _advance(cg, state, token), earley.feed(chart, piece), data + piece
            assert not bool(aj.is_error(cg, state)), data
            if larger_state is not None:
                larger_state = _advance(larger, larger_state, token)

        for token in prefixes[walk] if walk < len(prefixes) else ():
            advance(token)
        for _ in range(steps):
            expected = earley.allowed_tokens(chart, vocab)
            got = unpack(_mask(cg, state))
            assert not got[len(vocab) :].any()
            got = got[: len(vocab)]
            assert bool(_accepts(cg, state)) == earley.is_complete(chart), data
            if bool(state.overflow):
                overflowed += 1
                _assert_same(got, got & expected, vocab, f"unsound after {data!r} (overflow)")
                larger_state = _follow(larger, tokens) if larger_state is None else larger_state
                assert not bool(larger_state.overflow), f"larger bounds hit after {data!r}"
                _assert_same(unpack(_mask(larger, larger_state))[: len(vocab)], expected, vocab, f"larger bounds, after {data!r}")
            else:
                _assert_same(got, expected, vocab, f"after {data!r}")
            checked += 1
            choices = np.flatnonzero(got & not_eos)  # = expected unless a bound was hit
            if not choices.size:
                break
            advance(int(rng.choice(choices)))
    return checked, overflowed


def assert_walks_token_by_token(cg, vocab, tokens, is_complete, message):
    """Each token is allowed in turn, the state accepts exactly where ``is_complete(bytes so
    far)`` says, and EOS is allowed at the end."""
    state, data = cg.init_state(), b""
    for token in tokens:
        assert bool(aj.is_allowed(_mask(cg, state), token)), (message, data, vocab.token_bytes(token))
        state, data = _advance(cg, state, token), data + vocab.token_bytes(token)
        assert bool(_accepts(cg, state)) == is_complete(data), (message, data)
    assert bool(_accepts(cg, state)) and bool(aj.is_allowed(_mask(cg, state), vocab.eos_token_ids[0])), message


def is_refused(cg, tokens) -> bool:
    """Some token is masked on the way, or the state does not accept at the end."""
    state = cg.init_state()
    for token in tokens:
        if not bool(aj.is_allowed(_mask(cg, state), token)):
            return True
        state = _advance(cg, state, token)
    return not bool(_accepts(cg, state))


def example_prefixes(texts, encode, rng, n):
    """The token ids of n examples, each cut after a random number of its tokens (>= 1): states
    inside strings, names and comments, where nearly every token is allowed."""
    prefixes = []
    for i in rng.permutation(len(texts))[:n]:
        tokens = list(encode(texts[i]))
        prefixes.append(tokens[: rng.integers(1, len(tokens))] if len(tokens) > 1 else tokens)
    return prefixes


@pytest.mark.parametrize(
    "g, tokens",
    [
        pytest.param(ARITHMETIC, ARITHMETIC_TOKENS, id="arithmetic"),
        pytest.param(WORDS, WORDS_TOKENS, id="ambiguous-lexing", marks=pytest.mark.slow),
    ],
)
def test_full_masks_match_earley_on_a_vocabulary_of_bridge_tokens(g, tokens):
    vocab = aj.Vocabulary.from_tokens(tokens, eos_token_ids=[0], logits_width=40)
    cg = compile_ir(g, vocab)
    assert random_walk_check(cg, SharedEarley(g), vocab, np.random.default_rng(0), walks=40, steps=12)[0] >= 200


def _character_tokens(g, rng, extra: int) -> list[bytes]:
    """EOS, the characters of ``g``'s one-character terminals, every pair of them and ``extra``
    random runs of three to five: tokens that bridge terminals."""
    chars = sorted({t.regex.replace("\\", "").encode() for t in g.terminals})
    pairs = [a + b for a in chars for b in chars]
    runs = {b"".join(rng.choice(chars, size=int(rng.integers(3, 6)))) for _ in range(extra)}
    return [b"<eos>", *chars, *pairs, *sorted(runs - set(pairs))]


@pytest.mark.parametrize(
    "g, forking, steps",
    [
        pytest.param(AMBIGUOUS, b"n+n+n", 5, id="ambiguous", marks=pytest.mark.slow),
        pytest.param(DANGLING_ELSE, b"iixex", 5, id="dangling-else"),
        pytest.param(OPTIONAL_SPACES, b"n +", 8, id="optional-spaces"),
        pytest.param(OPTIONAL_SEPARATORS, b"", 8, id="optional-separators", marks=pytest.mark.slow),  # its forks meet at once
    ],
)
def test_where_the_lr_tables_conflict_parses_fork_and_masks_match_earley(g, forking, steps):
    """A conflicting cell forks the parse into configurations (``forking`` leaves several live,
    where given);
    whole masks equal Earley's along random walks, and where the forks outgrow the budget, the
    overflow contract of `random_walk_check` holds."""
    rng = np.random.default_rng(0)
    vocab = aj.Vocabulary.from_tokens(_character_tokens(g, rng, 30), eos_token_ids=[0])
    cg = compile_ir(g, vocab)
    assert cg.action_kind.shape[2] == 2
    with pytest.raises(aj.GrammarError, match="not LALR"):
        compile_ir(g, vocab, forks=False)
    state = _follow(cg, [vocab.tokens.index(bytes([c])) for c in forking])
    assert int(state.live.sum()) >= (2 if forking else 1) and not bool(state.overflow)
    assert random_walk_check(cg, SharedEarley(g), vocab, rng, walks=30, steps=steps)[0] >= 100


def _random_walks(cg, vocab, rng, *, walks: int, steps: int) -> list[list[int]]:
    """Token ids of random walks of allowed tokens (EOS, id 0, once complete), stepped one state
    at a time."""
    out = []
    for _ in range(walks):
        state, tokens = cg.init_state(), []
        for _ in range(steps):
            allowed = np.flatnonzero(unpack(_mask(cg, state))[1 : len(vocab)]) + 1
            tokens.append(int(rng.choice(allowed)) if allowed.size else 0)
            state = _advance(cg, state, tokens[-1])
        out.append(tokens)
    return out


def test_forking_grammar_under_scan_vmap_and_jit_matches_the_step_by_step_walk():
    """The dangling else under one jitted `lax.scan` per walk, vmapped over walks, traced once:
    every state's mask and acceptance equal the step-by-step ones, forks included."""
    rng = np.random.default_rng(3)
    vocab = aj.Vocabulary.from_tokens(_character_tokens(DANGLING_ELSE, rng, 20), eos_token_ids=[0])
    cg = compile_ir(DANGLING_ELSE, vocab)
    walks = _random_walks(cg, vocab, rng, walks=4, steps=6)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def scan_walks(cg, tokens):
        def walk(tokens):
            def body(state, token):
                return aj.advance(cg, state, token), (aj.token_mask(cg, state), aj.accepts(cg, state), state.live.sum())

            return jax.lax.scan(body, cg.init_state(), tokens)[1]

        return jax.vmap(walk)(tokens)

    masks, accepts, live = scan_walks(cg, jnp.asarray(walks, jnp.int32))
    scan_walks(cg, jnp.asarray(walks[::-1], jnp.int32))  # new tokens, same trace
    assert int(live.max()) >= 2, "some walk forks"
    for i, tokens in enumerate(walks):
        state = cg.init_state()
        for j, token in enumerate(tokens):
            np.testing.assert_array_equal(masks[i, j], _mask(cg, state))
            assert bool(accepts[i, j]) == bool(_accepts(cg, state))
            state = _advance(cg, state, token)


def _scan_walks(cg, tokens):
    """The masks and states along each walk of ``tokens`` (int32[W, T]): one `lax.scan` per walk,
    vmapped over the walks."""

    def walk(tokens):
        body = lambda state, token: (aj.advance(cg, state, token), (aj.token_mask(cg, state), state))
        return jax.lax.scan(body, cg.init_state(), tokens)[1]

    return jax.vmap(walk)(tokens)


@pytest.mark.parametrize(
    "g, tokens",
    [
        pytest.param(DANGLING_ELSE, None, id="dangling-else"),  # parse forks
        pytest.param(WORDS, WORDS_TOKENS, id="ambiguous-lexing"),  # configurations in distinct lexer states
        pytest.param(JSON, None, id="json"),
    ],
)
def test_the_accelerator_paths_step_as_the_cpu_paths(g, tokens, monkeypatch):
    """Programs lowered for an accelerator take several LR actions a loop trip and every
    configuration's mask at once: along random walks, under `lax.scan` and `vmap`, their masks
    and states equal the CPU paths' exactly. Two actions a trip instead of the shipped four: each
    more only repeats the trip's body, and halves what there is to trace and compile."""
    monkeypatch.setattr(lr_engine, "ACCELERATOR_ACTIONS", 2)
    rng = np.random.default_rng(5)
    vocab = aj.Vocabulary.from_tokens(tokens or _character_tokens(g, rng, 40), eos_token_ids=[0])
    cg = compile_ir(g, vocab)
    walks = _random_walks(cg, vocab, rng, walks=6, steps=10)

    stepped = {}
    for platform in ("cpu", "accelerator"):
        with paths_of(platform):
            step = jax.jit(lambda *args: _scan_walks(*args))  # a new jit for each set of paths
            stepped[platform] = jax.device_get(step(cg, jnp.asarray(walks, jnp.int32)))
    assert int(stepped["cpu"][1].live.sum(axis=-1).max()) >= (1 if g is JSON else 2)
    chex.assert_trees_all_equal(stepped["cpu"], stepped["accelerator"])


@pytest.mark.parametrize(
    "g, tokens, stack_depth",
    [
        pytest.param(WORDS, WORDS_TOKENS, None, id="ambiguous-lexing"),
        pytest.param(JSON, None, None, id="json"),
        pytest.param(JSON, None, 5, id="json-overflowing"),  # paths that run out of stack depth
    ],
)
def test_the_path_walk_gives_the_chunk_walk_s_verdicts(g, tokens, stack_depth, monkeypatch):
    """Small tries of tables that never fork are walked by whole paths (`_walk_paths`), others a
    chunk at a time: along random walks, under `lax.scan` and `vmap`, on the CPU and the
    accelerator paths, the masks and states of both walks are equal, overflow included."""
    monkeypatch.setattr(lr_engine, "ACCELERATOR_ACTIONS", 2)
    rng = np.random.default_rng(7)
    vocab = aj.Vocabulary.from_tokens(tokens or _character_tokens(g, rng, 40), eos_token_ids=[0])
    cg = compile_ir(g, vocab)
    cg = cg if stack_depth is None else dataclasses.replace(cg, stack_depth=stack_depth)
    walks = jnp.asarray(_random_walks(cg, vocab, rng, walks=6, steps=12), jnp.int32)

    stepped = {}
    for walk, nodes in (("chunks", -1), ("paths", 1 << 20)):
        monkeypatch.setattr(lr_engine, "PATH_NODES", nodes)
        monkeypatch.setattr(lr_engine, "PATH_LEVELS", 1 << 20)
        assert lr_engine.walks_paths(cg, cg.lr_actions()) == (walk == "paths")
        for platform in ("cpu", "accelerator"):
            with paths_of(platform):
                step = jax.jit(lambda *args: _scan_walks(*args))  # a new jit for each walk and set of paths
                stepped[walk, platform] = jax.device_get(step(cg, walks))
    if stack_depth is not None:
        assert stepped["chunks", "cpu"][1].overflow.any()
    for key, got in stepped.items():
        chex.assert_trees_all_equal(got, stepped["chunks", "cpu"], custom_message=str(key))


def test_a_grammar_without_conflicts_never_forks():
    """LALR(1) tables hold one action a cell: the step is the deterministic one."""
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS, eos_token_ids=[0])
    assert compile_ir(ARITHMETIC, vocab).action_kind.shape[2] == 1


def test_terminals_that_never_meet_share_no_lexer_state_and_masks_match_earley():
    """After a cut only the terminals that may follow begin: DATE (first) and WORD (after '[' or
    ',') both open with '"' but never run side by side; the masks stay exact."""
    vocab = aj.Vocabulary.from_tokens(DATES_TOKENS, eos_token_ids=[0], logits_width=32)
    tables = cfg_tables(DATES, vocab)
    date, word = tables.lexer.terminals.index("DATE"), tables.lexer.terminals.index("WORD")
    assert not (tables.lexer.alive[:, date] & tables.lexer.alive[:, word]).any()
    assert tables.lexer.alive[:, date].any() and tables.lexer.alive[:, word].any()
    cg = compile_ir(DATES, vocab)
    assert random_walk_check(cg, SharedEarley(DATES), vocab, np.random.default_rng(0), walks=40, steps=10)[0] >= 200


@functools.cache
def _json(vocab):
    return compile_ir(JSON, vocab)


@pytest.mark.slow
def test_json_masks_match_earley_with_real_vocabularies(real_vocab):
    """Sound and complete on whole masks, from the start and from inside the examples."""
    _, vocab, encode = real_vocab
    rng = np.random.default_rng(1)
    prefixes = example_prefixes(JSON_EXAMPLES, encode, rng, 4)
    assert random_walk_check(_json(vocab), SharedEarley(JSON), vocab, rng, walks=8, steps=6, prefixes=prefixes)[0] >= 24


@pytest.mark.slow
def test_json_examples_tokenized_by_the_real_tokenizers_are_accepted(real_vocab):
    _, vocab, encode = real_vocab
    cg = _json(vocab)
    for text in JSON_EXAMPLES:
        state = cg.init_state()
        for token in encode(text):
            assert bool(aj.is_allowed(_mask(cg, state), token)), (text, vocab.token_bytes(token))
            state = _advance(cg, state, token)
        assert bool(_accepts(cg, state)), text
        state = _advance(cg, state, vocab.eos_token_ids[0])
        assert bool(_accepts(cg, state)) and not bool(aj.is_error(cg, state))
        assert not bool(state.overflow)


@pytest.mark.slow
def test_random_logit_generation_under_jit_and_scan_parses_as_json(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    cg = _json(vocab)
    params = aj.SamplingParams(temperature=1.0)
    # A "model" that favours short structural tokens and EOS, so documents close.
    bias = np.zeros(vocab.logits_width, np.float32)
    for i, t in enumerate(vocab.tokens):
        if t in (b"{", b"}", b"[", b"]", b'"', b",", b":", b"1", b"0", b'":', b'",', b"}}", b"]]"):
            bias[i] = 4.0
    bias[list(vocab.eos_token_ids)] = 8.0

    @jax.jit
    def generate(key):
        def step(carry, key):
            state, done = carry
            k1, k2 = jax.random.split(key)
            logits = jax.random.normal(k1, (vocab.logits_width,)) + bias
            token, new_state = aj.constrained_step(cg, state, logits, k2, params)
            new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new_state)
            return (new_state, done | (token == cg.fallback_token)), jnp.where(done, -1, token)

        return jax.lax.scan(step, (cg.init_state(), jnp.bool_(False)), jax.random.split(key, 40))

    finished = 0
    for seed in range(4):
        (state, done), tokens = generate(jax.random.key(seed))
        ids = [int(t) for t in tokens if t >= 0 and t not in vocab.eos_token_ids]
        text = b"".join(vocab.token_bytes(t) for t in ids).decode("utf-8")
        assert not bool(aj.is_error(cg, state))
        if bool(done):
            json.loads(text)
            finished += 1
        else:
            assert EarleyRecogniser(JSON).viable(text.encode())
    assert finished >= 1


@pytest.mark.slow
def test_vmap_over_configurations_matches_single_states():
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS, eos_token_ids=[0])
    cg = compile_ir(ARITHMETIC, vocab)
    texts = [[b"(1", b"+"], [b"2+3", b"*"], [b"(", b"(", b"1"]]
    ids = {t: i for i, t in enumerate(vocab.tokens)}
    states = []
    for text in texts:
        s = cg.init_state()
        for piece in text:
            s = _advance(cg, s, ids[piece])
        states.append(s)
    batch = jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *states)
    masks = jax.jit(jax.vmap(aj.token_mask, in_axes=(None, 0)))(cg, batch)
    for i, s in enumerate(states):
        np.testing.assert_array_equal(masks[i], _mask(cg, s))


@pytest.mark.slow
def test_nesting_beyond_the_stack_depth_is_masked():
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS, eos_token_ids=[0])
    shallow, deep = compile_ir(ARITHMETIC, vocab, stack_depth=6), compile_ir(ARITHMETIC, vocab)
    open_paren = vocab.tokens.index(b"(")
    state, opened = shallow.init_state(), 0
    while bool(aj.is_allowed(_mask(shallow, state), open_paren)):
        state, opened = _advance(shallow, state, open_paren), opened + 1
        assert opened < 10, "the stack bound must stop nesting"
    assert opened >= 3 and not bool(aj.is_error(shallow, state))
    assert bool(state.overflow), "the state says that a token was masked for lack of depth"
    deep_state = deep.init_state()
    for _ in range(opened):
        deep_state = _advance(deep, deep_state, open_paren)
    assert bool(aj.is_allowed(_mask(deep, deep_state), open_paren)), "only the bound stops it"
    assert not bool(deep_state.overflow)


def test_forbidden_and_special_tokens_lead_to_the_error_state():
    vocab = aj.Vocabulary.from_tokens(ARITHMETIC_TOKENS + [b"<pad>"], eos_token_ids=[0], special_token_ids=[len(ARITHMETIC_TOKENS)])
    cg = compile_ir(ARITHMETIC, vocab)
    for token in (vocab.tokens.index(b")"), len(ARITHMETIC_TOKENS), 0, -1, 10**6):
        state = _advance(cg, cg.init_state(), token)
        assert bool(aj.is_error(cg, state))
        assert not unpack(_mask(cg, state)).any()


# Each X comes after an empty `a`: a token of n X's pushes 2n states.
EMPTY_RULES = grammar([("s", ["a", "X", "s"]), ("s", ["C"]), ("a", [])], {"X": "X", "C": "C"}, "s")


@pytest.mark.slow
@pytest.mark.parametrize(
    "g, pieces, opener", [(ARITHMETIC, ARITHMETIC_TOKENS[1:], b"("), (EMPTY_RULES, [b"X", b"C"], b"X")], ids=["parentheses", "empty-rules"]
)
def test_one_token_may_push_up_to_the_stack_depth(g, pieces, opener):
    """The scratch space of a token's LR simulation is as deep as the longest token can need."""
    deep_token = opener * 30  # 30 or 60 states: more than the tight depth, less than the roomy one
    vocab = aj.Vocabulary.from_tokens([b"<eos>", *pieces, deep_token], eos_token_ids=[0])
    deep = vocab.tokens.index(deep_token)
    roomy, tight = compile_ir(g, vocab, stack_depth=64), compile_ir(g, vocab, stack_depth=24)
    assert bool(aj.is_allowed(_mask(roomy, roomy.init_state()), deep)) and not bool(roomy.init_state().overflow)
    assert not bool(aj.is_allowed(_mask(tight, tight.init_state()), deep)) and bool(tight.init_state().overflow)
    checked, overflowed = random_walk_check(
        roomy, SharedEarley(g), vocab, np.random.default_rng(1), walks=20, steps=8, prefixes=[[deep]] * 10
    )
    assert checked >= 40 and overflowed >= 1, (checked, overflowed)


TREE_SCHEMA = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {"v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
            "required": ["v"],
        }
    },
    "$ref": "#/$defs/node",
}


def test_trie_chunks_are_the_greedy_ones():
    """A trie's chunks (`outcome_trie._chunks`, computed from each node's least first child on)
    equal the greedy layout read node by node: from its first node, a chunk takes the next while
    it has fewer than ``lanes`` nodes and that node's parent lies before the chunk; on random
    parent arrays (each parent an earlier node, or -1: a child of the configuration) and lane
    counts."""

    def greedy(parents: list[int], lanes: int) -> list[int]:
        starts, start = [], 0
        while start < len(parents):
            end = start + 1
            while end < len(parents) and end - start < lanes and parents[end] < start:
                end += 1
            starts.append(start)
            start = end
        return starts

    rng = np.random.default_rng(0)
    for _ in range(500):
        n = int(rng.integers(0, 120))
        parents = [-1 if j == 0 or rng.random() < 0.2 else int(rng.integers(-1, j)) for j in range(n)]
        for lanes in (1, 2, 5, 32):
            assert _chunks(np.asarray(parents, np.int32), lanes) == greedy(parents, lanes), (parents, lanes)


def _widened(cg):
    """``cg`` with its int16 tables widened to int32."""
    int16 = [f.name for f in dataclasses.fields(cg) if getattr(getattr(cg, f.name), "dtype", None) == jnp.int16]
    return dataclasses.replace(cg, **{name: getattr(cg, name).astype(jnp.int32) for name in int16}), int16


def test_int16_tables_step_as_their_int32_widening_under_scan_vmap_and_jit():
    """The tables narrowed to int16 (where their ids fit) give, under one jitted, vmapped
    `lax.scan` and in a bank beside their widening, the masks and states of the widened tables;
    ids past int16 keep int32."""
    rng = np.random.default_rng(5)
    vocab = aj.Vocabulary.from_tokens(_character_tokens(DANGLING_ELSE, rng, 20), eos_token_ids=[0])
    cg = compile_ir(DANGLING_ELSE, vocab)
    wide, narrowed = _widened(cg)
    assert {"class_set", "outcome_lookahead", "sparse_set"} <= set(narrowed)
    tokens = jnp.asarray(_random_walks(cg, vocab, rng, walks=4, steps=8), jnp.int32)
    scan = jax.jit(_scan_walks)
    chex.assert_trees_all_equal(scan(cg, tokens), scan(wide, tokens))
    bank = aj.stack_grammars([cg, wide])
    banked = jax.jit(jax.vmap(_scan_walks, in_axes=(0, None)))(bank, tokens)
    chex.assert_trees_all_equal(jax.tree_util.tree_map(lambda x: x[0], banked), jax.tree_util.tree_map(lambda x: x[1], banked))
    assert _narrowed(np.array([-1, 32767])).dtype == np.int16 and _narrowed(np.array([-1, 32768])).dtype == np.int64


@pytest.mark.slow
def test_a_bank_of_pushdown_grammars_runs_each_row_as_alone(sentencepiece_vocab):
    """Grammars of different sizes and bounds (a stack depth of 64 and 128, one schema compiled to
    the pushdown engine on request) padded into one bank: under vmap, every row's mask and
    acceptance equal its own grammar's along random walks, and its trie chunks, laid out again
    from the recovered node counts, equal the compiler's."""
    vocab = sentencepiece_vocab
    grammars = [
        aj.compile_grammar(JSON, vocab),
        aj.compile_grammar(ARITHMETIC, vocab),
        aj.compile_json_schema(TREE_SCHEMA, vocab),
        aj.compile_json_schema({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}, vocab, engine="pushdown"),
    ]
    assert all(isinstance(g, aj.PushdownGrammar) for g in grammars) and {g.stack_depth for g in grammars} == {64, 128}
    for g in grammars:
        start, count, node_chunk = chunk_layout(trie_parents(g), g.lanes, g.node_parent.shape[1])
        np.testing.assert_array_equal(start, np.asarray(g.chunk_start)[:, : start.shape[1]])
        np.testing.assert_array_equal(count, g.num_chunks)
        np.testing.assert_array_equal(node_chunk, g.node_chunk)
    bank = aj.stack_grammars(grammars)
    assert bank.stack_depth == 128 and bank.lanes == max(g.lanes for g in grammars)
    masks, accepts = jax.jit(jax.vmap(aj.token_mask)), jax.jit(jax.vmap(aj.accepts))
    advance = jax.jit(jax.vmap(aj.advance))
    rng = np.random.default_rng(0)
    for _ in range(2):
        banked, alone = jax.vmap(type(bank).init_state)(bank), [g.init_state() for g in grammars]
        for _ in range(24):
            got, complete = np.asarray(masks(bank, banked)), np.asarray(accepts(bank, banked))
            tokens = []
            for i, g in enumerate(grammars):
                expected = np.asarray(_mask(g, alone[i]))
                np.testing.assert_array_equal(got[i], expected)
                assert complete[i] == bool(_accepts(g, alone[i]))
                allowed = np.flatnonzero(unpack(expected)[: g.logits_width])
                tokens.append(int(rng.choice(allowed)) if allowed.size else 0)
                alone[i] = _advance(g, alone[i], tokens[-1])
            banked = advance(bank, banked, jnp.asarray(tokens, jnp.int32))


@pytest.mark.slow
def test_pushdown_grammars_of_one_bank_share_one_compiled_step(sentencepiece_vocab):
    """Two grammars taken from one bank have equal table shapes, so one jitted step serves both."""
    grammars = [aj.compile_grammar(JSON, sentencepiece_vocab), aj.compile_grammar(ARITHMETIC, sentencepiece_vocab)]
    bank = aj.stack_grammars(grammars)
    rows = [jax.tree_util.tree_map(lambda x, i=i: x[i], bank) for i in range(2)]
    chex.assert_trees_all_equal_shapes_and_dtypes(*rows)
    logits, key = jnp.zeros(sentencepiece_vocab.logits_width), jax.random.key(0)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(g, s):
        return aj.constrained_step(g, s, logits, key, aj.SamplingParams(temperature=0.0))

    own_step = jax.jit(lambda g, s: aj.constrained_step(g, s, logits, key, aj.SamplingParams(temperature=0.0)))
    for g, alone in zip(rows + rows, grammars + grammars):
        token, state = step(g, g.init_state())
        chex.assert_trees_all_equal_shapes_and_dtypes(state, g.init_state())
        expected, _ = own_step(alone, alone.init_state())  # jitted: an eager pushdown step takes seconds
        assert int(token) == int(expected) and not aj.is_error(g, state)


def test_a_bank_refuses_grammars_of_both_engines(sentencepiece_vocab):
    regular = aj.compile_regex(r"[0-9]+", sentencepiece_vocab)
    with pytest.raises(ValueError, match=r"one engine.*engine='pushdown'"):
        aj.stack_grammars([regular, aj.compile_grammar(ARITHMETIC, sentencepiece_vocab)])
    with pytest.raises(aj.SchemaError, match="engine must be"):
        aj.compile_json_schema({"type": "integer"}, sentencepiece_vocab, engine="dfa")


def test_a_lexer_too_ambiguous_for_the_vocabulary_names_the_overlapping_terminals(sentencepiece_vocab, monkeypatch):
    """Names and words that may follow one another with nothing between split a token of n
    letters in 2^(n-1) ways; past the walk's frontier limit (lowered here so that it is reached
    at once) the refusal names the terminals of the longest split and how to fix the grammar."""
    from ananke_jax._src.compile import outcome_walk

    monkeypatch.setattr(outcome_walk, "MAX_FRONTIER", 6_000)
    with pytest.raises(aj.GrammarError, match=r"too ambiguous .* as [\d,]+ different terminal sequences, such as (NAME|WORD) ") as e:
        aj.compile_lark("start: (WORD | NAME)+\nWORD: /[a-z]+/\nNAME: /[a-z_]+/", sentencepiece_vocab)
    assert "The terminals NAME, WORD overlap" in str(e.value) and "require a separator" in str(e.value)


def test_an_outcome_walk_past_the_frontier_limit_is_walked_again_from_halves_of_its_states(sentencepiece_vocab, monkeypatch):
    """The outcome walk steps every lexer state at once; where a level holds more rows than its
    limit (lowered here, above any one state's rows), it is walked again from halves of the
    states. The outcome tables equal those of one walk."""
    from ananke_jax._src.compile import outcome_walk

    whole = cfg_tables(JSON, sentencepiece_vocab)
    overflows = []

    class CountedOverflow(outcome_walk._FrontierOverflow):
        def __init__(self):
            overflows.append(1)

    monkeypatch.setattr(outcome_walk, "_FrontierOverflow", CountedOverflow)
    monkeypatch.setattr(outcome_walk, "MAX_FRONTIER", 1_000)
    split = cfg_tables(JSON, sentencepiece_vocab)
    assert overflows  # the walk from every state was given up for walks from its halves
    outcome_tables = [f.name for f in dataclasses.fields(whole) if isinstance(getattr(whole, f.name), np.ndarray)]
    assert "class_set" in outcome_tables and "state_outcomes" in outcome_tables
    for name in outcome_tables:
        np.testing.assert_array_equal(getattr(split, name), getattr(whole, name), err_msg=name)


def test_an_outcome_walk_past_its_dense_step_table_keeps_its_steps_sorted_instead(sentencepiece_vocab, monkeypatch):
    """The steps a walk has taken are a dense (function, label) table up to `_DENSE_STEPS`
    entries, then a `SortedMap`; with the limit lowered so that the walk passes it early, the
    outcome tables equal those of the dense table alone."""
    from ananke_jax._src.compile import outcome_walk

    whole = cfg_tables(JSON, sentencepiece_vocab)
    taken = []

    class Spied(outcome_walk.SortedMap):
        def insert(self, keys, values):
            if self.keys.dtype == np.int64:  # (the functions' hashes are uint64)
                taken.append(len(keys))
            super().insert(keys, values)

    monkeypatch.setattr(outcome_walk, "SortedMap", Spied)
    monkeypatch.setattr(outcome_walk, "_DENSE_STEPS", 2_000)  # (passed at the second level)
    sparse = cfg_tables(JSON, sentencepiece_vocab)
    assert len(taken) > 3 and taken[0] > 0  # the dense table's steps were moved over, and later ones inserted
    for field in ("outcome_terminals", "outcome_length", "outcome_lexer", "state_outcomes", "set_members", "token_class", "class_set"):
        np.testing.assert_array_equal(getattr(sparse, field), getattr(whole, field), err_msg=field)


def _outcomes_alone(walk, q: int, labels: list[int]) -> set:
    """The outcomes of one string (its ``labels``) from lexer state ``q``, byte by byte: read on
    in the current terminal, or cut where one ends (the walk's rules, `outcome_walk.Cuts`)."""
    (_, transitions, _, cuts, *_), found = walk, set()
    start_rows = transitions[cuts.start_after]

    def read(i, lex, seq):
        if i == len(labels):
            found.add((seq, lex))
            return
        if transitions[lex, labels[i]]:
            read(i + 1, int(transitions[lex, labels[i]]), seq)
        for column in cuts.columns[lex][cuts.columns[lex] != NO_CUT].tolist():
            last = seq[-1] if seq else -1
            new_last = column if column >= 0 else last
            cut = int(start_rows[new_last + 1, labels[i]])
            follows = column < 0 or last < 0 or cuts.follow[last, column]
            if cut and follows and cuts.may_start[new_last + 1, cut]:
                read(i + 1, cut, seq + ((column,) if column >= 0 else ()))

    read(0, q, ())
    return found


def test_the_outcome_walk_equals_each_state_and_string_read_alone(sentencepiece_vocab, monkeypatch):
    """The walk steps each distinct function once per label in the whole walk, not each node;
    on random (lexer state, token string) pairs of the JSON grammar, its outcomes equal those of
    the string read byte by byte from the state alone (`_outcomes_alone`)."""
    from ananke_jax._src.compile import cfg, outcome_walk

    walks, steps = [], []
    real, remember = cfg.walk_outcomes, outcome_walk._Functions.remember
    monkeypatch.setattr(cfg, "walk_outcomes", lambda *args: walks.append((args, real(*args))) or walks[-1][1])
    monkeypatch.setattr(outcome_walk._Functions, "remember", lambda self, taken, after: steps.append(taken) or remember(self, taken, after))
    cfg_tables(JSON, sentencepiece_vocab)
    args, walked = walks[0]
    trie, sources = args[2], args[4]
    # Each step once, though a level of the trie holds thousands of nodes, and its deep levels
    # many steps, all taken at the levels above.
    taken = np.concatenate(steps)
    assert len(np.unique(taken)) == len(taken) and len(taken) < trie.num_nodes // 20, (len(taken), trie.num_nodes)
    assert len(steps) < len(trie.parents) // 2, (len(steps), len(trie.parents))
    parent = np.concatenate([[-1], *trie.parents])
    label = np.concatenate([[0], *trie.labels])
    node_of = dict(zip(trie.token_ids.tolist(), trie.token_nodes.tolist()))
    rng = np.random.default_rng(0)
    checked = 0
    for string in rng.choice(trie.token_ids, 300, replace=False).tolist():
        labels, node = [], node_of[string]
        while node > 0:
            labels.append(int(label[node]))
            node = int(parent[node])
        for q in rng.choice(sources, 8, replace=False).tolist():
            rows = (walked.q == q) & (walked.column == walked.string_column[string])
            got = {(tuple(walked.terminals[o, : walked.lengths[o]].tolist()), int(walked.lexer_after[o])) for o in walked.outcome[rows]}
            assert got == _outcomes_alone(args, q, labels[::-1]), (q, labels[::-1])
            checked += bool(got)
    assert checked >= 50  # (most strings die from most states: they are words, and JSON has few)
    assert walked.num_columns < len(trie.token_ids) // 10, walked.num_columns  # strings that act alike share a column


@pytest.mark.parametrize("most", [1, 3])
def test_outcome_sets_are_interned_exactly(most):
    """Each (state, string) group gets the id of its set of outcomes: equal sets one id, other
    sets others, and the set's members listed; groups of one row (most walks hold only such)
    and of several mixed."""
    from ananke_jax._src.compile.cfg import _outcome_sets

    rng = np.random.default_rng(most)
    groups = {
        (q, s): sorted(rng.choice(6, rng.integers(1, most + 1), replace=False).tolist())
        for q in range(40)
        for s in range(30)
        if rng.random() < 0.5
    }
    rows = [(q, s, o) for (q, s), outcomes in sorted(groups.items()) for o in outcomes]
    q, string, outcome = (np.array(column, np.int64) for column in zip(*rows))
    group_q, group_string, set_of_group, members = _outcome_sets(q, string, outcome)
    assert list(zip(group_q.tolist(), group_string.tolist())) == sorted(groups)
    listed = {i: sorted(m for m in row.tolist() if m >= 0) for i, row in enumerate(members)}
    assert listed[0] == [] and len({tuple(v) for v in listed.values()}) == len(listed)  # each set once, 0 empty
    for key, id_ in zip(sorted(groups), set_of_group.tolist()):
        assert listed[id_] == groups[key], key


def test_lexer_states_along_a_bounded_string_share_rows_and_mask_as_the_token_dfa(sentencepiece_vocab):
    """Strings of up to 40 characters are chains of lexer states whose tables are alike: the
    pushdown engine keeps them once per distinct row (``lexer_row``). Along random walks its masks
    equal those of the token DFA compiled from the same schema."""
    schema = {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 4}
    dfa = aj.compile_json_schema(schema, sentencepiece_vocab, whitespace="compact")
    cg = aj.compile_json_schema(schema, sentencepiece_vocab, whitespace="compact", engine="pushdown")
    assert isinstance(dfa, aj.RegularGrammar) and isinstance(cg, aj.PushdownGrammar)
    assert 4 * cg.class_set.shape[0] < cg.lexer_row.shape[0]
    compared = 0
    for walk in _random_walks(cg, sentencepiece_vocab, np.random.default_rng(2), walks=6, steps=30):
        state, dfa_state = cg.init_state(), dfa.init_state()
        for token in walk:
            np.testing.assert_array_equal(_mask(cg, state), _mask(dfa, dfa_state))
            state, dfa_state, compared = _advance(cg, state, token), _advance(dfa, dfa_state, token), compared + 1
    assert compared == 180


def test_a_last_lexer_state_whose_outcomes_complete_nothing_gets_no_trie_node():
    """Outcomes that complete no terminal have no trie node (-1), also from the last lexer
    state when it has no node at all (its key would sort past every node's)."""
    from ananke_jax._src.compile.outcome_trie import outcome_tries

    tries = outcome_tries(
        state_outcomes=np.array([[0], [1]], np.int32),
        terminals=np.array([[0], [-1]], np.int32),
        lengths=np.array([1, 0], np.int32),
        lexer_after=np.array([1, 1], np.int32),
        pending=np.zeros((2, 2), bool),
        pending_free=np.ones(2, bool),
        completions=(np.array([0, 1]), [[[1]], []]),
    )
    assert tries.outcome_node[tries.trie_of_state].tolist() == [[0], [-1]]


def test_lexer_states_whose_outcomes_need_the_same_nodes_share_one_trie():
    """States 0 and 2 read outcomes of equal terminals into final states of equal lookaheads
    (but other outcomes and final states): one trie serves both, and each keeps its final
    states. State 1's outcome needs another lookahead, state 3's completes at EOS: tries of
    their own, equal to those built for them alone."""
    from ananke_jax._src.compile.outcome_trie import outcome_tries

    pending = np.array([[0, 1, 0], [0, 1, 0], [1, 0, 0], [0, 1, 0], [0, 1, 0]], bool)
    tables = dict(
        terminals=np.array([[0, 1], [0, 1], [0, 1], [2, -1]], np.int32),
        lengths=np.array([2, 2, 2, 1], np.int32),
        lexer_after=np.array([1, 3, 2, 4], np.int32),
        pending=pending,
        pending_free=np.zeros(5, bool),
    )
    state_outcomes = np.array([[0, 3], [2, 3], [1, 3], [0, 3]], np.int32)
    completions = (np.array([0, 0, 0, 1]), [[], [[2]]])
    tries = outcome_tries(state_outcomes=state_outcomes, completions=completions, **tables)
    assert tries.trie_of_state[0] == tries.trie_of_state[2] and len(set(tries.trie_of_state.tolist())) == 3
    assert tries.outcome_lexer.tolist() == [[1, 4], [2, 4], [3, 4], [1, 4]]
    for q in range(4):
        alone = outcome_tries(state_outcomes=state_outcomes[q : q + 1], completions=(completions[0][q : q + 1], completions[1]), **tables)
        for name in ("node_parent", "node_column", "outcome_node", "outcome_lookahead", "complete_node"):
            ours, theirs = getattr(tries, name)[tries.trie_of_state[q]], getattr(alone, name)[0]
            width = min(ours.shape[-1], theirs.shape[-1])
            np.testing.assert_array_equal(ours[..., :width], theirs[..., :width], err_msg=f"{name} of state {q}")
