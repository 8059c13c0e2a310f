"""JSON Schema to grammars: loading, normalisation, and compilation to DFA or pushdown tables."""
