"""The fused small-array operations of the pushdown step against numpy, on both sides of their
size limits, jitted and vmapped."""

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ananke_jax._src.engines.small_ops import FUSED_REDUCTION, all_last, any_last, count_before, min_last, true_indices

# Around the limits: fused below, sliced up to four slices, plain beyond.
_SIZES = st.sampled_from([1, 2, 5, 31, 32, 33, 64, 65, 128, 129, 300])


@st.composite
def _flags(draw, batch=False):
    n = draw(_SIZES)
    shape = (draw(st.integers(1, 3)), n) if batch else (n,)
    density = draw(st.sampled_from([0.0, 0.1, 0.5, 0.9, 1.0]))
    seed = draw(st.integers(0, 2**31 - 1))
    return np.random.default_rng(seed).random(shape) < density


@settings(max_examples=60, deadline=None)
@given(_flags(batch=True))
def test_count_before_is_an_exclusive_cumulative_sum(flags):
    expected = np.cumsum(flags, axis=-1) - flags
    np.testing.assert_array_equal(jax.jit(count_before)(flags), expected)
    np.testing.assert_array_equal(jax.vmap(count_before)(flags), expected)


@settings(max_examples=60, deadline=None)
@given(_flags())
def test_true_indices_are_the_true_positions_in_order(flags):
    count = int(flags.sum())
    for got in (jax.jit(true_indices)(flags), jax.vmap(true_indices)(flags[None])[0]):
        got = np.asarray(got)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got[:count], np.flatnonzero(flags))
        np.testing.assert_array_equal(got[count:], 0)


@settings(max_examples=60, deadline=None)
@given(_flags(batch=True), st.integers(0, 2**31 - 1))
def test_reductions_are_numpy_s(flags, seed):
    values = np.random.default_rng(seed).integers(-50, 50, flags.shape).astype(np.int32)
    for ours, theirs, x in [(all_last, np.all, flags), (any_last, np.any, flags), (min_last, np.min, values)]:
        np.testing.assert_array_equal(jax.jit(ours)(x), theirs(x, axis=-1))
        np.testing.assert_array_equal(jax.vmap(ours)(x), theirs(x, axis=-1))


def test_small_arrays_run_no_sort_cumulative_sum_or_reduce_window():
    """Below the limits the operations are fused ones: the compiled program holds no sort,
    reduce-window or scatter (on a CPU, each a kernel of its own)."""
    flags = jnp.zeros(FUSED_REDUCTION, bool)
    stacks = jnp.zeros((4, 4, 2 * FUSED_REDUCTION), bool)
    program = jax.jit(lambda f, s: (true_indices(f), count_before(f), all_last(s), any_last(s), min_last(s.astype(jnp.int32))))
    text = program.lower(flags, stacks).compile().as_text()
    for kind in (" sort(", " reduce-window(", " scatter("):
        assert kind not in text, f"{kind.strip(' (')} in the compiled program"
