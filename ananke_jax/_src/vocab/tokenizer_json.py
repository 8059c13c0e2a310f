"""Hugging Face ``tokenizer.json`` files: the model's vocabulary and added tokens, their bytes
read through the decoder (or the pre-tokenizer)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.vocab.files import PathLike, TokenizerContents, as_int, errors_name, read_json
from ananke_jax._src.vocab.pieces import BYTE_PIECE, SPACE_MARK, byte_level_bytes

_EOS_CANDIDATES = (
    "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<eos>", "<|end|>",
)  # fmt: skip
# Decoder steps that only rearrange or trim the decoded text, never a token's own bytes.
_TEXT_ONLY_DECODERS = frozenset({"Fuse", "Strip"})


def read_tokenizer_json(path: PathLike, eos_token_ids: int | Iterable[int] | None) -> TokenizerContents:
    """The tokens of a ``tokenizer.json`` file, its special ids, and ``eos_token_ids``, found
    beside or in the file when None (see `Vocabulary.from_tokenizer_json`)."""
    data = read_json(path)
    model = data["model"]
    vocab = model["vocab"]
    # Unigram models list [piece, score] pairs by id; BPE/WordPiece map piece -> id.
    if isinstance(vocab, list):
        pairs = [(piece, i) for i, (piece, _) in enumerate(vocab)]
    else:
        pairs = vocab.items()
    model_tokens: dict[int, str] = {}
    for piece, token_id in pairs:
        token_id = as_int(token_id, f"id of token {piece!r}")
        if model_tokens.setdefault(token_id, piece) != piece:
            raise VocabularyError(f"id {token_id} is used by both {model_tokens[token_id]!r} and {piece!r}")
    added = data.get("added_tokens") or []
    added_ids = {as_int(t["id"], "added token id"): t for t in added}
    all_ids = model_tokens.keys() | added_ids.keys()
    if not all_ids or min(all_ids) < 0:
        raise VocabularyError("the vocabulary is empty or has negative ids")
    size = max(all_ids) + 1

    to_bytes = _token_decoder(data, model)
    tokens = [b""] * size
    special = set(range(size)) - all_ids
    for token_id, piece in model_tokens.items():
        tokens[token_id] = to_bytes(piece)
    for token_id, token in added_ids.items():
        tokens[token_id] = token["content"].encode("utf-8")
        if token.get("special", False):
            special.add(token_id)

    if eos_token_ids is None:
        eos_token_ids = (_eos_id(path, model_tokens, added),)
    return TokenizerContents(
        tokens,
        eos_token_ids=eos_token_ids,
        special_token_ids=special,
    )


def _flatten_steps(spec: Mapping[str, Any] | None, key: str) -> list[Mapping[str, Any]]:
    if spec is None:
        return []
    if spec["type"] == "Sequence":
        return [step for sub in spec[key] for step in _flatten_steps(sub, key)]
    return [spec]


def _token_decoder(data: Mapping[str, Any], model: Mapping[str, Any]) -> Callable[[str], bytes]:
    """Returns a function mapping a model vocabulary string to the bytes it emits."""
    steps = _flatten_steps(data.get("decoder"), "decoders")
    if not steps:
        # Without a decoder the pre-tokenizer tells how the vocabulary was written.
        pre_tokenizer = _flatten_steps(data.get("pre_tokenizer"), "pretokenizers")
        steps = [s for s in pre_tokenizer if s["type"] in ("ByteLevel", "Metaspace")]
    byte_level = False
    byte_fallback = bool(model.get("byte_fallback", False))
    replacements: list[tuple[str, str]] = []
    for step in steps:
        kind = step["type"]
        if kind == "ByteLevel":
            byte_level = True
        elif kind == "Metaspace":
            replacements.append((step.get("replacement", SPACE_MARK), " "))
        elif kind == "Replace":
            pattern = step["pattern"]
            if "String" not in pattern:
                raise VocabularyError(f"unsupported Replace decoder pattern {pattern!r} (only String patterns)")
            replacements.append((pattern["String"], step["content"]))
        elif kind == "ByteFallback":
            byte_fallback = True
        elif kind not in _TEXT_ONLY_DECODERS:
            raise VocabularyError(
                f"unsupported decoder {kind!r}: only byte-level and SentencePiece-style (Metaspace) vocabularies are supported"
            )

    if byte_level:
        return byte_level_bytes

    def text_bytes(piece: str) -> bytes:
        if byte_fallback and (match := BYTE_PIECE.fullmatch(piece)):
            return bytes([int(match.group(1), 16)])
        for old, new in replacements:
            piece = piece.replace(old, new)
        return piece.encode("utf-8")

    return text_bytes


def _eos_id(path: PathLike, model_tokens: Mapping[int, str], added: Sequence[Mapping[str, Any]]) -> int:
    """Finds the EOS id from ``tokenizer_config.json`` beside ``path`` or the usual names."""
    ids = {piece: i for i, piece in model_tokens.items()}
    ids.update((t["content"], t["id"]) for t in added)
    config_path = os.path.join(os.path.dirname(os.fspath(path)), "tokenizer_config.json")
    if os.path.exists(config_path):
        with errors_name(config_path):
            eos = read_json(config_path).get("eos_token")
            if isinstance(eos, dict):
                eos = eos["content"]
            if eos is not None:
                if eos not in ids:
                    raise VocabularyError(f"eos_token {eos!r} is not in the vocabulary")
                return ids[eos]
    special_added = {t["content"]: t["id"] for t in added if t.get("special", False)}
    for name in _EOS_CANDIDATES:
        if name in special_added:
            return special_added[name]
    raise VocabularyError("cannot tell the EOS token: pass eos_token_ids= explicitly")
