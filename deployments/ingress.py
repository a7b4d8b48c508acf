"""The ingress deployment: the HTTP API over a memory service whose parts are the other deployments."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

import ray
from fastapi import FastAPI
from ray import serve
from ray.serve.handle import DeploymentHandle

from deployments.api.app import create_api
from deployments.api.auth import Authenticator
from deployments.api.idempotency import Replays
from deployments.api.jobs import JobQueue
from deployments.api.metrics import Metrics, write_stats
from deployments.api.runtime import Runtime
from deployments.binding import check_binding
from deployments.embedder import RemoteEmbedder
from deployments.llm import RemoteEngine
from deployments.stores import ShardClient, open_profile, open_shards
from deployments.sweeper import SweeperClient, open_sweeper
from memory_core.embedding import make_embedder
from memory_core.errors import LongmemError
from memory_core.llm.structured import StructuredLLM
from memory_core.service import MemoryService
from memory_core.settings import Settings
from memory_core.store.facts import ShardedFactStore
from memory_core.telemetry import configure_tracing
from memory_core.write.lanes import WriteLanes
from memory_core.write.writes import UserWrites

log = logging.getLogger("longmem.ingress")


@serve.deployment(name="ingress")
@serve.ingress()
class Ingress:
    """Holds the service; Serve routes HTTP to the FastAPI app built from it."""

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
        remote_embedder = RemoteEmbedder(embedder, await embedder.info.remote(), local)
        self._embedder = remote_embedder
        self._shards = open_shards(settings, remote_embedder.dim, remote_embedder.name)
        self._profiles = open_profile(settings)
        self._llm_handle = llm
        facts = ShardedFactStore(self._shards, settings.limits)
        service = MemoryService(
            settings,
            remote_embedder,
            facts,
            self._profiles,
            llm=StructuredLLM(RemoteEngine(llm, await llm.name.remote())),
        )
        sweeper = open_sweeper(settings, remote_embedder.dim, remote_embedder.name)
        await sweeper.start_schedule.remote()
        self._lanes = WriteLanes(settings.write)
        writes = UserWrites(service, self._lanes)
        # Turns accepted (answered 202) and not written when the last process stopped.
        resumed = writes.resume()
        if resumed:
            log.info("resumed the write of %d accepted turn batches", resumed)
        self._runtime = Runtime(
            settings=settings,
            service=service,
            writes=writes,
            replays=Replays(facts, service.clock, timedelta(hours=settings.write.idempotency_hours)),
            auth=Authenticator(settings.serve),
            jobs=JobQueue(),
            metrics=Metrics(self._stats),
            sweeps=SweeperClient(sweeper),
            health=self._health,
        )

    def __serve_build_asgi_app__(self) -> FastAPI:
        return create_api(self._runtime)

    def _stats(self) -> dict[str, dict[str, float]]:
        shards = [shard.stats() for shard in self._shards]
        return {
            "facts": {f"shard{i}": s["facts"] for i, s in enumerate(shards)},
            "users": {f"shard{i}": s["users"] for i, s in enumerate(shards)},
            **write_stats(self._lanes, self._runtime.service.llm),
        }

    def _health(self) -> dict[str, Any]:
        report: dict[str, Any] = {"shards": [], "ok": True}
        for shard_no, shard in enumerate(self._shards):
            report["shards"].append(_probe(lambda s=shard: _shard_ok(s), f"shard {shard_no}"))
        report["profile_store"] = _probe(lambda: self._profiles.health()["duckdb_open"], "profile store")
        # Texts to store always go to the deployment: probe it, not a local question embedder.
        report["embedder"] = _probe(
            lambda: self._embedder.embed_passages(["health"]).shape == (1, self._embedder.dim), "embedder"
        )
        report["llm"] = _probe(lambda: bool(self._llm_handle.name.remote().result()), "llm")
        parts = [*report["shards"], report["profile_store"], report["embedder"], report["llm"]]
        report["ok"] = all(part["ok"] for part in parts)
        return report

    def drain(self) -> int:
        """Finish every queued memory write (called before the app stops); returns how many were left."""
        left = self._lanes.pending() + self._lanes.running()
        self._lanes.close(wait=True)
        return left


def _shard_ok(shard: ShardClient) -> bool:
    health = shard.health()
    return bool(health["log_writable"])


def _probe(check: Any, label: str) -> dict[str, Any]:
    try:
        ok = bool(check())
        return {"part": label, "ok": ok}
    except (LongmemError, ray.exceptions.RayError) as exc:
        return {"part": label, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
