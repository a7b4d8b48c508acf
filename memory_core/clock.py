"""Time, injected: the service never calls ``datetime.now`` itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol

from memory_core.models import as_utc


class Clock(Protocol):
    """Source of the current time."""

    def now(self) -> datetime:
        """Return the current time as an aware UTC datetime."""
        ...


class SystemClock:
    """The machine's wall clock."""

    def now(self) -> datetime:
        """Return the wall-clock time in UTC."""
        return datetime.now(UTC)


class ManualClock:
    """A clock that only moves when told to (scenario runs, tests)."""

    def __init__(self, start: datetime) -> None:
        self._now = as_utc(start)

    def now(self) -> datetime:
        """Return the time last set."""
        return self._now

    def set(self, value: datetime) -> None:
        """Move the clock to ``value`` (forwards or backwards)."""
        self._now = as_utc(value)

    def advance(self, delta: timedelta) -> None:
        """Move the clock forwards by ``delta``."""
        self._now += delta
