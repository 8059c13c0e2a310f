"""Reference models: a Llama-style Flax decoder with a KV cache, GGUF/safetensors loaders and
SmolLM2-135M-Instruct, the embedded default.

    config, params, vocab, tokenizer = ananke_jax.models.load_smollm2()
    step_fn = ananke_jax.models.make_step_fn(config)   # (params, cache, tokens, positions)
    cache = ananke_jax.models.init_cache(config, batch=1, max_len=512)
"""

from ananke_jax._src.models.llama import KVCache as KVCache
from ananke_jax._src.models.llama import Llama as Llama
from ananke_jax._src.models.llama import LlamaConfig as LlamaConfig
from ananke_jax._src.models.llama import init_cache as init_cache
from ananke_jax._src.models.llama import init_params as init_params
from ananke_jax._src.models.llama import make_step_fn as make_step_fn
from ananke_jax._src.models.smollm2 import load_smollm2 as load_smollm2
from ananke_jax._src.models.smollm2 import smollm2_path as smollm2_path
from ananke_jax._src.models.tokenizer import chat_prompt as chat_prompt
from ananke_jax._src.models.tokenizer import gguf_tokenizer as gguf_tokenizer
from ananke_jax._src.models.weights import load_gguf as load_gguf
from ananke_jax._src.models.weights import load_safetensors as load_safetensors
from ananke_jax._src.models.weights import tensor_names as tensor_names

__all__ = [
    "KVCache",
    "Llama",
    "LlamaConfig",
    "chat_prompt",
    "gguf_tokenizer",
    "init_cache",
    "init_params",
    "load_gguf",
    "load_safetensors",
    "load_smollm2",
    "make_step_fn",
    "smollm2_path",
    "tensor_names",
]
