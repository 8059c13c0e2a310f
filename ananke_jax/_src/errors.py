"""Errors raised on the host for bad user input. Device code never raises: it sets flags."""


class AnankeError(ValueError):
    """Base class of every error ananke_jax raises for bad input."""


class GrammarError(AnankeError):
    """A grammar or regex is malformed, uses an unsupported feature, or denotes no string."""


class VocabularyError(AnankeError):
    """A tokenizer file is missing, corrupt, or inconsistent with the logits."""
