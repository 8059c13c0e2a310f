"""Reference models: KV-cache correctness on a tiny model, weight loaders, SmolLM2-135M-Instruct."""

import dataclasses
import importlib
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import traverse_util
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke_jax import VocabularyError, WeightsError
from ananke_jax._src.vocab import Vocabulary
from ananke_jax.models import (
    LlamaConfig,
    chat_prompt,
    gguf_tokenizer,
    init_cache,
    init_params,
    load_gguf,
    load_safetensors,
    load_smollm2,
    make_step_fn,
    tensor_names,
)

TINY = LlamaConfig.tiny(vocab_size=97)
MAX_LEN = 16  # one cache length for all tiny tests: every distinct shape is a compilation


def _required(module: str):
    """Imports an optional test dependency: skipped locally when absent, a failure under CI."""
    if os.environ.get("CI"):
        return importlib.import_module(module)
    return pytest.importorskip(module)


@pytest.fixture(scope="module")
def tiny_params():
    return init_params(TINY, jax.random.key(0))


@pytest.fixture(scope="module")
def tiny_step():
    return jax.jit(make_step_fn(TINY))


def run(step, params, cache, tokens, positions):
    return step(params, cache, jnp.asarray(tokens, jnp.int32), jnp.asarray(positions, jnp.int32))


# --------------------------------------------------------------------------- KV cache


def test_prefill_verify_decode_equal_full_forward(tiny_params, tiny_step):
    tokens = jax.random.randint(jax.random.key(1), (3, 12), 0, TINY.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(12), (3, 12))
    full, _ = run(tiny_step, tiny_params, init_cache(TINY, 3, MAX_LEN), tokens, positions)

    cache = init_cache(TINY, 3, MAX_LEN)
    pieces = []
    # Prefill 3, verify 3 twice (k = 3), then decode one at a time.
    for start, stop in [(0, 3), (3, 6), (6, 9), *((t, t + 1) for t in range(9, 12))]:
        logits, cache = run(tiny_step, tiny_params, cache, tokens[:, start:stop], positions[:, start:stop])
        pieces.append(logits)
    np.testing.assert_allclose(jnp.concatenate(pieces, axis=1), full, atol=1e-5, rtol=1e-5)


def test_ragged_batch_equals_separate_rows(tiny_params, tiny_step):
    lengths = [3, 7, 5]
    rng = np.random.default_rng(0)
    prompts = [rng.integers(0, TINY.vocab_size, n) for n in lengths]
    next_tokens = rng.integers(0, TINY.vocab_size, (3, 4))
    width = max(lengths)
    padded = np.zeros((3, width), np.int32)  # right padding with token 0
    for row, prompt in enumerate(prompts):
        padded[row, : len(prompt)] = prompt
    logits, cache = run(
        tiny_step,
        tiny_params,
        init_cache(TINY, 3, MAX_LEN),
        padded,
        np.tile(np.arange(width), (3, 1)),
    )
    batched_decode = []
    for j in range(next_tokens.shape[1]):
        positions = np.array(lengths)[:, None] + j
        step_logits, cache = run(tiny_step, tiny_params, cache, next_tokens[:, j : j + 1], positions)
        batched_decode.append(step_logits[:, 0])

    # Each row alone, one token at a time (the first test shows that equals a prefill).
    for row, prompt in enumerate(prompts):
        row_cache = init_cache(TINY, 1, MAX_LEN)
        for position, token in enumerate([*prompt, *next_tokens[row]]):
            alone, row_cache = run(tiny_step, tiny_params, row_cache, [[token]], [[position]])
            expected = logits[row, position] if position < len(prompt) else batched_decode[position - len(prompt)][row]
            np.testing.assert_allclose(expected, alone[0, 0], atol=1e-5, rtol=1e-5)


def test_vmap_over_requests_equals_batch(tiny_params, tiny_step):
    tokens = jax.random.randint(jax.random.key(2), (3, 3), 0, TINY.vocab_size)
    positions = jnp.broadcast_to(jnp.arange(3), (3, 3))
    batched, batched_cache = run(tiny_step, tiny_params, init_cache(TINY, 3, MAX_LEN), tokens, positions)
    caches = jax.tree.map(lambda x: jnp.broadcast_to(x, (3, *x.shape)), init_cache(TINY, 1, MAX_LEN))
    mapped, mapped_cache = jax.vmap(tiny_step, in_axes=(None, 0, 0, 0))(tiny_params, caches, tokens[:, None], positions[:, None])
    np.testing.assert_allclose(mapped[:, 0], batched, atol=1e-5, rtol=1e-5)
    np.testing.assert_allclose(mapped_cache.keys[:, 0], batched_cache.keys, atol=1e-6)


