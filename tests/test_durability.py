"""Durability of fact shards on real files: crashes, torn tails, damaged logs and snapshots.

Every test writes through the real store (log, snapshots, FAISS) into ``tmp_path``, damages
the files the way a crash, a bad disk or an operator could, and reopens. The rule under test:
an acknowledged write is never lost silently; either it is there after reopen, or opening
fails with CorruptionError.
"""

from __future__ import annotations

import errno
import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, BinaryIO, NoReturn

import numpy as np
import pytest

from memory_core.errors import CorruptionError, NotFoundError, StorageError
from memory_core.models import MAX_SOURCES, Fact, NewFact
from memory_core.routing import shard_of
from memory_core.settings import LimitSettings, StorageSettings
from memory_core.store import snapshot as snap
from memory_core.store import wal
from memory_core.store.facts import LocalFactStore
from memory_core.store.fsutil import write_atomically
from memory_core.store.shard import FactShard

DIM = 16
NOW = datetime(2024, 6, 1, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[1]
WRITER = Path(__file__).with_name("crash_writer.py")


# ------------------------------------------------------------------------------- helpers


def _unit(rng: np.random.Generator, rows: int) -> np.ndarray:
    matrix = rng.standard_normal((rows, DIM)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def _batch(user: str, first: int, count: int) -> list[NewFact]:
    return [
        NewFact(user_id=user, text=f"fact-{n}", created_at=NOW - timedelta(days=1) + timedelta(seconds=n))
        for n in range(first, first + count)
    ]


@dataclass
class _Writes:
    """What a test wrote to a shard, to compare with what a reopened shard holds."""

    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(7))
    live: dict[int, tuple[Fact, np.ndarray]] = field(default_factory=dict)
    next_n: int = 0

    def add(self, shard: FactShard, user: str, count: int) -> list[Fact]:
        vectors = _unit(self.rng, count)
        stored = shard.add(_batch(user, self.next_n, count), vectors)
        self.next_n += count
        self.live.update((fact.id, (fact, vector)) for fact, vector in zip(stored, vectors, strict=True))
        return stored

    def delete(self, shard: FactShard, facts: list[Fact]) -> None:
        shard.delete(facts[0].user_id, [f.id for f in facts])
        for fact in facts:
            del self.live[fact.id]

    def assert_held_by(self, shard: FactShard) -> None:
        """The shard holds exactly the live facts (so none deleted), with their vectors."""
        users = {fact.user_id for fact, _ in self.live.values()}
        held = {f.id: f for user in users for f in shard.list_user(user, include_superseded=True)}
        assert held.keys() == self.live.keys()
        assert shard.stats()["facts"] == len(self.live)
        for fact_id, (fact, vector) in self.live.items():
            assert held[fact_id] == fact
            np.testing.assert_allclose(shard.vectors_of(fact.user_id, [fact_id])[0], vector, atol=1e-6)
        for fact, vector in list(self.live.values())[:5]:
            (best, score), *_ = shard.search(fact.user_id, vector, k=1, now=NOW)
            assert best.id == fact.id and score == pytest.approx(1.0, abs=1e-5)


# Each round of _write_history logs three adds and a delete.
_RECORDS_PER_ROUND = 4


def _write_history(directory: Path, snapshots: int) -> tuple[_Writes, list[int]]:
    """Rounds of adds and deletes with a snapshot between rounds, so records follow the last one.

    Returns:
        What was written, and the snapshot sequence numbers in order.
    """
    writes = _Writes()
    shard = FactShard(directory, DIM)
    seqs: list[int] = []
    for round_no in range(snapshots + 1):
        first = writes.add(shard, "alice", 4)
        writes.add(shard, "bob", 3)
        writes.add(shard, "alice", 2)
        writes.delete(shard, first[:2])
        if round_no < snapshots:
            seqs.append(shard.snapshot())
    shard.close()
    return writes, seqs


def _flip(path: Path, offset: int, mask: int = 0xFF) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= mask
    path.write_bytes(bytes(data))


def _record_offsets(path: Path) -> list[int]:
    """Start offsets of the records in an undamaged log segment."""
    data = path.read_bytes()
    offsets: list[int] = []
    pos = 0
    while pos < len(data):
        offsets.append(pos)
        (length,) = struct.unpack_from("<I", data, pos)
        pos += 9 + length  # header: length u32, crc32 u32, op u8
    return offsets


# ----------------------------------------------------------------------- crash test


@dataclass
class _Ledger:
    """What the crash writer reported, line by line."""

    acked: dict[int, tuple[str, str, np.ndarray]] = field(default_factory=dict)
    deleted: set[int] = field(default_factory=set)
    attempted: set[str] = field(default_factory=set)
    snapshots: dict[int, int] = field(default_factory=dict)
    last_try: tuple[str, set[str]] = ("", set())
    done: bool = False

    def feed(self, line: str) -> None:
        if not line.endswith("\n"):
            return  # cut short by the kill: the call it reports may not have returned
        kind, *rest = line.split()
        if kind == "TRY" and rest[0] == "ADD":
            first, count = int(rest[1]), int(rest[2])
            texts = {f"fact-{n}" for n in range(first, first + count)}
            self.attempted |= texts
            self.last_try = ("ADD", texts)
        elif kind == "TRY" and rest[0] == "DEL":
            self.last_try = ("DEL", set(rest[2:]))
        elif kind == "ADD":
            fact_id, user, text, vector = rest
            self.acked[int(fact_id)] = (user, text, np.frombuffer(bytes.fromhex(vector), dtype=np.float32))
        elif kind == "DEL":
            self.deleted.add(int(rest[0]))
        elif kind == "SNAP":
            self.snapshots[int(rest[0])] = int(rest[1])
        elif kind == "DONE":
            self.done = True

    def in_flight(self, op: str) -> set[str]:
        """Texts (ADD) or ids (DEL) of the call running at the kill; it may or may not have taken effect."""
        kind, items = self.last_try
        return items if kind == op else set()


def _pump(stream: IO[str], lines: queue.Queue[str | None]) -> None:
    for line in stream:
        lines.put(line)
    lines.put(None)


def _next_line(lines: queue.Queue[str | None], deadline: float, log: Path) -> str | None:
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        pytest.fail(f"crash writer stalled; its stderr:\n{log.read_text()}")


def _check_recovery(shard: FactShard, acked_snapshot: int) -> None:
    """The recovery report agrees with the files the shard recovered from."""
    report = shard.recovery
    assert report.snapshot_seq is not None and report.snapshot_seq >= acked_snapshot
    # Only a snapshot the kill cut short (renamed, sidecar not yet written) may be skipped.
    assert len(report.skipped_snapshots) <= 1
    assert all(seq > report.snapshot_seq for seq in report.skipped_snapshots)
    segments = [s for s in wal.list_segments(shard.directory) if s >= report.snapshot_seq]
    assert segments[0] == report.snapshot_seq
    on_disk = sum(len(wal.read_segment(wal.segment_path(shard.directory, s), False)[0]) for s in segments)
    assert report.replayed_records == on_disk
    if report.torn_tail is not None:
        newest = wal.segment_path(shard.directory, segments[-1])
        assert report.torn_tail.path == newest
        assert report.torn_tail.offset == newest.stat().st_size
        assert report.torn_tail.dropped_bytes > 0


def test_kill_during_writes_keeps_every_acknowledged_write(tmp_path: Path) -> None:
    """SIGKILL a writer mid-stream: every acked add and delete survives, nothing else appears."""
    rng = np.random.default_rng(2024)
    kill_after = int(rng.integers(3_500, 4_500))
    shards, users, snapshot_every = 2, 7, 100
    data_dir = tmp_path / "data"
    stderr_log = tmp_path / "writer.stderr"
    command = [
        sys.executable,
        str(WRITER),
        str(data_dir),
        *("--seed", "11", "--total", "10000", "--dim", str(DIM), "--shards", str(shards)),
        *("--users", str(users), "--snapshot-every", str(snapshot_every), "--embedder", "crash-test"),
        *("--snapshot-at", "1500", "3000"),
    ]
    python_path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": python_path}
    ledger = _Ledger()
    lines: queue.Queue[str | None] = queue.Queue()
    deadline = time.monotonic() + 45
    with open(stderr_log, "w") as stderr:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    assert child.stdout is not None
    reader = threading.Thread(target=_pump, args=(child.stdout, lines), daemon=True)
    reader.start()
    try:
        while len(ledger.acked) < kill_after:
            line = _next_line(lines, deadline, stderr_log)
            if line is None:
                pytest.fail(f"crash writer exited early; its stderr:\n{stderr_log.read_text()}")
            ledger.feed(line)
        time.sleep(float(rng.uniform(0.0, 0.02)))
        child.send_signal(signal.SIGKILL)
        # Acks written before the kill but not read yet count too.
        while (line := _next_line(lines, deadline, stderr_log)) is not None:
            ledger.feed(line)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=10)
        reader.join(timeout=10)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL and not ledger.done
    assert set(ledger.snapshots) == set(range(shards)), "the kill came before the explicit snapshots"

    storage = StorageSettings(data_dir=data_dir, shards=shards, snapshot_every=snapshot_every)
    store = LocalFactStore(storage, LimitSettings(), DIM, "crash-test")
    try:
        for shard_no, shard in enumerate(store.shards):
            _check_recovery(shard, ledger.snapshots[shard_no])
        stored = {
            f.id: f for u in range(users) for f in store.list_user(f"user-{u}", include_superseded=True)
        }
        assert sum(shard.stats()["facts"] for shard in store.shards) == len(stored)

        duplicated = [text for text, times in Counter(f.text for f in stored.values()).items() if times > 1]
        assert not duplicated
        maybe_deleted = {int(i) for i in ledger.in_flight("DEL")}
        must_hold = ledger.acked.keys() - ledger.deleted - maybe_deleted
        assert not must_hold - stored.keys(), "acknowledged facts were lost"
        assert not ledger.deleted & stored.keys(), "acknowledged deletes were undone"
        assert len(stored) >= len(must_hold)
        unacked = {stored[i].text for i in stored.keys() - ledger.acked.keys()}
        assert unacked <= ledger.in_flight("ADD"), "facts appeared that no interrupted call was writing"
        assert {f.text for f in stored.values()} <= ledger.attempted

        by_user: dict[str, list[int]] = {}
        for fact_id in must_hold:
            user, text, _ = ledger.acked[fact_id]
            assert (stored[fact_id].user_id, stored[fact_id].text) == (user, text)
            by_user.setdefault(user, []).append(fact_id)
        for user, ids in by_user.items():
            expected = np.vstack([ledger.acked[i][2] for i in ids])
            np.testing.assert_allclose(store.vectors_of(user, ids), expected, atol=1e-6)
            (best, score), *_ = store.search(user, expected[0], k=1, now=NOW)
            assert best.id == ids[0] and score == pytest.approx(1.0, abs=1e-5)
    finally:
        store.close()


