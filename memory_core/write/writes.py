"""Every write of a user, in that user's write lane: what the HTTP API and the inspector call.

The service does the writing; this object decides when: one write of a user at a time, in the
order they arrived, with different users written in parallel (:class:`WriteLanes`). Reads
(recall, prompts, listings) do not queue.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

from memory_core.models import Fact, ProfileEntry, Turn
from memory_core.service import EraseReceipt, MemoryService, Remember
from memory_core.write.forget import ForgetResult
from memory_core.write.lanes import WriteLanes
from memory_core.write.pipeline import TurnOutcome


class UserWrites:
    """The service's writes, each in its user's lane."""

    def __init__(self, service: MemoryService, lanes: WriteLanes) -> None:
        self.service = service
        self.lanes = lanes

    def ingest(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> list[TurnOutcome]:
        """:meth:`MemoryService.ingest`, after the user's writes queued before it."""
        svc = self.service
        svc.check_turns(user_id, turns)
        return self.lanes.run(user_id, lambda: svc.ingest(user_id, session_id, turns, at))

    def submit_turns(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> Future[list[TurnOutcome]]:
        """Check turns and add them to the session's window now; queue their write.

        Raises:
            ValidationError: a bad user id or turn; nothing added or queued.
            WriteQueueFullError: too many writes wait; nothing added or queued.
        """
        svc = self.service
        svc.check_turns(user_id, turns)
        when = at or svc.clock.now()  # the time they were received, not when the queue reaches them
        future = self.lanes.submit(user_id, lambda: svc.write_turns(user_id, turns, when))
        svc.accept_turns(user_id, session_id, turns)
        return future

    def write_after_reply(self, user_id: str, turns: Sequence[Turn]) -> Future[list[TurnOutcome]]:
        """Queue the write of a chat turn that was already answered (never refused: the reply
        was given)."""
        svc = self.service
        return self.lanes.submit(user_id, lambda: svc.write_turns(user_id, turns), bounded=False)

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
        """Cancel the user's queued writes, wait for the running one, then erase every trace:
        nothing queued before the erase is written after it.

        Returns:
            The receipt, and how many queued writes were cancelled.
        """
        cancelled, receipt = self.lanes.run_alone(user_id, lambda: self.service.erase(user_id))
        return receipt, cancelled
