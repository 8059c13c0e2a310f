"""Prompt encoding for GGUF models: a ``tokenizers`` BPE built from the file's tokens and merges.

The constraint engine only needs ``Vocabulary.from_gguf``; encoding a prompt needs the merges
and the pre-tokenizer too. Only byte-level BPE files (``tokenizer.ggml.model == "gpt2"``) with
a known pre-tokenizer are supported, which covers SmolLM2.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.gguf_file import read_gguf
from ananke_jax._src.models.optional import optional_import

if TYPE_CHECKING:
    import tokenizers

PathLike = str | os.PathLike[str]

SMOLLM2_SYSTEM_PROMPT = "You are a helpful AI assistant named SmolLM, trained by Hugging Face"

_CONTROL = 3  # GGUF token type of special tokens (SentencePiece's CONTROL).


def gguf_tokenizer(path: PathLike) -> tokenizers.Tokenizer:
    """Builds a ``tokenizers.Tokenizer`` from the tokenizer stored in a GGUF file.

    Control tokens (``<|im_start|>``, ``<|im_end|>``, ...) are special added tokens, so they
    are recognised in the text, and no BOS or EOS is added. ``tokenizer.ggml.pre`` selects
    the pre-tokenizer as llama.cpp does: ``"smollm"`` splits digits one by one before
    GPT-2's byte-level split; ``"gpt2"`` or ``"default"`` use the byte-level split alone.

    Args:
        path: The ``.gguf`` file.

    Returns:
        The tokenizer; ``encode(text).ids`` are the model's token ids.

    Raises:
        VocabularyError: If the file is not GGUF, its tokenizer is not byte-level BPE, or
            its pre-tokenizer is unknown.
    """
    tokenizers = optional_import("tokenizers", "encoding prompts")
    pre_tokenizers = tokenizers.pre_tokenizers
    meta = read_gguf(path, VocabularyError).metadata
    name = os.fspath(path)
    kind, pre = meta.get("tokenizer.ggml.model"), meta.get("tokenizer.ggml.pre", "default")
    if kind != "gpt2":
        raise VocabularyError(f"{name}: tokenizer model {kind!r} is not byte-level BPE ('gpt2')")
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre == "smollm":
        pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    elif pre in ("gpt2", "default"):
        pre_tokenizer = byte_level
    else:
        raise VocabularyError(f"{name}: unsupported pre-tokenizer {pre!r}")
    if "tokenizer.ggml.tokens" not in meta or "tokenizer.ggml.merges" not in meta:
        raise VocabularyError(f"{name}: the GGUF file has no tokens or no merges")
    tokens = meta["tokenizer.ggml.tokens"]
    merges = [tuple(merge.split(" ", 1)) for merge in meta["tokenizer.ggml.merges"]]
    tokenizer = tokenizers.Tokenizer(tokenizers.models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = tokenizers.decoders.ByteLevel()
    types = meta.get("tokenizer.ggml.token_type", ())
    tokenizer.add_special_tokens([tokenizers.AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == _CONTROL])
    return tokenizer


def chat_prompt(
    messages: str | Sequence[Mapping[str, str]],
    *,
    system: str | None = SMOLLM2_SYSTEM_PROMPT,
    add_generation_prompt: bool = True,
) -> str:
    """Renders a conversation in ChatML, as SmolLM2's chat template does.

    Args:
        messages: ``[{"role": ..., "content": ...}, ...]``, or one user message as a string.
        system: System message put first when the conversation does not start with one
            (SmolLM2's default); ``None`` for none.
        add_generation_prompt: End with ``<|im_start|>assistant\\n`` for the reply.

    Returns:
        The prompt text, special tokens written out (``gguf_tokenizer`` encodes them).
    """
    if isinstance(messages, str):
        messages = [{"role": "user", "content": messages}]
    if system is not None and (not messages or messages[0]["role"] != "system"):
        messages = [{"role": "system", "content": system}, *messages]
    text = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return text + ("<|im_start|>assistant\n" if add_generation_prompt else "")
