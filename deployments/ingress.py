"""The ingress deployment: the HTTP API over a memory service whose parts are the other deployments."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import ray
from fastapi import FastAPI, Request, Response
from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.api.app import create_api
from deployments.api.auth import Authenticator
from deployments.api.idempotency import Replays
from deployments.api.metrics import Metrics
from deployments.api.runtime import Runtime
from deployments.binding import check_binding
from deployments.parts import remote_service
from deployments.stores import ShardClient
from deployments.sweeper import ReshardClient, SweeperClient, open_sweeper
from deployments.writers import open_writers
from memory_core.embedding import make_embedder
from memory_core.errors import LongmemError
from memory_core.settings import Settings
from memory_core.telemetry import configure_tracing


@serve.deployment(name="ingress")
@serve.ingress()
class Ingress:
    """Holds the service; Serve routes HTTP to the FastAPI app built from it. A replica keeps no
    state of its own: working windows are in the shards, writes run in the writer actors."""

    async def __init__(self, settings: Settings, embedder: DeploymentHandle, llm: DeploymentHandle) -> None:
        # Before anything is opened: a proxy listening elsewhere (e.g. `serve run` on its own
        # defaults) would serve a keyless app to the network or ignore serve.host/port.
        await check_binding(settings)
        # Serve builds the replica on its event loop, where a handle's .result() is refused:
        # deployment handles are awaited. The store actors are checked with blocking calls: the
        # replica takes no requests before its constructor returns anyway.
        self._settings = settings
        configure_tracing(settings.telemetry)
        local = make_embedder(settings.embedder) if settings.serve.query_embedding == "ingress" else None
        service = remote_service(
            settings, embedder, await embedder.info.remote(), llm, await llm.name.remote(), queries=local
        )
        self._llm_handle = llm
        sweeper = open_sweeper(settings, service.embedder.dim, service.embedder.name)
        await sweeper.start_schedule.remote()
        self._writes = open_writers(settings, embedder, llm)
        self._sweeps = SweeperClient(sweeper)
        self._runtime = Runtime(
            settings=settings,
            service=service,
            writes=self._writes,
            replays=Replays(service.facts, service.clock, timedelta(hours=settings.write.idempotency_hours)),
            auth=Authenticator(settings.serve),
            metrics=Metrics(self._stats),
            sweeps=self._sweeps,
            reshards=ReshardClient(sweeper),
            health=self._health,
            backups=self._sweeps.backup_status,
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        app = create_api(self._runtime)
        replica = serve.get_replica_context().replica_id.unique_id

        @app.middleware("http")
        async def served_by(request: Request, call_next: Any) -> Response:
            # Which replica answered, for operators following a session across replicas.
            response: Response = await call_next(request)
            response.headers["Longmem-Replica"] = replica
            return response

        return app

    @property
    def _shards(self) -> list[ShardClient]:
        return self._runtime.service.facts.shards  # type: ignore[attr-defined,no-any-return]

    def _stats(self) -> dict[str, dict[str, float]]:
        shards = [shard.stats() for shard in self._shards]
        stats = {
            "facts": {f"shard{i}": s["facts"] for i, s in enumerate(shards)},
            "users": {f"shard{i}": s["users"] for i, s in enumerate(shards)},
            **self._writes.stats(),
        }
        # Only an app with a backup schedule asks the sweeper for it at each scrape.
        backups = self._sweeps.backup_status() if self._settings.storage.backup_every else None
        if backups is not None:
            last = backups["last"]
            stats["backups_taken"] = {"schedule": backups["taken"]}
            stats["backup_failures"] = {"schedule": backups["failures"]}
            stats["backup_last_success_timestamp_seconds"] = {
                "schedule": datetime.fromisoformat(last["created_at"]).timestamp() if last else 0.0
            }
        # This replica's own LLM calls: chat replies (every write's are its writer's).
        own = self._runtime.service.llm
        if own is not None:
            stats.setdefault("llm_calls", {})["ingress"] = own.stats.calls
            stats.setdefault("llm_seconds", {})["ingress"] = own.stats.seconds
        return stats

    def _health(self) -> dict[str, Any]:
        service = self._runtime.service
        report: dict[str, Any] = {"shards": [], "ok": True}
        for shard_no, shard in enumerate(self._shards):
            report["shards"].append(_probe(lambda s=shard: _shard_ok(s), f"shard {shard_no}"))
        # Texts to store always go to the deployment: probe it, not a local question embedder.
        embedder = service.embedder
        report["embedder"] = _probe(
            lambda: embedder.embed_passages(["health"]).shape == (1, embedder.dim), "embedder"
        )
        report["llm"] = _probe(lambda: bool(self._llm_handle.name.remote().result()), "llm")
        report["writers"] = _probe(lambda: bool(self._writes.health()), "writers")
        parts = [
            *report["shards"],
            report["embedder"],
            report["llm"],
            report["writers"],
        ]
        report["ok"] = all(part["ok"] for part in parts)
        return report


def _shard_ok(shard: ShardClient) -> bool:
    health = shard.health()
    return bool(health["log_writable"] and health["profile_open"])


def _probe(check: Any, label: str) -> dict[str, Any]:
    try:
        ok = bool(check())
        return {"part": label, "ok": ok}
    except (LongmemError, ray.exceptions.RayError) as exc:
        return {"part": label, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
