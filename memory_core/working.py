"""Working memory: the last turns of each session, capped by count and by a token budget."""

from __future__ import annotations

import threading
from collections import OrderedDict, deque

from memory_core.models import Turn
from memory_core.settings import WorkingSettings
from memory_core.text import estimate_tokens


class WorkingMemory:
    """Recent turns per (user, session), in process memory; sessions are evicted least recently used."""

    def __init__(self, settings: WorkingSettings, max_sessions: int = 10_000) -> None:
        self._settings = settings
        self._max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], deque[Turn]] = OrderedDict()
        self._lock = threading.Lock()

    def append(self, user_id: str, session_id: str, turn: Turn) -> None:
        """Add a turn to the end of the session's window."""
        key = (user_id, session_id)
        with self._lock:
            turns = self._sessions.pop(key, None) or deque(maxlen=self._settings.turns)
            turns.append(turn)
            self._sessions[key] = turns
            while len(self._sessions) > self._max_sessions:
                self._sessions.popitem(last=False)

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The newest turns of the session that fit the turn count and token budget, oldest first."""
        with self._lock:
            turns = list(self._sessions.get((user_id, session_id), ()))
        kept: list[Turn] = []
        budget = self._settings.token_budget
        for turn in reversed(turns):
            cost = estimate_tokens(turn.content)
            if cost > budget:
                break
            budget -= cost
            kept.append(turn)
        return kept[::-1]

    def erase_user(self, user_id: str) -> int:
        """Drop every session of the user; returns how many turns were dropped."""
        with self._lock:
            keys = [key for key in self._sessions if key[0] == user_id]
            return sum(len(self._sessions.pop(key)) for key in keys)
