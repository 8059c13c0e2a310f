"""What every tokenizer loader shares: reading the file, naming it in errors, checking ints, and
the contents a loader hands to `Vocabulary`."""

from __future__ import annotations

import contextlib
import json
import operator
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from ananke_jax._src.errors import VocabularyError

PathLike = str | os.PathLike[str]


class TokenizerContents(NamedTuple):
    """What a loader read from a tokenizer file: the arguments of `Vocabulary`.

    Attributes:
        tokens: Byte string of each token id.
        eos_token_ids: The EOS ids the file names.
        special_token_ids: Ids never emitted as text.
        logits_width: Width of the model's logits if the file gives it, else None.
    """

    tokens: Sequence[bytes]
    eos_token_ids: int | Iterable[int]
    special_token_ids: Iterable[int]
    logits_width: int | None = None


def as_int(value: Any, what: str) -> int:
    """``value`` as an int (a bool is refused); a VocabularyError names ``what`` otherwise."""
    if isinstance(value, bool):
        raise VocabularyError(f"{what} must be an int, got {value!r}")
    try:
        return operator.index(value)
    except TypeError as e:
        raise VocabularyError(f"{what} must be an int, got {value!r}") from e


@contextlib.contextmanager
def errors_name(path: PathLike) -> Iterator[None]:
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


def read_bytes(path: PathLike) -> bytes:
    """The bytes of ``path``; a file that cannot be read is a VocabularyError."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise VocabularyError(f"cannot read file: {e.strerror or e}") from e


def read_json(path: PathLike) -> Any:
    """The JSON object in ``path``; other JSON values and invalid JSON are VocabularyErrors."""
    raw = read_bytes(path)
    try:
        data = json.loads(raw)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError both derive from it.
        raise VocabularyError(f"not valid JSON: {e}") from e
    if not isinstance(data, dict):
        raise VocabularyError(f"expected a JSON object at top level, got {type(data).__name__}")
    return data
