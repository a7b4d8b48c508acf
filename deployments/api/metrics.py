"""Prometheus metrics of the HTTP API, in a registry of the app's own (no process-global state)."""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class _StatsCollector(Collector):
    """Reads store and job counts when Prometheus scrapes, not on every request."""

    def __init__(self, read: Callable[[], dict[str, dict[str, float]]]) -> None:
        self._read = read

    def collect(self):  # type: ignore[no-untyped-def]
        for name, series in self._read().items():
            family = GaugeMetricFamily(
                f"longmem_{name}", f"longmem {name.replace('_', ' ')}", labels=["part"]
            )
            for part, value in series.items():
                family.add_metric([part], value)
            yield family


class Metrics:
    """Request counts and latencies by route, plus store gauges read at scrape time."""

    def __init__(self, read_stats: Callable[[], dict[str, dict[str, float]]]) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "longmem_http_requests", "HTTP requests", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "longmem_http_request_seconds",
            "HTTP request latency",
            ["route"],
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=self.registry,
        )
        self.registry.register(_StatsCollector(read_stats))

    def render(self) -> bytes:
        """The text exposition format."""
        return generate_latest(self.registry)

    def middleware(self, app: ASGIApp) -> ASGIApp:
        """ASGI middleware timing each request under its route template (never the raw path,
        which holds user ids)."""

        async def timed(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] != "http":
                await app(scope, receive, send)
                return
            start = time.perf_counter()
            status = [500]

            async def send_status(message: Message) -> None:
                if message["type"] == "http.response.start":
                    status[0] = message["status"]
                await send(message)

            try:
                await app(scope, receive, send_status)
            finally:
                route = scope.get("route")
                label = getattr(route, "path", "unmatched")
                self.requests.labels(label, str(status[0])).inc()
                self.latency.labels(label).observe(time.perf_counter() - start)

        return timed
