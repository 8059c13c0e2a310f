"""The grammar pool: pooled masks equal each grammar's own on random walks (real vocabularies),
admission compiles nothing, identical tables are stored once, space is freed and reused, and
bad input gets a clear error."""

import dataclasses
import functools
import json
import pathlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax.serving import CompileCounter, GrammarPool, PoolCapacity, PoolCapacityError

GRAMMARS = pathlib.Path(__file__).resolve().parents[1] / "grammars"
SCHEMAS = json.loads((GRAMMARS / "json_schemas.json").read_text())
TINY = PoolCapacity(
    regular_grammars=8,
    regular_states=4096,
    regular_transitions=1 << 18,
    outcome_terminals=128,
    regular_rows=512,
    pushdown_grammars=4,
    lexer_states=512,
    lr_states=128,
    rules=128,
    outcomes=1024,
    outcome_sets=512,
    pushdown_rows=64,
)


def _constraints(vocab):
    """Both engines: regexes, choices, JSON Schemas (flat and recursive), GBNF and Lark."""
    return [
        aj.compile_regex(r"\d{4}-\d{2}-\d{2}", vocab),
        aj.compile_choices(["red", "green", "blue"], vocab),
        aj.compile_json_schema(SCHEMAS["regular"]["address"], vocab),
        aj.compile_gbnf((GRAMMARS / "json.gbnf").read_text(), vocab),
        aj.compile_json_schema(SCHEMAS["recursive"]["linked_list"], vocab),
        aj.compile_lark((GRAMMARS / "arithmetic.lark").read_text(), vocab),
    ]


def _pool(vocab, capacity=TINY) -> GrammarPool:
    return GrammarPool(len(vocab), vocab.logits_width, vocab.eos_token_ids, capacity)


_mask, _advance = jax.jit(aj.token_mask), jax.jit(aj.advance)


def _walk_equal(pool: GrammarPool, handle, grammar, vocab, rng, steps=24):
    """Walk random allowed tokens; the pooled mask, accepts and error flag equal the grammar's."""
    pooled = pool.constraint(handle)
    ps, gs = pooled.init_state(), grammar.init_state()
    for _ in range(steps):
        if isinstance(gs, aj.PushdownState) and bool(gs.overflow):
            return  # the grammar's own stack depth ran out; the pool's deeper one refuses less
        pm, gm = np.asarray(_mask(pooled, ps)), np.asarray(_mask(grammar, gs))
        np.testing.assert_array_equal(pm, gm)
        assert bool(pooled.accepts(ps)) == bool(grammar.accepts(gs))
        allowed = np.flatnonzero(np.unpackbits(gm.view(np.uint8), bitorder="little")[: len(vocab)])
        ordinary = np.setdiff1d(allowed, vocab.eos_token_ids)
        if not len(ordinary):
            break
        token = int(rng.choice(ordinary))
        ps, gs = _advance(pooled, ps, token), _advance(grammar, gs, token)
    forbidden = int(np.setdiff1d(np.arange(len(vocab)), allowed)[0]) if len(allowed) < len(vocab) else None
    if forbidden is not None:  # a forbidden token leads both to their error state
        ps, gs = _advance(pooled, ps, forbidden), _advance(grammar, gs, forbidden)
        assert bool(pooled.is_error(ps)) and bool(grammar.is_error(gs))
        assert not np.asarray(_mask(pooled, ps)).any()


def test_pooled_masks_equal_each_grammars_own(real_vocab):
    _, vocab, _ = real_vocab
    pool, grammars = _pool(vocab), _constraints(vocab)
    handles = [pool.add(g) for g in grammars]
    rng = np.random.default_rng(0)
    for seed in range(2):
        for handle, grammar in zip(handles, grammars):
            _walk_equal(pool, handle, grammar, vocab, np.random.default_rng([seed, handle.index]))
    # Removing members and admitting others into the freed space leaves the rest intact.
    for h in handles[::2]:
        pool.remove(h)
    again = [pool.add(g) for g in grammars[::2]]
    for handle, grammar in zip(again + handles[1::2], grammars[::2] + grammars[1::2]):
        _walk_equal(pool, handle, grammar, vocab, rng)


