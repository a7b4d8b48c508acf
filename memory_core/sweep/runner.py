"""The expiry sweep: delete due facts shard by shard, in bounded, paced batches.

Pacing is what keeps recall fast during a sweep. Each batch holds its shard for the time it
takes, so after a batch of t seconds the shard rests at least ``t*(1/duty_cycle-1)`` (and at
least ``pause_seconds``): a busy shard answers slower and so gets longer rests. The same
runner serves the CLI, the app's schedule and the Ray job; in Ray the shards are actor
proxies and ``retryable`` names the errors of an actor that is down.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import NoReturn

from memory_core.clock import Clock, SystemClock
from memory_core.errors import LongmemError, SweepBusyError
from memory_core.models import as_utc
from memory_core.settings import SweepSettings
from memory_core.store.facts import ShardHandle
from memory_core.sweep.log import SweepLog
from memory_core.sweep.record import ShardSweep, SweepRecord, SweepStatus, SweepTrigger

logger = logging.getLogger(__name__)

# Error messages go into records the API lists; a bound keeps a remote traceback from filling them.
_MAX_ERROR_CHARS = 500


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:_MAX_ERROR_CHARS]


class SweepRunner:
    """Runs sweeps over a fixed list of shards, one sweep at a time, and logs every run."""

    def __init__(
        self,
        shards: Sequence[ShardHandle],
        settings: SweepSettings,
        log: SweepLog,
        *,
        clock: Clock | None = None,
        sleep: Callable[[float], None] = time.sleep,
        timer: Callable[[], float] = time.monotonic,
        retryable: tuple[type[BaseException], ...] = (),
    ) -> None:
        """Sweep ``shards`` (numbered in the given order) and append each run to ``log``.

        Args:
            shards: the shards, in routing order (each run sweeps those there as it starts).
            settings: batch size, pacing, parallelism and retries.
            log: where run records go.
            clock: gives the records' start and end times (the wall clock by default).
            sleep: how the runner rests between batches and retries.
            timer: monotonic seconds, to time batches.
            retryable: errors besides LongmemError that mean "try this shard again",
                e.g. the errors of a Ray actor that died or timed out.
        """
        self._shards = shards  # the store's own list: a reshard grows or shrinks it in place
        self._settings = settings
        self.log = log
        self._clock = clock or SystemClock()
        self._sleep = sleep
        self._timer = timer
        self._retryable: tuple[type[BaseException], ...] = (LongmemError, *retryable)
        self._busy = threading.Lock()
        self._running: str | None = None

    def run(
        self,
        now: datetime,
        dry_run: bool = False,
        trigger: SweepTrigger = SweepTrigger.MANUAL,
        tenant: str | None = None,
    ) -> SweepRecord:
        """Delete every fact with expire_at before ``now`` in every shard, and log the run.

        Shards are swept in parallel, at most ``parallel_shards`` at a time. A shard that fails
        is retried with doubling backoff; one that still fails is reported in the record
        (status partial) while the others are swept to the end.

        Args:
            now: the cut-off; a fact expiring exactly at ``now`` is kept.
            dry_run: only count the due facts; delete nothing.
            trigger: who asked, for the record.
            tenant: sweep only this tenant's users (every tenant's when None).

        Returns:
            The run record, already appended to the log.

        Raises:
            SweepBusyError: another sweep of this runner is running; a refused record is logged.
            StorageError: the run record could not be logged (the deletes themselves are durable).
            Exception: an error a shard raised that is neither a LongmemError nor ``retryable``
                (a bug, not an outage) propagates once the other shards are done; no record is logged.
        """
        cutoff = as_utc(now)
        if not self._busy.acquire(blocking=False):
            self._refuse(cutoff, dry_run, trigger, tenant)
        try:
            sweep_id = uuid.uuid4().hex
            self._running = sweep_id
            started = self._clock.now()
            logger.info(
                "sweep %s (%s) started: cut-off %s, dry run %s, tenant %s",
                sweep_id,
                trigger,
                cutoff,
                dry_run,
                tenant or "all",
            )
            current = list(self._shards)
            workers = max(1, min(self._settings.parallel_shards, len(current)))
            with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="sweep") as pool:
                numbers = range(len(current))
                shards = list(
                    pool.map(lambda n: self._sweep_shard(n, current[n], cutoff, dry_run, tenant), numbers)
                )
            failed = any(s.error is not None for s in shards)
            record = SweepRecord(
                id=sweep_id,
                trigger=trigger,
                tenant=tenant,
                now=cutoff,
                started_at=started,
                finished_at=self._clock.now(),
                dry_run=dry_run,
                status=SweepStatus.PARTIAL if failed else SweepStatus.OK,
                shards=shards,
                deleted=sum(s.deleted for s in shards),
                due=sum(s.due or 0 for s in shards) if dry_run else None,
            )
            self.log.append(record)
            logger.log(
                logging.WARNING if failed else logging.INFO,
                "sweep %s %s: deleted %d, due %s, failed shards %s",
                sweep_id,
                record.status,
                record.deleted,
                record.due,
                sorted(record.failed()),
            )
            return record
        finally:
            self._running = None
            self._busy.release()

    def _refuse(self, cutoff: datetime, dry_run: bool, trigger: SweepTrigger, tenant: str | None) -> NoReturn:
        running = self._running or "unknown"
        at = self._clock.now()
        refused = SweepRecord(
            id=uuid.uuid4().hex,
            trigger=trigger,
            tenant=tenant,
            now=cutoff,
            started_at=at,
            finished_at=at,
            dry_run=dry_run,
            status=SweepStatus.REFUSED,
            deleted=0,
        )
        logger.warning("sweep (%s) refused: sweep %s is still running", trigger, running)
        self.log.append(refused)
        raise SweepBusyError(running)

    def _sweep_shard(
        self, shard_no: int, shard: ShardHandle, cutoff: datetime, dry_run: bool, tenant: str | None
    ) -> ShardSweep:
        settings = self._settings
        began = self._timer()
        deleted = batches = failures = 0
        attempts = 1
        due: int | None = None
        while True:
            try:
                if dry_run:
                    due = shard.count_due(cutoff, tenant)
                    break
                batch_began = self._timer()
                ids = shard.expire(cutoff, settings.batch_size, tenant)
                took = self._timer() - batch_began
            except self._retryable as exc:
                failures += 1
                if failures > settings.retries:
                    logger.warning("sweep: shard %d failed %d times, giving up: %s", shard_no, failures, exc)
                    return ShardSweep(
                        shard=shard_no,
                        deleted=deleted,
                        batches=batches,
                        attempts=attempts,
                        seconds=self._timer() - began,
                        error=_describe(exc),
                    )
                backoff = settings.retry_backoff_seconds * 2 ** (failures - 1)
                logger.warning("sweep: shard %d failed (%s); retry in %.1f s", shard_no, exc, backoff)
                attempts += 1
                self._sleep(backoff)
                continue
            # Retries count consecutive failures: a shard that recovers gets its full allowance again.
            failures = 0
            batches += 1
            deleted += len(ids)
            if len(ids) < settings.batch_size:
                break
            self._sleep(max(settings.pause_seconds, took * (1 / settings.duty_cycle - 1)))
        return ShardSweep(
            shard=shard_no,
            deleted=deleted,
            due=due,
            batches=batches,
            attempts=attempts,
            seconds=self._timer() - began,
        )
