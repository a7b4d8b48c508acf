"""When the app sweeps: slots aligned to the period, optionally only inside an off-peak window.

:func:`next_run_after` is pure (time in, time out); :class:`Scheduler` only waits for the times
it is given and runs its job (:class:`SweepScheduler` the sweep, the sweeper actor's backups too).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from memory_core.clock import Clock, SystemClock
from memory_core.errors import ConfigError, LongmemError, SweepBusyError
from memory_core.models import as_utc
from memory_core.settings import SweepSettings
from memory_core.sweep.record import SweepTrigger
from memory_core.sweep.runner import SweepRunner

logger = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# A slot may fit the window only in part of the year (DST shifts local time against UTC slots).
_SEARCH_DAYS = 400


def _slot_after(t: datetime, every: timedelta) -> datetime:
    """The first multiple of ``every`` since the epoch strictly after ``t``."""
    return _EPOCH + ((t - _EPOCH) // every + 1) * every


def _slot_from(t: datetime, every: timedelta) -> datetime:
    """The first multiple of ``every`` since the epoch at or after ``t``."""
    return _EPOCH - ((_EPOCH - t) // every) * every


def next_run_after(t: datetime, settings: SweepSettings) -> datetime | None:
    """The next scheduled sweep time strictly after ``t``.

    Slots are the multiples of ``schedule_every`` since the Unix epoch, which for periods
    that divide a day are the multiples since midnight UTC (hourly: on the hour). With an
    off-peak window, the first slot that falls inside it (start inclusive, end exclusive,
    local time of ``off_peak_timezone``).

    Args:
        t: any aware time (naive is taken as UTC).
        settings: period, window and time zone.

    Returns:
        The time in UTC, or None when the schedule is off (``schedule_every`` is 0).

    Raises:
        ConfigError: no slot falls inside the window for over a year (window shorter than
            the period and off its alignment).
    """
    every = settings.schedule_every
    if every <= timedelta(0):
        return None
    slot = _slot_after(as_utc(t), every)
    bounds = settings.off_peak_bounds()
    if bounds is None:
        return slot
    start, end = bounds
    zone = ZoneInfo(settings.off_peak_timezone)
    # Start a day early: a window that wraps midnight may have opened yesterday and still be open.
    day = slot.astimezone(zone).date() - timedelta(days=1)
    for _ in range(_SEARCH_DAYS):
        opens = datetime.combine(day, start, tzinfo=zone).astimezone(UTC)
        closes_on = day + timedelta(days=1) if end <= start else day
        closes = datetime.combine(closes_on, end, tzinfo=zone).astimezone(UTC)
        candidate = max(slot, _slot_from(opens, every))
        if candidate < closes:
            return candidate
        day += timedelta(days=1)
    raise ConfigError(
        f"no sweep slot every {every} falls inside the off-peak window {settings.off_peak} "
        f"({settings.off_peak_timezone}); widen the window or shorten schedule_every"
    )


class Scheduler:
    """Runs ``job`` at the times ``next_after`` gives, in a daemon thread until stopped."""

    def __init__(
        self,
        name: str,
        job: Callable[[datetime], object],
        next_after: Callable[[datetime], datetime | None],
        clock: Clock | None = None,
    ) -> None:
        """Schedule ``job`` (called with the time it runs at); nothing runs until :meth:`start`.

        Args:
            name: what runs, for logs and the thread's name ("sweep", "backup").
            job: the work; a LongmemError it raises is logged and the next time comes.
            next_after: the next time strictly after the one given, or None for never.
            clock: the time source the schedule follows (the wall clock by default).
        """
        self._name = name
        self._job = job
        self._next_after = next_after
        self._clock = clock or SystemClock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.next_run: datetime | None = None

    def start(self) -> datetime | None:
        """Start the schedule thread.

        Returns:
            The first scheduled time, or None when the schedule is off (no thread starts).

        Raises:
            ConfigError: no time fits the schedule (raised here, not in the thread).
        """
        if self._thread is not None:
            raise ConfigError(f"the {self._name} scheduler is already started")
        self.next_run = self._next_after(self._clock.now())
        if self.next_run is None:
            return None
        self._thread = threading.Thread(target=self._loop, name=f"{self._name}-scheduler", daemon=True)
        self._thread.start()
        return self.next_run

    def is_running(self) -> bool:
        """Whether the schedule thread is alive (health checks)."""
        return self._thread is not None and self._thread.is_alive()

    def stop(self, timeout: float | None = None) -> None:
        """Stop scheduling and wait for the thread (and a job it is running) to end."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        due = self.next_run
        while due is not None:
            while (wait := (due - self._clock.now()).total_seconds()) > 0:
                if self._stop.wait(wait):
                    return
            if self._stop.is_set():
                return
            try:
                self._job(self._clock.now())
            except SweepBusyError as exc:
                # The runner logged the refusal; a schedule tick is simply skipped.
                logger.info("scheduled %s skipped: %s", self._name, exc)
            except LongmemError:
                # The next tick tries again; the job's own record and this log say what went wrong.
                logger.exception("scheduled %s failed", self._name)
            due = self._next_after(max(self._clock.now(), due))
            self.next_run = due


class SweepScheduler(Scheduler):
    """Runs ``runner`` at the times :func:`next_run_after` gives."""

    def __init__(self, runner: SweepRunner, settings: SweepSettings, clock: Clock | None = None) -> None:
        """Schedule ``runner`` by ``settings`` (period and off-peak window); nothing runs until
        :meth:`start`. Overlapping runs are refused by the runner's one-at-a-time rule."""
        super().__init__(
            "sweep",
            lambda now: runner.run(now, trigger=SweepTrigger.SCHEDULE),
            lambda t: next_run_after(t, settings),
            clock,
        )


def every_period(every: timedelta) -> Callable[[datetime], datetime | None]:
    """The ``next_after`` of a plain period: the multiples of ``every`` since the Unix epoch
    (hourly: on the hour); never when ``every`` is 0."""
    if every <= timedelta(0):
        return lambda _: None
    return lambda t: _slot_after(as_utc(t), every)
