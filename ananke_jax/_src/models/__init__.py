"""Reference models for constrained decoding: a Llama-style Flax decoder and its loaders."""
