"""Deployment paths: `jax.export` of the constrained step and of the decode loop, reloaded in a
fresh process; the batch sharded over 8 (forced host) devices equals the unsharded run."""

import json
import pathlib
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import ananke_jax as aj
from ananke_jax._src.bank import rows_of_runs
from ananke_jax._src.engines.lr import SHIFT_REDUCE
from ananke_jax.models import LlamaConfig, init_cache, init_params, make_step_fn

TOKENS = [b"<eos>"] + [bytes([c]) for c in range(32, 127)] + [b'{"', b'":', b"true", b"false"]
VOCAB = aj.Vocabulary.from_tokens(TOKENS, eos_token_ids=[0])
CONFIG = LlamaConfig.tiny(len(TOKENS))
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}, "required": ["ok", "n"]}
PROMPT = np.array([[5, 6, 7, 8], [9, 10, 11, 12]], np.int32)
NEW = 20


def _fresh_process(script: str, *args) -> object:
    """Run ``script`` in a new interpreter (argv: args) and parse the JSON it prints."""
    run = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *map(str, args)], capture_output=True, text=True, timeout=300, check=False
    )
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout.strip().splitlines()[-1])


def _decode(prompt, raw_key):
    cg = aj.compile_json_schema(SCHEMA, VOCAB, whitespace="compact")
    result = aj.generate(
        make_step_fn(CONFIG), init_params(CONFIG, jax.random.key(0)), prompt, cg,
        cache=init_cache(CONFIG, prompt.shape[0], prompt.shape[1] + NEW), max_new_tokens=NEW,
        eos_token_ids=VOCAB.eos_token_ids, key=jax.random.wrap_key_data(raw_key), sampling=aj.SamplingParams(temperature=1.0),
    )  # fmt: skip
    return result.tokens


@pytest.mark.slow
def test_exported_decode_loop_gives_identical_tokens_in_a_fresh_process(tmp_path):
    raw_key = jax.random.key_data(jax.random.key(3))
    exported = jax.export.export(jax.jit(_decode))(PROMPT, raw_key)
    (tmp_path / "loop.bin").write_bytes(exported.serialize())
    np.save(tmp_path / "prompt.npy", PROMPT)
    np.save(tmp_path / "key.npy", np.asarray(raw_key))
    script = """
        import json, pathlib, sys
        import jax, numpy as np
        folder = pathlib.Path(sys.argv[1])
        loop = jax.export.deserialize(bytearray((folder / "loop.bin").read_bytes()))
        tokens = loop.call(np.load(folder / "prompt.npy"), np.load(folder / "key.npy"))
        print(json.dumps(np.asarray(tokens).tolist()))
    """
    assert _fresh_process(script, tmp_path) == np.asarray(_decode(PROMPT, raw_key)).tolist()


def test_exported_constrained_step_runs_on_reloaded_tables(tmp_path):
    """Tables are arguments of the exported step: any grammar of the same shapes can be fed."""
    cg = aj.compile_regex(r"[a-z]{2,5}[0-9]", VOCAB)
    step = jax.jit(lambda cg, state, logits, raw: aj.constrained_step(cg, state, logits, jax.random.wrap_key_data(raw)))
    logits = jax.random.normal(jax.random.key(1), (len(TOKENS),))
    raw = jax.random.key_data(jax.random.key(2))
    exported = jax.export.export(step)(cg, cg.init_state(), logits, raw)
    (tmp_path / "step.bin").write_bytes(exported.serialize())
    aj.save_constraint(cg, tmp_path / "cg.npz")
    np.save(tmp_path / "logits.npy", np.asarray(logits))
    np.save(tmp_path / "key.npy", np.asarray(raw))
    script = """
        import json, pathlib, sys
        import jax, numpy as np
        import ananke_jax as aj
        folder = pathlib.Path(sys.argv[1])
        step = jax.export.deserialize(bytearray((folder / "step.bin").read_bytes()))
        cg = aj.load_constraint(folder / "cg.npz")
        state, out = cg.init_state(), []
        for i in range(6):
            token, state = step.call(cg, state, np.load(folder / "logits.npy") * (i + 1), np.load(folder / "key.npy"))
            out.append(int(token))
        print(json.dumps(out))
    """
    state, expected = cg.init_state(), []
    for i in range(6):
        token, state = step(cg, state, logits * (i + 1), raw)
        expected.append(int(token))
    assert _fresh_process(script, tmp_path) == expected


