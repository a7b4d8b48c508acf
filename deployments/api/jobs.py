"""Memory writes that run after the answer: async ingest and the write after a chat reply."""

from __future__ import annotations

import logging
import secrets
import threading
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from memory_core.errors import LongmemError
from memory_core.write.pipeline import TurnOutcome

log = logging.getLogger("longmem.jobs")


@dataclass
class Job:
    """One queued write."""

    job_id: str
    tenant: str
    user_id: str
    status: str = "queued"
    outcomes: list[TurnOutcome] = field(default_factory=list)
    error: str | None = None


class JobQueue:
    """Runs writes one at a time, in order (the LLM serialises them anyway, and order keeps
    "update" resolution right); remembers the last ``keep`` jobs for polling.

    Jobs live in this replica's memory: a restart loses queued writes that were never
    acknowledged as done (their turns were only acknowledged as received).
    """

    def __init__(self, keep: int = 10_000) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="longmem-write")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._keep = keep
        self._lock = threading.Lock()

    def submit(self, tenant: str, user_id: str, work: Callable[[], list[TurnOutcome]]) -> Job:
        """Queue ``work`` writing memories of ``user_id``; returns the job to poll."""
        job = Job(job_id=secrets.token_hex(12), tenant=tenant, user_id=user_id)
        with self._lock:
            self._jobs[job.job_id] = job
            while len(self._jobs) > self._keep:
                self._jobs.popitem(last=False)
        self._pool.submit(self._run, job, work)
        return job

    def _run(self, job: Job, work: Callable[[], list[TurnOutcome]]) -> None:
        with self._lock:
            if job.status == "cancelled":
                return
            job.status = "running"
        try:
            job.outcomes = work()
            job.status = "done"
        # Logs get the error's class and where it was raised, never its message: messages may
        # name the user (NotFoundError) or quote them; the job record, which only the caller's
        # tenant can read, keeps the whole message.
        except LongmemError as exc:
            job.status, job.error = "failed", f"{type(exc).__name__}: {exc}"
            log.warning("write job %s failed: %s", job.job_id, type(exc).__name__)
        except Exception as exc:  # a bug or a dead actor: the job must still end, as failed
            job.status, job.error = "failed", f"internal error: {type(exc).__name__}"
            frames = "".join(traceback.format_tb(exc.__traceback__))
            log.error("write job %s failed: %s\n%s", job.job_id, type(exc).__name__, frames)

    def get(self, tenant: str, job_id: str) -> Job | None:
        """A job of ``tenant`` (another tenant's job id is unknown to it)."""
        with self._lock:
            job = self._jobs.get(job_id)
        return job if job is not None and job.tenant == tenant else None

    def of_user(self, tenant: str, user_id: str, limit: int) -> list[Job]:
        """The newest ``limit`` job records of one of ``tenant``'s users, newest first."""
        with self._lock:
            theirs = [j for j in self._jobs.values() if j.tenant == tenant and j.user_id == user_id]
        return theirs[::-1][:limit]

    def forget_user(self, user_id: str) -> int:
        """Before erasing a user: drop their queued writes, wait for a running one, and delete
        every job record of theirs (results hold memory text). Returns how many jobs went."""
        with self._lock:
            for job in self._jobs.values():
                if job.user_id == user_id and job.status == "queued":
                    job.status = "cancelled"
        # The single writer runs jobs in order: an empty job queued now runs after the current one.
        self._pool.submit(lambda: None).result()
        with self._lock:
            theirs = [job_id for job_id, job in self._jobs.items() if job.user_id == user_id]
            for job_id in theirs:
                del self._jobs[job_id]
        return len(theirs)

    def pending(self) -> int:
        """Jobs not finished yet."""
        with self._lock:
            return sum(job.status in ("queued", "running") for job in self._jobs.values())

    def close(self) -> None:
        """Finish the queued writes, then stop."""
        self._pool.shutdown(wait=True)
