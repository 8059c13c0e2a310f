"""The thread that owns the `Engine`: it submits requests, steps the engine while any has work,
and hands each request's events to that request's callback (from this thread: callers bridge
to their event loop). Nothing else touches the engine, so it needs no lock.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from ananke_jax._src.server.metrics import Metrics
from ananke_jax._src.server.specs import RequestError
from ananke_jax._src.serving.engine import Engine

log = logging.getLogger(__name__)
Sink = Callable[[Any], None]


class Ticket:
    """A submitted request: its engine id once the engine's thread has taken it."""

    id: int | None = None


class Scheduler:
    def __init__(self, engine: Engine, metrics: Metrics):
        self.engine, self.metrics = engine, metrics
        self.failure: str | None = None  # why the engine stopped serving, once it has
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[int, Sink] = {}
        self._thread = threading.Thread(target=self._run, daemon=True, name="engine")
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self.failure is None and self._thread.is_alive()

    def submit(self, sink: Sink, *args, **kwargs) -> Ticket:
        """Queue ``Engine.submit(*args, **kwargs)``; ``sink`` then receives each `Event` of the
        request, or one `RequestError` if it is refused or the engine fails.

        Raises:
          RequestError: 503 when the engine has stopped serving.
        """
        if not self.alive:
            raise RequestError(503, f"the engine has stopped: {self.failure or 'shut down'}", code="server_error")
        ticket = Ticket()
        self._commands.put(lambda: self._submit(ticket, sink, args, kwargs))
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        self._commands.put(lambda: self._cancel(ticket))

    def close(self) -> None:
        self._commands.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:
            while True:
                commands = [self._commands.get()] if not self.engine.has_work() else []
                while not self._commands.empty():
                    commands.append(self._commands.get())
                for command in commands:
                    if command is None:
                        return
                    command()
                if self.engine.has_work():
                    self._step()
                self._refresh()
        except Exception as e:  # the engine's state can no longer be trusted: stop serving, end every request
            log.exception("the engine failed; the server stops serving")
            self.failure = f"{type(e).__name__}: {e}"
            for sink in self._sinks.values():
                sink(RequestError(500, "the engine failed while decoding", code="server_error"))
            self._sinks.clear()

    def _submit(self, ticket: Ticket, sink: Sink, args, kwargs) -> None:
        try:
            ticket.id = self.engine.submit(*args, **kwargs)
        except ValueError as e:  # the library's errors, the pool's capacity among them
            sink(RequestError(400, str(e)))
            return
        self._sinks[ticket.id] = sink

    def _cancel(self, ticket: Ticket) -> None:
        if ticket.id is not None and self._sinks.pop(ticket.id, None) is not None:
            self.engine.cancel(ticket.id)

    def _step(self) -> None:
        for event in self.engine.step():
            sink = self._sinks.get(event.request_id)
            if sink is not None:
                sink(event)
                if event.finished:
                    del self._sinks[event.request_id]

    def _refresh(self) -> None:
        engine = self.engine
        self.metrics.snapshot = {
            "running": engine.running,
            "waiting": engine.waiting,
            "compilations": engine.compilations,
            "occupancy": engine.pool.occupancy(),
        }
