"""GGUF container reader: metadata and tensor directory, with the standard library only.

A GGUF file (llama.cpp's format, versions 2 and 3) is a header of typed key-value metadata,
a directory of tensors (name, shape, ggml type, offset) and the aligned tensor data. This
module parses the header directly rather than through the ``gguf`` package, whose reader
builds a numpy view per array element (about 3 s for a 49k-token vocabulary, here 0.1 s),
and so that ``Vocabulary.from_gguf`` needs no extra package. Dequantising the tensor bytes
is left to ``gguf.quants`` (see ``models/weights.py``).
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from typing import Any

import numpy as np

from ananke_jax._src.errors import AnankeError

PathLike = str | os.PathLike[str]

_MAGIC = b"GGUF"
_DEFAULT_ALIGNMENT = 32
_STRING, _ARRAY = 8, 9
# GGUF metadata value types with a fixed width: type id -> struct format.
_SCALAR_FORMATS = {
    0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d",
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class GGUFTensorInfo:
    """One entry of the tensor directory.

    Attributes:
        name: Tensor name, e.g. ``"blk.0.attn_q.weight"``.
        shape: Shape in numpy (row-major) order: the GGUF dimensions reversed.
        ggml_type: ``GGMLQuantizationType`` id of the stored data.
        offset: Absolute byte offset of the data in the file.
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    offset: int


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    """A parsed GGUF header over a read-only memory map of the file.

    Attributes:
        path: The file.
        metadata: Key-value metadata; strings are ``str``, string arrays ``list[str]``,
            numeric arrays 1-D numpy arrays.
        tensors: Tensor directory by name, in file order.
        buffer: The memory-mapped file; tensor data lies at ``GGUFTensorInfo.offset``.
    """

    path: str
    metadata: dict[str, Any]
    tensors: dict[str, GGUFTensorInfo]
    buffer: mmap.mmap


def read_gguf(path: PathLike, error: type[AnankeError]) -> GGUFFile:
    """Parses the header and tensor directory of a GGUF file.

    Args:
        path: The ``.gguf`` file.
        error: Error class to raise, so that callers report problems in their own terms
            (``VocabularyError`` for tokenizers, ``WeightsError`` for weights).

    Returns:
        The parsed file; tensor data stays on disk until read through ``buffer``.

    Raises:
        error: If the file cannot be read, is not GGUF (version 2 or 3), or is truncated.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError) as e:  # ValueError: an empty file cannot be mapped.
        raise error(f"{name}: cannot read GGUF file: {e}") from e
    try:
        return _parse(name, buffer)
    except (struct.error, IndexError, UnicodeDecodeError, ValueError) as e:
        raise error(f"{name}: malformed GGUF file: {e}") from e


def _parse(name: str, buffer: mmap.mmap) -> GGUFFile:
    if buffer[:4] != _MAGIC:
        raise ValueError(f"not a GGUF file (starts with {buffer[:4]!r})")
    version, tensor_count, kv_count = struct.unpack_from("<IQQ", buffer, 4)
    if version not in (2, 3):
        raise ValueError(f"unsupported GGUF version {version} (2 and 3 are)")
    reader = _Reader(buffer, 24)
    metadata = {}
    for _ in range(kv_count):
        key = reader.string()
        metadata[key] = reader.value(reader.scalar("I"))
    infos = []
    for _ in range(tensor_count):
        tensor_name = reader.string()
        dims = [reader.scalar("Q") for _ in range(reader.scalar("I"))]
        ggml_type, offset = reader.scalar("I"), reader.scalar("Q")
        infos.append((tensor_name, tuple(reversed(dims)), ggml_type, offset))
    alignment = int(metadata.get("general.alignment", _DEFAULT_ALIGNMENT))
    data_start = -(-reader.pos // alignment) * alignment
    tensors = {n: GGUFTensorInfo(n, shape, t, data_start + off) for n, shape, t, off in infos}
    return GGUFFile(name, metadata, tensors, buffer)


class _Reader:
    """Sequential little-endian reads of GGUF values from a buffer."""

    def __init__(self, buffer: mmap.mmap, pos: int):
        self.buffer, self.pos = buffer, pos

    def scalar(self, fmt: str) -> Any:
        (value,) = struct.unpack_from("<" + fmt, self.buffer, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def string(self) -> str:
        length = self.scalar("Q")
        end = self.pos + length
        if end > len(self.buffer):
            raise ValueError(f"string of {length} bytes runs past the end of the file")
        text = self.buffer[self.pos : end].decode("utf-8")
        self.pos = end
        return text

    def value(self, value_type: int) -> Any:
        if value_type == _STRING:
            return self.string()
        if value_type == _ARRAY:
            item_type, count = self.scalar("I"), self.scalar("Q")
            if item_type in _SCALAR_FORMATS:
                dtype = np.dtype("<" + _SCALAR_FORMATS[item_type])
                items = np.frombuffer(self.buffer, dtype, count, self.pos).copy()
                self.pos += dtype.itemsize * count
                return items
            return [self.value(item_type) for _ in range(count)]
        if value_type not in _SCALAR_FORMATS:
            raise ValueError(f"unknown metadata value type {value_type}")
        return self.scalar(_SCALAR_FORMATS[value_type])
