"""Writer actors: each user's writes go to one writer (by the user-id hash over
``storage.shards`` writers, whichever shard holds the user now), whichever ingress replica took
the call.

A writer holds the shard's write lanes (``memory_core.write.lanes``): one write of a user at a
time, in arrival order, users of the shard in parallel up to ``write.concurrency``. So the
ingress keeps no state of its own and can run as many replicas as wanted: two replicas taking
one user's turns still hand them to one writer, in one lane. Writers are named, detached and
restarted by Ray when they die; a restarted writer first queues the batches its shard accepted
and did not write. A writer's job records live in its memory (a restart forgets them); the
accepted turns themselves are on disk in the shard.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import ray
from ray.serve.handle import DeploymentHandle

from deployments.parts import remote_service
from deployments.stores import ActorClient, OwnerActor, actor_options
from memory_core.errors import StorageError
from memory_core.models import Fact, ProfileEntry, Turn
from memory_core.routing import shard_of
from memory_core.service import EraseReceipt, Remember
from memory_core.settings import Settings
from memory_core.telemetry import configure_tracing
from memory_core.write.forget import ForgetResult
from memory_core.write.jobs import JobQueue, JobView
from memory_core.write.lanes import WriteLanes
from memory_core.write.pipeline import TurnOutcome
from memory_core.write.writes import UserWrites

log = logging.getLogger("longmem.writers")

_WRITER_CALLS = frozenset(
    {
        "ingest",
        "submit_turns",
        "write_after_reply",
        "job",
        "jobs_of",
        "remember",
        "forget",
        "forget_ids",
        "set_preference",
        "delete_preference",
        "erase",
        "stats",
        "drain",
        "health",
    }
)
_JOB_ID = re.compile(r"w(\d{1,6})-[0-9a-f]+")


def writer_of(user_id: str, writers: int) -> int:
    """The writer of ``user_id``'s writes: fixed by the user-id hash over the app's writers
    (``storage.shards`` of them), whichever shard holds the user after reshards, so a user's
    writes stay in one lane while their slot moves."""
    return shard_of(user_id, writers)


def writer_actor_name(shard_no: int) -> str:
    """The Ray name of shard ``shard_no``'s writer."""
    return f"longmem-writer-{shard_no:04d}"


class WriterActor(OwnerActor):
    """The writes of one shard's users, in their lanes."""

    _allowed = _WRITER_CALLS
    _own = frozenset({"health", "drain"})

    def __init__(
        self, settings: Settings, shard_no: int, embedder: DeploymentHandle, llm: DeploymentHandle
    ) -> None:
        configure_tracing(settings.telemetry)
        service = remote_service(
            settings, embedder, embedder.info.remote().result(), llm, llm.name.remote().result()
        )
        self._shard_no = shard_no
        self._lanes = WriteLanes(settings.write, name=f"longmem-write-{shard_no}")
        self._target = UserWrites(
            service, self._lanes, JobQueue(prefix=f"w{shard_no}-"), label=f"writer{shard_no}"
        )
        # Turns of this writer's users accepted (answered 202) and not written when the last
        # writer stopped, in whichever shard holds them now (a reshard moves them with their user).
        writers = settings.storage.shards
        mine = [b for b in service.facts.pending_turns() if writer_of(b.user_id, writers) == shard_no]
        resumed = self._target.resume(mine)
        if resumed:
            log.info("writer %d resumed the write of %d accepted turn batches", shard_no, resumed)

    def health(self) -> dict[str, Any]:
        """The writer answers: its process, and how many writes it holds."""
        lanes = self._lanes
        return {
            "writer": self._shard_no,
            "pid": os.getpid(),
            "pending": lanes.pending(),
            "running": lanes.running(),
        }

    def drain(self) -> int:
        """Finish every queued write and refuse new ones (before the app stops); how many were left."""
        left = self._lanes.pending() + self._lanes.running()
        self._lanes.close(wait=True)
        return left


class WriterClient(ActorClient):
    """One writer actor; a write it did not acknowledge before dying is not repeated here (the
    caller retries with its Idempotency-Key)."""

    def call(self, method: str, *args: Any) -> Any:
        return self._call(method, *args)


