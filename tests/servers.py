"""`ananke-jax serve` for tests: a subprocess on a free port, ready once ``/health`` answers,
sharing the suite's XLA compilation cache, with XLA's cheaper compile (as tests/conftest.py)."""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import jax
import pytest


@contextlib.contextmanager
def serve(*options: str):
    """Yields ``(process, url)`` of a server started with ``options``; stops it afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    command = [sys.executable, "-m", "ananke_jax", "serve", "--port", str(port), *options]
    command += ["--compilation-cache", jax.config.jax_compilation_cache_dir]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_DISABLE_MOST_OPTIMIZATIONS": "1"}
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryFile("w+") as log:  # a file, not a pipe: nobody reads it while the server runs
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            deadline = time.monotonic() + 600
            while process.poll() is None and time.monotonic() < deadline:
                try:
                    if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    time.sleep(1)
            else:
                log.seek(0)
                pytest.fail(f"the server did not start: {log.read()[-3000:]}")
            yield process, url
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
