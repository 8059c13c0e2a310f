"""The compiler's output: rules whose bodies are `regex_ast` trees, in which `Ref` nodes stand
for other rules."""

from __future__ import annotations

import dataclasses

from ananke_jax._src.compile import regex_ast as rx


@dataclasses.dataclass(frozen=True)
class Ref:
    """A reference to the rule ``name`` inside a rule body."""

    name: str


@dataclasses.dataclass
class Rules:
    """The compiled rules: ``bodies[name]`` is a regex tree that may hold `Ref` nodes."""

    start: str
    bodies: dict[str, rx.Node]


def is_regular(node) -> bool:
    """No `Ref` inside ``node``."""
    return not any(isinstance(leaf, Ref) for leaf in rx.leaves(node))


def automaton_node(dfa) -> rx.Node:
    """The node of a DFA's language (`rx.NOTHING` when its start is the dead state)."""
    return rx.Automaton(dfa) if dfa.start else rx.NOTHING
