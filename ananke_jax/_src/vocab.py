"""Token vocabularies: the byte string of every token id, loaded from tokenizer files.

The constraint engine only needs to know which bytes each token id emits, which ids end
generation (EOS), which ids must never be sampled (special tokens) and how wide the
model's logits are. Loaders read the common tokenizer formats directly (SentencePiece
``.model`` protobuf, Mistral Tekken JSON, Hugging Face ``tokenizer.json``, the header of a
GGUF model file) with numpy and the standard library only, so no tokenizer package is needed
at runtime.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import operator
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.gguf_file import read_gguf

PathLike = str | os.PathLike[str]

_SPACE_MARK = "\u2581"  # '▁': SentencePiece's visible stand-in for a space.
_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")


class Vocabulary:
    """Token byte strings indexed by token id, plus EOS ids, special ids and the logits width.

    Special tokens (control, unknown, added special tokens) keep their text bytes in
    ``tokens`` (e.g. ``b"</s>"``) but are flagged in ``special_token_ids``: the
    constraint engine never allows them, except an EOS id once the output is complete.
    Ids in ``[len(self), logits_width)`` are padding columns of the model's logits; they
    are not tokens and are never allowed.

    Attributes:
        tokens: Byte string of each token id, ``tokens[i]`` for id ``i``.
        eos_token_ids: Sorted, non-empty ids that end generation.
        special_token_ids: Ids never emitted as text; always includes the EOS ids.
        logits_width: Size of the model's logits' last axis, ``>= len(self)``.
        fingerprint: SHA-256 hex digest identifying the vocabulary; used as a cache key.
    """

    def __init__(
        self,
        tokens: Sequence[bytes],
        *,
        eos_token_ids: int | Iterable[int],
        special_token_ids: Iterable[int] = (),
        logits_width: int | None = None,
    ):
        """Builds a vocabulary and checks that it is consistent.

        Args:
            tokens: Byte string of each token id.
            eos_token_ids: One EOS id or several; at least one is required.
            special_token_ids: Ids that must never be emitted as text. The EOS ids are
                added to them.
            logits_width: Width of the model's logits when it is padded beyond the
                vocabulary; defaults to ``len(tokens)``.

        Raises:
            VocabularyError: If a token is not ``bytes``, no EOS id is given, an id is
                out of range, or ``logits_width`` is smaller than the vocabulary.
        """
        self._tokens = tuple(tokens)
        for i, token in enumerate(self._tokens):
            if not isinstance(token, bytes):
                raise VocabularyError(
                    f"token {i} is {type(token).__name__}, expected bytes "
                    "(use Vocabulary.from_tokens for str tokens)"
                )
        size = len(self._tokens)
        eos = _id_tuple(eos_token_ids, "eos_token_ids")
        if not eos:
            raise VocabularyError("at least one EOS token id is required")
        special = frozenset(_id_tuple(special_token_ids, "special_token_ids")) | frozenset(eos)
        bad = sorted(i for i in special if not 0 <= i < size)
        if bad:
            kind = "EOS" if set(bad) & set(eos) else "special"
            raise VocabularyError(
                f"{kind} token id {bad[0]} is out of range for vocabulary size {size}"
            )
        if logits_width is None:
            logits_width = size
        logits_width = _as_int(logits_width, "logits_width")
        if logits_width < size:
            raise VocabularyError(
                f"logits_width {logits_width} is smaller than the vocabulary size {size}"
            )
        self._eos_token_ids = tuple(sorted(set(eos)))
        self._special_token_ids = special
        self._logits_width = logits_width

    @classmethod
    def from_tokens(
        cls,
        tokens: Sequence[bytes | str],
        *,
        eos_token_ids: int | Iterable[int],
        special_token_ids: Iterable[int] = (),
        logits_width: int | None = None,
    ) -> Vocabulary:
        """Builds a vocabulary from token strings; ``str`` tokens are UTF-8 encoded.

        Args:
            tokens: Token text of each token id, ``bytes`` or ``str``.
            eos_token_ids: One EOS id or several.
            special_token_ids: Ids never emitted as text.
            logits_width: Width of the model's logits; defaults to ``len(tokens)``.

        Returns:
            The vocabulary.

        Raises:
            VocabularyError: As for the constructor.
        """
        encoded = [t.encode("utf-8") if isinstance(t, str) else t for t in tokens]
        return cls(
            encoded,
            eos_token_ids=eos_token_ids,
            special_token_ids=special_token_ids,
            logits_width=logits_width,
        )

    @classmethod
    def from_sentencepiece(cls, path: PathLike, *, logits_width: int | None = None) -> Vocabulary:
        """Loads a SentencePiece ``.model`` file (a serialized ``ModelProto``).

        Pieces map to bytes as the SentencePiece decoder does: ``'▁'`` becomes a space and
        a byte-fallback piece ``<0xNN>`` is the single byte ``NN``. Control, unknown and
        unused pieces are special and keep their piece text. EOS is the trainer's
        ``eos_id``.

        With ``add_dummy_prefix`` (the default) SentencePiece prepends a space to the text
        before encoding, so the concatenated token bytes of an encoding of ``text`` are
        ``b" " + text``; those are the bytes the constraint sees. A literal ``'▁'`` in the
        text is indistinguishable from a space once encoded.

        Args:
            path: The ``.model`` file.
            logits_width: Width of the model's logits; defaults to the number of pieces.

        Returns:
            The vocabulary.

        Raises:
            VocabularyError: If the file is missing, not a valid model, or inconsistent.
        """
        with _errors_name(path):
            data = memoryview(_read_bytes(path))
            pieces: list[tuple[str, int]] = []
            eos_id = 2  # TrainerSpec's default.
            has_trainer_spec = False
            for field, wire, value in _proto_fields(data):
                if field == 1:  # repeated SentencePiece pieces
                    pieces.append(_parse_piece(_expect_bytes(field, wire, value)))
                elif field == 2:  # TrainerSpec
                    has_trainer_spec = True
                    trainer_spec = _expect_bytes(field, wire, value)
                    for sub, sub_wire, sub_value in _proto_fields(trainer_spec):
                        if sub == 42:
                            eos_id = _as_int32(_expect_varint(sub, sub_wire, sub_value))
            # Writers always emit the trainer spec after the pieces, so its absence means
            # the file was cut short (or is not a SentencePiece model at all).
            if not pieces or not has_trainer_spec:
                raise VocabularyError(
                    "not a SentencePiece model (no pieces or no trainer spec; truncated file?)"
                )
            if eos_id < 0:
                raise VocabularyError("the model defines no EOS piece (eos_id = -1)")
            tokens, special = _typed_pieces(pieces, _sentencepiece_text)
            return cls(
                tokens,
                eos_token_ids=(eos_id,),
                special_token_ids=special,
                logits_width=logits_width,
            )

    @classmethod
    def from_tekken(cls, path: PathLike, *, logits_width: int | None = None) -> Vocabulary:
        """Loads a Mistral Tekken tokenizer JSON file.

        Ids ``[0, default_num_special_tokens)`` are special tokens, taken from the file's
        ``special_tokens`` list or, for older files without one, mistral_common's
        historical defaults; unlisted ranks are fillers ``<SPECIAL_{id}>``. Ordinary token
        of rank ``r`` has id ``r + default_num_special_tokens``, and only enough ordinary
        tokens to reach ``default_vocab_size`` are kept, as mistral_common's Tekkenizer
        does. EOS is the id of ``"</s>"``.

        Args:
            path: The Tekken ``.json`` file.
            logits_width: Width of the model's logits; defaults to ``default_vocab_size``.

        Returns:
            The vocabulary.

        Raises:
            VocabularyError: If the file is missing, not valid JSON, or not a Tekken file.
        """
        with _errors_name(path):
            data = _read_json(path)
            config = data["config"]
            vocab_size = _as_int(config["default_vocab_size"], "default_vocab_size")
            num_special = _as_int(
                config["default_num_special_tokens"], "default_num_special_tokens"
            )
            entries = data["vocab"]
            num_ordinary = vocab_size - num_special
            if not 0 <= num_ordinary <= len(entries):
                raise VocabularyError(
                    f"default_vocab_size {vocab_size} needs {num_ordinary} ordinary tokens "
                    f"after {num_special} special ones, but the file has {len(entries)}"
                )
            special_names = [f"<SPECIAL_{i}>" for i in range(num_special)]
            listed = data.get("special_tokens")
            for entry in _TEKKEN_DEFAULT_SPECIAL_TOKENS if listed is None else listed:
                rank = _as_int(entry["rank"], "special token rank")
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
            return cls(
                tokens,
                eos_token_ids=(special_names.index("</s>"),),
                special_token_ids=range(num_special),
                logits_width=logits_width,
            )

    @classmethod
    def from_tokenizer_json(
        cls,
        path: PathLike,
        *,
        eos_token_ids: int | Iterable[int] | None = None,
        logits_width: int | None = None,
    ) -> Vocabulary:
        """Loads a Hugging Face ``tokenizer.json`` file.

        How token strings map to bytes is read from the ``decoder`` (or, without one, the
        ``pre_tokenizer``): byte-level vocabularies (GPT-2 style) map each character back to
        one byte; SentencePiece-style vocabularies (``Metaspace``, ``Replace ▁→' '``) turn
        ``'▁'`` into a space and, with byte fallback, ``<0xNN>`` into the byte ``NN``.
        Decoders that only trim the decoded text (``Strip``, ``Fuse``, the first-token
        space removal of ``Metaspace``) do not change what the model emits and are ignored,
        so, as with SentencePiece, a tokenizer that prepends a space to its input has
        encodings whose bytes start with that space.

        Added tokens marked ``special`` are special; other added tokens are ordinary tokens
        whose bytes are the UTF-8 of their content. Ids that neither the model nor the
        added tokens define get ``b""`` and are special.

        Args:
            path: The ``tokenizer.json`` file.
            eos_token_ids: EOS ids. By default the ``eos_token`` of a
                ``tokenizer_config.json`` beside the file, else the first special added
                token among the usual EOS names (``</s>``, ``<|endoftext|>``,
                ``<|im_end|>``, ``<|eot_id|>``, ``<|end_of_text|>``, ``<eos>``, ``<|end|>``).
            logits_width: Width of the model's logits; defaults to the vocabulary size.

        Returns:
            The vocabulary.

        Raises:
            VocabularyError: If the file is missing, malformed, uses an unsupported decoder,
                or no EOS token can be determined.
        """
        with _errors_name(path):
            data = _read_json(path)
            model = data["model"]
            vocab = model["vocab"]
            # Unigram models list [piece, score] pairs by id; BPE/WordPiece map piece -> id.
            if isinstance(vocab, list):
                pairs = [(piece, i) for i, (piece, _) in enumerate(vocab)]
            else:
                pairs = vocab.items()
            model_tokens: dict[int, str] = {}
            for piece, token_id in pairs:
                token_id = _as_int(token_id, f"id of token {piece!r}")
                if model_tokens.setdefault(token_id, piece) != piece:
                    raise VocabularyError(
                        f"id {token_id} is used by both {model_tokens[token_id]!r} and {piece!r}"
                    )
            added = data.get("added_tokens") or []
            added_ids = {_as_int(t["id"], "added token id"): t for t in added}
            all_ids = model_tokens.keys() | added_ids.keys()
            if not all_ids or min(all_ids) < 0:
                raise VocabularyError("the vocabulary is empty or has negative ids")
            size = max(all_ids) + 1

            to_bytes = _hf_token_decoder(data, model)
            tokens = [b""] * size
            special = set(range(size)) - all_ids
            for token_id, piece in model_tokens.items():
                tokens[token_id] = to_bytes(piece)
            for token_id, token in added_ids.items():
                tokens[token_id] = token["content"].encode("utf-8")
                if token.get("special", False):
                    special.add(token_id)

            if eos_token_ids is None:
                eos_token_ids = (_hf_eos_id(path, model_tokens, added),)
            return cls(
                tokens,
                eos_token_ids=eos_token_ids,
                special_token_ids=special,
                logits_width=logits_width,
            )

    @classmethod
    def from_gguf(cls, path: PathLike, *, logits_width: int | None = None) -> Vocabulary:
        """Loads the tokenizer stored in a GGUF model file (llama.cpp's format).

        ``tokenizer.ggml.model`` tells how token strings map to bytes: ``"gpt2"`` (byte-level
        BPE: SmolLM2, Llama 3, ...) maps each character back to one byte and user-defined
        tokens are literal text; ``"llama"`` (SentencePiece) turns ``'▁'`` into a space and
        ``<0xNN>`` into the byte ``NN``. Token types are SentencePiece's: unknown, control and
        unused tokens are special and keep their text (``b"<|im_end|>"``). EOS is
        ``tokenizer.ggml.eos_token_id``, plus ``tokenizer.ggml.eot_token_id`` when the file
        has one (llama.cpp stops at both).

        Args:
            path: The ``.gguf`` file; only its header is read.
            logits_width: Width of the model's logits; defaults to the model's
                ``{architecture}.vocab_size``, else the number of tokens.

        Returns:
            The vocabulary.

        Raises:
            VocabularyError: If the file is not GGUF, has no tokenizer, or uses another
                tokenizer model.
        """
        file = read_gguf(path, VocabularyError)
        with _errors_name(path):
            meta = file.metadata
            kind = meta["tokenizer.ggml.model"]
            if kind == "gpt2":
                text_bytes, user_defined_bytes = _byte_level_bytes, str.encode
            elif kind == "llama":
                text_bytes, user_defined_bytes = _sentencepiece_text, None
            else:
                raise VocabularyError(
                    f"unsupported GGUF tokenizer model {kind!r} (gpt2 and llama are supported)"
                )
            pieces = meta["tokenizer.ggml.tokens"]
            types = meta.get("tokenizer.ggml.token_type", [_SP_NORMAL] * len(pieces))
            tokens, special = _typed_pieces(
                zip(pieces, list(types), strict=True), text_bytes, user_defined_bytes
            )
            eos = [
                meta[k]
                for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id")
                if k in meta
            ]
            if logits_width is None:
                logits_width = meta.get(f"{meta.get('general.architecture')}.vocab_size")
            return cls(
                tokens,
                eos_token_ids=eos,
                special_token_ids=special,
                logits_width=logits_width,
            )

    def __len__(self) -> int:
        """Number of token ids the tokenizer defines (the vocabulary size)."""
        return len(self._tokens)

    def token_bytes(self, token_id: int) -> bytes:
        """Returns the bytes that token ``token_id`` emits.

        Raises:
            IndexError: If ``token_id`` is not in ``[0, len(self))``.
        """
        if not 0 <= token_id < len(self._tokens):
            raise IndexError(
                f"token id {token_id} is out of range for vocabulary size {len(self._tokens)}"
            )
        return self._tokens[token_id]

    @property
    def tokens(self) -> tuple[bytes, ...]:
        return self._tokens

    @property
    def eos_token_ids(self) -> tuple[int, ...]:
        return self._eos_token_ids

    @property
    def special_token_ids(self) -> frozenset[int]:
        return self._special_token_ids

    @property
    def logits_width(self) -> int:
        return self._logits_width

    @functools.cached_property
    def fingerprint(self) -> str:
        """SHA-256 hex digest over the tokens, EOS ids, special ids and logits width."""
        digest = hashlib.sha256(b"ananke_jax.Vocabulary/1\0")
        tokens = self._tokens
        special = sorted(self._special_token_ids)
        header = [len(tokens), self._logits_width, self._eos_token_ids, special]
        digest.update(json.dumps(header).encode("ascii"))
        # Hashing the token lengths keeps token lists with equal concatenations apart.
        digest.update(np.fromiter(map(len, tokens), dtype="<u4", count=len(tokens)).tobytes())
        digest.update(b"".join(tokens))
        return digest.hexdigest()

    def __repr__(self) -> str:
        return (
            f"Vocabulary(size={len(self)}, logits_width={self._logits_width}, "
            f"eos={self._eos_token_ids}, special={len(self._special_token_ids)})"
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Vocabulary):
            return NotImplemented
        return self.fingerprint == other.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise VocabularyError(f"{what} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError as e:
        raise VocabularyError(f"{what} must be an int, got {value!r}") from e


def _id_tuple(ids: int | Iterable[int], what: str) -> tuple[int, ...]:
    if isinstance(ids, Iterable):
        return tuple(_as_int(i, what) for i in ids)
    return (_as_int(ids, what),)


# --------------------------------------------------------------------------- file reading


@contextlib.contextmanager
def _errors_name(path: PathLike) -> Iterator[None]:
    """Turns any error met while loading ``path`` into a VocabularyError naming the file.

    Code inside raises VocabularyError without the path, or lets a lookup or type error
    from malformed content escape; both are reported as a problem with this file.
    """
    name = os.fspath(path)
    try:
        yield
    except VocabularyError as e:
        raise VocabularyError(f"{name}: {e}") from e
    except KeyError as e:
        raise VocabularyError(f"{name}: malformed tokenizer file: missing key {e}") from e
    except (TypeError, ValueError, IndexError, AttributeError) as e:
        raise VocabularyError(f"{name}: malformed tokenizer file: {type(e).__name__}: {e}") from e


def _read_bytes(path: PathLike) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise VocabularyError(f"cannot read file: {e.strerror or e}") from e


def _read_json(path: PathLike) -> Any:
    raw = _read_bytes(path)
    try:
        data = json.loads(raw)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both derive from it.
        raise VocabularyError(f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise VocabularyError(f"expected a JSON object at top level, got {type(data).__name__}")
    return data


# --------------------------------------------------------------------------- SentencePiece

# SentencePiece.Type enum values, which GGUF's token types reuse.
_SP_NORMAL, _SP_UNKNOWN, _SP_CONTROL, _SP_USER_DEFINED, _SP_UNUSED, _SP_BYTE = 1, 2, 3, 4, 5, 6


def _sentencepiece_text(piece: str) -> bytes:
    return piece.replace(_SPACE_MARK, " ").encode("utf-8")


def _typed_pieces(
    pieces: Iterable[tuple[str, int]],
    text_bytes: Callable[[str], bytes],
    user_defined_bytes: Callable[[str], bytes] | None = None,
) -> tuple[list[bytes], list[int]]:
    """Token bytes and special ids of ``(piece, SentencePiece type)`` pairs in id order.

    Unknown, control and unused pieces are special and keep their text; a byte piece
    ``<0xNN>`` is the byte ``NN``; the others go through ``text_bytes``, or through
    ``user_defined_bytes`` when given for user-defined pieces.
    """
    tokens: list[bytes] = []
    special: list[int] = []
    for piece, piece_type in pieces:
        if piece_type in (_SP_UNKNOWN, _SP_CONTROL, _SP_UNUSED):
            special.append(len(tokens))
            tokens.append(piece.encode("utf-8"))
        elif piece_type == _SP_BYTE:
            tokens.append(_byte_piece(piece))
        elif piece_type == _SP_USER_DEFINED and user_defined_bytes is not None:
            tokens.append(user_defined_bytes(piece))
        else:
            tokens.append(text_bytes(piece))
    return tokens, special


def _read_varint(buf: memoryview, pos: int) -> tuple[int, int]:
    result = shift = 0
    while shift < 64:
        if pos >= len(buf):
            raise VocabularyError("truncated protobuf varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7
    raise VocabularyError("protobuf varint longer than 10 bytes")


def _proto_fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
    """Yields ``(field_number, wire_type, value)`` for each field of a protobuf message.

    Varint and fixed-width values are unsigned ints; length-delimited values are views.
    """
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if field == 0:
            raise VocabularyError("invalid protobuf field number 0")
        value: int | memoryview
        if wire == 0:
            value, pos = _read_varint(buf, pos)
        elif wire in (1, 5):  # fixed64 / fixed32
            width = 8 if wire == 1 else 4
            value = int.from_bytes(buf[pos : pos + width], "little")
            pos += width
        elif wire == 2:
            length, pos = _read_varint(buf, pos)
            value = buf[pos : pos + length]
            pos += length
        else:
            raise VocabularyError(f"unsupported protobuf wire type {wire} (field {field})")
        if pos > end:
            raise VocabularyError(f"truncated protobuf field {field}")
        yield field, wire, value


def _expect_bytes(field: int, wire: int, value: int | memoryview) -> memoryview:
    if wire != 2:
        raise VocabularyError(
            f"protobuf field {field} has wire type {wire}, expected length-delimited"
        )
    assert isinstance(value, memoryview)
    return value


def _expect_varint(field: int, wire: int, value: int | memoryview) -> int:
    if wire != 0:
        raise VocabularyError(f"protobuf field {field} has wire type {wire}, expected varint")
    assert isinstance(value, int)
    return value


def _as_int32(value: int) -> int:
    # Negative int32 values are sign-extended to 64 bits on the wire.
    return value - (1 << 64) if value >= 1 << 63 else value


def _parse_piece(message: memoryview) -> tuple[str, int]:
    piece, piece_type = "", _SP_NORMAL
    for field, wire, value in _proto_fields(message):
        if field == 1:
            piece = bytes(_expect_bytes(field, wire, value)).decode("utf-8")
        elif field == 3:
            piece_type = _expect_varint(field, wire, value)
    return piece, piece_type


def _byte_piece(piece: str) -> bytes:
    match = _BYTE_PIECE.fullmatch(piece)
    if match is None:
        raise VocabularyError(f"byte piece {piece!r} is not of the form <0xNN>")
    return bytes([int(match.group(1), 16)])


# --------------------------------------------------------------------------- Tekken

# Special tokens of Tekken files that predate the "special_tokens" list, by rank.
_TEKKEN_DEFAULT_SPECIAL_TOKENS = tuple(
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


# --------------------------------------------------------------------------- Hugging Face

_HF_EOS_CANDIDATES = (
    "</s>", "<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "<eos>", "<|end|>",
)  # fmt: skip
# Decoder steps that only rearrange or trim the decoded text, never a token's own bytes.
_HF_TEXT_ONLY_DECODERS = frozenset({"Fuse", "Strip"})


@functools.lru_cache(maxsize=1)
def _byte_level_chars() -> dict[str, int]:
    """Inverse of GPT-2's ``bytes_to_unicode``: printable stand-in character -> byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = {chr(b): b for b in printable}
    others = (b for b in range(256) if b not in set(printable))
    chars.update((chr(256 + n), b) for n, b in enumerate(others))
    return chars


def _byte_level_bytes(piece: str) -> bytes:
    """Bytes of a GPT-2 byte-level vocabulary string."""
    try:
        return bytes(map(_byte_level_chars().__getitem__, piece))
    except KeyError:
        # Like the ByteLevel decoder: a string outside the byte alphabet is literal text.
        return piece.encode("utf-8")


def _flatten_steps(spec: Mapping[str, Any] | None, key: str) -> list[Mapping[str, Any]]:
    if spec is None:
        return []
    if spec["type"] == "Sequence":
        return [step for sub in spec[key] for step in _flatten_steps(sub, key)]
    return [spec]


def _hf_token_decoder(data: Mapping[str, Any], model: Mapping[str, Any]) -> Callable[[str], bytes]:
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
            replacements.append((step.get("replacement", _SPACE_MARK), " "))
        elif kind == "Replace":
            pattern = step["pattern"]
            if "String" not in pattern:
                raise VocabularyError(
                    f"unsupported Replace decoder pattern {pattern!r} (only String patterns)"
                )
            replacements.append((pattern["String"], step["content"]))
        elif kind == "ByteFallback":
            byte_fallback = True
        elif kind not in _HF_TEXT_ONLY_DECODERS:
            raise VocabularyError(
                f"unsupported decoder {kind!r}: only byte-level and SentencePiece-style "
                "(Metaspace) vocabularies are supported"
            )

    if byte_level:
        return _byte_level_bytes

    def text_bytes(piece: str) -> bytes:
        if byte_fallback and (match := _BYTE_PIECE.fullmatch(piece)):
            return bytes([int(match.group(1), 16)])
        for old, new in replacements:
            piece = piece.replace(old, new)
        return piece.encode("utf-8")

    return text_bytes


def _hf_eos_id(
    path: PathLike, model_tokens: Mapping[int, str], added: Sequence[Mapping[str, Any]]
) -> int:
    """Finds the EOS id from ``tokenizer_config.json`` beside ``path`` or the usual names."""
    ids = {piece: i for i, piece in model_tokens.items()}
    ids.update((t["content"], t["id"]) for t in added)
    config_path = os.path.join(os.path.dirname(os.fspath(path)), "tokenizer_config.json")
    if os.path.exists(config_path):
        with _errors_name(config_path):
            eos = _read_json(config_path).get("eos_token")
            if isinstance(eos, dict):
                eos = eos["content"]
            if eos is not None:
                if eos not in ids:
                    raise VocabularyError(f"eos_token {eos!r} is not in the vocabulary")
                return ids[eos]
    special_added = {t["content"]: t["id"] for t in added if t.get("special", False)}
    for name in _HF_EOS_CANDIDATES:
        if name in special_added:
            return special_added[name]
    raise VocabularyError("cannot tell the EOS token: pass eos_token_ids= explicitly")
