"""Working memory: the last turns of each session, capped by count and by a token budget.

The turns are kept in the user's shard (``memory_core.store.inbox``), durably, so a session's
window is the same whichever ingress replica asks, and survives restarts; the token budget is
applied when the window is read.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from memory_core.models import Turn
from memory_core.settings import WorkingSettings
from memory_core.text import estimate_tokens


class WindowStore(Protocol):
    """Where sessions' turns are kept: the fact store, in each user's shard."""

    def extend_window(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> None:
        """Add turns to the end of the session's window, durably."""
        ...

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The session's last turns (at most ``working.turns``), oldest first."""
        ...


class WorkingMemory:
    """Recent turns per (user, session)."""

    def __init__(self, settings: WorkingSettings, store: WindowStore) -> None:
        self._settings = settings
        self._store = store

    def append(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> None:
        """Add turns to the end of the session's window.

        Raises:
            StorageError: not written; the window is as before.
        """
        self._store.extend_window(user_id, session_id, turns)

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The newest turns of the session that fit the turn count and token budget, oldest first."""
        turns = self._store.window(user_id, session_id)[-self._settings.turns :]
        kept: list[Turn] = []
        budget = self._settings.token_budget
        for turn in reversed(turns):
            cost = estimate_tokens(turn.content)
            if cost > budget:
                break
            budget -= cost
            kept.append(turn)
        return kept[::-1]
