"""Mistral Tekken tokenizer files (JSON: base64 token bytes by rank, special tokens first)."""

from __future__ import annotations

import base64

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.vocab.files import PathLike, TokenizerContents, as_int, read_json

# Special tokens of Tekken files that predate the "special_tokens" list, by rank.
_DEFAULT_SPECIAL_TOKENS = tuple(
    {"rank": rank, "token_str": name}
    for rank, name in enumerate(
        (
            "<unk>", "<s>", "</s>", "[INST]", "[/INST]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]",
            "[TOOL_RESULTS]", "[/TOOL_RESULTS]", "[TOOL_CALLS]", "[IMG]", "<pad>", "[IMG_BREAK]",
            "[IMG_END]", "[PREFIX]", "[MIDDLE]", "[SUFFIX]", "[SYSTEM_PROMPT]", "[/SYSTEM_PROMPT]",
            "[TOOL_CONTENT]",
        )
    )
)  # fmt: skip


def read_tekken(path: PathLike) -> TokenizerContents:
    """The special and ordinary tokens of a Tekken file, as mistral_common numbers them (see
    `Vocabulary.from_tekken`)."""
    data = read_json(path)
    config = data["config"]
    vocab_size = as_int(config["default_vocab_size"], "default_vocab_size")
    num_special = as_int(config["default_num_special_tokens"], "default_num_special_tokens")
    entries = data["vocab"]
    num_ordinary = vocab_size - num_special
    if not 0 <= num_ordinary <= len(entries):
        raise VocabularyError(
            f"default_vocab_size {vocab_size} needs {num_ordinary} ordinary tokens "
            f"after {num_special} special ones, but the file has {len(entries)}"
        )
    special_names = [f"<SPECIAL_{i}>" for i in range(num_special)]
    listed = data.get("special_tokens")
    for entry in _DEFAULT_SPECIAL_TOKENS if listed is None else listed:
        rank = as_int(entry["rank"], "special token rank")
        if not 0 <= rank < num_special:
            raise VocabularyError(f"special token rank {rank} is not below {num_special}")
        special_names[rank] = entry["token_str"]
    if "</s>" not in special_names:
        raise VocabularyError('no "</s>" special token')
    entries = entries[:num_ordinary]
    for i, entry in enumerate(entries):
        if entry["rank"] != i:
            raise VocabularyError(f"vocab entry {i} has rank {entry['rank']}")
    b64decode = base64.b64decode
    tokens = [name.encode("utf-8") for name in special_names]
    tokens += [b64decode(entry["token_bytes"], validate=True) for entry in entries]
    return TokenizerContents(
        tokens,
        eos_token_ids=(special_names.index("</s>"),),
        special_token_ids=range(num_special),
    )
