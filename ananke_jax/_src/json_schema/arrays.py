"""Arrays: ``prefixItems``, ``items``, item counts and ``contains``."""

from __future__ import annotations

from ananke_jax._src.compile import regex_ast as rx
from ananke_jax._src.json_schema.keywords import counts
from ananke_jax._src.json_schema.refs import child
from ananke_jax._src.json_schema.rules import automaton_node, is_regular


class Arrays:
    """The methods of `SchemaCompiler` for arrays (they use its layout, ``allow_additional``
    option, `value` and `unsupported`)."""

    def items(self, s: dict):
        """The schema of the items after ``prefixItems``: ``items``, else closed after a prefix
        unless allow_additional is set."""
        return s.get("items", bool(self.allow_additional or not s.get("prefixItems")))

    def array(self, s: dict, pointer: str, depth: int) -> rx.Node:
        """The arrays ``s`` allows, items separated as the layout says."""
        prefix = s.get("prefixItems", [])
        items_schema = self.items(s)
        tail = self.value(items_schema, child(pointer, "items"), depth + 1)
        items = [self.value(p, child(pointer, "prefixItems", i), depth + 1) for i, p in enumerate(prefix)]
        lo = max(counts(s, "minItems", pointer) or [0])
        his = counts(s, "maxItems", pointer)
        hi = min(his) if his else None
        comma = self.layout.comma(depth)

        def rest(i: int) -> rx.Node:  # elements i.. each after a comma
            if hi is not None and i >= hi:
                return rx.EMPTY
            if i >= len(items):
                return rx.repeat(rx.seq(comma, tail), max(lo - i, 0), None if hi is None else hi - i)
            element = rx.seq(comma, items[i], rest(i + 1))
            return element if i < lo else rx.optional(element)

        first = items[0] if items else tail
        nonempty = rx.seq(first, rest(1)) if hi != 0 else rx.NOTHING
        may_be_empty = lo == 0
        if "contains" in s:
            nonempty, may_be_empty = self.contains(s, pointer, depth, nonempty, may_be_empty, items_schema, comma)
        return self.layout.container("[]", nonempty, may_be_empty, depth)

    def contains(self, s, pointer, depth, nonempty, may_be_empty, items_schema, comma):
        """The element lists of ``array`` restricted to minContains..maxContains hits."""
        at_least = max(counts(s, "minContains", pointer) or [1])
        his = counts(s, "maxContains", pointer)
        at_most = min(his) if his else None
        where = child(pointer, "contains")
        hit = self.value({"allOf": [items_schema, s["contains"]]}, where, depth + 1)
        miss = self.value({"allOf": [items_schema, {"not": s["contains"]}]}, where, depth + 1)

        def after(a: int, b: int | None) -> rx.Node:  # comma-led elements with a..b hits
            if b is not None and b < 0:
                return rx.NOTHING
            misses = rx.star(rx.seq(comma, miss))
            return rx.seq(misses, rx.repeat(rx.seq(comma, hit, misses), max(a, 0), b))

        less = lambda b: None if b is None else b - 1
        counted = rx.alt(rx.seq(hit, after(at_least - 1, less(at_most))), rx.seq(miss, after(at_least, at_most)))
        may_be_empty = may_be_empty and at_least == 0
        if not ({"prefixItems", "minItems", "maxItems"} & set(s)):
            return counted, may_be_empty
        if not (is_regular(nonempty) and is_regular(counted)):
            self.unsupported("contains", "contains with item counts over recursive item schemas", pointer)
            return nonempty, may_be_empty
        return automaton_node(rx.intersect(rx.to_dfa(nonempty), rx.to_dfa(counted))), may_be_empty
