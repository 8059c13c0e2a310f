"""The server's Prometheus metrics (``GET /metrics``), in a registry of its own.

Events (tokens, requests, compile times, time to first token) are counted as they happen; the
engine's figures (requests running and waiting, pool occupancy, XLA compilations) are read from
a snapshot that the engine's thread refreshes after each step.
"""

from __future__ import annotations

import prometheus_client as prom
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

_LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self):
        self.registry = prom.CollectorRegistry()
        self.snapshot = {"running": 0, "waiting": 0, "compilations": 0, "occupancy": {}}
        self.compiling = 0
        self.cache = None  # the GrammarCache, for its hits and misses
        kw = {"registry": self.registry}
        self.prompt_tokens = prom.Counter("ananke_prompt_tokens", "Prompt tokens prefilled.", **kw)
        self.generation_tokens = prom.Counter("ananke_generation_tokens", "Tokens generated.", **kw)
        self.requests = prom.Counter("ananke_requests", "Requests finished, by finish reason.", ["finish_reason"], **kw)
        self.errors = prom.Counter("ananke_request_errors", "Requests refused or failed, by HTTP status.", ["status"], **kw)
        self.time_to_first_token = prom.Histogram(
            "ananke_time_to_first_token_seconds", "From a request's arrival to its first token.", buckets=_LATENCY_BUCKETS, **kw
        )
        self.compile_seconds = prom.Histogram(
            "ananke_grammar_compile_seconds", "Grammar compiles in the worker processes.", buckets=_LATENCY_BUCKETS, **kw
        )
        self.registry.register(_EngineCollector(self))

    def render(self) -> bytes:
        return prom.generate_latest(self.registry)


class _EngineCollector(prom.registry.Collector):
    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self):
        m, s = self.metrics, self.metrics.snapshot
        yield GaugeMetricFamily("ananke_requests_running", "Requests in a slot.", value=s["running"])
        yield GaugeMetricFamily(
            "ananke_requests_waiting", "Requests waiting for a slot or for their grammar.", value=s["waiting"] + m.compiling
        )
        yield CounterMetricFamily("ananke_xla_compilations", "XLA compilations since the engine's warm-up.", value=s["compilations"])
        occupancy = GaugeMetricFamily("ananke_pool_occupancy", "Fraction of the grammar pool in use, by buffer.", labels=["axis"])
        for axis, used in s["occupancy"].items():
            occupancy.add_metric([axis], used)
        yield occupancy
        if m.cache is not None:
            yield CounterMetricFamily("ananke_grammar_cache_hits", "Constraints found compiled.", value=m.cache.hits)
            yield CounterMetricFamily("ananke_grammar_cache_misses", "Constraints sent to compile.", value=m.cache.misses)
            yield GaugeMetricFamily("ananke_grammar_cache_entries", "Constraints held compiled.", value=len(m.cache))