def test_positions_past_the_cache_are_not_stored(tiny_params, tiny_step):
    cache = init_cache(TINY, 1, MAX_LEN)
    for position in (MAX_LEN, MAX_LEN + 7):
        logits, cache = run(tiny_step, tiny_params, cache, [[5]], [[position]])
        assert logits.shape == (1, 1, TINY.vocab_size)
    assert not jnp.any(cache.keys != 0) and not jnp.any(cache.values != 0)


# --------------------------------------------------------------------------- weight files


def converter_permute(weight: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf.py ``LlamaModel.permute``: the oracle for GGUF Q/K rows."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def file_tensors(config: LlamaConfig, params, fmt: str) -> dict[str, np.ndarray]:
    """The tensors a converter writes for ``params``: ``[out, in]`` weights, GGUF Q/K permuted."""
    flat = traverse_util.flatten_dict(params, sep="/")
    tensors = {}
    for path, names in tensor_names(config, fmt).items():
        stacked = np.asarray(flat[path]) if path.startswith("layers/") else np.asarray(flat[path])[None]
        for name, tensor in zip(names, stacked, strict=True):
            tensor = tensor.T if path.endswith("kernel") else tensor
            if fmt == "gguf" and path.endswith("attn/q/kernel"):
                tensor = converter_permute(tensor, config.heads)
            elif fmt == "gguf" and path.endswith("attn/k/kernel"):
                tensor = converter_permute(tensor, config.kv_heads)
            tensors[name] = np.ascontiguousarray(tensor)
    return tensors


def write_gguf(path, config: LlamaConfig, tensors, *, architecture="llama", tokenizer=None):
    """Writes a GGUF file of ``config``; ``tokenizer`` is ``(model, tokens, types)`` or None."""
    gguf = _required("gguf")
    writer = gguf.GGUFWriter(os.fspath(path), architecture)
    writer.add_block_count(config.layers)
    writer.add_context_length(config.max_len)
    writer.add_embedding_length(config.width)
    writer.add_feed_forward_length(config.ffn)
    writer.add_head_count(config.heads)
    writer.add_head_count_kv(config.kv_heads)
    writer.add_rope_freq_base(config.rope_theta)
    writer.add_layer_norm_rms_eps(config.rms_eps)
    writer.add_vocab_size(config.vocab_size)
    if tokenizer is not None:
        model, tokens, types = tokenizer
        writer.add_tokenizer_model(model)
        writer.add_token_list(tokens)
        writer.add_token_types(types)
        writer.add_eos_token_id(tokens.index("</s>"))
    for name, tensor in tensors.items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_safetensors(path, config: LlamaConfig, tensors):
    safetensors_numpy = _required("safetensors.numpy")
    safetensors_numpy.save_file(tensors, os.fspath(path / "model.safetensors"))
    hf_config = {
        "model_type": "llama", "vocab_size": config.vocab_size, "hidden_size": config.width,
        "num_hidden_layers": config.layers, "num_attention_heads": config.heads,
        "num_key_value_heads": config.kv_heads, "intermediate_size": config.ffn,
        "rms_norm_eps": config.rms_eps, "rope_theta": config.rope_theta,
        "tie_word_embeddings": config.tie_embeddings, "max_position_embeddings": config.max_len,
    }  # fmt: skip
    (path / "config.json").write_text(json.dumps(hf_config))


def write_weights(tmp_path, fmt, config, tensors):
    """Writes ``tensors`` in ``fmt``; returns the path to load."""
    if fmt == "gguf":
        write_gguf(tmp_path / "model.gguf", config, tensors)
        return tmp_path / "model.gguf"
    write_safetensors(tmp_path, config, tensors)
    return tmp_path


LOADERS = {"gguf": load_gguf, "safetensors": load_safetensors}


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
@pytest.mark.parametrize("tied", [True, False])
def test_weights_round_trip(tmp_path, tiny_params, fmt, tied):
    config = dataclasses.replace(TINY, tie_embeddings=tied)
    params = tiny_params
    if not tied:
        lm_head = jax.random.normal(jax.random.key(4), (TINY.width, TINY.vocab_size))
        params = {**params, "lm_head": {"kernel": lm_head}}
    path = write_weights(tmp_path, fmt, config, file_tensors(config, params, fmt))
    loaded_config, loaded = LOADERS[fmt](path)
    assert loaded_config == config
    assert jax.tree.structure(loaded) == jax.tree.structure(params)
    jax.tree.map(np.testing.assert_array_equal, loaded, params)


@pytest.mark.parametrize("fmt", ["gguf", "safetensors"])
def test_missing_and_misshaped_tensors_are_named(tmp_path, tiny_params, fmt):
    tensors = file_tensors(TINY, tiny_params, fmt)
    names = tensor_names(TINY, fmt)
    missing, misshaped = names["layers/ffn/up/kernel"][1], names["layers/attn/k/kernel"][0]
    del tensors[missing]
    tensors[misshaped] = tensors[misshaped][:-1]
    path = write_weights(tmp_path, fmt, TINY, tensors)
    with pytest.raises(WeightsError) as error:
        LOADERS[fmt](path)
    message = str(error.value)
    assert f"missing tensors: {missing}" in message
    assert f"{misshaped} has shape (31, 64), expected (32, 64)" in message


def test_unsupported_and_corrupt_gguf(tmp_path, tiny_params):
    tensors = file_tensors(TINY, tiny_params, "gguf")
    write_gguf(tmp_path / "gpt.gguf", TINY, tensors, architecture="gpt2")
    with pytest.raises(WeightsError, match="architecture 'gpt2' is not supported"):
        load_gguf(tmp_path / "gpt.gguf")
    (tmp_path / "bad.gguf").write_bytes(b"GGML" + bytes(40))
    with pytest.raises(WeightsError, match="not a GGUF file"):
        load_gguf(tmp_path / "bad.gguf")
    with pytest.raises(VocabularyError, match="not a GGUF file"):
        Vocabulary.from_gguf(tmp_path / "bad.gguf")
    write_gguf(tmp_path / "model.gguf", TINY, tensors)
    (tmp_path / "cut.gguf").write_bytes((tmp_path / "model.gguf").read_bytes()[:300])
    with pytest.raises(WeightsError, match="malformed GGUF file"):
        load_gguf(tmp_path / "cut.gguf")
    with pytest.raises(WeightsError, match="cannot read GGUF file"):
        load_gguf(tmp_path / "absent.gguf")


def test_sentencepiece_style_gguf_vocabulary(tmp_path):
    # GGUF token types: 1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte.
    tokens = ["<unk>", "<s>", "</s>", "<0x0A>", "\u2581the", "ing", "<tool>"]
    types = [2, 3, 3, 6, 1, 1, 4]
    write_gguf(tmp_path / "sp.gguf", TINY, {}, tokenizer=("llama", tokens, types))
    vocab = Vocabulary.from_gguf(tmp_path / "sp.gguf")
    assert vocab.tokens == (b"<unk>", b"<s>", b"</s>", b"\n", b" the", b"ing", b"<tool>")
    assert vocab.special_token_ids == {0, 1, 2} and vocab.eos_token_ids == (2,)
    assert vocab.logits_width == TINY.vocab_size
    with pytest.raises(VocabularyError, match="not byte-level BPE"):
        gguf_tokenizer(tmp_path / "sp.gguf")
    write_gguf(tmp_path / "rwkv.gguf", TINY, {}, tokenizer=("rwkv", tokens, types))
    with pytest.raises(VocabularyError, match="unsupported GGUF tokenizer model 'rwkv'"):
        Vocabulary.from_gguf(tmp_path / "rwkv.gguf")


def test_chat_prompt():
    assert chat_prompt([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]) == (
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert chat_prompt("Hi", system=None, add_generation_prompt=False) == "<|im_start|>user\nHi<|im_end|>\n"
    assert chat_prompt("Hi").startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")


# --------------------------------------------------------------------------- SmolLM2-135M-Instruct

PARAGRAPH = (
    "The city of Paris is the capital and most populous city of France. It is located on the "
    "river Seine, in the north of the country. Paris is known for its museums and architectural "
    "landmarks: the Louvre was the most visited art museum in the world, and the Eiffel Tower, "
    "built for the World's Fair of 1889, has become a global symbol of the city."
)


@dataclasses.dataclass(repr=False)  # no repr: hypothesis prints fixtures of failing examples
class Model:
    config: LlamaConfig
    params: dict
    vocab: Vocabulary
    tokenizer: object
    step: object


@pytest.fixture(scope="module")
def smollm2(smollm2_gguf) -> Model:
    """SmolLM2-135M-Instruct with a jitted step that donates the cache."""
    _required("gguf")
    config, params, vocab, tokenizer = load_smollm2()
    return Model(config, params, vocab, tokenizer, jax.jit(make_step_fn(config), donate_argnums=1))


@pytest.mark.slow
def test_smollm2_layout(smollm2):
    vocab = smollm2.vocab
    assert smollm2.config == LlamaConfig.smollm2_135m()
    assert len(vocab) == vocab.logits_width == 49152
    assert vocab.eos_token_ids == (2,) and vocab.tokens[2] == b"<|im_end|>"
    assert vocab.special_token_ids == set(range(17))


@pytest.mark.slow
def test_smollm2_greedy_answer(smollm2):
    m = smollm2
    prompt = m.tokenizer.encode(chat_prompt("What is the capital of France?")).ids
    logits, cache = run(m.step, m.params, init_cache(m.config, 1, len(prompt) + 16), [prompt], [range(len(prompt))])
    answer = []
    while len(answer) < 16 and (token := int(jnp.argmax(logits[0, -1]))) not in m.vocab.eos_token_ids:
        answer.append(token)
        logits, cache = run(m.step, m.params, cache, [[token]], [[len(prompt) + len(answer) - 1]])
    text = b"".join(m.vocab.tokens[t] for t in answer).decode()
    assert "Paris" in text, text


@pytest.mark.slow
def test_smollm2_perplexity(smollm2):
    m = smollm2
    ids = m.tokenizer.encode(PARAGRAPH).ids
    logits, _ = run(m.step, m.params, init_cache(m.config, 1, len(ids)), [ids], [range(len(ids))])
    log_probs = jax.nn.log_softmax(logits[0, :-1])
    nll = -jnp.take_along_axis(log_probs, jnp.asarray(ids[1:])[:, None], axis=1).mean()
    # 6.1 measured; uniform is 49152, and un-permuted GGUF Q/K rows give about 25.
    assert float(jnp.exp(nll)) < 12


# The vocabulary has no token for these bytes, so the tokenizer drops them (as Hugging Face's
# does): C0 controls 0x04 0x06 0x13 0x14 0x16 0x1d, and 0xF1 0xF2 (code points U+40000-U+BFFFF).
encodable_text = st.text(
    st.characters(codec="utf-8", max_codepoint=0x3FFFF, exclude_characters="\x04\x06\x13\x14\x16\x1d"),
    max_size=60,
)


@settings(max_examples=100, deadline=None)
@given(text=encodable_text)
def test_smollm2_vocabulary_round_trip(smollm2, text):
    ids = smollm2.tokenizer.encode(text).ids
    assert b"".join(smollm2.vocab.tokens[i] for i in ids) == text.encode()


def test_smollm2_chat_prompt_round_trip(smollm2):
    prompt = chat_prompt('Give me 3 names, as JSON: {"names": [...]}')
    ids = smollm2.tokenizer.encode(prompt).ids
    assert ids.count(1) == 3 and ids.count(2) == 2  # <|im_start|> and <|im_end|> are single tokens
    assert b"".join(smollm2.vocab.tokens[i] for i in ids) == prompt.encode()


@pytest.mark.slow
@pytest.mark.xla_optimized
def test_smollm2_constrained_greedy_is_minimally_invasive(smollm2):
    """Prompts whose unconstrained greedy reply is already in the language: the constrained reply
    is the same tokens, and the model is never overruled (DOMINO's bar)."""
    import ananke_jax as aj

    m = smollm2
    schema = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}, "required": ["name", "age"]}
    cases = [
        (
            'Give a JSON object with keys "name" and "age" for a 30-year-old named Alice. Reply with JSON only.',
            aj.compile_json_schema(schema, m.vocab),
        ),
        ("Is Paris in France? Answer with one word: Yes or No.", aj.compile_regex(r"[A-Z][a-z ]*\.", m.vocab)),
    ]
    ids = [m.tokenizer.encode(chat_prompt(prompt)).ids for prompt, _ in cases]
    width = max(map(len, ids))
    prompts = np.array([row + [0] * (width - len(row)) for row in ids])
    options = {
        "cache": init_cache(m.config, len(ids), width + 40), "max_new_tokens": 40, "eos_token_ids": m.vocab.eos_token_ids,
        "key": jax.random.key(0), "prompt_lengths": [len(row) for row in ids], "sampling": aj.SamplingParams(temperature=0.0),
    }  # fmt: skip
    free = aj.generate(m.step, m.params, prompts, None, **options)
    bank = aj.stack_grammars([cg for _, cg in cases])
    constrained = aj.generate(m.step, m.params, prompts, bank, grammar_index=[0, 1], **options)
    assert free.finish_names() == ["eos", "eos"], "the unconstrained replies end by themselves"
    np.testing.assert_array_equal(np.asarray(constrained.tokens), np.asarray(free.tokens))
    assert set(constrained.finish_names()) <= {"eos", "grammar_complete"}
    assert np.asarray(constrained.interventions).tolist() == [0, 0]
    reply = b"".join(m.vocab.tokens[t] for t in np.asarray(constrained.tokens[0, : constrained.lengths[0]])).decode()
    assert json.loads(reply) == {"name": "Alice", "age": 30}
