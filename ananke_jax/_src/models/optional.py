"""Imports of the optional packages behind the ``model`` extra, with the install command."""

from __future__ import annotations

import importlib
from types import ModuleType


def optional_import(module: str, purpose: str) -> ModuleType:
    """Imports ``module``, or raises ImportError saying what needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{purpose} needs the {module.split('.')[0]} package: pip install 'ananke-jax[model]'") from e
