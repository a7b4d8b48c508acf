"""The in-process scenario target: a MemoryService driven by a manual clock."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from memory_core.clock import ManualClock
from memory_core.models import Turn
from memory_core.prompt import render_profile
from memory_core.service import MemoryService


class LocalTarget:
    """Runs scenario steps directly on a service whose clock is a :class:`ManualClock`."""

    def __init__(self, service: MemoryService, clock: ManualClock) -> None:
        self._svc = service
        self._clock = clock

    def ingest(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> None:
        """Move the clock to ``at`` and ingest synchronously."""
        self._clock.set(at)
        self._svc.ingest(user_id, session_id, turns, at)

    def recall_texts(self, user_id: str, query: str, k: int) -> list[str]:
        """Top-k facts plus every profile entry, as the prompt builder would use them."""
        facts = [hit.fact.text for hit in self._svc.recall(user_id, query, k)]
        return facts + [entry.text for entry in self._svc.profile(user_id)]

    def profile_text(self, user_id: str) -> str:
        """The rendered profile block."""
        return render_profile(self._svc.profile(user_id))

    def advance_and_sweep(self, to: datetime) -> None:
        """Move the clock and sweep expired facts, as the scheduled job would."""
        self._clock.set(to)
        self._svc.sweep(to).raise_for_status()

    def llm_usage(self) -> tuple[int, float]:
        """LLM calls and seconds of the service so far."""
        if self._svc.llm is None:
            return 0, 0.0
        return self._svc.llm.stats.calls, self._svc.llm.stats.seconds
