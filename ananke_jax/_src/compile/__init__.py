"""Automata and alignment (host, numpy): regexes to byte DFAs, LR tables, and automata times a
vocabulary to the token tables of `ananke_jax._src.compiled` and `ananke_jax._src.engines.pushdown`."""
