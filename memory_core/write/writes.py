"""Every write of a user, in that user's write lane: what the HTTP API and the inspector call.

The service does the writing; this object decides when: one write of a user at a time, in the
order they arrived, with different users written in parallel (:class:`WriteLanes`). Reads
(recall, prompts, listings) do not queue.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from concurrent.futures import Future
from datetime import datetime

from memory_core.models import Fact, ProfileEntry, Role, Turn
from memory_core.service import EraseReceipt, MemoryService, Remember
from memory_core.store.profile import learned_source
from memory_core.write.forget import ForgetResult
from memory_core.write.lanes import WriteLanes
from memory_core.write.pipeline import TurnOutcome


def _numbered(turns: Sequence[Turn]) -> tuple[Turn, ...]:
    return tuple(
        t if t.turn_id else t.model_copy(update={"turn_id": f"t-{secrets.token_hex(8)}"}) for t in turns
    )


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
        numbered = _numbered(turns)
        future = self._accept(user_id, session_id, numbered, at or svc.clock.now())
        svc.accept_turns(user_id, session_id, numbered)
        return future

    def write_after_reply(
        self, user_id: str, session_id: str, turns: Sequence[Turn]
    ) -> Future[list[TurnOutcome]]:
        """Accept the turns of a chat reply already given (already in the window) for their write;
        never refused for a full queue, since the reply was given.

        Raises:
            StorageError: the turns could not be made durable.
        """
        numbered = _numbered(turns)
        return self._accept(user_id, session_id, numbered, numbered[0].at or self.service.clock.now())

    def _accept(
        self, user_id: str, session_id: str, turns: tuple[Turn, ...], at: datetime
    ) -> Future[list[TurnOutcome]]:
        seq = self.service.facts.accept_turns(user_id, session_id, turns, at)
        return self.lanes.submit(user_id, lambda: self._write(user_id, seq, turns, at), bounded=False)

    def _write(
        self, user_id: str, seq: int, turns: tuple[Turn, ...], at: datetime, resumed: bool = False
    ) -> list[TurnOutcome]:
        svc = self.service
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
        outcomes = svc.write_turns(user_id, turns, at) if any(t.role is Role.USER for t in turns) else []
        svc.facts.turns_done(user_id, seq)
        return outcomes

    def resume(self) -> int:
        """Queue the write of every batch accepted and not written when the last process stopped
        (each user's in the order accepted), and put its turns back in their windows.

        Returns:
            How many batches were queued.
        """
        batches = self.service.facts.pending_turns()
        for batch in batches:
            for turn in batch.turns:
                self.service.add_turn(batch.user_id, batch.session_id, turn)
            self.lanes.submit(
                batch.user_id,
                lambda b=batch: self._write(b.user_id, b.seq, b.turns, b.at, resumed=True),  # type: ignore[misc]
                bounded=False,
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
        """Cancel the user's queued writes, wait for the running one, then erase every trace:
        nothing queued before the erase is written after it.

        Returns:
            The receipt, and how many queued writes were cancelled.
        """
        cancelled, receipt = self.lanes.run_alone(user_id, lambda: self.service.erase(user_id))
        return receipt, cancelled
