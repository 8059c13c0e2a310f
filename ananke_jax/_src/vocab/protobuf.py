"""A minimal protobuf wire-format reader, enough for SentencePiece ``.model`` files (no
protobuf package needed)."""

from __future__ import annotations

from collections.abc import Iterator

from ananke_jax._src.errors import VocabularyError


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


def proto_fields(buf: memoryview) -> Iterator[tuple[int, int, int | memoryview]]:
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


def expect_bytes(field: int, wire: int, value: int | memoryview) -> memoryview:
    """``value``, checked to be length-delimited."""
    if wire != 2:
        raise VocabularyError(f"protobuf field {field} has wire type {wire}, expected length-delimited")
    assert isinstance(value, memoryview)
    return value


def expect_varint(field: int, wire: int, value: int | memoryview) -> int:
    """``value``, checked to be a varint."""
    if wire != 0:
        raise VocabularyError(f"protobuf field {field} has wire type {wire}, expected varint")
    assert isinstance(value, int)
    return value


def as_int32(value: int) -> int:
    """A varint read as an int32."""
    # Negative int32 values are sign-extended to 64 bits on the wire.
    return value - (1 << 64) if value >= 1 << 63 else value
