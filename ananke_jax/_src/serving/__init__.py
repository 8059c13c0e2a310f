"""Serving a live stream of requests: the grammar pool (admission into fixed device buffers)
and the slot engine (continuous batching over a model's step function)."""