def test_admission_compiles_nothing_and_batches_mix_engines(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    pool = _pool(vocab)
    grammars = _constraints(vocab)
    batch_mask = jax.jit(lambda t, s: t.batch_token_mask(s))
    batch_advance = jax.jit(lambda t, s, x: t.batch_advance(s, x))
    batch_start = jax.jit(lambda t, h: t.batch_start(h))
    first = pool.add(grammars[0])
    handles = jnp.asarray([first.index] * len(grammars) + [-1], jnp.int32)
    states = batch_start(pool.tables, handles)  # compiles the batched step once
    jax.block_until_ready(batch_advance(pool.tables, states, jnp.zeros(len(handles), jnp.int32)))
    jax.block_until_ready(batch_mask(pool.tables, states))
    CompileCounter.install()
    before = CompileCounter.count
    admitted = [first, *(pool.add(g) for g in grammars[1:])]
    handles = jnp.asarray([h.index for h in admitted] + [-1], jnp.int32)
    tables = pool.tables
    states = batch_start(tables, handles)
    masks = np.asarray(batch_mask(tables, states))
    assert CompileCounter.count == before, "admitting grammars or mixing them in a batch compiled something"
    for row, g in enumerate(grammars):
        np.testing.assert_array_equal(masks[row], np.asarray(_mask(g, g.init_state())))
    free = np.unpackbits(masks[-1].view(np.uint8), bitorder="little")
    assert free[: len(vocab)].all() and not free[len(vocab) :].any()


@pytest.mark.slow
def test_batches_told_whether_pushdown_rows_are_in_them_step_as_those_that_look(sentencepiece_vocab):
    """The engine tells the batch methods whether a pushdown row is in the batch (no predicate
    read on the device); told True for a batch with pushdown rows, or False for one without, they
    step as the methods that decide on the device."""
    vocab = sentencepiece_vocab
    pool = _pool(vocab)
    grammars = _constraints(vocab)
    handles = [pool.add(g) for g in grammars]
    regular = [h.index for h, g in zip(handles, grammars) if isinstance(g, aj.RegularGrammar)]
    assert regular and len(regular) < len(handles)
    tables = pool.tables

    def step(t, told, states, key):
        """Mask, draw an allowed token from random logits, advance."""
        masks = t.batch_token_mask(states, told)
        tokens = jnp.argmax(aj.apply_mask(jax.random.normal(key, (masks.shape[0], t.logits_width)), masks), axis=1).astype(jnp.int32)
        return t.batch_advance(states, tokens, told), (masks, tokens)

    walk = jax.jit(
        lambda t, h, told: jax.lax.scan(functools.partial(step, t, told), t.batch_start(h), jax.random.split(jax.random.key(0), 8)),
        static_argnames="told",
    )
    for rows, flags in (([h.index for h in handles] + [-1], (None, True)), (regular + [-1], (None, False))):
        runs = [walk(tables, jnp.asarray(rows, jnp.int32), told) for told in flags]
        for run in runs[1:]:
            chex.assert_trees_all_equal(run, runs[0])


def test_identical_tables_are_stored_once_and_freed_with_the_last_reference(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    pool = _pool(vocab)
    a = pool.add(aj.compile_regex(r"[a-z]{2,6}", vocab))
    used = pool.occupancy()
    b = pool.add(aj.compile_regex(r"[a-z]{2,6}", vocab))  # compiled again: equal tables
    assert a == b and len(pool) == 1 and pool.occupancy() == used
    pool.remove(a)
    pool.check(b)  # one reference left
    pool.remove(b)
    assert len(pool) == 0 and all(v == 0 for v in pool.occupancy().values())
    with pytest.raises(ValueError, match="not in the pool"):
        pool.constraint(b)


def test_capacity_errors_name_the_axis_and_both_sizes(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    small = PoolCapacity(
        regular_grammars=2, regular_states=64, regular_transitions=1 << 12, regular_rows=32, pushdown_grammars=1, lexer_states=16
    )
    pool = _pool(vocab, small)
    with pytest.raises(PoolCapacityError, match=r"needs \d+ regular states, but the pool holds at most 63") as e:
        pool.add(aj.compile_json_schema(SCHEMAS["regular"]["address"], vocab))
    assert e.value.permanent and e.value.axis == "regular states"
    handles = [pool.add(aj.compile_regex(p, vocab)) for p in (r"[0-9]{3}", r"[a-c]{2}")]
    with pytest.raises(PoolCapacityError, match="needs 1 regular grammars, but the pool has 0 free of 2") as e:
        pool.add(aj.compile_regex(r"x+", vocab))
    assert not e.value.permanent
    pool.remove(handles[0])
    pool.add(aj.compile_regex(r"x+", vocab))  # the freed space is reused
    with pytest.raises(PoolCapacityError, match="lexer states"):
        pool.add(aj.compile_gbnf((GRAMMARS / "json.gbnf").read_text(), vocab, stack_depth=8))
    # A failed admission changed nothing.
    assert len(pool) == 2


def test_grammars_whose_lr_tables_conflict_need_a_pool_that_forks(sentencepiece_vocab):
    """A pool with one LR action a cell refuses a grammar with conflicts, naming the axis; one
    with two admits it beside LALR(1) members, and its masks equal each grammar's own."""
    vocab = sentencepiece_vocab
    forking = aj.compile_gbnf((GRAMMARS / "calculator.gbnf").read_text(), vocab)
    with pytest.raises(PoolCapacityError, match=r"needs 2 LR actions a cell, but the pool holds at most 1") as e:
        _pool(vocab).add(forking)
    assert e.value.permanent
    pool = _pool(vocab, dataclasses.replace(TINY, lr_actions=2, outcomes_per_state=256, trie_nodes=512))
    members = [forking, aj.compile_lark((GRAMMARS / "arithmetic.lark").read_text(), vocab)]
    for seed, grammar in enumerate(members):
        _walk_equal(pool, pool.add(grammar), grammar, vocab, np.random.default_rng(seed))


def test_bad_members_are_refused(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    pool = _pool(vocab)
    other = aj.Vocabulary.from_tokens([b"<eos>", b"a", b"b"], eos_token_ids=[0])
    with pytest.raises(ValueError, match="another vocabulary"):
        pool.add(aj.compile_regex("a+", other))
    with pytest.raises(ValueError, match="not FusedConstraint"):
        pool.add(aj.fusion.fused(vocab, syntax=aj.compile_regex("a+", vocab)))
    with pytest.raises(ValueError, match="one by one"):
        pool.add(aj.stack_grammars([aj.compile_regex("a+", vocab), aj.compile_regex("b+", vocab)]))
    with pytest.raises(PoolCapacityError, match="stack depth"):
        pool.add(aj.compile_gbnf((GRAMMARS / "json.gbnf").read_text(), vocab, stack_depth=1024))


def test_capacity_memory_formula():
    width = 131_072
    cap = PoolCapacity()
    words = width // 32
    # Mask rows dominate: 4 bytes per word per row, for both engines.
    rows = 4 * words * (cap.regular_rows + cap.pushdown_rows)
    assert rows < cap.table_bytes(width) < rows + 200 * 2**20
    assert PoolCapacity(regular_rows=2 * cap.regular_rows).table_bytes(width) - cap.table_bytes(width) == 4 * words * cap.regular_rows


def test_matchers_on_new_pushdown_grammars_compile_nothing(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    grammars = _constraints(vocab)[3:] + [aj.compile_json_schema(SCHEMAS["recursive"]["tree"], vocab)]
    warm = [aj.Matcher(grammars[0], vocab) for _ in grammars]  # compiles the pooled steps once
    aj.fill_bitmasks(warm, aj.allocate_token_bitmask(len(warm), vocab.logits_width))
    assert warm[0].accept_token(int(np.flatnonzero(_unpack(warm[0], vocab))[0])) and not warm[0].is_completed()
    CompileCounter.install()
    before = CompileCounter.count
    matchers = [aj.Matcher(g, vocab) for g in grammars]
    out = aj.allocate_token_bitmask(len(matchers), vocab.logits_width)
    aj.fill_bitmasks(matchers, out)  # one call for every grammar
    for m in matchers:
        assert m.accept_token(int(np.flatnonzero(_unpack(m, vocab))[0]))
        m.is_completed()
    assert CompileCounter.count == before, "a matcher on a new grammar compiled something"
    for row, g in zip(out, grammars):
        np.testing.assert_array_equal(row.view(np.uint32), np.asarray(_mask(g, g.init_state())))


def _unpack(matcher, vocab):
    """bool[vocab_size]: the ordinary tokens the matcher allows now."""
    out = aj.allocate_token_bitmask(1, vocab.logits_width)
    matcher.fill_next_token_bitmask(out)
    bits = np.unpackbits(out.view(np.uint8), bitorder="little")[: len(vocab)].astype(bool)
    bits[list(vocab.eos_token_ids)] = False
    return bits


@pytest.mark.slow
def test_the_default_pool_holds_the_corpus_at_once(smollm2_gguf):
    """Every schema of the corpus, the grammars and ten regexes (48 constraints) at once, with
    SmolLM2's vocabulary, in the default capacity, with room to spare."""
    vocab = aj.Vocabulary.from_gguf(smollm2_gguf)
    pool = _pool(vocab, "default")
    grammars = [aj.compile_json_schema(s, vocab) for s in [*SCHEMAS["regular"].values(), *SCHEMAS["recursive"].values()]]
    grammars += [
        aj.compile_gbnf((GRAMMARS / n).read_text(), vocab)
        for n in ("json.gbnf", "xml_person.gbnf", "gsm8k.gbnf", "markdown_list.gbnf", "rpg.gbnf")
    ]
    grammars += [aj.compile_lark((GRAMMARS / n).read_text(), vocab) for n in ("json.lark", "arithmetic.lark")]
    grammars += [aj.compile_regex(r, vocab) for r in json.loads((GRAMMARS / "regexes.json").read_text())[:10]]
    for g in grammars:
        pool.add(g)
    assert len(pool) == len(grammars) >= 48
    assert max(pool.occupancy().values()) < 0.75


def test_a_trie_wider_than_the_pool_is_refused_before_any_work(sentencepiece_vocab):
    vocab = sentencepiece_vocab
    pool = _pool(vocab, PoolCapacity(regular_grammars=2, regular_states=64, regular_transitions=1 << 12, regular_rows=32, trie_nodes=64))
    with pytest.raises(PoolCapacityError, match=r"trie nodes \(with lanes\), but the pool holds at most 64"):
        pool.add(aj.compile_lark((GRAMMARS / "arithmetic.lark").read_text(), vocab))
    assert len(pool) == 0
