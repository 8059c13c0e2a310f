"""``ananke-jax serve``: an OpenAI-compatible HTTP server over the slot engine (FastAPI), with
grammars compiled in worker processes behind a cache. Needs the ``serve`` extra."""
