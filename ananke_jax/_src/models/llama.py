"""A Llama-style decoder in flax.linen with an explicit KV cache, as one pure step function.

``make_step_fn(config)`` returns ``step_fn(params, cache, tokens, positions) -> (logits,
cache)``: prefill (``T`` = prompt length), decode (``T = 1``) and multi-token verification
(``T = k``) are the same call. Every token writes its keys and values into the cache at its
own position, then attends to the cache slots ``s <= position``; the mask comes from the
positions alone, so the rows of a batch may be at different lengths. A right-padded batch
of prompts works as is: a padding token writes junk at a slot past its row's end, and that
slot is written again by the row's next real token before any later token can read it.

Layout conventions are Hugging Face's: linear weights act as ``x @ kernel`` with
``kernel: [in, out]`` (the transpose of a ``torch.nn.Linear`` weight), and RoPE rotates the
pairs ``(i, i + head_dim / 2)`` (``rotate_half``). See ``models/weights.py`` for the
parameter names and their GGUF and safetensors sources.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

Params = Any  # the "params" collection of ``Llama``: a nested dict of arrays.


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Hyperparameters of a Llama-style decoder (hashable: usable as a static argument).

    Attributes:
        vocab_size: Rows of the embedding, width of the logits.
        width: Model (residual stream) width.
        layers: Number of decoder blocks.
        heads: Query heads.
        kv_heads: Key/value heads; ``heads`` must be a multiple (grouped-query attention).
        head_dim: Width of one head.
        ffn: Hidden width of the SwiGLU feed-forward block.
        rms_eps: RMSNorm epsilon.
        rope_theta: RoPE base frequency.
        tie_embeddings: Logits use the input embedding (no separate ``lm_head``).
        max_len: Context length the model was trained for; the default cache length.
    """

    vocab_size: int
    width: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    ffn: int
    rms_eps: float = 1e-5
    rope_theta: float = 10_000.0
    tie_embeddings: bool = True
    max_len: int = 2048

    def __post_init__(self):
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")

    @classmethod
    def smollm2_135m(cls) -> LlamaConfig:
        """SmolLM2-135M(-Instruct): 30 layers, width 576, 9/3 heads of 64, FFN 1536."""
        return cls(
            vocab_size=49152, width=576, layers=30, heads=9, kv_heads=3, head_dim=64,
            ffn=1536, rms_eps=1e-5, rope_theta=100_000.0, tie_embeddings=True, max_len=8192,
        )  # fmt: skip

    @classmethod
    def tiny(cls, vocab_size: int) -> LlamaConfig:
        """A 2-layer, width-64 model for fast tests, with grouped-query attention (4/2 heads)."""
        return cls(
            vocab_size=vocab_size, width=64, layers=2, heads=4, kv_heads=2, head_dim=16,
            ffn=128, max_len=256,
        )  # fmt: skip


class KVCache(NamedTuple):
    """Keys and values of every layer, by absolute position (batch, then position, leading).

    Attributes:
        keys: ``[batch, max_len, layers, kv_heads, head_dim]``, keys after RoPE.
        values: ``[batch, max_len, layers, kv_heads, head_dim]``.
    """

    keys: jax.Array
    values: jax.Array


def init_cache(config: LlamaConfig, batch: int, max_len: int | None = None, dtype: Any = jnp.float32) -> KVCache:
    """Returns an all-zero cache for ``batch`` rows.

    Args:
        config: The model.
        batch: Number of rows.
        max_len: Cache slots per row; defaults to ``config.max_len``. Positions at or past
            it are not stored (their tokens still get logits).
        dtype: Dtype of keys and values.
    """
    length = config.max_len if max_len is None else max_len
    shape = (batch, length, config.layers, config.kv_heads, config.head_dim)
    return KVCache(jnp.zeros(shape, dtype), jnp.zeros(shape, dtype))


