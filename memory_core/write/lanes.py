"""Write lanes: each user's writes one at a time in arrival order, different users' in parallel.

Every write of a user (turns through the write path, memories stored as given, forget, deletes,
profile changes, erase) runs in that user's lane, so a write never races another of the same
user (search-then-add done twice at once stores a duplicate, or supersedes one fact twice),
while up to ``concurrency`` users are written at once. Users take turns: a worker that finished
one of a user's writes moves on to the next user waiting, so one user's backlog never starves
the others.

A queued write that waits for an unreachable LLM (:meth:`WriteLanes.pause`) keeps its user's lane
but not the pool: another worker takes its place, so the other users' writes that need no LLM
(memories stored as given, deletes, profile changes, erase) go on. From its first wait until it
ends, no other write that would wait for the LLM is started: it is the probe, and the rest queue
behind it (an outage costs one stand-in thread per write it caught running, and one LLM call per
retry).
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, TypeVar

from memory_core.errors import WriteQueueFullError
from memory_core.settings import WriteSettings

T = TypeVar("T")


@dataclass
class _Item:
    work: Callable[[], Any]
    future: Future[Any]
    waits_for_llm: bool = False
    queued_at: float = field(default_factory=time.monotonic)


class WriteLanes:
    """A pool of ``settings.concurrency`` working threads over per-user FIFO lanes (and one more
    for each write waiting for the LLM)."""

    def __init__(self, settings: WriteSettings, name: str = "longmem-write") -> None:
        self._settings = settings
        self._name = name
        self._lanes: dict[str, deque[_Item]] = {}
        self._ready: OrderedDict[str, None] = OrderedDict()  # users with work and no write running
        self._running: set[str] = set()
        self._erasing: set[str] = set()  # users an erase waits for (their running write stops waiting)
        self._queued = 0
        self._completed = 0
        self._paused = 0  # writes waiting in :meth:`pause` now
        self._probing: set[str] = set()  # users whose running write has waited for the LLM
        self._closed = False
        lock = threading.Lock()
        self._cond = threading.Condition(lock)  # idle workers wait on it
        self._unpause = threading.Condition(lock)  # paused writes wait on it
        self._workers: list[threading.Thread] = []
        self._numbers = itertools.count()
        with lock:
            for _ in range(settings.concurrency):
                self._add_worker()

    def _add_worker(self) -> None:
        worker = threading.Thread(target=self._work, name=f"{self._name}-{next(self._numbers)}", daemon=True)
        worker.start()
        self._workers.append(worker)

    def submit(
        self, user_id: str, work: Callable[[], T], bounded: bool = True, waits_for_llm: bool = False
    ) -> Future[T]:
        """Queue ``work`` at the end of ``user_id``'s lane.

        Args:
            user_id: whose lane.
            work: the write; its result or exception completes the future.
            bounded: refuse it when ``settings.max_pending`` writes wait already (async writes,
                which the caller answers before they run); a write the caller waits for holds a
                request thread instead, and is never refused.
            waits_for_llm: the write may :meth:`pause` for the LLM: not started while another does.

        Raises:
            WriteQueueFullError: the queue is full (nothing was queued).
            RuntimeError: the lanes are closed.
        """
        future: Future[T] = Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the write lanes are closed")
            if bounded:
                self._check_room()
            self._lanes.setdefault(user_id, deque()).append(_Item(work, future, waits_for_llm))
            self._queued += 1
            if user_id not in self._running:
                self._ready[user_id] = None
            self._cond.notify()
        return future

    def check_room(self) -> None:
        """Refuse what would be queued past ``settings.max_pending`` (before accepting it).

        Raises:
            WriteQueueFullError: the queue is full.
        """
        with self._cond:
            self._check_room()

    def _check_room(self) -> None:
        if self._queued >= self._settings.max_pending:
            raise WriteQueueFullError(self._queued, self._settings.retry_after_s)

    def run(self, user_id: str, work: Callable[[], T]) -> T:
        """Run ``work`` in ``user_id``'s lane after the writes queued before it; its result.

        Raises:
            whatever ``work`` raises.
        """
        return self.submit(user_id, work, bounded=False).result()

    def run_alone(self, user_id: str, work: Callable[[], T]) -> tuple[int, T]:
        """Cancel ``user_id``'s queued writes, then run ``work`` once the running one is done
        (an erase: nothing queued before it is written after it).

        Returns:
            How many queued writes were cancelled, and ``work``'s result.
        """
        with self._cond:
            dropped = self._lanes.pop(user_id, deque())
            self._queued -= len(dropped)
            self._ready.pop(user_id, None)
            self._erasing.add(user_id)
            self._unpause.notify_all()  # a running write waiting in :meth:`pause` gives up
        for item in dropped:
            item.future.cancel()

        def alone() -> T:
            try:
                return work()
            finally:  # before the lane is free: a write queued after the erase waits as usual
                with self._cond:
                    self._erasing.discard(user_id)

        return len(dropped), self.run(user_id, alone)

    def pause(self, user_id: str, seconds: float) -> bool:
        """Wait ``seconds`` in ``user_id``'s running write (one that waits for the LLM), its lane
        held so that the user's later writes stay behind it.

        Returns:
            False, at once, when the write must give up instead: the user is being erased, or
            the lanes are closing (the write is left for the next start).
        """
        with self._cond:
            self._probing.add(user_id)  # until the write ends, its tries included
            self._paused += 1
            try:
                if len(self._workers) - self._paused < self._settings.concurrency:
                    self._add_worker()  # the pool stays whole for the writes that need no LLM
                return not self._unpause.wait_for(lambda: self._closed or user_id in self._erasing, seconds)
            finally:
                self._paused -= 1

    def _next_user(self) -> str | None:
        """The first user waiting whose next write may start now."""
        for user_id in self._ready:
            if not (self._probing and self._lanes[user_id][0].waits_for_llm):
                return user_id
        return None

    def _work(self) -> None:
        while True:
            with self._cond:
                while (user_id := self._next_user()) is None and not (self._closed and not self._ready):
                    self._cond.wait()
                if user_id is None:
                    self._workers.remove(threading.current_thread())
                    return  # closed and nothing left to run
                del self._ready[user_id]
                lane = self._lanes[user_id]
                item = lane.popleft()
                if not lane:
                    del self._lanes[user_id]
                self._queued -= 1
                self._running.add(user_id)
            if item.future.set_running_or_notify_cancel():
                try:
                    item.future.set_result(item.work())
                except Exception as exc:  # the future carries it to whoever waits
                    item.future.set_exception(exc)
            with self._cond:
                self._completed += 1
                self._running.discard(user_id)
                if user_id in self._lanes:
                    self._ready[user_id] = None  # at the back: the next user waiting goes first
                    self._cond.notify()
                if user_id in self._probing:
                    self._probing.discard(user_id)
                    self._cond.notify_all()  # the writes held back behind the probe may start
                if len(self._workers) - self._paused > self._settings.concurrency:
                    self._workers.remove(threading.current_thread())
                    return  # a write that waited is done waiting: its stand-in leaves

    def pending(self) -> int:
        """Writes queued and not started."""
        with self._cond:
            return self._queued

    def running(self) -> int:
        """Writes running now (one per user at most)."""
        with self._cond:
            return len(self._running)

    def waiting_for_llm(self) -> int:
        """Writes that have waited for the LLM and are not done: the probe of an outage (one
        at a time, or the writes an outage caught running)."""
        with self._cond:
            return len(self._probing)

    def completed(self) -> int:
        """Writes the workers finished (done or failed) since the lanes started."""
        with self._cond:
            return self._completed

    def oldest_pending_s(self) -> float:
        """How long the oldest queued write has waited (0 with none)."""
        with self._cond:
            heads = [lane[0].queued_at for lane in self._lanes.values() if lane]
        return time.monotonic() - min(heads) if heads else 0.0

    def close(self, wait: bool = True) -> None:
        """Refuse new writes; with ``wait``, finish the queued ones first (a write waiting for
        the LLM gives up, see :meth:`pause`)."""
        with self._cond:
            self._closed = True
            if not wait:
                for lane in self._lanes.values():
                    for item in lane:
                        item.future.cancel()
                self._lanes.clear()
                self._ready.clear()
                self._queued = 0
            self._cond.notify_all()
            self._unpause.notify_all()
        while wait:
            with self._cond:
                if not self._workers:
                    return
                worker = self._workers[0]
            worker.join()
