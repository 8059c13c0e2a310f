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

from ananke_jax._src.compile.budget import CompileBudget
from ananke_jax._src.server.limits import CompileLimits
from ananke_jax._src.server.specs import RequestError, Spec, compile_spec

log = logging.getLogger(__name__)
# Specs whose compiles build the vocabulary's shared tables: those of the regular path, and those
# of the pushdown path's JSON strings (a second each on a 131k vocabulary; `json_object` needs them).
_WARM_UP = (
    Spec("json_schema", {"type": "object", "properties": {"a": {"type": "integer"}}}),
    Spec("json_schema", {"type": "object"}),
)


def warm_up(vocab) -> None:
    """Build ``vocab``'s tables that compiles share (cached per vocabulary in this process)."""
    for spec in _WARM_UP:
        compile_spec(spec, vocab)


def _worker(connection, vocab, budget: CompileBudget) -> None:
    """A worker process: compile each spec received within ``budget``, answer ``("ok",
    constraint)`` with numpy leaves, or ``("error", status, message)``."""
    jax.config.update("jax_platforms", "cpu")  # the accelerator belongs to the server's model
    warm_up(vocab)
    connection.send(("ready",))
    while True:
        spec = connection.recv()
        try:
            constraint = compile_spec(spec, vocab, budget)
            answer = ("ok", None if constraint is None else jax.tree_util.tree_map(np.asarray, constraint))
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
        self.process = context.Process(target=_worker, args=(theirs, vocab, budget), daemon=True)
        self.process.start()
        theirs.close()

    def wait_ready(self, timeout: float) -> None:
        """Wait for the worker's warm-up; raises RuntimeError if it dies or takes longer."""
        if not self.connection.poll(timeout) or self.connection.recv() != ("ready",):
            raise RuntimeError("a grammar compile worker did not start")

    def compile(self, spec: Spec, seconds: float) -> tuple:
        """The worker's answer for ``spec``; TimeoutError past ``seconds``, EOFError or OSError
        if the worker dies."""
        self.connection.send(spec)
        if not self.connection.poll(seconds):
            raise TimeoutError
        return self.connection.recv()

    def stop(self) -> None:
        self.process.kill()
        self.process.join()
        self.connection.close()


class CompileWorkers:
    """``workers`` processes compiling `Spec`s for ``vocab``; `submit` returns a future.

    Each process is fed by its own thread in this one and compiles within ``limits.budget``: a
    compile over it fails with the library's `BudgetError` (400). One still at work
    `CompileLimits.KILL_GRACE_SECONDS` past the budget's ``max_seconds`` fails with a 400 naming
    the budget, and any other failure of the worker (it dies, its answer cannot be read) with a
    500; either way the process is replaced.
    """

    START_SECONDS = 300.0  # a worker's start: imports, the vocabulary's tables, one compile

    def __init__(
        self, vocab, workers: int = 2, limits: CompileLimits = CompileLimits(), on_compiled: Callable[[float], None] | None = None
    ):
        self.vocab, self.limits = vocab, limits
        self._context = multiprocessing.get_context("spawn")
        self._jobs: queue.Queue = queue.Queue()
        self._on_compiled = on_compiled or (lambda seconds: None)
        self._ready = [threading.Event() for _ in range(workers)]
        self._threads = [threading.Thread(target=self._feed, args=(i,), daemon=True, name=f"compile-{i}") for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def wait_ready(self) -> None:
        """Block until every worker has loaded the library and the vocabulary's tables.

        Raises:
          RuntimeError: a worker did not start within `START_SECONDS`.
        """
        if not all(event.wait(self.START_SECONDS) for event in self._ready):
            raise RuntimeError("the grammar compile workers did not start")

    def submit(self, spec: Spec) -> concurrent.futures.Future:
        """The future constraint of ``spec``.

        Raises:
          RequestError: 503 when ``limits.max_queue`` compiles already wait.
        """
        if self._jobs.qsize() >= self.limits.max_queue:
            raise RequestError(503, f"{self._jobs.qsize()} grammars are waiting to compile: try again shortly", code="server_busy")
        future: concurrent.futures.Future = concurrent.futures.Future()
        self._jobs.put((spec, future))
        return future

    def close(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def _feed(self, index: int) -> None:
        process = self._start()
        self._ready[index].set()
        while (job := self._jobs.get()) is not None:
            spec, future = job
            if not future.set_running_or_notify_cancel():
                continue
            start = time.perf_counter()
            try:
                answer = process.compile(spec, self.limits.budget.max_seconds + CompileLimits.KILL_GRACE_SECONDS)
            except TimeoutError:
                seconds = self.limits.budget.max_seconds
                future.set_exception(RequestError(400, f"the grammar did not compile within the compile budget max_seconds={seconds:g}"))
            except BaseException:
                log.exception("a grammar compile worker failed")
                future.set_exception(RequestError(500, "the grammar compiler's worker process failed", code="server_error"))
            else:
                self._on_compiled(time.perf_counter() - start)
                if answer[0] == "ok":
                    future.set_result(answer[1])
                else:
                    future.set_exception(
                        RequestError(answer[1], answer[2], code="invalid_request_error" if answer[1] == 400 else "server_error")
                    )
                continue
            process.stop()
            process = self._start()
        process.stop()

    def _start(self) -> _Process:
        """A new worker process, warmed up (retried until one starts)."""
        while True:
            process = _Process(self._context, self.vocab, self.limits.budget)
            try:
                process.wait_ready(self.START_SECONDS)
                return process
            except (RuntimeError, EOFError, OSError):
                log.exception("a grammar compile worker did not start; starting another")
                process.stop()
                time.sleep(1)


class GrammarCache:
    """Compiled constraints by `Spec.key`, the ``size`` most recently used kept. A key being
    compiled maps to its future, so concurrent identical requests share one compile. A refusal
    (400) is kept like a success, so a repeated grammar bomb costs nothing the second time; a
    server error or a cancelled compile is dropped, to be tried again."""

    def __init__(self, workers: CompileWorkers, size: int = 256):
        self.workers, self.size = workers, size
        self._fingerprint = workers.vocab.fingerprint
        self._entries: collections.OrderedDict[str, concurrent.futures.Future] = collections.OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, spec: Spec) -> concurrent.futures.Future:
        """The future constraint of ``spec``; its exception, if any, is a `RequestError` whose
        status and message callers copy (`refusal`), never raise as it is (it is shared)."""
        if spec.size > self.workers.limits.max_spec_bytes:
            raise RequestError(
                400, f"the constraint takes {spec.size:,} bytes of JSON, over the limit of {self.workers.limits.max_spec_bytes:,}"
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
            future.add_done_callback(lambda done: self._forget_failure(key, done))
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
            return future

    def _forget_failure(self, key: str, future: concurrent.futures.Future) -> None:
        if future.cancelled() or (isinstance(future.exception(), RequestError) and future.exception().status >= 500):
            with self._lock:
                if self._entries.get(key) is future:
                    del self._entries[key]

    def __len__(self) -> int:
        return len(self._entries)


def refusal(error: RequestError) -> RequestError:
    """A new error with ``error``'s status, message and code (a cached refusal is shared)."""
    return RequestError(error.status, error.message, param=error.param, code=error.code)