def rope(x: jax.Array, positions: jax.Array, theta: float) -> jax.Array:
    """Rotates ``x: [B, T, N, D]`` by ``positions: int32[B, T]``, pairing ``i`` with ``i + D/2``."""
    half = x.shape[-1] // 2
    inv_freq = theta ** (-jnp.arange(half, dtype=jnp.float32) / half)
    angles = positions[:, :, None, None].astype(jnp.float32) * inv_freq[None, None, None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    x1, x2 = jnp.split(x.astype(jnp.float32), 2, axis=-1)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(x.dtype)


class Attention(nn.Module):
    """Grouped-query self-attention over one layer of the KV cache."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x: jax.Array, positions: jax.Array, cache: KVCache, layer: jax.Array) -> tuple[jax.Array, KVCache]:
        c = self.config
        batch, length, _ = x.shape
        groups = c.heads // c.kv_heads
        dense = functools.partial(nn.Dense, use_bias=False, dtype=x.dtype, param_dtype=x.dtype)

        def project(name: str, heads: int) -> jax.Array:
            return dense(heads * c.head_dim, name=name)(x).reshape(batch, length, heads, c.head_dim)

        q, k, v = project("q", c.heads), project("k", c.kv_heads), project("v", c.kv_heads)
        q, k = rope(q, positions, c.rope_theta), rope(k, positions, c.rope_theta)

        # Each row writes at its own positions; out-of-range positions are dropped.
        rows = jnp.arange(batch)[:, None]
        cache = KVCache(
            cache.keys.at[rows, positions, layer].set(k.astype(cache.keys.dtype), mode="drop"),
            cache.values.at[rows, positions, layer].set(v.astype(cache.values.dtype), mode="drop"),
        )
        keys, values = (jax.lax.dynamic_index_in_dim(part, layer, axis=2, keepdims=False) for part in cache)
        # Query head h reads key/value head h // groups, as Hugging Face's repeat_kv.
        q = q.reshape(batch, length, c.kv_heads, groups, c.head_dim)
        scores = jnp.einsum("btkgd,bskd->bkgts", q, keys, preferred_element_type=jnp.float32) / jnp.sqrt(jnp.float32(c.head_dim))
        slots = jnp.arange(keys.shape[1])
        visible = slots[None, None, :] <= positions[:, :, None]  # [B, T, S]
        scores = jnp.where(visible[:, None, None], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(values.dtype)
        out = jnp.einsum("bkgts,bskd->btkgd", probs, values).astype(x.dtype)
        out = out.reshape(batch, length, c.heads * c.head_dim)
        return dense(c.width, name="o")(out), cache


class FeedForward(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    config: LlamaConfig

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        dense = functools.partial(nn.Dense, use_bias=False, dtype=x.dtype, param_dtype=x.dtype)
        gate, up = dense(self.config.ffn, name="gate")(x), dense(self.config.ffn, name="up")(x)
        return dense(self.config.width, name="down")(nn.silu(gate) * up)


BlockCarry = tuple[jax.Array, KVCache, jax.Array]  # residual [B, T, width], cache, int32 layer index


class Block(nn.Module):
    """Pre-norm decoder block: attention then feed-forward, each added to the residual.

    A ``lax.scan`` body over the layers: the carry is the residual stream, the cache and the
    layer's index in it.
    """

    config: LlamaConfig

    @nn.compact
    def __call__(self, carry: BlockCarry, positions: jax.Array) -> tuple[BlockCarry, None]:
        x, cache, layer = carry
        norm = functools.partial(nn.RMSNorm, epsilon=self.config.rms_eps, param_dtype=x.dtype)
        attended, cache = Attention(self.config, name="attn")(norm(name="attn_norm")(x), positions, cache, layer)
        x = x + attended
        x = x + FeedForward(self.config, name="ffn")(norm(name="ffn_norm")(x))
        return (x, cache, layer + 1), None


class Llama(nn.Module):
    """The decoder: embedding, ``config.layers`` blocks, final RMSNorm, logits.

    The blocks run as one ``lax.scan`` over parameters stacked on a leading layer axis
    (``params["layers"]``): a program traces and compiles one block whatever the depth
    (SmolLM2's decode step: 1.1 s instead of 16 s on a 2-core CPU). XLA's CPU backend copies
    each layer's weights out of the stack before its matmuls, which costs that step ~25 ms.
    Parameter dtype follows the loaded weights (float32 unless cast); activations use it
    too, attention scores and logits are float32.
    """

    config: LlamaConfig
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, tokens: jax.Array, positions: jax.Array, cache: KVCache) -> tuple[jax.Array, KVCache]:
        """Runs ``tokens`` at ``positions`` against ``cache``.

        Args:
            tokens: ``int32[B, T]`` token ids.
            positions: ``int32[B, T]`` absolute position of each token.
            cache: The ``KVCache`` from ``init_cache``.

        Returns:
            ``float32[B, T, vocab_size]`` logits and the updated cache.
        """
        c = self.config
        embed = nn.Embed(
            c.vocab_size, c.width, param_dtype=self.param_dtype, dtype=self.param_dtype,
            embedding_init=nn.initializers.normal(0.02), name="embed",
        )  # fmt: skip
        layers = nn.scan(Block, variable_axes={"params": 0}, split_rngs={"params": True}, in_axes=nn.broadcast, length=c.layers)
        (x, cache, _), _ = layers(c, name="layers")((embed(tokens), cache, jnp.int32(0)), positions)
        x = nn.RMSNorm(epsilon=c.rms_eps, param_dtype=self.param_dtype, name="final_norm")(x)
        if c.tie_embeddings:
            logits = embed.attend(x)
        else:
            logits = nn.Dense(c.vocab_size, use_bias=False, param_dtype=self.param_dtype, name="lm_head")(x)
        return logits.astype(jnp.float32), cache


@functools.partial(jax.jit, static_argnames=("config", "dtype"))
def init_params(config: LlamaConfig, key: jax.Array, dtype: Any = jnp.float32) -> Params:
    """Randomly initialised parameters (the ``"params"`` collection) of ``Llama(config)``.

    Jitted: one compilation per configuration instead of one per initialiser op.

    Args:
        config: The model (static).
        key: PRNG key.
        dtype: Parameter dtype (static).
    """
    tokens = jnp.zeros((1, 1), jnp.int32)
    variables = Llama(config, dtype).init(key, tokens, tokens, init_cache(config, 1, 1, dtype))
    return variables["params"]


def make_step_fn(config: LlamaConfig) -> Callable[..., tuple[jax.Array, KVCache]]:
    """Returns the pure model step ``step_fn(params, cache, tokens, positions)``.

    ``step_fn`` takes ``tokens, positions: int32[B, T]`` and returns ``(float32[B, T, V]
    logits, cache)``; it is jit-, vmap- and scan-friendly (batch is the leading axis of every
    array; donate the cache to update it in place). Under ``vmap`` over requests, give each
    request ``B = 1``. The parameter dtype is taken from ``params``.
    """

    def step_fn(params: Params, cache: KVCache, tokens: jax.Array, positions: jax.Array) -> tuple[jax.Array, KVCache]:
        dtype = params["embed"]["embedding"].dtype
        return Llama(config, dtype).apply({"params": params}, tokens, positions, cache)

    step_fn.init_cache = functools.partial(init_cache, config)  # (batch, max_len) -> cache, for serving.Engine
    return step_fn
