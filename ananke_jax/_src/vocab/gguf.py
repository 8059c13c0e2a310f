"""The tokenizer in a GGUF model file's metadata (``tokenizer.ggml.*``; the file is read by
`ananke_jax._src.gguf_file`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.vocab.files import TokenizerContents
from ananke_jax._src.vocab.pieces import SP_NORMAL, byte_level_bytes, sentencepiece_text, typed_pieces


def gguf_contents(meta: Mapping[str, Any]) -> TokenizerContents:
    """The tokens, special ids, EOS ids and logits width in a GGUF file's metadata ``meta`` (see
    `Vocabulary.from_gguf`)."""
    kind = meta["tokenizer.ggml.model"]
    if kind == "gpt2":
        text_bytes, user_defined_bytes = byte_level_bytes, str.encode
    elif kind == "llama":
        text_bytes, user_defined_bytes = sentencepiece_text, None
    else:
        raise VocabularyError(f"unsupported GGUF tokenizer model {kind!r} (gpt2 and llama are supported)")
    pieces = meta["tokenizer.ggml.tokens"]
    types = meta.get("tokenizer.ggml.token_type", [SP_NORMAL] * len(pieces))
    tokens, special = typed_pieces(zip(pieces, list(types), strict=True), text_bytes, user_defined_bytes)
    eos = [meta[k] for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in meta]
    return TokenizerContents(
        tokens,
        eos_token_ids=eos,
        special_token_ids=special,
        logits_width=meta.get(f"{meta.get('general.architecture')}.vocab_size"),
    )
