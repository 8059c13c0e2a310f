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


class Ticket:
    """A submitted request: its engine id once the engine's thread has taken it."""

    id: int | None = None


class Scheduler:
    def __init__(self, engine: Engine, metrics: Metrics):
        self.engine, self.metrics = engine, metrics
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._sinks: dict[int, Callable[[Any], None]] = {}
        self._thread = threading.Thread(target=self._run, daemon=True, name="engine")
        self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, sink: Callable[[Any], None], *args, **kwargs) -> Ticket:
        """Queue ``Engine.submit(*args, **kwargs)``; ``sink`` then receives each `Event` of the
        request, or one `RequestError` if the engine refuses it."""
        ticket = Ticket()
        self._commands.put(("submit", ticket, sink, args, kwargs))
        return ticket

    def cancel(self, ticket: Ticket) -> None:
        self._commands.put(("cancel", ticket))

    def close(self) -> None:
        self._commands.put(("close",))
        self._thread.join(timeout=30)

    def _run(self) -> None:
        while True:
            commands = [self._commands.get()] if not self.engine.has_work() else []
            while not self._commands.empty():
                commands.append(self._commands.get())
            for command in commands:
                if command[0] == "close":
                    return
                self._obey(command)
            if self.engine.has_work():
                self._step()
            self._refresh()

    def _obey(self, command) -> None:
        if command[0] == "cancel":
            ticket = command[1]
            if ticket.id is not None and self._sinks.pop(ticket.id, None) is not None:
                self.engine.cancel(ticket.id)
            return
        _, ticket, sink, args, kwargs = command
        try:
            ticket.id = self.engine.submit(*args, **kwargs)
        except ValueError as e:  # the library's errors, the pool's capacity among them
            sink(RequestError(400, str(e)))
            return
        self._sinks[ticket.id] = sink

    def _step(self) -> None:
        try:
            events = self.engine.step()
        except Exception:
            log.exception("the engine's step failed; its requests are ended")
            for request_id, sink in self._sinks.items():
                self.engine.cancel(request_id)
                sink(RequestError(500, "the engine failed while decoding", code="server_error"))
            self._sinks.clear()
            return
        for event in events:
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
