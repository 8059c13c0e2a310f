"""SentencePiece ``.model`` files: a serialized ``ModelProto``, read field by field."""

from __future__ import annotations

from ananke_jax._src.errors import VocabularyError
from ananke_jax._src.vocab.files import PathLike, TokenizerContents, read_bytes
from ananke_jax._src.vocab.pieces import SP_NORMAL, sentencepiece_text, typed_pieces
from ananke_jax._src.vocab.protobuf import as_int32, expect_bytes, expect_varint, proto_fields


def read_sentencepiece(path: PathLike) -> TokenizerContents:
    """The pieces of a ``.model`` file as token bytes, its special ids and the trainer's EOS id
    (see `Vocabulary.from_sentencepiece`)."""
    data = memoryview(read_bytes(path))
    pieces: list[tuple[str, int]] = []
    eos_id = 2  # TrainerSpec's default.
    has_trainer_spec = False
    for field, wire, value in proto_fields(data):
        if field == 1:  # repeated SentencePiece pieces
            pieces.append(_parse_piece(expect_bytes(field, wire, value)))
        elif field == 2:  # TrainerSpec
            has_trainer_spec = True
            trainer_spec = expect_bytes(field, wire, value)
            for sub, sub_wire, sub_value in proto_fields(trainer_spec):
                if sub == 42:
                    eos_id = as_int32(expect_varint(sub, sub_wire, sub_value))
    # Writers always emit the trainer spec after the pieces, so its absence means
    # the file was cut short (or is not a SentencePiece model at all).
    if not pieces or not has_trainer_spec:
        raise VocabularyError("not a SentencePiece model (no pieces or no trainer spec; truncated file?)")
    if eos_id < 0:
        raise VocabularyError("the model defines no EOS piece (eos_id = -1)")
    tokens, special = typed_pieces(pieces, sentencepiece_text)
    return TokenizerContents(
        tokens,
        eos_token_ids=(eos_id,),
        special_token_ids=special,
    )


def _parse_piece(message: memoryview) -> tuple[str, int]:
    piece, piece_type = "", SP_NORMAL
    for field, wire, value in proto_fields(message):
        if field == 1:
            piece = bytes(expect_bytes(field, wire, value)).decode("utf-8")
        elif field == 3:
            piece_type = expect_varint(field, wire, value)
    return piece, piece_type
