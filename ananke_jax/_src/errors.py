"""Errors raised on the host for bad user input. Device code never raises: it sets flags."""


class AnankeError(ValueError):
    """Base class of every error ananke_jax raises for bad input."""


class GrammarError(AnankeError):
    """A grammar or regex is malformed, uses an unsupported feature, or denotes no string.

    Where the grammar is a JSON document (a structural tag), the message ends with the JSON
    pointer of the object at fault, also the attribute ``pointer`` (None elsewhere).
    """

    def __init__(self, message: str, *, pointer: str | None = None):
        super().__init__(message if pointer is None else f"{message} at {pointer}")
        self.pointer = pointer


class ConflictError(GrammarError):
    """A grammar is not LALR(1): the pushdown engine's parse tables would hold a conflict."""


class BudgetError(GrammarError):
    """A compile went past its `CompileBudget`; ``budget`` names the limit (``"max_states"``,
    ``"max_table_bytes"`` or ``"max_seconds"``), as the message does."""

    def __init__(self, message: str, *, budget: str):
        super().__init__(message)
        self.budget = budget


class VocabularyError(AnankeError):
    """A tokenizer file is missing, corrupt, or inconsistent with the logits."""


class WeightsError(AnankeError):
    """A weights file is missing, corrupt, or does not fit the model configuration."""


class SchemaError(AnankeError):
    """A JSON Schema is malformed, unsatisfiable, or uses a keyword that cannot be compiled.

    The message names the keyword and the JSON pointer of the schema holding it; both are also
    attributes.
    """

    def __init__(self, message: str, *, keyword: str | None = None, pointer: str = ""):
        where = f" at {pointer or '#'}" + (f" (keyword {keyword!r})" if keyword else "")
        super().__init__(message + where)
        self.reason = message
        self.keyword = keyword
        self.pointer = pointer or "#"


class FusionError(AnankeError):
    """A fusion config (or its JSON form), a domain, a trigger or a score vector is invalid."""
