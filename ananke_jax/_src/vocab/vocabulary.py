"""`Vocabulary`: the byte string of every token id, plus EOS ids, special ids and logits width.

The constraint engine only needs to know which bytes each token id emits, which ids end
generation (EOS), which ids must never be sampled (special tokens) and how wide the
model's logits are. The ``from_*`` constructors read the common tokenizer formats through the
loaders beside this module (SentencePiece ``.model`` protobuf, Mistral Tekken JSON, Hugging Face
``tokenizer.json``, the header of a GGUF model file), with numpy and the standard library only,
so no tokenizer package is needed at runtime.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence

import numpy as np

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.gguf_file import read_gguf
from ananke_jax._src.vocab.files import PathLike, TokenizerContents, as_int, errors_name
from ananke_jax._src.vocab.gguf import gguf_contents
from ananke_jax._src.vocab.sentencepiece import read_sentencepiece
from ananke_jax._src.vocab.tekken import read_tekken
from ananke_jax._src.vocab.tokenizer_json import read_tokenizer_json


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
                raise VocabularyError(f"token {i} is {type(token).__name__}, expected bytes (use Vocabulary.from_tokens for str tokens)")
        size = len(self._tokens)
        eos = _id_tuple(eos_token_ids, "eos_token_ids")
        if not eos:
            raise VocabularyError("at least one EOS token id is required")
        special = frozenset(_id_tuple(special_token_ids, "special_token_ids")) | frozenset(eos)
        bad = sorted(i for i in special if not 0 <= i < size)
        if bad:
            kind = "EOS" if set(bad) & set(eos) else "special"
            raise VocabularyError(f"{kind} token id {bad[0]} is out of range for vocabulary size {size}")
        if logits_width is None:
            logits_width = size
        logits_width = as_int(logits_width, "logits_width")
        if logits_width < size:
            raise VocabularyError(f"logits_width {logits_width} is smaller than the vocabulary size {size}")
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
        with errors_name(path):
            return cls._from_contents(read_sentencepiece(path), logits_width)

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
        with errors_name(path):
            return cls._from_contents(read_tekken(path), logits_width)

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
        with errors_name(path):
            return cls._from_contents(read_tokenizer_json(path, eos_token_ids), logits_width)

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
        with errors_name(path):
            return cls._from_contents(gguf_contents(file.metadata), logits_width)

    @classmethod
    def _from_contents(cls, contents: TokenizerContents, logits_width: int | None) -> Vocabulary:
        """The vocabulary of what a loader read; ``logits_width``, when given, overrides the file's."""
        return cls(
            contents.tokens,
            eos_token_ids=contents.eos_token_ids,
            special_token_ids=contents.special_token_ids,
            logits_width=contents.logits_width if logits_width is None else logits_width,
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
            raise IndexError(f"token id {token_id} is out of range for vocabulary size {len(self._tokens)}")
        return self._tokens[token_id]

    def decode(self, token_ids: Iterable[int]) -> str:
        """The text that ``token_ids`` spell, as a generated row reads.

        Args:
          token_ids: ints or an int array; negative ids (the padding `generate` writes after a
            row's end) and special ids (EOS among them) spell nothing.

        Returns:
          The concatenated token bytes decoded as UTF-8; bytes of an unfinished character become
          U+FFFD.
        """
        skip = self.special_token_ids | set(self.eos_token_ids)
        ids = (int(t) for t in np.asarray(token_ids).reshape(-1))
        return b"".join(self._tokens[t] for t in ids if t >= 0 and t not in skip).decode("utf-8", errors="replace")

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


def _id_tuple(ids: int | Iterable[int], what: str) -> tuple[int, ...]:
    if isinstance(ids, Iterable):
        return tuple(as_int(i, what) for i in ids)
    return (as_int(ids, what),)
