"""How tokenizers spell token bytes as text: SentencePiece's ``'▁'`` for a space and
``<0xNN>`` byte pieces, GPT-2's byte-level alphabet, and SentencePiece's piece types (which GGUF
reuses)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable

from ananke_jax._src.errors import VocabularyError

SPACE_MARK = "\u2581"  # '▁': SentencePiece's visible stand-in for a space.
BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")

# SentencePiece.Type enum values, which GGUF's token types reuse.
SP_NORMAL, SP_UNKNOWN, SP_CONTROL, SP_USER_DEFINED, SP_UNUSED, SP_BYTE = 1, 2, 3, 4, 5, 6


def sentencepiece_text(piece: str) -> bytes:
    """The bytes of a SentencePiece-style piece: ``'▁'`` stands for a space."""
    return piece.replace(SPACE_MARK, " ").encode("utf-8")


def typed_pieces(
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
        if piece_type in (SP_UNKNOWN, SP_CONTROL, SP_UNUSED):
            special.append(len(tokens))
            tokens.append(piece.encode("utf-8"))
        elif piece_type == SP_BYTE:
            tokens.append(byte_piece(piece))
        elif piece_type == SP_USER_DEFINED and user_defined_bytes is not None:
            tokens.append(user_defined_bytes(piece))
        else:
            tokens.append(text_bytes(piece))
    return tokens, special


def byte_piece(piece: str) -> bytes:
    match = BYTE_PIECE.fullmatch(piece)
    if match is None:
        raise VocabularyError(f"byte piece {piece!r} is not of the form <0xNN>")
    return bytes([int(match.group(1), 16)])


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


def byte_level_bytes(piece: str) -> bytes:
    """Bytes of a GPT-2 byte-level vocabulary string."""
    try:
        return bytes(map(_byte_level_chars().__getitem__, piece))
    except KeyError:
        # Like the ByteLevel decoder: a string outside the byte alphabet is literal text.
        return piece.encode("utf-8")
