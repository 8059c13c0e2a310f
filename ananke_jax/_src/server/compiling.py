"""Grammar compilation off the serving path: worker processes with a time budget, behind an
LRU cache of compiled constraints.

A compile runs in a worker process, so the thread that steps the engine keeps its core and the
interpreter to itself, and a compile that runs past its budget is stopped by ending the process
(its worker is replaced). The compiled tables come back as numpy arrays, ready for the pool.
"""

from __future__ import annotations

import collections
import concurrent.futures
import logging
import multiprocessing
import queue
import threading
import time
from collections.abc import Callable

import jax
import numpy as np

from ananke_jax._src.server.specs import RequestError, Spec, compile_spec

log = logging.getLogger(__name__)
_WARM_UP = Spec("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}})


class CompileBudget:
    """Limits on one compile: ``max_seconds`` of work (the worker is stopped), ``max_table_bytes``
    of tables, ``max_spec_bytes`` of request JSON (checked before any work)."""

    def __init__(self, max_seconds: float = 10.0, max_table_bytes: int = 256 << 20, max_spec_bytes: int = 64 << 10):
        self.max_seconds, self.max_table_bytes, self.max_spec_bytes = max_seconds, max_table_bytes, max_spec_bytes


def _worker(connection, vocab, max_table_bytes: int) -> None:
    """A worker process: compile each spec received, answer ``("ok", constraint)`` with numpy
    leaves, or ``("error", status, message)``."""
    jax.config.update("jax_platforms", "cpu")  # the accelerator belongs to the server's model
    compile_spec(_WARM_UP, vocab)  # the vocabulary's shared tables, built once per worker
    connection.send(("ready",))
    while True:
        spec = connection.recv()
        try:
            constraint = compile_spec(spec, vocab)
            constraint = None if constraint is None else jax.tree_util.tree_map(np.asarray, constraint)
            size = sum(leaf.nbytes for leaf in jax.tree_util.tree_leaves(constraint))
            if size > max_table_bytes:
                answer = ("error", 400, f"the compiled tables take {size:,} bytes, over the compile budget of {max_table_bytes:,}")
            else:
                answer = ("ok", constraint)
        except (ValueError, TypeError, KeyError, RecursionError) as e:  # the library's errors are ValueErrors
            answer = ("error", 400, f"{type(e).__name__}: {e}")
        except Exception as e:
            log.exception("compile failed")
            answer = ("error", 500, f"the grammar compiler failed: {type(e).__name__}: {e}")
        connection.send(answer)


class _Process:
    """One worker process and its end of the pipe."""

    def __init__(self, context, vocab, budget: CompileBudget):
        self.connection, theirs = context.Pipe()
        self.process = context.Process(target=_worker, args=(theirs, vocab, budget.max_table_bytes), daemon=True)
        self.process.start()
        theirs.close()

    def wait_ready(self) -> None:
        self.connection.recv()

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.connection.close()


class CompileWorkers:
    """``workers`` processes compiling `Spec`s for ``vocab``; `submit` returns a future.

    Each process is fed by its own thread in this one. A compile past ``budget.max_seconds``
    fails with a 400 `RequestError` naming the budget; a process that dies (out of memory, say)
    fails its compile with a 500. Either way the process is replaced.
    """

    def __init__(self, vocab, workers: int = 2, budget: CompileBudget | None = None, on_compiled: Callable[[float], None] | None = None):
        self.vocab, self.budget = vocab, budget or CompileBudget()
        self._context = multiprocessing.get_context("spawn")
        self._jobs: queue.Queue = queue.Queue()
        self._on_compiled = on_compiled or (lambda seconds: None)
        processes = [_Process(self._context, vocab, self.budget) for _ in range(workers)]
        self._threads = [threading.Thread(target=self._feed, args=(p,), daemon=True, name=f"compile-{i}") for i, p in enumerate(processes)]
        self._ready = [threading.Event() for _ in processes]
        for thread in self._threads:
            thread.start()

    def wait_ready(self, timeout: float | None = None) -> None:
        """Block until every worker has loaded the library and the vocabulary's tables."""
        for event in self._ready:
            event.wait(timeout)

    def submit(self, spec: Spec) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((spec, future))
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _feed(self, process: _Process) -> None:
        index = self._threads.index(threading.current_thread())
        process.wait_ready()
        self._ready[index].set()
        while (job := self._jobs.get()) is not None:
            spec, future = job
            if not future.set_running_or_notify_cancel():
                continue
            start = time.perf_counter()
            process.connection.send(spec)
            try:
                if not process.connection.poll(self.budget.max_seconds):
                    raise TimeoutError
                answer = process.connection.recv()
            except (TimeoutError, EOFError, OSError) as e:
                future.set_exception(
                    RequestError(400, f"the grammar did not compile within the compile budget of {self.budget.max_seconds:g} s")
                    if isinstance(e, TimeoutError)
                    else RequestError(500, "the grammar compiler's worker process died", code="server_error")
                )
                process.stop()
                process = _Process(self._context, self.vocab, self.budget)
                process.wait_ready()
                continue
            self._on_compiled(time.perf_counter() - start)
            if answer[0] == "ok":
                future.set_result(answer[1])
            else:
                future.set_exception(
                    RequestError(answer[1], answer[2], code="invalid_request_error" if answer[1] == 400 else "server_error")
                )
        process.stop()


class GrammarCache:
    """Compiled constraints by `Spec.key`, the ``size`` most recently used kept. A key being
    compiled maps to its future, so concurrent identical requests share one compile; a refusal is
    kept like a success (a repeated grammar bomb costs nothing the second time)."""

    def __init__(self, workers: CompileWorkers, size: int = 256):
        self.workers, self.size = workers, size
        self._fingerprint = workers.vocab.fingerprint
        self._entries: collections.OrderedDict[str, concurrent.futures.Future] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, spec: Spec) -> concurrent.futures.Future:
        """The future constraint of ``spec`` (None for free text)."""
        if spec.size > self.workers.budget.max_spec_bytes:
            raise RequestError(
                400, f"the constraint takes {spec.size:,} bytes of JSON, over the limit of {self.workers.budget.max_spec_bytes:,}"
            )
        key = spec.key(self._fingerprint)
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                self.hits += 1
                return self._entries[key]
            self.misses += 1
            future = self.workers.submit(spec)
            self._entries[key] = future
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return future

    def __len__(self) -> int:
        return len(self._entries)
