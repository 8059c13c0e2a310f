"""Structural tags (tool calls, reasoning, free text around structure) compiled to one constraint."""