class RemoteWrites:
    """The writer actors seen as :class:`~memory_core.write.writes.Writes`: each call goes to the
    writer of the user's shard."""

    def __init__(self, writers: Sequence[WriterClient]) -> None:
        self._writers = list(writers)

    def _of(self, user_id: str) -> WriterClient:
        return self._writers[writer_of(user_id, len(self._writers))]

    def ingest(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> list[TurnOutcome]:
        return self._of(user_id).call("ingest", user_id, session_id, list(turns), at)  # type: ignore[no-any-return]

    def submit_turns(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> str:
        return self._of(user_id).call("submit_turns", user_id, session_id, list(turns), at)  # type: ignore[no-any-return]

    def write_after_reply(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> str:
        return self._of(user_id).call("write_after_reply", user_id, session_id, list(turns))  # type: ignore[no-any-return]

    def job(self, tenant: str, job_id: str) -> JobView | None:
        match = _JOB_ID.fullmatch(job_id)
        if match is None or int(match.group(1)) >= len(self._writers):
            return None
        return self._writers[int(match.group(1))].call("job", tenant, job_id)  # type: ignore[no-any-return]

    def jobs_of(self, tenant: str, user_id: str, limit: int) -> list[JobView]:
        return self._of(user_id).call("jobs_of", tenant, user_id, limit)  # type: ignore[no-any-return]

    def remember(self, user_id: str, items: Sequence[Remember], at: datetime | None = None) -> list[Fact]:
        return self._of(user_id).call("remember", user_id, list(items), at)  # type: ignore[no-any-return]

    def forget(self, user_id: str, utterance: str, at: datetime | None = None) -> ForgetResult:
        return self._of(user_id).call("forget", user_id, utterance, at)  # type: ignore[no-any-return]

    def forget_ids(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        return self._of(user_id).call("forget_ids", user_id, list(fact_ids))  # type: ignore[no-any-return]

    def set_preference(self, user_id: str, text: str, source: str, key: str | None = None) -> ProfileEntry:
        return self._of(user_id).call("set_preference", user_id, text, source, key)  # type: ignore[no-any-return]

    def delete_preference(self, user_id: str, key: str) -> None:
        self._of(user_id).call("delete_preference", user_id, key)

    def erase(self, user_id: str) -> tuple[EraseReceipt, int]:
        return self._of(user_id).call("erase", user_id)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, dict[str, float]]:
        merged: dict[str, dict[str, float]] = {}
        for writer in self._writers:
            for name, series in writer.call("stats").items():
                merged.setdefault(name, {}).update(series)
        return merged

    def health(self) -> list[dict[str, Any]]:
        """Each writer's :meth:`WriterActor.health`."""
        return [writer.call("health") for writer in self._writers]


def open_writers(settings: Settings, embedder: DeploymentHandle, llm: DeploymentHandle) -> RemoteWrites:
    """Get (creating on first use) one writer per shard.

    A writer's calls wait for the user's earlier writes and for the LLM: they are given
    ``write.wait_timeout_s``; the writer takes as many calls at once as every ingress replica
    may send it.
    """
    remote = ray.remote(WriterActor)
    concurrency = settings.serve.max_ongoing_requests * settings.serve.most_ingress_replicas + 16
    clients = []
    for shard_no in range(settings.storage.shards):
        options = {
            **actor_options(settings, writer_actor_name(shard_no), data=None),
            "max_concurrency": concurrency,
        }
        actor = remote.options(**options).remote(settings, shard_no, embedder, llm)
        clients.append(WriterClient(actor, f"writer {shard_no}", settings.write.wait_timeout_s))
    return RemoteWrites(clients)


def stop_writers(settings: Settings) -> list[str]:
    """Let every writer finish its queued writes, then end it (no restart).

    Returns:
        Problems met (a writer that was already gone is not one).
    """
    problems = []
    for shard_no in range(settings.storage.shards):
        name = writer_actor_name(shard_no)
        try:
            actor = ray.get_actor(name, namespace=settings.serve.namespace)
        except ValueError:
            continue
        try:
            WriterClient(actor, name, settings.write.wait_timeout_s).call("drain")
        except StorageError as exc:
            problems.append(f"{name}: {exc}")
        ray.kill(actor, no_restart=True)
    return problems
