"""Every write of a user, in that user's write lane: what the HTTP API and the inspector call.

The service does the writing; this object decides when: one write of a user at a time, in the
order they arrived, with different users written in parallel (:class:`WriteLanes`). Reads
(recall, prompts, listings) do not queue. :class:`Writes` is what the API needs of it; under
Serve each shard's users are written by that shard's writer actor (``deployments.writers``),
which holds one of these.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Protocol

from memory_core.errors import LLMUnavailableError
from memory_core.models import Fact, ProfileEntry, Role, Turn
from memory_core.service import EraseReceipt, MemoryService, Remember
from memory_core.store.inbox import PendingTurns
from memory_core.store.profile import learned_source
from memory_core.tenancy import tenant_of
from memory_core.write.forget import ForgetResult
from memory_core.write.jobs import Job, JobQueue, JobView
from memory_core.write.lanes import WriteLanes
from memory_core.write.pipeline import TurnOutcome

log = logging.getLogger("longmem.write")

# Seconds a queued write waits before trying a turn again while the LLM cannot be reached: an
# accepted turn is written once it answers, never dropped.
LLM_RETRY_S = (0.5, 1.0, 2.0, 5.0, 10.0, 30.0)


class Writes(Protocol):
    """Every write of a user, each in the user's lane, and the records of queued ones."""

    def ingest(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> list[TurnOutcome]:
        """Write turns now (see :meth:`MemoryService.ingest`), after the user's queued writes."""
        ...

    def submit_turns(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> str:
        """Accept turns durably for a later write; the id of its job."""
        ...

    def write_after_reply(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> str:
        """Accept a chat reply's turns durably for their write; the id of its job."""
        ...

    def job(self, tenant: str, job_id: str) -> JobView | None:
        """A write job of ``tenant``."""
        ...

    def jobs_of(self, tenant: str, user_id: str, limit: int) -> list[JobView]:
        """The user's newest write jobs, newest first."""
        ...

    def remember(self, user_id: str, items: Sequence[Remember], at: datetime | None = None) -> list[Fact]:
        """Store facts as given."""
        ...

    def forget(self, user_id: str, utterance: str, at: datetime | None = None) -> ForgetResult:
        """Forget what a request names."""
        ...

    def forget_ids(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        """Delete memories by id."""
        ...

    def set_preference(self, user_id: str, text: str, source: str, key: str | None = None) -> ProfileEntry:
        """Add or replace a profile entry."""
        ...

    def delete_preference(self, user_id: str, key: str) -> None:
        """Delete a profile entry."""
        ...

    def erase(self, user_id: str) -> tuple[EraseReceipt, int]:
        """Cancel the user's queued writes and erase every trace; the receipt and how many job
        records went."""
        ...

    def stats(self) -> dict[str, dict[str, float]]:
        """Gauges of the write side, by metric name and writer."""
        ...


def _numbered(turns: Sequence[Turn]) -> tuple[Turn, ...]:
    return tuple(
        t if t.turn_id else t.model_copy(update={"turn_id": f"t-{secrets.token_hex(8)}"}) for t in turns
    )


class UserWrites:
    """The service's writes, each in its user's lane (a :class:`Writes` in this process)."""

    def __init__(
        self, service: MemoryService, lanes: WriteLanes, jobs: JobQueue | None = None, label: str = "local"
    ) -> None:
        """``label`` names this writer in the metrics."""
        self.service = service
        self.lanes = lanes
        self.jobs = jobs or JobQueue()
        self._label = label
        # Users with a batch that stopped waiting for the LLM and stays for the next start: their
        # later batches stay too, or one the LLM answered in the meantime would be written first.
        self._left: set[str] = set()

    def ingest(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> list[TurnOutcome]:
        """:meth:`MemoryService.ingest`, after the user's writes queued before it; a turn without
        an id gets one, as in :meth:`queue_turns`."""
        svc = self.service
        svc.check_turns(user_id, turns)
        numbered = _numbered(turns)
        return self.lanes.run(user_id, lambda: svc.ingest(user_id, session_id, numbered, at))

    def submit_turns(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> str:
        """:meth:`queue_turns`; the id of the job to poll."""
        return self.queue_turns(user_id, session_id, turns, at).job_id

    def queue_turns(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> Job:
        """Accept turns for a later write: checked, on disk in the user's shard (the answer may
        say "accepted" once this returns), in the session's window, and queued in the user's lane.

        Every turn without an id gets one: it is the source of the memories the turn leaves,
        and what lets a write resumed after a crash skip the turns it had written already.

        Raises:
            ValidationError: a bad user id or turn; nothing accepted.
            WriteQueueFullError: too many writes wait; nothing accepted.
            StorageError: the turns could not be made durable; nothing accepted.
        """
        svc = self.service
        svc.check_turns(user_id, turns)
        self.lanes.check_room()
        return self._accept(user_id, session_id, _numbered(turns), at or svc.clock.now())

    def write_after_reply(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> str:
        """Accept the turns of a chat reply already given for their write (and the session's
        window); never refused for a full queue, since the reply was given. The job's id.

        Raises:
            StorageError: the turns could not be made durable.
        """
        numbered = _numbered(turns)
        return self._accept(user_id, session_id, numbered, numbered[0].at or self.service.clock.now()).job_id

    def _accept(self, user_id: str, session_id: str, turns: tuple[Turn, ...], at: datetime) -> Job:
        seq = self.service.facts.accept_turns(user_id, session_id, turns, at)
        future = self.lanes.submit(
            user_id,
            lambda: self._write(user_id, session_id, seq, turns, at),
            bounded=False,
            waits_for_llm=True,
        )
        return self.jobs.track(tenant_of(user_id), user_id, future)

    def job(self, tenant: str, job_id: str) -> JobView | None:
        """A write job of ``tenant`` (another tenant's job id is unknown to it)."""
        return self.jobs.get(tenant, job_id)

    def jobs_of(self, tenant: str, user_id: str, limit: int) -> list[JobView]:
        """The newest ``limit`` write jobs of one of ``tenant``'s users, newest first."""
        return self.jobs.of_user(tenant, user_id, limit)

    def _write(
        self,
        user_id: str,
        session_id: str,
        seq: int,
        turns: tuple[Turn, ...],
        at: datetime,
        resumed: bool = False,
    ) -> list[TurnOutcome]:
        svc = self.service
        if user_id in self._left:
            raise LLMUnavailableError(
                "an earlier batch of the user waits for the next start; the turns stay accepted"
            )
        if resumed:
            # A process that died in the middle of this batch may have written some of its
            # turns: their memories carry their ids.
            facts = svc.list_facts(user_id, include_superseded=True)
            written = {turn_id for fact in facts for turn_id in fact.source_turn_ids}
            written |= {e.source for e in svc.profile(user_id)}
            turns = tuple(
                t
                for t in turns
                if t.role is Role.ASSISTANT or not written & {t.turn_id, learned_source(t.turn_id)}
            )
        try:
            outcomes = (
                svc.write_turns(user_id, turns, at, session_id, self._llm_waiter(user_id))
                if any(t.role is Role.USER for t in turns)
                else []
            )
        except LLMUnavailableError as exc:
            # Not done: the batch stays in the inbox, and the next start writes it (an erase
            # takes it with the user).
            self._left.add(user_id)
            raise LLMUnavailableError(
                f"stopped waiting for the LLM ({exc}); the turns stay accepted"
            ) from None
        svc.facts.turns_done(user_id, seq)
        return outcomes

    def _llm_waiter(self, user_id: str) -> Callable[[], bool]:
        """For one batch: waits a little longer each time the LLM could not be reached (up to
        the last of :data:`LLM_RETRY_S`); False when the write must give up (an erase of the user,
        or the writer stopping: the batch stays on disk for the next start)."""
        tries = 0

        def wait() -> bool:
            nonlocal tries
            delay = LLM_RETRY_S[min(tries, len(LLM_RETRY_S) - 1)]
            tries += 1
            log.warning("the LLM could not be reached; a queued write tries again in %.1f s", delay)
            return self.lanes.pause(user_id, delay)

        return wait

    def resume(self, batches: Sequence[PendingTurns] | None = None) -> int:
        """Queue the write of the batches accepted and not written when the last process stopped
        (each user's in the order accepted): ``batches``, or every shard's.

        Returns:
            How many batches were queued.
        """
        batches = self.service.facts.pending_turns() if batches is None else batches
        for batch in batches:
            self.lanes.submit(
                batch.user_id,
                lambda b=batch: self._write(b.user_id, b.session_id, b.seq, b.turns, b.at, resumed=True),  # type: ignore[misc]
                bounded=False,
                waits_for_llm=True,
            )
        return len(batches)

    def remember(self, user_id: str, items: Sequence[Remember], at: datetime | None = None) -> list[Fact]:
        """:meth:`MemoryService.remember` in the user's lane."""
        return self.lanes.run(user_id, lambda: self.service.remember(user_id, items, at))

    def forget(self, user_id: str, utterance: str, at: datetime | None = None) -> ForgetResult:
        """:meth:`MemoryService.forget` in the user's lane."""
        return self.lanes.run(user_id, lambda: self.service.forget(user_id, utterance, at))

    def forget_ids(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        """:meth:`MemoryService.forget_ids` in the user's lane."""
        return self.lanes.run(user_id, lambda: self.service.forget_ids(user_id, fact_ids))

    def set_preference(self, user_id: str, text: str, source: str, key: str | None = None) -> ProfileEntry:
        """:meth:`MemoryService.set_preference` in the user's lane."""
        return self.lanes.run(user_id, lambda: self.service.set_preference(user_id, text, source, key))

    def delete_preference(self, user_id: str, key: str) -> None:
        """:meth:`MemoryService.delete_preference` in the user's lane."""
        self.lanes.run(user_id, lambda: self.service.delete_preference(user_id, key))

    def erase(self, user_id: str) -> tuple[EraseReceipt, int]:
        """Cancel the user's queued writes, wait for the running one, then erase every trace,
        job records included: nothing queued before the erase is written after it.

        Returns:
            The receipt, and how many job records went (their results held memory text).
        """

        def erase() -> EraseReceipt:
            self._left.discard(user_id)  # its batches left for the next start go with it
            return self.service.erase(user_id)

        _, receipt = self.lanes.run_alone(user_id, erase)
        return receipt, self.jobs.forget_user(user_id)

    def stats(self) -> dict[str, dict[str, float]]:
        """Gauges: queued and running writes, the oldest wait, writes waiting for the LLM, writes
        done, LLM calls in flight, LLM calls made and seconds waited on them."""
        lanes, llm, label = self.lanes, self.service.llm, self._label
        return {
            "write_jobs_pending": {label: lanes.pending()},
            "writes_running": {label: lanes.running()},
            "write_oldest_pending_seconds": {label: lanes.oldest_pending_s()},
            "writes_waiting_for_llm": {label: lanes.waiting_for_llm()},
            "writes_completed": {label: lanes.completed()},
            "llm_calls_in_flight": {label: llm.in_flight if llm is not None else 0},
            "llm_calls": {label: llm.stats.calls if llm is not None else 0},
            "llm_seconds": {label: llm.stats.seconds if llm is not None else 0.0},
        }
