"""Compile budgets: limits on the work and the tables of one compile, so that a grammar bomb is
refused with the limit named instead of exhausting memory or time.

Every ``compile_*`` entry point runs inside `metered` with its `CompileBudget`. The compiler
checks sizes against it where it can estimate them before the work (a regex tree's automaton
states), and during the work as a fallback (automaton states built, elapsed time), through the
`charge_states` (`charge_dfa_states` for deterministic automata), `charge_bytes` and `check_time`
functions, which read the budget of the compile running in this thread (a `contextvars`
variable), or the defaults outside any compile. An attempt that has a cheaper way out runs with
its deterministic automata capped more tightly (`dfas_capped`).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import math
import time
from collections.abc import Iterator

from ananke_jax._src.errors import BudgetError


@dataclasses.dataclass(frozen=True)
class CompileBudget:
    """Limits on one compile. The size defaults suit a server compiling what requests send; the
    time default leaves room for large grammars compiled once (`ananke-jax serve` uses 10 s).

    Attributes:
      max_states: the most states of any automaton built on the way (a regex's NFA and DFA, a
        product of two, the lexer's), checked on an estimate before building where one exists.
      max_table_bytes: the most bytes of the compiled tables.
      max_seconds: the most wall-clock seconds of the whole compile (``math.inf``: no limit).
    """

    max_states: int = 200_000
    max_table_bytes: int = 256 << 20
    max_seconds: float = 60.0

    def __post_init__(self):
        for name in ("max_states", "max_table_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"CompileBudget.{name} must be a positive integer, got {value!r}")
        if isinstance(self.max_seconds, bool) or not isinstance(self.max_seconds, (int, float)) or not self.max_seconds > 0:
            raise ValueError(f"CompileBudget.max_seconds must be a positive number, got {self.max_seconds!r}")


@dataclasses.dataclass(frozen=True)
class _Meter:
    budget: CompileBudget
    deadline: float  # time.monotonic() past which the compile stops
    dfa_cap: tuple[int, str] | None = None  # `dfas_capped`'s cap on deterministic automata, and why


_OUTSIDE = _Meter(CompileBudget(max_seconds=math.inf), math.inf)
_meter: contextvars.ContextVar[_Meter] = contextvars.ContextVar("ananke_compile_budget", default=_OUTSIDE)


@contextlib.contextmanager
def metered(budget: CompileBudget | None) -> Iterator[None]:
    """Run a compile under ``budget`` (None: `CompileBudget()`). A compile nested in another
    (a structural tag's JSON Schema) stays under the outer one's budget and deadline."""
    if budget is not None and not isinstance(budget, CompileBudget):
        raise TypeError(f"budget must be an ananke_jax.CompileBudget, got {type(budget).__name__}")
    if _meter.get() is not _OUTSIDE:
        yield
        return
    budget = CompileBudget() if budget is None else budget
    token = _meter.set(_Meter(budget, time.monotonic() + budget.max_seconds))
    try:
        yield
    finally:
        _meter.reset(token)


class PastCap(BudgetError):
    """A deterministic automaton passed `dfas_capped`'s cap, not the budget itself."""


@contextlib.contextmanager
def dfas_capped(cap: int, why: str) -> Iterator[None]:
    """Within it, a deterministic automaton of the running compile (`charge_dfa_states`) is also
    refused past ``cap`` states, the refusal saying "over ``why``" (naming the budget field it
    protects). For an attempt that has a cheaper way out: what it raises is caught, and the
    other way taken."""
    meter = _meter.get()
    token = _meter.set(dataclasses.replace(meter, dfa_cap=(cap, why)))
    try:
        yield
    finally:
        _meter.reset(token)


def budget_now() -> CompileBudget:
    """The running compile's budget (the defaults outside any compile)."""
    return _meter.get().budget


def within_states(count: int) -> bool:
    """Whether an automaton of ``count`` states fits the running compile's ``max_states``."""
    return count <= _meter.get().budget.max_states


def charge_states(count: int, what: str) -> None:
    """Refuse an automaton of ``count`` states (``what`` says which, for the message).

    Raises:
      BudgetError: over ``max_states``.
    """
    _charge("max_states", count, f"{what} of {count:,} states is")


def charge_dfa_states(count: int, what: str) -> None:
    """`charge_states` for a deterministic automaton, which `dfas_capped` may bound more tightly.

    Raises:
      BudgetError: over ``max_states``; `PastCap`: over the cap (naming ``max_table_bytes``).
    """
    charge_states(count, what)
    cap = _meter.get().dfa_cap
    if cap is not None and count > cap[0]:
        raise PastCap(f"{what} of {count:,} states is over {cap[1]}", budget="max_table_bytes")


def charge_bytes(count: int, what: str) -> None:
    """Refuse tables of ``count`` bytes.

    Raises:
      BudgetError: over ``max_table_bytes``.
    """
    _charge("max_table_bytes", count, f"{what} of {count:,} bytes are")


def _charge(field: str, count: int, subject: str) -> None:
    limit = getattr(_meter.get().budget, field)
    if count > limit:
        raise BudgetError(f"{subject} over the compile budget {field}={limit:,}", budget=field)


def check_time(ahead: float = 0.0) -> None:
    """Stop a compile past its deadline (cheap: call it in loops), or one whose next step, of
    about ``ahead`` seconds, would end past it.

    Raises:
      BudgetError: past ``max_seconds``.
    """
    meter = _meter.get()
    if time.monotonic() + ahead > meter.deadline:
        raise BudgetError(f"the compile ran past the compile budget max_seconds={meter.budget.max_seconds:g}", budget="max_seconds")