def test_saved_tables_name_their_format_and_files_of_the_formats_before_still_load(tmp_path):
    """Format 2 may hold fused shift-reductions, which a reader of format 1 would misread as
    errors; a file of format 1 holds none and loads as it is. Format 3 keeps each lexer state's
    outcomes and each row's sparse tokens as runs; the rows of formats 1 and 2 load as runs.
    Later formats are refused."""
    cg = aj.compile_gbnf('root ::= "[" (item ("," item)*)? "]"\nitem ::= "true" | "false" | root', VOCAB)
    aj.save_constraint(cg, tmp_path / "cg.npz")
    with np.load(tmp_path / "cg.npz") as data:
        arrays = dict(data)
    header = json.loads(arrays.pop("__header__").tobytes())
    assert header["format"] == 3 and (np.asarray(cg.action_kind) == SHIFT_REDUCE).any()

    def written_as(version, tables):
        path = tmp_path / f"format{version}.npz"
        np.savez(path, __header__=np.frombuffer(json.dumps({**header, "format": version}).encode(), np.uint8), **tables)
        return path

    width, start = cg.outcome_node.shape[1], arrays["outcome_start"]
    as_rows = {name: rows_of_runs(start, arrays[name], width, -1) for name in ("state_outcomes", "outcome_lexer")}
    as_rows.update(
        {name: rows_of_runs(arrays["sparse_start"], arrays[name], cg.sparse_width, 0) for name in ("sparse_token", "sparse_set")}
    )
    older = {**{name: x for name, x in arrays.items() if name not in ("outcome_start", "sparse_start")}, **as_rows}
    assert (np.diff(start) < width).any()  # rows padded with -1, which runs leave out
    assert header["static"].pop("sparse_width") == cg.sparse_width  # (older files have no such size)
    for version in (1, 2):
        loaded = aj.load_constraint(written_as(version, older))
        assert all(np.array_equal(np.asarray(getattr(loaded, name)), value) for name, value in arrays.items())
        assert loaded.sparse_width == cg.sparse_width
    with pytest.raises(ValueError, match="unknown constraint file format 4"):
        aj.load_constraint(written_as(4, arrays))


@pytest.mark.slow
def test_batch_sharded_over_eight_devices_equals_the_unsharded_run():
    script = """
        import os
        os.environ["XLA_FLAGS"] += " --xla_force_host_platform_device_count=8"  # after tests/conftest.py's flags
        import json, sys
        sys.path.insert(0, sys.argv[1])
        import jax, numpy as np
        from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
        from test_deploy import CONFIG, NEW, _decode
        assert len(jax.devices()) == 8
        prompt = np.random.default_rng(0).integers(1, 96, (8, 4)).astype(np.int32)
        raw = jax.random.key_data(jax.random.key(5))
        plain = np.asarray(jax.jit(_decode)(prompt, raw))
        mesh = Mesh(np.array(jax.devices()), ("batch",))
        sharded_prompt = jax.device_put(prompt, NamedSharding(mesh, P("batch")))
        out = jax.jit(_decode, out_shardings=NamedSharding(mesh, P("batch")))(sharded_prompt, jax.device_put(raw, NamedSharding(mesh, P())))
        assert len(out.sharding.device_set) == 8
        print(json.dumps([plain.tolist(), np.asarray(out).tolist()]))
    """
    plain, sharded = _fresh_process(script, pathlib.Path(__file__).parent)
    assert plain == sharded
    assert any(t >= 0 for row in plain for t in row)
    assert jnp.asarray(plain).shape == (8, NEW)