# ---------------------------------------------------------------------- torn tails


def _tail(kind: str, record: bytes, rng: np.random.Generator) -> bytes:
    if kind == "half-record":
        return record[: len(record) // 2]
    if kind == "short-header":
        return record[:5]
    if kind == "garbage":
        return rng.integers(0, 256, size=300, dtype=np.uint8).tobytes()
    return bytes(4096)  # zero-fill: blocks allocated but never written


@pytest.mark.parametrize("kind", ["half-record", "short-header", "garbage", "zero-fill"])
def test_torn_tail_is_cut_off_and_reported(tmp_path: Path, kind: str) -> None:
    writes, _ = _write_history(tmp_path, snapshots=1)
    shard = FactShard(tmp_path, DIM)
    newest = wal.segment_path(tmp_path, shard.stats()["log_seq"])
    acked_size = newest.stat().st_size
    # A real record of a batch whose append the crash interrupted (it was never acknowledged).
    _Writes(next_n=1_000).add(shard, "carol", 5)
    shard.close()
    record = newest.read_bytes()[acked_size:]
    tail = _tail(kind, record, np.random.default_rng(5))
    os.truncate(newest, acked_size)
    with open(newest, "ab") as handle:
        handle.write(tail)

    shard = FactShard(tmp_path, DIM)
    torn = shard.recovery.torn_tail
    assert torn == wal.TornTail(newest, acked_size, len(tail))
    assert newest.stat().st_size == acked_size
    writes.assert_held_by(shard)
    assert shard.list_user("carol") == []

    writes.add(shard, "carol", 2)
    shard.close()
    shard = FactShard(tmp_path, DIM)
    assert shard.recovery.torn_tail is None
    writes.assert_held_by(shard)
    shard.close()


# --------------------------------------------------------------- damaged log records


@pytest.mark.parametrize(
    "where",
    [
        "payload",
        "checksum",
        "op",
        "length-smaller",
        "length-past-eof",
    ],
)
def test_damaged_record_before_valid_ones_fails_open(tmp_path: Path, where: str) -> None:
    _write_history(tmp_path, snapshots=0)
    path = wal.segment_path(tmp_path, 0)
    second = _record_offsets(path)[1]
    offset, mask = {
        "payload": (second + 9 + 20, 0xFF),
        "checksum": (second + 4, 0x01),
        "op": (second + 8, 0x07),
        "length-smaller": (second, 0x01),
        "length-past-eof": (second + 3, 0x40),
    }[where]
    _flip(path, offset, mask)
    damaged = path.read_bytes()

    with pytest.raises(CorruptionError) as caught:
        FactShard(tmp_path, DIM).close()
    assert caught.value.path == str(path)
    assert path.read_bytes() == damaged, "a failed open must leave the evidence alone"


def test_torn_end_of_an_older_segment_fails_open(tmp_path: Path) -> None:
    """Only the newest segment can end in a torn append; elsewhere a cut record was acked."""
    _write_history(tmp_path, snapshots=1)
    (tmp_path / "snap-00000001.crc").unlink()  # force a replay of segment 0 then 1
    older = wal.segment_path(tmp_path, 0)
    os.truncate(older, older.stat().st_size - 3)

    with pytest.raises(CorruptionError):
        FactShard(tmp_path, DIM).close()


# ----------------------------------------------------------------- damaged snapshots


def _damage_snapshot(directory: Path, seq: int, how: str) -> None:
    path = snap.snapshot_path(directory, seq)
    sidecar = path.with_suffix(".crc")
    if how == "flipped-byte":
        _flip(path, path.stat().st_size // 2)
    elif how == "truncated":
        os.truncate(path, path.stat().st_size // 2)
    elif how == "no-sidecar":
        sidecar.unlink()
    else:
        sidecar.write_text("not a checksum\n")


@pytest.mark.parametrize("how", ["flipped-byte", "truncated", "no-sidecar", "bad-sidecar"])
@pytest.mark.parametrize("older_snapshot", [True, False], ids=["falls-back-to-snapshot", "falls-back-to-log"])
def test_damaged_newest_snapshot_falls_back(tmp_path: Path, how: str, older_snapshot: bool) -> None:
    writes, seqs = _write_history(tmp_path, snapshots=2 if older_snapshot else 1)
    newest = seqs[-1]
    _damage_snapshot(tmp_path, newest, how)

    shard = FactShard(tmp_path, DIM)
    report = shard.recovery
    assert report.skipped_snapshots == (newest,)
    assert report.snapshot_seq == (seqs[0] if older_snapshot else None)
    rounds_replayed = 2 if older_snapshot else len(seqs) + 1
    assert report.replayed_records == _RECORDS_PER_ROUND * rounds_replayed
    assert report.torn_tail is None
    writes.assert_held_by(shard)

    writes.add(shard, "dave", 3)
    shard.snapshot()
    shard.close()
    shard = FactShard(tmp_path, DIM)
    assert shard.recovery.skipped_snapshots == ()
    writes.assert_held_by(shard)
    shard.close()


def test_snapshot_after_a_fallback_keeps_a_usable_fallback(tmp_path: Path) -> None:
    writes, seqs = _write_history(tmp_path, snapshots=2)
    _damage_snapshot(tmp_path, seqs[-1], "flipped-byte")
    shard = FactShard(tmp_path, DIM)
    writes.add(shard, "dave", 3)
    newest = shard.snapshot()
    shard.close()
    _damage_snapshot(tmp_path, newest, "flipped-byte")

    shard = FactShard(tmp_path, DIM)
    writes.assert_held_by(shard)
    shard.close()


# ------------------------------------------------------------------ missing segments


def _remove_segments(directory: Path, seqs: list[int]) -> None:
    for seq in seqs:
        wal.segment_path(directory, seq).unlink()


@pytest.mark.parametrize(
    "case",
    [
        "fallback-snapshot-segment-missing",
        "fallback-to-log-segment-0-missing",
        "fallback-to-log-all-segments-missing",
        "usable-snapshot-segment-missing",
    ],
)
def test_missing_log_segment_with_acked_data_fails_open(tmp_path: Path, case: str) -> None:
    if case == "fallback-snapshot-segment-missing":
        _, seqs = _write_history(tmp_path, snapshots=2)
        _damage_snapshot(tmp_path, seqs[1], "flipped-byte")
        _remove_segments(tmp_path, [seqs[0]])
    elif case == "fallback-to-log-segment-0-missing":
        _, seqs = _write_history(tmp_path, snapshots=1)
        _damage_snapshot(tmp_path, seqs[0], "truncated")
        _remove_segments(tmp_path, [0])
    elif case == "fallback-to-log-all-segments-missing":
        _, seqs = _write_history(tmp_path, snapshots=1)
        _damage_snapshot(tmp_path, seqs[0], "no-sidecar")
        _remove_segments(tmp_path, wal.list_segments(tmp_path))
    else:
        _, seqs = _write_history(tmp_path, snapshots=1)
        _remove_segments(tmp_path, [seqs[0]])

    with pytest.raises(CorruptionError):
        FactShard(tmp_path, DIM).close()


# -------------------------------------------------------------------- failed writes


class _FailingHandle:
    """Stands in for a log's file handle; ``write`` fails, after writing part of the data if asked."""

    def __init__(self, real: BinaryIO, written_fraction: float) -> None:
        self._real = real
        self._fraction = written_fraction

    def write(self, data: bytes) -> int:
        if self._fraction:
            self._real.write(data[: int(len(data) * self._fraction)])
            self._real.flush()
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _texts(shard: FactShard | LocalFactStore, user: str) -> set[str]:
    return {f.text for f in shard.list_user(user, include_superseded=True)}


@pytest.mark.parametrize("written_fraction", [0.0, 0.5], ids=["nothing-written", "half-written"])
def test_failed_log_write_is_not_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, written_fraction: float
) -> None:
    writes = _Writes()
    shard = FactShard(tmp_path, DIM)
    writes.add(shard, "alice", 3)
    log = shard._wal
    monkeypatch.setattr(log, "_handle", _FailingHandle(log._handle, written_fraction))

    vectors = _unit(np.random.default_rng(3), 2)
    with pytest.raises(StorageError):
        shard.add(_batch("alice", 500, 2), vectors)
    assert _texts(shard, "alice") == {"fact-0", "fact-1", "fact-2"}
    assert all(hit.text != "fact-500" for hit, _ in shard.search("alice", vectors[0], k=10, now=NOW))
    assert shard.stats()["facts"] == 3

    monkeypatch.undo()
    writes.add(shard, "alice", 1)  # the failed append was cut off, so the log still works
    shard.close()
    shard = FactShard(tmp_path, DIM)
    assert shard.recovery.torn_tail is None
    writes.assert_held_by(shard)
    shard.close()


def test_failed_fsync_breaks_the_log_until_reopen(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    writes = _Writes()
    shard = FactShard(tmp_path, DIM)
    writes.add(shard, "alice", 3)

    def refuse(fd: int) -> None:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fsync", refuse)
    with pytest.raises(StorageError):
        shard.add(_batch("alice", 500, 2), _unit(np.random.default_rng(3), 2))
    monkeypatch.undo()
    # The failed append could not be undone durably, so the log refuses appends until reopen.
    with pytest.raises(StorageError):
        shard.add(_batch("alice", 600, 1), _unit(np.random.default_rng(4), 1))
    assert _texts(shard, "alice") == {"fact-0", "fact-1", "fact-2"}
    shard.close()

    shard = FactShard(tmp_path, DIM)
    writes.assert_held_by(shard)
    shard.close()


def _refuse(*args: object, **kwargs: object) -> NoReturn:
    raise StorageError("refused by the test")


def test_failed_automatic_snapshot_does_not_misreport_a_stored_write(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shard = FactShard(tmp_path, DIM, snapshot_every=1)
    monkeypatch.setattr(snap, "write_snapshot", _refuse)
    try:
        shard.add(_batch("alice", 0, 2), _unit(np.random.default_rng(1), 2))
        expected = {"fact-0", "fact-1"}
    except StorageError:
        expected = set()
    monkeypatch.undo()
    assert _texts(shard, "alice") == expected
    shard.close()
    shard = FactShard(tmp_path, DIM)
    assert _texts(shard, "alice") == expected
    shard.close()


def test_failed_segment_open_in_snapshot_leaves_the_log_usable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = _Writes()
    shard = FactShard(tmp_path, DIM)
    writes.add(shard, "alice", 2)
    monkeypatch.setattr(wal, "WalWriter", _refuse)
    with pytest.raises(StorageError):
        shard.snapshot()
    monkeypatch.undo()

    writes.add(shard, "alice", 1)
    shard.close()
    shard = FactShard(tmp_path, DIM)
    writes.assert_held_by(shard)
    shard.close()


def _users_on_different_shards(shards: int) -> tuple[str, str]:
    users = [f"user-{n}" for n in range(100)]
    return users[0], next(u for u in users if shard_of(u, shards) != shard_of(users[0], shards))


def test_failed_write_on_one_shard_takes_back_the_whole_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    storage = StorageSettings(data_dir=tmp_path, shards=2)
    store = LocalFactStore(storage, LimitSettings(), DIM, "durability-test")
    first, second = _users_on_different_shards(2)
    failing = store.shards[shard_of(second, 2)]._wal
    monkeypatch.setattr(failing, "_handle", _FailingHandle(failing._handle, 0.0))

    batch = _batch(first, 0, 2) + _batch(second, 2, 2)
    with pytest.raises(StorageError):
        store.add(batch, _unit(np.random.default_rng(1), 4))
    assert _texts(store, first) == set() and _texts(store, second) == set()
    monkeypatch.undo()
    store.close()

    store = LocalFactStore(storage, LimitSettings(), DIM, "durability-test")
    assert _texts(store, first) == set() and _texts(store, second) == set()
    store.close()


def test_sources_added_to_a_fact_survive_reopen_from_the_log_and_from_a_snapshot(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    shard = FactShard(tmp_path, DIM)
    (fact,) = shard.add(
        [NewFact(user_id="alice", text="likes tea", created_at=NOW, source_turn_ids=("t1",))], _unit(rng, 1)
    )
    (bobs,) = shard.add([NewFact(user_id="bob", text="likes tea", created_at=NOW)], _unit(rng, 1))
    assert shard.add_sources("alice", fact.id, ["t5", "t1", "t5"]).source_turn_ids == ("t1", "t5")
    with pytest.raises(NotFoundError):
        shard.add_sources("alice", bobs.id, ["t9"])  # another user's fact
    log_bytes = sum(p.stat().st_size for p in tmp_path.glob("wal-*"))
    shard.add_sources("alice", fact.id, ["t5"])  # held already (a resumed write): nothing logged
    assert sum(p.stat().st_size for p in tmp_path.glob("wal-*")) == log_bytes > 0
    shard.close()
    shard = FactShard(tmp_path, DIM)  # from the log
    assert shard.get("alice", fact.id).source_turn_ids == ("t1", "t5")
    assert shard.get("bob", bobs.id).source_turn_ids == ()
    shard.add_sources("alice", fact.id, ["t8"])
    shard.snapshot()
    shard.close()
    shard = FactShard(tmp_path, DIM)  # from the snapshot
    assert shard.get("alice", fact.id).source_turn_ids == ("t1", "t5", "t8")
    assert shard.recovery.replayed_records == 0
    # Said again and again: the first turn and the newest are kept.
    for n in range(100):
        shard.add_sources("alice", fact.id, [f"r{n}"])
    kept = shard.get("alice", fact.id).source_turn_ids
    assert (
        len(kept) == MAX_SOURCES
        and kept[0] == "t1"
        and kept[-1] == "r99"
        and kept[1] == f"r{101 - MAX_SOURCES}"
    )
    shard.close()


def test_concurrent_atomic_writes_of_one_path_never_share_a_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "longmem.json"
    payloads = [bytes([65 + n]) * 200_000 for n in range(8)]
    start = threading.Barrier(len(payloads))
    errors: list[BaseException] = []

    def writer(payload: bytes) -> None:
        start.wait()
        for _ in range(20):
            try:
                write_atomically(
                    target,
                    lambda handle: [
                        handle.write(payload[i : i + 4096]) for i in range(0, len(payload), 4096)
                    ],
                )
            except StorageError as exc:
                errors.append(exc)

    threads = [threading.Thread(target=writer, args=(p,)) for p in payloads]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert target.read_bytes() in payloads  # whole, and one writer's
    assert [p.name for p in tmp_path.iterdir()] == [target.name]  # no temp file left behind
