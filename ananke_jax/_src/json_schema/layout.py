"""Whitespace between JSON tokens: flexible (bounded runs), compact, or a fixed indent.

Whitespace only appears inside containers: the output starts and ends with its value.
"""

from __future__ import annotations

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.errors import SchemaError
from ananke_jax._src.json_schema.gaps import GAP, MAX_WHITESPACE_RUN, bounded_gap


def is_count(value) -> bool:
    """Whether ``value`` is a non-negative int (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


class Layout:
    """Separators as regex nodes. ``depth`` is the nesting depth of the container; flexible
    whitespace runs are at most ``max_whitespace`` long (0: none)."""

    def __init__(self, whitespace: str | int, *, placeholder_gaps: bool = False, max_whitespace: int = MAX_WHITESPACE_RUN):
        if whitespace not in ("flexible", "compact") and not is_count(whitespace):
            raise SchemaError(f"whitespace must be 'flexible', 'compact' or an indent width, got {whitespace!r}")
        if not is_count(max_whitespace):
            raise SchemaError(f"max_whitespace must be a non-negative integer, got {max_whitespace!r}")
        self.indent = whitespace if isinstance(whitespace, int) else None
        flexible = whitespace == "flexible" and max_whitespace > 0
        self._gap = (GAP if placeholder_gaps else bounded_gap(max_whitespace)) if flexible else rx.EMPTY

    @property
    def depth_dependent(self) -> bool:
        return self.indent is not None

    def _line(self, depth: int) -> rx.Node:
        return rx.Text("\n" + " " * (self.indent * depth))

    def comma(self, depth: int) -> rx.Node:
        if self.indent is not None:
            return rx.seq(rx.Text(","), self._line(depth + 1))
        return rx.seq(self._gap, rx.Text(","), self._gap)

    def colon(self) -> rx.Node:
        if self.indent is not None:
            return rx.Text(": ")
        return rx.seq(self._gap, rx.Text(":"), self._gap)

    def container(self, brackets: str, items: rx.Node, may_be_empty: bool, depth: int) -> rx.Node:
        """``brackets[0] items brackets[1]``; ``items`` is non-empty; ``[]`` too if allowed."""
        open_, close = rx.Text(brackets[0]), rx.Text(brackets[1])
        if self.indent is not None:
            inner, outer, empty = self._line(depth + 1), self._line(depth), rx.EMPTY
        else:
            inner = outer = empty = self._gap
        full = rx.seq(open_, inner, items, outer, close)
        return rx.alt(rx.seq(open_, empty, close), full) if may_be_empty else full
