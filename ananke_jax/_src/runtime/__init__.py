"""The run-time functions of compiled constraints (device, pure jax): mask, advance, accepts,
sampling and the constrained step."""
