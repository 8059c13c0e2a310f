"""Compiled regular constraints against brute-force references, with both real vocabularies."""

import functools
import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import regex as regex_module

import ananke_jax as aj
from ananke_jax._src.compile import token_table
from ananke_jax._src.compile.arrays import sorted_unique, unique_inverse
from ananke_jax._src.compile.regex import regex_to_dfa

from oracles import REGEXES, ReferenceMasks, random_member, unpack

NUM_STATES = 200


@functools.cache
def _compiled(pattern, vocab):
    return aj.compile_regex(pattern, vocab), regex_to_dfa(pattern)


@functools.cache
def _reference(pattern, vocab):
    return ReferenceMasks(_compiled(pattern, vocab)[1], vocab)


_mask = jax.jit(aj.token_mask)
_advance = jax.jit(aj.advance)
_accepts = jax.jit(aj.accepts)


def _partial_ok(pattern, data: bytes):
    """Independent check with the `regex` module, where ``data`` is whole UTF-8 text."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return regex_module.fullmatch(pattern, text, flags=regex_module.ASCII, partial=True) is not None


@pytest.mark.parametrize("pattern", REGEXES)
def test_masks_match_brute_force_walk_on_random_reachable_states(pattern, real_vocab):
    """Full-mask comparison (sound and complete) on >= 200 random reachable states."""
    _, vocab, _ = real_vocab
    cg, dfa = _compiled(pattern, vocab)
    ref = _reference(pattern, vocab)
    rng = np.random.default_rng(len(pattern) * 7919 + len(vocab))
    eos = vocab.eos_token_ids[0]
    checked = 0
    while checked < NUM_STATES:
        state, data = cg.init_state(), b""
        for _ in range(int(rng.integers(0, 12))):
            ref_state = dfa.walk(dfa.start, data)
            expected = ref.allowed(ref_state)
            got = unpack(_mask(cg, state))
            np.testing.assert_array_equal(got[: vocab.logits_width], expected, err_msg=f"{pattern!r} after {data!r}")
            assert not got[vocab.logits_width :].any()
            assert bool(_accepts(cg, state)) == bool(dfa.accepting[ref_state])
            # Cross-check a sample of tokens with the `regex` module on whole characters.
            for tok in rng.choice(len(vocab), 8):
                if tok in vocab.special_token_ids:
                    continue
                ok = _partial_ok(pattern, data + vocab.token_bytes(int(tok)))
                if ok is not None:
                    assert expected[tok] == ok, (pattern, data, vocab.token_bytes(int(tok)))
            checked += 1
            choices = np.flatnonzero(expected)
            choices = choices[choices != eos]
            if not len(choices):
                break
            tok = int(rng.choice(choices))
            state, data = _advance(cg, state, tok), data + vocab.token_bytes(tok)
            assert not bool(aj.is_error(cg, state))


@pytest.mark.slow
@pytest.mark.parametrize("pattern", REGEXES)
def test_every_state_mask_matches_the_brute_force_walk(pattern, real_vocab):
    """All states, not only those random walks reach: every DFA state and the finished state."""
    _, vocab, _ = real_vocab
    cg, dfa = _compiled(pattern, vocab)
    ref = _reference(pattern, vocab)
    masks = jax.vmap(lambda node: aj.token_mask(cg, aj.RegularState(node)))(jnp.arange(cg.num_states))
    for node in range(dfa.num_states):
        np.testing.assert_array_equal(unpack(masks[node])[: vocab.logits_width], ref.allowed(node), err_msg=f"state {node}")
    finished = unpack(masks[dfa.num_states])
    assert set(np.flatnonzero(finished)) == set(vocab.eos_token_ids)


@pytest.mark.parametrize("pattern", [r"[^\n]{0,20}\n", r"(red|green|blue|yellow)", r"[A-Z][a-z]{2,9}( [A-Z][a-z]{2,9}){0,2}"])
def test_tables_do_not_depend_on_how_the_walk_is_split_or_rows_are_built(pattern, real_vocab, monkeypatch):
    """The trie walk split into single start states (its memory bound) and mask rows built
    token by token or as flips of their neighbours give the same next states and masks."""
    _, vocab, _ = real_vocab
    dfa = regex_to_dfa(pattern)

    def per_state(tables):
        return tables.next_state[:, tables.class_of_token], tables.mask_rows[tables.row_of_state]

    default = per_state(token_table.token_tables(dfa, vocab))
    monkeypatch.setattr(token_table, "_MAX_PAIRS", 1)
    for factor in (0, 1 << 30):  # as flips; token by token
        monkeypatch.setattr(token_table, "_DENSE_ROWS_FACTOR", factor)
        for got, want in zip(per_state(token_table.token_tables(dfa, vocab)), default):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("pattern", REGEXES)
def test_tokenized_members_are_accepted_token_by_token(pattern, real_vocab):
    _, vocab, encode = real_vocab
    cg, dfa = _compiled(pattern, vocab)
    rng = np.random.default_rng(1)
    for _ in range(8):
        text = random_member(dfa, rng).decode("utf-8")
        assert re.fullmatch(pattern, text, re.ASCII)
        ids = encode(text)
        assert b"".join(vocab.token_bytes(i) for i in ids) == text.encode("utf-8")
        state, data = cg.init_state(), b""
        for tok in ids:
            assert bool(aj.is_allowed(_mask(cg, state), tok)), (pattern, text, data, vocab.token_bytes(tok))
            state, data = _advance(cg, state, tok), data + vocab.token_bytes(tok)
            prefix_complete = re.fullmatch(pattern, data.decode("utf-8", "replace"), re.ASCII) is not None
            assert bool(_accepts(cg, state)) == (prefix_complete and data.decode("utf-8", "ignore").encode() == data)
        assert bool(_accepts(cg, state))
        assert bool(aj.is_allowed(_mask(cg, state), vocab.eos_token_ids[0]))
        finished = _advance(cg, state, vocab.eos_token_ids[0])
        assert bool(_accepts(cg, finished)) and not bool(aj.is_error(cg, finished))


def test_forbidden_special_and_out_of_range_tokens_lead_to_the_error_state(tekken_vocab):
    cg = aj.compile_regex(r"\d+", tekken_vocab)
    state = cg.init_state()
    letter = next(i for i, t in enumerate(tekken_vocab.tokens) if t == b"a")
    bos = 1
    for tok in (letter, bos, tekken_vocab.eos_token_ids[0], -1, cg.logits_width, 10**9):
        bad = _advance(cg, state, tok)
        assert bool(aj.is_error(cg, bad)) and not bool(_accepts(cg, bad))
        assert not unpack(_mask(cg, bad)).any(), "the error state's mask is empty"
        again = _advance(cg, bad, next(i for i, t in enumerate(tekken_vocab.tokens) if t == b"7"))
        assert bool(aj.is_error(cg, again)), "the error state is absorbing"


def test_padding_ids_beyond_the_tokenizer_are_never_allowed(sentencepiece_vocab):
    vocab = aj.Vocabulary(
        sentencepiece_vocab.tokens,
        eos_token_ids=sentencepiece_vocab.eos_token_ids,
        special_token_ids=sentencepiece_vocab.special_token_ids,
        logits_width=32_100,
    )
    cg = aj.compile_regex(r"(?s).*", vocab)
    bits = unpack(_mask(cg, cg.init_state()))
    assert bits[: len(vocab)].sum() > 30_000 and not bits[len(vocab) :].any()


def _generate(cg, key, bias, steps, params):
    """Random-logit constrained generation inside a jitted lax.scan (the sampler's Gumbel noise
    varies the draws from step to step around one random logit vector per sequence)."""
    key, logits_key = jax.random.split(key)
    logits = jax.random.normal(logits_key, (cg.logits_width,)) + bias

    def step(carry, key):
        state, done = carry
        # A "model" that likes to finish: tokens that complete the output get a boost.
        completes = cg.accepting[cg.next_state[state.node][cg.class_of_token]]
        token, new_state = aj.constrained_step(cg, state, logits + 5.0 * completes, key, params)
        new_state = jax.tree_util.tree_map(lambda a, b: jnp.where(done, a, b), state, new_state)
        token = jnp.where(done, -1, token)
        return (new_state, done | (token == cg.fallback_token)), token

    (state, done), tokens = jax.lax.scan(step, (cg.init_state(), jnp.bool_(False)), jax.random.split(key, steps))
    return tokens, done, state


@pytest.mark.xla_optimized
@pytest.mark.slow
def test_random_logit_generation_under_jit_and_scan_matches_re(real_vocab):
    """Every second pattern, stacked in one bank: one jitted scan, vmapped over the bank's rows
    and 3 keys each, generates for all of them (one compilation)."""
    _, vocab, _ = real_vocab
    patterns = REGEXES[::2]
    bank = aj.stack_grammars([_compiled(p, vocab)[0] for p in patterns])
    per_row = jax.vmap(_generate, in_axes=(None, 0, None, None, None))
    generate = jax.jit(jax.vmap(per_row, in_axes=(0, 0, None, None, None)), static_argnums=(3, 4))
    params = aj.SamplingParams(temperature=1.0)
    bias = np.zeros(vocab.logits_width, np.float32)
    bias[list(vocab.eos_token_ids)] = 6.0
    keys = jax.random.split(jax.random.key(0), (len(patterns), 3))
    tokens, done, states = jax.device_get(generate(bank, keys, bias, 64, params))
    eos = vocab.eos_token_ids[0]
    for pattern, rows, row_done, nodes in zip(patterns, tokens, done, states.node):
        finished = 0
        for row, is_done, node in zip(rows, row_done, nodes):
            ids = [int(t) for t in row if t >= 0]
            assert node != 0, f"{pattern!r}: generation never enters the error state"
            if is_done:
                assert ids[-1] == eos
                text = b"".join(vocab.token_bytes(t) for t in ids[:-1]).decode("utf-8")
                assert re.fullmatch(pattern, text, re.ASCII), (pattern, text)
                finished += 1
            else:
                assert _partial_ok(pattern, b"".join(vocab.token_bytes(t) for t in ids)) is not False
        assert finished >= 1, pattern


def test_jit_vmap_and_eager_agree(tekken_vocab):
    cg = aj.compile_regex(REGEXES[2], tekken_vocab)
    keys = jax.random.split(jax.random.key(3), 8)
    logits = jax.random.normal(jax.random.key(4), (8, cg.logits_width))
    params = aj.SamplingParams(temperature=0.7, top_k=50)
    states = jax.vmap(lambda _: cg.init_state())(jnp.arange(8))
    batched = jax.jit(jax.vmap(aj.constrained_step, in_axes=(None, 0, 0, 0, None)), static_argnums=4)(cg, states, logits, keys, params)
    for i in range(8):
        state_i = jax.tree_util.tree_map(lambda x, i=i: x[i], states)
        with jax.disable_jit():
            eager = aj.constrained_step(cg, state_i, logits[i], keys[i], params)
        jitted = jax.jit(aj.constrained_step, static_argnums=4)(cg, state_i, logits[i], keys[i], params)
        assert int(eager[0]) == int(jitted[0]) == int(batched[0][i])
        assert int(eager[1].node) == int(jitted[1].node) == int(batched[1].node[i])
    masks = jax.vmap(aj.token_mask, in_axes=(None, 0))(cg, batched[1])
    for i in range(8):
        np.testing.assert_array_equal(masks[i], aj.token_mask(cg, jax.tree_util.tree_map(lambda x, i=i: x[i], batched[1])))


@pytest.mark.slow
def test_a_bank_of_padded_grammars_runs_per_request_under_vmap(sentencepiece_vocab, tekken_vocab):
    grammars = [
        aj.compile_choices(["yes", "no"], sentencepiece_vocab),
        aj.compile_regex(r"\d{4}", sentencepiece_vocab),
        aj.compile_regex(r"[x-z]{3}", sentencepiece_vocab),
    ]
    bank = aj.stack_grammars(grammars)
    assert bank.next_state.shape[0] == 3
    with pytest.raises(ValueError, match="different vocabularies"):
        aj.stack_grammars([grammars[0], aj.compile_regex("a", tekken_vocab)])
    with pytest.raises(ValueError, match="at least one"):
        aj.stack_grammars([])
    keys = jax.random.split(jax.random.key(0), 3)
    logits = jax.random.normal(jax.random.key(1), (3, sentencepiece_vocab.logits_width))
    states = jax.vmap(lambda g: g.init_state())(bank)
    params = aj.SamplingParams(temperature=0.0)
    for _ in range(3):
        masks = jax.vmap(aj.token_mask)(bank, states)
        tokens, new_states = jax.jit(jax.vmap(aj.constrained_step, in_axes=(0, 0, 0, 0, None)), static_argnums=4)(
            bank, states, logits, keys, params
        )
        for i, g in enumerate(grammars):
            state_i = jax.tree_util.tree_map(lambda x, i=i: x[i], states)
            np.testing.assert_array_equal(masks[i], aj.token_mask(g, state_i))
            token, new_state = aj.constrained_step(g, state_i, logits[i], keys[i], params)
            assert int(token) == int(tokens[i]) and int(new_state.node) == int(new_states.node[i])
        states = new_states


def test_grammars_padded_to_equal_shapes_share_one_compiled_step(sentencepiece_vocab):
    a = aj.compile_choices(["yes", "no"], sentencepiece_vocab)
    b = aj.compile_regex(r"[x-z]{3}", sentencepiece_vocab)
    sizes = dict(states=max(a.num_states, b.num_states), classes=max(a.num_classes, b.num_classes), rows=8)
    a, b = aj.pad_grammar(a, **sizes), aj.pad_grammar(b, **sizes)
    chex.assert_trees_all_equal_shapes_and_dtypes(a, b)
    logits, key = jnp.zeros(sentencepiece_vocab.logits_width), jax.random.key(0)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(g, s):
        return aj.constrained_step(g, s, logits, key, aj.SamplingParams(temperature=0.0))

    for g in (a, b, a):
        token, state = step(g, g.init_state())
        chex.assert_shape(token, ())
        chex.assert_trees_all_equal_shapes_and_dtypes(state, g.init_state())
        assert not aj.is_error(g, state)
    with pytest.raises(ValueError, match="cannot pad a grammar with"):
        aj.pad_grammar(a, states=1, classes=1, rows=1)


def test_repr_reports_states_classes_and_table_bytes(sentencepiece_vocab):
    cg = aj.compile_regex(r"\d{4}-\d{2}-\d{2}", sentencepiece_vocab)
    text = repr(cg)
    assert "states=13" in text and f"table_bytes={cg.table_bytes:,}" in text and "classes=" in text


@pytest.mark.parametrize("seed", range(4))
def test_unique_inverse_matches_numpy_with_and_without_the_table(seed):
    rng = np.random.default_rng(seed)
    for high in (5, 300, 10**9):  # a small range takes the table, a large one the sort
        keys = rng.integers(0, high, rng.integers(1, 2000))
        distinct, inverse = unique_inverse(keys)
        expected, expected_inverse = np.unique(keys, return_inverse=True)
        np.testing.assert_array_equal(distinct, expected)
        np.testing.assert_array_equal(inverse, expected_inverse)


@pytest.mark.parametrize("seed", range(4))
def test_sorted_unique_matches_numpy_with_and_without_the_table(seed):
    rng = np.random.default_rng(seed)
    for high, dtype in [(5, np.int64), (3_000, np.int32), (10**9, np.int64), (2**63, np.uint64)]:
        keys = rng.integers(0, high, rng.integers(0, 5_000), dtype=dtype)  # the table from 1,025 keys
        distinct = sorted_unique(keys)
        np.testing.assert_array_equal(distinct, np.unique(keys))
        assert distinct.dtype == keys.dtype
    signed = rng.integers(-3, 3, 3_000)  # negative keys: the sort
    np.testing.assert_array_equal(sorted_unique(signed), np.unique(signed))


def test_spellings_are_shared_by_automata_with_the_same_byte_classes_and_spell_every_token(sentencepiece_vocab):
    """Two automata whose bytes fall into the same classes (numbered apart) share one cached
    spelling; running each over a token's class string lands where its bytes do."""
    first, second = (regex_to_dfa(p).transitions for p in ("[a-c]+x[0-9]*", "x*[0-9][a-c]?"))
    spelled = [token_table.spell_tokens(t, sentencepiece_vocab) for t in (first, second)]
    assert spelled[0].trie is spelled[1].trie and spelled[0].spelling is spelled[1].spelling
    trie = spelled[0].trie
    parent = np.concatenate([[-1], *trie.parents])
    label = np.concatenate([[0], *trie.labels])
    rng = np.random.default_rng(0)
    for i in rng.choice(len(spelled[0].token_ids), 300, replace=False):
        node, classes = int(trie.token_nodes[spelled[0].spelling[i]]), []
        while node > 0:
            classes.append(int(label[node]))
            node = int(parent[node])
        token = sentencepiece_vocab.tokens[spelled[0].token_ids[i]]
        for transitions, spelling in zip((first, second), spelled):
            for state in range(len(transitions)):
                by_bytes, by_classes = state, state
                for byte in token:
                    by_bytes = transitions[by_bytes, byte]
                for c in reversed(classes):
                    by_classes = spelling.transitions[by_classes, c]
                assert by_bytes == by_classes, (token, state)
