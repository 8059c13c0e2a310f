"""Llama weights from GGUF and safetensors files, checked against the model's parameter tree.

Parameters of ``Llama(config)`` (its ``"params"`` collection; ``L`` = layers, ``D`` = width,
``V`` = vocabulary, ``Q`` = heads x head_dim, ``K`` = kv_heads x head_dim, ``F`` = ffn) and
their tensors. Every tensor name ends in ``.weight``. The per-layer parameters under
``layers/`` stack one tensor per layer on a leading axis; the tensor of layer ``i`` starts
with ``blk.{i}.`` in GGUF and with ``model.layers.{i}.`` in safetensors (Hugging Face names):

============================  =========  ===========  =============================
parameter                     shape      GGUF         safetensors
============================  =========  ===========  =============================
embed/embedding               [V, D]     token_embd   model.embed_tokens
layers/attn_norm/scale        [L, D]     attn_norm    input_layernorm
layers/attn/q/kernel          [L, D, Q]  attn_q       self_attn.q_proj
layers/attn/k/kernel          [L, D, K]  attn_k       self_attn.k_proj
layers/attn/v/kernel          [L, D, K]  attn_v       self_attn.v_proj
layers/attn/o/kernel          [L, Q, D]  attn_output  self_attn.o_proj
layers/ffn_norm/scale         [L, D]     ffn_norm     post_attention_layernorm
layers/ffn/gate/kernel        [L, D, F]  ffn_gate     mlp.gate_proj
layers/ffn/up/kernel          [L, D, F]  ffn_up       mlp.up_proj
layers/ffn/down/kernel        [L, F, D]  ffn_down     mlp.down_proj
final_norm/scale              [D]        output_norm  model.norm
lm_head/kernel                [D, V]     output       lm_head (only without tied embeddings)
============================  =========  ===========  =============================

Both formats store linear weights ``[out, in]``, transposed here into kernels. llama.cpp's
converter permutes the rows of Q and K within each head so that llama.cpp can rotate
adjacent pairs; they are un-permuted here, so both formats feed the model's ``rotate_half``
RoPE. ``tensor_names`` gives this table for a configuration.
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Mapping
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from flax import traverse_util

from ananke_jax._src.errors import WeightsError
from ananke_jax._src.gguf_file import GGUFFile, read_gguf
from ananke_jax._src.models.llama import LlamaConfig, Params, init_params
from ananke_jax._src.models.optional import optional_import

PathLike = str | os.PathLike[str]
Format = Literal["gguf", "safetensors"]

# (parameter path, GGUF name, Hugging Face name).
_MODEL_TENSORS = (
    ("embed/embedding", "token_embd.weight", "model.embed_tokens.weight"),
    ("final_norm/scale", "output_norm.weight", "model.norm.weight"),
    ("lm_head/kernel", "output.weight", "lm_head.weight"),
)
# The same per layer, relative to "layers/", "blk.{i}." and "model.layers.{i}.".
_LAYER_TENSORS = (
    ("attn_norm/scale", "attn_norm.weight", "input_layernorm.weight"),
    ("attn/q/kernel", "attn_q.weight", "self_attn.q_proj.weight"),
    ("attn/k/kernel", "attn_k.weight", "self_attn.k_proj.weight"),
    ("attn/v/kernel", "attn_v.weight", "self_attn.v_proj.weight"),
    ("attn/o/kernel", "attn_output.weight", "self_attn.o_proj.weight"),
    ("ffn_norm/scale", "ffn_norm.weight", "post_attention_layernorm.weight"),
    ("ffn/gate/kernel", "ffn_gate.weight", "mlp.gate_proj.weight"),
    ("ffn/up/kernel", "ffn_up.weight", "mlp.up_proj.weight"),
    ("ffn/down/kernel", "ffn_down.weight", "mlp.down_proj.weight"),
)
_LAYER_PREFIXES = {"gguf": "blk.{}.", "safetensors": "model.layers.{}."}


def tensor_names(config: LlamaConfig, fmt: Format) -> dict[str, tuple[str, ...]]:
    """Maps each parameter path of ``Llama(config)`` (``"layers/attn/q/kernel"``) to the names
    of its tensors in a ``fmt`` file: one per layer for the stacked parameters under
    ``layers/``, in layer order, and one for the others."""
    column = 1 if fmt == "gguf" else 2
    names = {row[0]: (row[column],) for row in _MODEL_TENSORS}
    if config.tie_embeddings:
        del names["lm_head/kernel"]
    prefixes = [_LAYER_PREFIXES[fmt].format(i) for i in range(config.layers)]
    names.update((f"layers/{row[0]}", tuple(prefix + row[column] for prefix in prefixes)) for row in _LAYER_TENSORS)
    return names


def load_gguf(path: PathLike, *, dtype: Any = jnp.float32) -> tuple[LlamaConfig, Params]:
    """Loads a Llama-architecture GGUF model, dequantising every tensor.

    The configuration comes from the ``llama.*`` metadata; tied embeddings are recognised
    by the absence of ``output.weight``.

    Args:
        path: The ``.gguf`` file.
        dtype: Parameter dtype (tensors are dequantised to float32, then cast).

    Returns:
        The configuration and the parameters (layout in this module's docstring).

    Raises:
        WeightsError: If the file is unreadable or not a supported Llama model (another
            architecture, RoPE scaling), or tensors are missing or mis-shaped (all named).
        ImportError: If the ``gguf`` package is not installed.
    """
    gguf = optional_import("gguf", "reading GGUF weights")
    file = read_gguf(path, WeightsError)
    config = _gguf_config(file)

    def read(name: str) -> np.ndarray:
        info = file.tensors[name]
        try:
            qtype = gguf.GGMLQuantizationType(info.ggml_type)
            block, type_size = gguf.GGML_QUANT_SIZES[qtype]
            *rows, columns = info.shape
            row_bytes = columns // block * type_size
            raw = np.frombuffer(file.buffer, np.uint8, math.prod(rows) * row_bytes, info.offset)
            return gguf.quants.dequantize(raw.reshape(*rows, row_bytes), qtype)
        except (ValueError, KeyError, NotImplementedError) as e:
            raise WeightsError(f"{file.path}: cannot read tensor {name}: {e}") from e

    shapes = {name: info.shape for name, info in file.tensors.items()}
    return config, _assemble(config, "gguf", shapes, read, file.path, dtype)


def load_safetensors(path: PathLike, config: LlamaConfig | None = None, *, dtype: Any = jnp.float32) -> tuple[LlamaConfig, Params]:
    """Loads Hugging Face Llama weights from safetensors.

    Args:
        path: A ``.safetensors`` file, or a directory whose ``*.safetensors`` files together
            hold the weights (a sharded checkpoint).
        config: The model; by default read from the Hugging Face ``config.json`` in the same
            directory (``model_type`` ``"llama"``).
        dtype: Parameter dtype.

    Returns:
        The configuration and the parameters (layout in this module's docstring).

    Raises:
        WeightsError: If a file is unreadable, the configuration is missing or unsupported
            (RoPE scaling, biases), or tensors are missing or mis-shaped (all named).
        ImportError: If the ``safetensors`` package is not installed.
    """
    safe_open = optional_import("safetensors", "reading safetensors weights").safe_open
    name = os.fspath(path)
    directory = name if os.path.isdir(name) else os.path.dirname(name)
    files = sorted(os.path.join(name, f) for f in os.listdir(name) if f.endswith(".safetensors")) if os.path.isdir(name) else [name]
    if not files:
        raise WeightsError(f"{name}: no .safetensors files in the directory")
    if config is None:
        config = _hf_config(os.path.join(directory, "config.json"))
    handles, shapes = {}, {}
    for file in files:
        try:
            handle = safe_open(file, framework="flax")
            for tensor in handle.keys():  # noqa: SIM118 (a safetensors handle is no dict)
                handles[tensor] = handle
                shapes[tensor] = tuple(handle.get_slice(tensor).get_shape())
        except Exception as e:  # safetensors raises its own SafetensorError and OSError.
            raise WeightsError(f"{file}: cannot read safetensors file: {e}") from e

    def read(tensor: str) -> jax.Array:
        return handles[tensor].get_tensor(tensor)

    return config, _assemble(config, "safetensors", shapes, read, name, dtype)


def _assemble(
    config: LlamaConfig,
    fmt: Format,
    shapes: Mapping[str, tuple[int, ...]],
    read: Callable[[str], Any],
    source: str,
    dtype: Any,
) -> Params:
    """Checks every tensor ``Llama(config)`` needs against ``shapes``, then reads them."""
    expected = traverse_util.flatten_dict(jax.eval_shape(functools.partial(init_params, config, dtype=dtype), jax.random.key(0)), sep="/")
    names = tensor_names(config, fmt)
    missing, misshaped = [], []
    for path, leaf in expected.items():
        # One tensor per layer of a stacked parameter; kernels are stored transposed, [out, in].
        want = leaf.shape[1:] if path.startswith("layers/") else leaf.shape
        want = want[::-1] if path.endswith("kernel") else want
        for name in names[path]:
            if name not in shapes:
                missing.append(name)
            elif tuple(shapes[name]) != want:
                misshaped.append(f"{name} has shape {tuple(shapes[name])}, expected {want}")
    if missing or misshaped:
        problems = ([f"missing tensors: {', '.join(missing)}"] if missing else []) + misshaped
        raise WeightsError(f"{source}: weights do not fit {config}: " + "; ".join(problems))

    def tensor(path: str, name: str) -> np.ndarray:
        value = np.asarray(read(name))
        if fmt == "gguf" and path.endswith(("attn/q/kernel", "attn/k/kernel")):
            value = _unpermute_rope_rows(value, config.heads if path.endswith("q/kernel") else config.kv_heads)
        return value.T if path.endswith("kernel") else value

    params = {}
    for path in expected:
        parts = [tensor(path, name) for name in names[path]]
        params[path] = jnp.asarray(np.stack(parts) if path.startswith("layers/") else parts[0], dtype)
    return traverse_util.unflatten_dict(params, sep="/")


def _unpermute_rope_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """Undoes llama.cpp's ``permute`` of a ``[heads * head_dim, in]`` Q or K weight.

    The converter reorders each head's rows from halves ``(i, i + head_dim/2)`` into
    adjacent pairs ``(2i, 2i + 1)``; this restores the halves.
    """
    rows, columns = weight.shape
    return weight.reshape(heads, rows // heads // 2, 2, columns).swapaxes(1, 2).reshape(rows, columns)


def _gguf_config(file: GGUFFile) -> LlamaConfig:
    meta = file.metadata
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise WeightsError(f"{file.path}: architecture {arch!r} is not supported (only 'llama')")
    if meta.get("llama.rope.scaling.type", "none") != "none" or "rope_freqs.weight" in file.tensors:
        raise WeightsError(f"{file.path}: RoPE scaling is not supported")

    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise WeightsError(f"{file.path}: metadata key llama.{key} is missing")
        return value

    width, heads = int(get("embedding_length")), int(get("attention.head_count"))
    vocab_size = get("vocab_size", len(meta.get("tokenizer.ggml.tokens", ())) or None)
    # Metadata floats are float32: read them back at float32 precision (9.99999975e-06 -> 1e-05).
    eps = float(str(np.float32(get("attention.layer_norm_rms_epsilon"))))
    return LlamaConfig(
        vocab_size=int(vocab_size),
        width=width,
        layers=int(get("block_count")),
        heads=heads,
        kv_heads=int(get("attention.head_count_kv", heads)),
        head_dim=int(get("attention.key_length", width // heads)),
        ffn=int(get("feed_forward_length")),
        rms_eps=eps,
        rope_theta=float(str(np.float32(get("rope.freq_base", 10_000.0)))),
        tie_embeddings="output.weight" not in file.tensors,
        max_len=int(get("context_length")),
    )


def _hf_config(path: str) -> LlamaConfig:
    """Reads a Hugging Face ``config.json`` of a Llama model."""
    try:
        with open(path) as f:
            data = json.load(f)
        if data.get("model_type") != "llama":
            raise WeightsError(f"model_type {data.get('model_type')!r} is not 'llama'")
        if data.get("rope_scaling"):
            raise WeightsError("RoPE scaling is not supported")
        if data.get("attention_bias") or data.get("mlp_bias"):
            raise WeightsError("attention or MLP biases are not supported")
        width, heads = data["hidden_size"], data["num_attention_heads"]
        return LlamaConfig(
            vocab_size=data["vocab_size"],
            width=width,
            layers=data["num_hidden_layers"],
            heads=heads,
            kv_heads=data.get("num_key_value_heads") or heads,
            head_dim=data.get("head_dim") or width // heads,
            ffn=data["intermediate_size"],
            rms_eps=data.get("rms_norm_eps", 1e-6),
            rope_theta=data.get("rope_theta", 10_000.0),
            tie_embeddings=data.get("tie_word_embeddings", False),
            max_len=data.get("max_position_embeddings", 2048),
        )
    except WeightsError as e:
        raise WeightsError(f"{path}: {e}") from e
    except KeyError as e:
        raise WeightsError(f"{path}: missing key {e}") from e
    except (OSError, ValueError, TypeError) as e:
        raise WeightsError(f"{path}: cannot read the model configuration: {e}") from e
