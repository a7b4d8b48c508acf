"""The HTTP API in-process: the same FastAPI app the Serve ingress builds, over a local service
(real FAISS shards, DuckDB, sweep log), called through Starlette's test client. No Ray."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from fastapi import FastAPI

from deployments.api.app import create_api
from deployments.api.auth import Authenticator
from deployments.api.idempotency import Replays
from deployments.api.metrics import Metrics
from deployments.api.runtime import Runtime
from memory_core.service import MemoryService
from memory_core.store.resharding import ReshardRunner
from memory_core.sweep import SweepRecord
from memory_core.write.lanes import WriteLanes
from memory_core.write.writes import UserWrites


class LocalSweeps:
    """The service's own sweep runner as the API's sweep control (the sweeper actor under Serve)."""

    def __init__(self, service: MemoryService) -> None:
        self._service = service

    def run(self, now: datetime, dry_run: bool, tenant: str | None = None) -> SweepRecord:
        return self._service.sweep(now, dry_run, tenant)

    def list(self, limit: int, tenant: str | None = None) -> list[SweepRecord]:
        assert self._service.sweeper is not None
        return self._service.sweeper.log.list(limit, tenant)


def local_api(service: MemoryService, health: Callable[[], dict[str, Any]] | None = None) -> FastAPI:
    """The HTTP API over ``service``, authenticating with its settings' keys; like the ingress,
    it first queues the turns accepted and not written before. ``app.state.lanes`` are its write
    lanes (close them before the service)."""
    lanes = WriteLanes(service.settings.write)
    writes = UserWrites(service, lanes)
    writes.resume()
    runtime = Runtime(
        settings=service.settings,
        service=service,
        writes=writes,
        replays=Replays(
            service.facts, service.clock, timedelta(hours=service.settings.write.idempotency_hours)
        ),
        auth=Authenticator(service.settings.serve),
        metrics=Metrics(writes.stats),
        sweeps=LocalSweeps(service),
        reshards=ReshardRunner(service.facts.resharder),  # type: ignore[attr-defined]
        health=health or (lambda: {"ok": True}),
    )
    app = create_api(runtime)
    app.state.lanes = lanes
    return app
