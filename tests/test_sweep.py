"""The expiry sweep on real shards and files: what it deletes, how it paces, fails, logs and schedules.

Shards are real :class:`FactShard`s (log, FAISS) on ``tmp_path``. Faults are injected by
:class:`Probe`, a thin wrapper that passes every call through to a real shard unless told to
fail or wait first: the stand-in for a shard actor that is down or busy.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError as PydanticValidationError

from longmem.cli import cmd_sweep, main
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import (
    ConfigError,
    CorruptionError,
    StorageError,
    SweepBusyError,
    SweepIncompleteError,
)
from memory_core.models import Fact, NewFact
from memory_core.routing import shard_of
from memory_core.service import Remember, open_local_service
from memory_core.settings import LimitSettings, Settings, StorageSettings, SweepSettings, load_settings
from memory_core.store.facts import LocalFactStore, ShardHandle
from memory_core.store.shard import FactShard
from memory_core.sweep import (
    SweepLog,
    SweepRecord,
    SweepRunner,
    SweepScheduler,
    SweepStatus,
    SweepTrigger,
    next_run_after,
)

DIM = 8
T = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)  # the sweep's cut-off
CANARY_TEXT = "canary-text-5d1e9b"
CANARY_USER = "canary-user-77c0f2"


# ------------------------------------------------------------------------------- helpers


class Probe:
    """A real shard behind a switch: call n fails if ``fails(n)``, calls wait at ``gate`` and are counted."""

    def __init__(
        self,
        shard: ShardHandle,
        fails: Callable[[int], bool] = lambda n: False,
        error: Callable[[], BaseException] = lambda: StorageError("shard is down"),
        gate: threading.Event | None = None,
        on_call: Callable[[], None] | None = None,
    ) -> None:
        self.shard = shard
        self.fails = fails
        self.calls = 0
        self.error = error
        self.gate = gate
        self.on_call = on_call
        self.entered = threading.Event()
        self.limits: list[int | None] = []
        self.returned: list[int] = []

    def _enter(self) -> None:
        self.entered.set()
        if self.gate is not None:
            assert self.gate.wait(10), "test gate never opened"
        if self.on_call is not None:
            self.on_call()
        self.calls += 1
        if self.fails(self.calls - 1):
            raise self.error()

    def expire(self, now: datetime, limit: int | None = None, tenant: str | None = None) -> list[int]:
        self.limits.append(limit)
        self._enter()
        ids = self.shard.expire(now, limit, tenant)
        self.returned.append(len(ids))
        return ids

    def count_due(self, now: datetime, tenant: str | None = None) -> int:
        self._enter()
        return self.shard.count_due(now, tenant)


def _vectors(rows: int, seed: int = 0) -> np.ndarray:
    matrix = np.random.default_rng(seed).standard_normal((rows, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _fact(user: str, text: str, expire_at: datetime | None) -> NewFact:
    return NewFact(user_id=user, text=text, created_at=T - timedelta(days=10), expire_at=expire_at)


def _add(shard: FactShard | LocalFactStore, facts: list[NewFact]) -> list[Fact]:
    return shard.add(facts, _vectors(len(facts), seed=len(facts)))


def _due_facts(user: str, due: int, later: int = 0) -> list[NewFact]:
    """``due`` facts expiring before T, ``later`` expiring after it."""
    return [_fact(user, f"due {i}", T - timedelta(minutes=i + 1)) for i in range(due)] + [
        _fact(user, f"later {i}", T + timedelta(minutes=i + 1)) for i in range(later)
    ]


@pytest.fixture
def shards(tmp_path: Path) -> Iterator[Callable[[int], list[FactShard]]]:
    opened: list[FactShard] = []

    def make(count: int) -> list[FactShard]:
        new = [FactShard(tmp_path / f"shard-{len(opened) + i}", DIM) for i in range(count)]
        opened.extend(new)
        return new

    yield make
    for shard in opened:
        shard.close()


@pytest.fixture
def log(tmp_path: Path) -> SweepLog:
    return SweepLog(tmp_path / "sweeps")


def _runner(
    shards: list[ShardHandle], log: SweepLog, rests: list[float] | None = None, **settings: object
) -> SweepRunner:
    rest_log = rests if rests is not None else []
    return SweepRunner(shards, SweepSettings.model_validate(settings), log, sleep=rest_log.append)


# ------------------------------------------------------------------- what a sweep deletes


def test_sweep_deletes_exactly_the_facts_expired_before_the_cutoff(tmp_path: Path, log: SweepLog) -> None:
    storage = StorageSettings(data_dir=tmp_path / "data", shards=3)
    store = LocalFactStore(storage, LimitSettings(), DIM, "test")
    users = [f"user-{n}" for n in range(12)]
    assert len({shard_of(u, 3) for u in users}) == 3
    for n, user in enumerate(users):
        _add(
            store,
            [
                *_due_facts(user, due=n % 4 + 1),
                _fact(user, "expires exactly at T", T),
                _fact(user, "expires a microsecond after T", T + timedelta(microseconds=1)),
                _fact(user, "lasting", None),
            ],
        )
    runner = _runner(list(store.shards), log, batch_size=3)
    record = runner.run(T)

    expected_due = sum(n % 4 + 1 for n in range(12))
    assert record.status is SweepStatus.OK and record.deleted == expected_due
    per_shard = {s: sum(n % 4 + 1 for n, u in enumerate(users) if shard_of(u, 3) == s) for s in range(3)}
    assert {s.shard: s.deleted for s in record.shards} == per_shard
    for user in users:
        assert sorted(f.text for f in store.list_user(user)) == [
            "expires a microsecond after T",
            "expires exactly at T",
            "lasting",
        ]
    again = runner.run(T)
    assert again.deleted == 0 and [s.batches for s in again.shards] == [1, 1, 1]
    store.close()

    reopened = LocalFactStore(storage, LimitSettings(), DIM, "test")
    try:
        assert reopened.count_due(T) == 0
        assert sum(len(reopened.list_user(u)) for u in users) == 3 * len(users)
        assert reopened.count_due(T + timedelta(microseconds=2)) == 2 * len(users)
    finally:
        reopened.close()


def test_batches_are_bounded_and_paced_by_the_duty_cycle(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    (shard,) = shards(1)
    _add(shard, _due_facts("u", due=30, later=4))
    clock = {"t": 0.0}

    def slow_batch() -> None:
        clock["t"] += 0.1  # every batch takes 100 ms of the shard's time

    def rest(seconds: float) -> None:
        rests.append(seconds)
        clock["t"] += seconds

    probe = Probe(shard, on_call=slow_batch)
    rests: list[float] = []
    runner = SweepRunner(
        [probe],
        SweepSettings(batch_size=7, pause_seconds=0.01, duty_cycle=0.25),
        log,
        sleep=rest,
        timer=lambda: clock["t"],
    )
    record = runner.run(T)
    assert probe.limits == [7] * 5 and probe.returned == [7, 7, 7, 7, 2]
    assert record.shards[0].batches == 5 and record.deleted == 30
    # 100 ms at a 25 % duty cycle: 300 ms of rest after each full batch, none after the last.
    assert rests == pytest.approx([0.3] * 4)
    assert record.shards[0].seconds == pytest.approx(5 * 0.1 + 4 * 0.3)


def test_fast_batches_still_rest_the_pause(shards: Callable[[int], list[FactShard]], log: SweepLog) -> None:
    (shard,) = shards(1)
    _add(shard, _due_facts("u", due=10))
    rests: list[float] = []
    record = SweepRunner(
        [shard], SweepSettings(batch_size=4, pause_seconds=0.5, duty_cycle=1.0), log, sleep=rests.append
    ).run(T)
    assert record.deleted == 10 and rests == [0.5, 0.5]


def test_dry_run_counts_and_deletes_nothing(shards: Callable[[int], list[FactShard]], log: SweepLog) -> None:
    first, second = shards(2)
    _add(first, _due_facts("a", due=5, later=2))
    _add(second, _due_facts("b", due=3))
    runner = _runner([first, second], log)
    record = runner.run(T, dry_run=True)
    assert record.dry_run and record.status is SweepStatus.OK
    assert (record.due, record.deleted) == (8, 0)
    assert [(s.due, s.deleted, s.batches) for s in record.shards] == [(5, 0, 0), (3, 0, 0)]
    assert first.count_due(T) == 5 and second.count_due(T) == 3
    assert runner.run(T).deleted == 8


def test_a_tenant_sweep_takes_only_that_tenants_facts_and_survives_a_restart(
    tmp_path: Path, log: SweepLog
) -> None:
    first, second = FactShard(tmp_path / "one", DIM), FactShard(tmp_path / "two", DIM)
    for shard in (first, second):
        planted = (
            _due_facts("acme:a", due=4, later=1) + _due_facts("globex:a", due=3) + _due_facts("acme", due=2)
        )
        _add(shard, planted)
    runner = _runner([first, second], log, batch_size=3)
    assert runner.run(T, dry_run=True, tenant="acme").due == 8
    record = runner.run(T, tenant="acme")
    assert record.tenant == "acme" and record.deleted == 8 and [s.batches for s in record.shards] == [2, 2]
    for shard in (first, second):
        assert [f.text for f in shard.list_user("acme:a")] == ["later 0"]
        assert len(shard.list_user("globex:a")) == 3 and len(shard.list_user("acme")) == 2
        assert shard.count_due(T, "acme") == 0 and shard.count_due(T, "globex") == 3
        shard.close()
    first, second = FactShard(tmp_path / "one", DIM), FactShard(tmp_path / "two", DIM)
    try:
        assert (first.count_due(T, "acme"), first.count_due(T, "globex"), first.count_due(T, "")) == (0, 3, 2)
        whole = _runner([first, second], log).run(T)
        assert whole.tenant is None and whole.deleted == 10
        assert [r.tenant for r in log.list(tenant="acme")] == ["acme", "acme"]
        assert [r.tenant for r in log.list()] == [None, "acme", "acme"]
    finally:
        first.close()
        second.close()


# ------------------------------------------------------------------------ shards that fail


def test_a_shard_that_fails_twice_is_retried_and_finishes(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    healthy, flaky_shard = shards(2)
    _add(healthy, _due_facts("a", due=4))
    _add(flaky_shard, _due_facts("b", due=9))
    flaky = Probe(flaky_shard, fails=lambda n: n < 2)
    rests: list[float] = []
    runner = _runner(
        [healthy, flaky], log, rests, batch_size=5, retries=3, retry_backoff_seconds=0.5, pause_seconds=0.0
    )
    record = runner.run(T)
    assert record.status is SweepStatus.OK and record.deleted == 13
    assert (record.shards[1].attempts, record.shards[1].deleted, record.shards[1].error) == (3, 9, None)
    assert flaky_shard.count_due(T) == 0
    assert [r for r in rests if r >= 0.5] == [0.5, 1.0]  # doubling backoff


def test_retries_count_consecutive_failures_only(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    (shard,) = shards(1)
    _add(shard, _due_facts("a", due=6))
    probe = Probe(shard, fails=lambda n: n % 2 == 0)  # down, up, down, up, ...
    record = _runner([probe], log, batch_size=2, retries=1, retry_backoff_seconds=0.0).run(T)
    # Four failures in all, never two in a row: one retry each is enough.
    assert record.status is SweepStatus.OK and record.deleted == 6 and record.shards[0].attempts == 5


def test_a_shard_that_stays_down_is_reported_and_the_others_are_swept(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    first, dead_shard, third = shards(3)
    for shard, user in ((first, "a"), (dead_shard, "b"), (third, "c")):
        _add(shard, _due_facts(user, due=4))
    dead = Probe(dead_shard, fails=lambda n: True)
    record = _runner([first, dead, third], log, retries=2, retry_backoff_seconds=0.0).run(T)
    assert record.status is SweepStatus.PARTIAL and record.deleted == 8
    assert record.failed() == {1: "StorageError: shard is down"}
    assert (record.shards[1].attempts, record.shards[1].deleted) == (3, 0)
    assert [s.error for s in record.shards] == [None, "StorageError: shard is down", None]
    assert dead_shard.count_due(T) == 4 and first.count_due(T) == third.count_due(T) == 0
    with pytest.raises(SweepIncompleteError) as raised:
        record.raise_for_status()
    assert raised.value.failed == {1: "StorageError: shard is down"}
    assert log.list(1) == [record]


class ActorDied(Exception):
    """Stands in for ray.exceptions.RayActorError, which the core must not import."""


def test_caller_named_errors_are_retried_and_others_propagate(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    (shard,) = shards(1)
    _add(shard, _due_facts("a", due=3))
    settings = SweepSettings(retry_backoff_seconds=0.0)
    revived = Probe(shard, fails=lambda n: n == 0, error=lambda: ActorDied("actor died"))
    runner = SweepRunner([revived], settings, log, sleep=lambda _: None, retryable=(ActorDied,))
    assert runner.run(T).shards[0].attempts == 2

    buggy = Probe(shard, fails=lambda n: n == 0, error=lambda: RuntimeError("a bug, not an outage"))
    runner = SweepRunner([buggy], settings, log, sleep=lambda _: None, retryable=(ActorDied,))
    with pytest.raises(RuntimeError):
        runner.run(T)
    assert len(log.list()) == 1  # the bug left no record
    assert runner.run(T).status is SweepStatus.OK  # and did not leave the runner busy


# ---------------------------------------------------------------------- one sweep at a time


def test_a_second_sweep_while_one_runs_is_refused_and_logged(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    (shard,) = shards(1)
    _add(shard, _due_facts("a", due=3))
    gate = threading.Event()
    probe = Probe(shard, gate=gate)
    runner = _runner([probe], log)
    results: list[SweepRecord] = []
    worker = threading.Thread(target=lambda: results.append(runner.run(T)))
    worker.start()
    try:
        assert probe.entered.wait(10)
        with pytest.raises(SweepBusyError) as refused:
            runner.run(T, trigger=SweepTrigger.JOB)
    finally:
        gate.set()
        worker.join(10)
    (first,) = results
    assert refused.value.running_id == first.id and first.deleted == 3
    newest, oldest = log.list()
    assert (newest.id, newest.status) == (first.id, SweepStatus.OK)
    assert (oldest.status, oldest.trigger, oldest.deleted, oldest.shards) == (
        SweepStatus.REFUSED,
        SweepTrigger.JOB,
        0,
        [],
    )


# ----------------------------------------------------------------------------- the log


def _record(n: int, status: SweepStatus = SweepStatus.OK) -> SweepRecord:
    at = T + timedelta(hours=n)
    return SweepRecord(
        id=f"run-{n}",
        trigger=SweepTrigger.MANUAL,
        now=at,
        started_at=at,
        finished_at=at,
        dry_run=False,
        status=status,
        deleted=n,
    )


def test_log_appends_durably_and_lists_newest_first(
    tmp_path: Path, log: SweepLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def watching_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", watching_fsync)
    log.append(_record(1))
    assert str(log.path.resolve()) in synced  # the record itself was fsynced before append returned
    assert str(log.path.parent.resolve()) in synced  # and so was the new file's directory entry
    log.append(_record(2))
    log.append(_record(3))
    assert [r.id for r in log.list()] == ["run-3", "run-2", "run-1"]
    assert [r.id for r in log.list(2)] == ["run-3", "run-2"]
    assert [r.id for r in SweepLog(log.path.parent).list()] == ["run-3", "run-2", "run-1"]
    assert SweepLog(tmp_path / "nothing-yet").list() == []


def test_log_keeps_only_the_newest_records(log: SweepLog, tmp_path: Path) -> None:
    small = SweepLog(log.path.parent, keep=3)
    for n in range(7):
        small.append(_record(n))
    assert [r.id for r in small.list()] == ["run-6", "run-5", "run-4"]
    assert len(small.path.read_bytes().splitlines()) == 3
    assert not list(small.path.parent.glob("*.tmp"))


def test_torn_last_line_is_ignored_and_cut_before_the_next_append(log: SweepLog) -> None:
    log.append(_record(1))
    log.append(_record(2))
    with open(log.path, "ab") as handle:
        handle.write(_record(3).model_dump_json().encode()[:40])  # a crash mid-append
    assert [r.id for r in log.list()] == ["run-2", "run-1"]
    restarted = SweepLog(log.path.parent)
    restarted.append(_record(4))
    assert [r.id for r in restarted.list()] == ["run-4", "run-2", "run-1"]
    assert all(json.loads(line) for line in log.path.read_bytes().splitlines())


def test_damage_before_the_last_line_is_corruption(log: SweepLog) -> None:
    log.append(_record(1))
    log.append(_record(2))
    lines = log.path.read_bytes().splitlines(keepends=True)
    log.path.write_bytes(b'{"id": "run-1", "trig\n' + lines[1])
    with pytest.raises(CorruptionError):
        log.list()


def test_log_that_cannot_be_written_raises_storage_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(StorageError):
        SweepLog(blocker / "sweeps").append(_record(1))


def test_records_hold_no_fact_text_and_no_user_id(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    good, dead_shard = shards(2)
    _add(good, [_fact(CANARY_USER, f"{CANARY_TEXT} {i}", T - timedelta(hours=1)) for i in range(3)])
    _add(dead_shard, [_fact(CANARY_USER + "-2", CANARY_TEXT, T - timedelta(hours=1))])
    dead = Probe(dead_shard, fails=lambda n: True)
    runner = _runner([good, dead], log, retries=0)
    runner.run(T, dry_run=True)
    assert runner.run(T).status is SweepStatus.PARTIAL
    written = log.path.read_bytes()
    assert written.count(b"\n") == 2 and b'"deleted":3' in written  # the log is the one we think
    assert CANARY_TEXT.encode() not in written and CANARY_USER.encode() not in written


# ---------------------------------------------------------------------------- schedule


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


@pytest.mark.parametrize(
    ("settings", "after", "expected"),
    [
        ({}, "2026-03-01T10:17:03+00:00", "2026-03-01T11:00:00+00:00"),
        ({}, "2026-03-01T11:00:00+00:00", "2026-03-01T12:00:00+00:00"),  # strictly after
        ({}, "2026-03-01T23:30:00+00:00", "2026-03-02T00:00:00+00:00"),
        ({"schedule_every": "PT15M"}, "2026-03-01T10:17:03+00:00", "2026-03-01T10:30:00+00:00"),
        ({"schedule_every": "PT6H"}, "2026-03-01T18:00:00+08:00", "2026-03-01T12:00:00+00:00"),
        ({"off_peak": "02:00-05:00"}, "2026-03-01T10:17:00+00:00", "2026-03-02T02:00:00+00:00"),
        ({"off_peak": "02:00-05:00"}, "2026-03-01T03:30:00+00:00", "2026-03-01T04:00:00+00:00"),
        ({"off_peak": "02:00-05:00"}, "2026-03-01T04:30:00+00:00", "2026-03-02T02:00:00+00:00"),
        (
            {"schedule_every": "PT30M", "off_peak": "02:30-03:00"},
            "2026-03-01T00:00:00+00:00",
            "2026-03-01T02:30:00+00:00",
        ),
        # Wrapping midnight in UTC+8: 22:00-02:00 local is 14:00-18:00 UTC.
        (
            {"off_peak": "22:00-02:00", "off_peak_timezone": "Asia/Shanghai"},
            "2026-03-01T10:00:00+00:00",
            "2026-03-01T14:00:00+00:00",
        ),
        (
            {"off_peak": "22:00-02:00", "off_peak_timezone": "Asia/Shanghai"},
            "2026-03-01T16:10:00+00:00",
            "2026-03-01T17:00:00+00:00",
        ),
        (
            {"off_peak": "22:00-02:00", "off_peak_timezone": "Asia/Shanghai"},
            "2026-03-01T17:30:00+00:00",
            "2026-03-02T14:00:00+00:00",
        ),
        # Daylight saving moves a local window against the UTC slots: 01:00 Berlin is 00:00 UTC in
        # winter and 23:00 UTC the day before in summer.
        (
            {"off_peak": "01:00-02:00", "off_peak_timezone": "Europe/Berlin"},
            "2026-01-10T12:00:00+00:00",
            "2026-01-11T00:00:00+00:00",
        ),
        (
            {"off_peak": "01:00-02:00", "off_peak_timezone": "Europe/Berlin"},
            "2026-07-10T12:00:00+00:00",
            "2026-07-10T23:00:00+00:00",
        ),
    ],
)
def test_next_run_is_aligned_and_inside_the_window(
    settings: dict[str, str], after: str, expected: str
) -> None:
    assert next_run_after(_at(after), SweepSettings.model_validate(settings)) == _at(expected)


def test_schedule_off_and_windows_that_never_fit() -> None:
    assert next_run_after(T, SweepSettings(schedule_every=timedelta(0))) is None
    never = SweepSettings(schedule_every=timedelta(days=1), off_peak="01:00-02:00")
    with pytest.raises(ConfigError):
        next_run_after(T, never)


@pytest.mark.parametrize(
    "fields",
    [
        {"off_peak": "2:00-5:00"},
        {"off_peak": "02:00-02:00"},
        {"off_peak": "25:00-01:00"},
        {"off_peak_timezone": "Mars/Olympus"},
        {"duty_cycle": 0},
        {"schedule_every": -3600},
    ],
)
def test_bad_sweep_settings_are_refused(fields: dict[str, object]) -> None:
    with pytest.raises(PydanticValidationError):
        SweepSettings.model_validate(fields)
    with pytest.raises(ConfigError):
        load_settings(sweep=fields)


def test_scheduler_runs_on_time_refuses_overlaps_and_stops(
    shards: Callable[[int], list[FactShard]], log: SweepLog
) -> None:
    (shard,) = shards(1)
    _add(shard, _due_facts("a", due=2))
    gate = threading.Event()
    probe = Probe(shard, gate=gate)
    settings = SweepSettings(schedule_every=timedelta(milliseconds=100))
    runner = SweepRunner([probe], settings, log, sleep=lambda _: None)
    manual = threading.Thread(target=lambda: runner.run(T))
    manual.start()
    scheduler = SweepScheduler(runner, settings)
    try:
        assert probe.entered.wait(10)
        first = scheduler.start()
        assert first is not None and first.microsecond % 100_000 == 0
        deadline = time.monotonic() + 5
        while not any(r.status is SweepStatus.REFUSED for r in log.list()) and time.monotonic() < deadline:
            time.sleep(0.02)
        refused = [r for r in log.list() if r.status is SweepStatus.REFUSED]
        assert refused and refused[0].trigger is SweepTrigger.SCHEDULE
        gate.set()
        manual.join(10)
        deadline = time.monotonic() + 5
        while not any(r.trigger is SweepTrigger.SCHEDULE and r.status is SweepStatus.OK for r in log.list()):
            assert time.monotonic() < deadline, "no scheduled sweep ran"
            time.sleep(0.02)
        assert scheduler.is_running()  # the refusals did not kill it
    finally:
        gate.set()
        scheduler.stop(timeout=5)
    assert not scheduler.is_running()
    assert shard.count_due(T) == 0


def test_scheduler_with_the_schedule_off_starts_nothing(log: SweepLog) -> None:
    scheduler = SweepScheduler(_runner([], log), SweepSettings(schedule_every=timedelta(0)))
    assert scheduler.start() is None
    scheduler.stop()


# ---------------------------------------------------------------------- service and CLI


def test_service_sweeps_through_the_runner_and_logs(tmp_path: Path, embedder: Embedder) -> None:
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data", shards=2))
    svc = open_local_service(settings, ManualClock(T), embedder)
    try:
        svc.remember("u", [Remember("boarding soon", ttl=timedelta(hours=1)), Remember("lasting")])
        record = svc.sweep(T + timedelta(hours=2))
        assert (record.deleted, record.status, len(record.shards)) == (1, SweepStatus.OK, 2)
        assert svc.sweeper is not None and svc.sweeper.log.list() == [record]
        assert SweepLog.for_data_dir(tmp_path / "data").list() == [record]
    finally:
        svc.close()


def test_cli_sweep_prints_the_record_and_fails_when_partial(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embedder: Embedder
) -> None:
    data = str(tmp_path / "data")
    assert main(["--data-dir", data, "remember", "--user", "zoe", "meeting", "--ttl", "1h"]) == 0
    capsys.readouterr()
    assert main(["--data-dir", data, "sweep", "--now", "2999-01-01T00:00:00+00:00", "--dry-run"]) == 0
    record = json.loads(capsys.readouterr().out)
    assert (record["due"], record["deleted"], record["dry_run"], record["status"]) == (1, 0, True, "ok")
    assert len(record["shards"]) == Settings().storage.shards

    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "data"))
    svc = open_local_service(settings, embedder=embedder)
    try:
        assert svc.sweeper is not None
        dead_shard = FactShard(tmp_path / "dead", DIM)
        dead = Probe(dead_shard, fails=lambda n: True)
        svc.sweeper = SweepRunner([dead], SweepSettings(retries=0), svc.sweeper.log)
        # main() turns this, like every LongmemError, into "error: ..." on stderr and status 2.
        with pytest.raises(SweepIncompleteError):
            cmd_sweep(svc, argparse.Namespace(now=T, dry_run=False))
        assert json.loads(capsys.readouterr().out)["status"] == "partial"
        dead_shard.close()
    finally:
        svc.close()
