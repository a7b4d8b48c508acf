"""Records of the writes that run after the answer (async ingest, the write after a chat reply),
for polling; the writes themselves run in the users' write lanes (``memory_core.write.lanes``)."""

from __future__ import annotations

import logging
import secrets
import threading
import traceback
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass

from memory_core.errors import LongmemError
from memory_core.write.pipeline import TurnOutcome

log = logging.getLogger("longmem.jobs")


@dataclass(frozen=True)
class JobView:
    """A write job as its caller polls it, at one moment (it crosses processes)."""

    job_id: str
    tenant: str
    user_id: str
    status: str  # queued, running, done, failed or cancelled (by an erase)
    outcomes: tuple[TurnOutcome, ...]  # what the write did with each user turn (empty until done)
    error: str | None  # why it failed, for the caller (the record is only its tenant's to read)


@dataclass
class Job:
    """One queued write."""

    job_id: str
    tenant: str
    user_id: str
    future: Future[list[TurnOutcome]]

    def view(self) -> JobView:
        """Where the write stands now."""
        future = self.future
        if future.cancelled():
            return self._view("cancelled")
        if not future.done():
            return self._view("running" if future.running() else "queued")
        exc = future.exception()
        if exc is None:
            return self._view("done", outcomes=tuple(future.result()))
        if isinstance(exc, LongmemError):
            return self._view("failed", error=f"{type(exc).__name__}: {exc}")
        return self._view("failed", error=f"internal error: {type(exc).__name__}")

    def _view(self, status: str, outcomes: tuple[TurnOutcome, ...] = (), error: str | None = None) -> JobView:
        return JobView(self.job_id, self.tenant, self.user_id, status, outcomes, error)


class JobQueue:
    """Remembers the last ``keep`` write jobs for polling; their ids start with ``prefix`` (which
    names the writer that holds them)."""

    def __init__(self, prefix: str = "", keep: int = 10_000) -> None:
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._prefix = prefix
        self._keep = keep
        self._lock = threading.Lock()

    def track(self, tenant: str, user_id: str, future: Future[list[TurnOutcome]]) -> Job:
        """Record a queued write of ``user_id``; returns the job to poll."""
        job = Job(job_id=self._prefix + secrets.token_hex(12), tenant=tenant, user_id=user_id, future=future)
        with self._lock:
            self._jobs[job.job_id] = job
            while len(self._jobs) > self._keep:
                self._jobs.popitem(last=False)
        future.add_done_callback(lambda _: _log_failure(job))
        return job

    def get(self, tenant: str, job_id: str) -> JobView | None:
        """A job of ``tenant`` (another tenant's job id is unknown to it)."""
        with self._lock:
            job = self._jobs.get(job_id)
        return job.view() if job is not None and job.tenant == tenant else None

    def of_user(self, tenant: str, user_id: str, limit: int) -> list[JobView]:
        """The newest ``limit`` job records of one of ``tenant``'s users, newest first."""
        with self._lock:
            theirs = [j for j in self._jobs.values() if j.tenant == tenant and j.user_id == user_id]
        return [job.view() for job in theirs[::-1][:limit]]

    def forget_user(self, user_id: str) -> int:
        """After erasing a user: delete every job record of theirs (results hold memory text).
        Returns how many went."""
        with self._lock:
            theirs = [job_id for job_id, job in self._jobs.items() if job.user_id == user_id]
            for job_id in theirs:
                del self._jobs[job_id]
        return len(theirs)


def _log_failure(job: Job) -> None:
    # The error's class and where it was raised, never its message: messages may name the user
    # (NotFoundError) or quote them; the job record, which only the caller's tenant can read,
    # keeps the whole message.
    if job.future.cancelled() or job.future.exception() is None:
        return
    exc = job.future.exception()
    if isinstance(exc, LongmemError):
        log.warning("write job %s failed: %s", job.job_id, type(exc).__name__)
    else:
        frames = "".join(traceback.format_tb(exc.__traceback__ if exc else None))
        log.error("write job %s failed: %s\n%s", job.job_id, type(exc).__name__, frames)
