"""Implementation of ananke_jax; the public names are re-exported by `ananke_jax` and its public modules."""
