"""The engines: device tables of compiled constraints and their run-time functions, as pytrees
that speak one protocol (`ananke_jax._src.engines.protocol.Constraint`).

This layer sits below both the compiler (which fills the tables) and the run-time layer (which
calls the protocol); it imports neither.
"""
