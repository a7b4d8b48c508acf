"""Accepted turns survive the process: a batch answered "accepted" is on disk in its user's
shard, a process killed with 1,000 accepted turns of 100 users pending writes every one of them
exactly once when it starts again, each user's in order; an erase takes pending turns with it.
Real shards, files and embedder; a fixed-latency scripted LLM (the queue is under test)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from memory_core.models import Role, Turn
from memory_core.service import open_local_service
from memory_core.settings import Settings, StorageSettings
from memory_core.store.shard import FactShard
from memory_core.store.wal import list_segments, segment_path
from tests.queue_writer import fact

USERS, TURNS = 100, 10
ROOT = Path(__file__).parent.parent


def _writer(data_dir: Path, log: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.queue_writer", str(data_dir), str(log), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
    )


def test_a_killed_writer_writes_every_accepted_turn_once_in_order_after_restart(tmp_path: Path) -> None:
    data_dir, log = tmp_path / "data", tmp_path / "extracted.log"
    first = _writer(data_dir, log, "accept", str(USERS), str(TURNS))
    assert first.stdout is not None
    written = 0
    for line in first.stdout:
        if line.startswith("written"):
            written = int(line.split()[1])
            if written >= 200:
                break
    assert 200 <= written < USERS * TURNS, "the writer finished before it could be killed"
    os.kill(first.pid, signal.SIGKILL)
    first.wait()

    second = _writer(data_dir, log, "resume")
    out, _ = second.communicate(timeout=600)
    assert second.returncode == 0 and "finished" in out, out
    resumed = int(out.split("resumed")[1].split()[0])
    assert 0 < resumed <= USERS * TURNS - written

    service = open_local_service(Settings(storage=StorageSettings(data_dir=data_dir, shards=4)))
    stored: Counter[str] = Counter()
    for user in range(USERS):
        stored.update(f.text for f in service.list_facts(f"acme:u{user}", include_superseded=True))
    assert service.facts.pending_turns() == []
    service.close()
    expected = {fact(user, n) for user in range(USERS) for n in range(TURNS)}
    assert set(stored) == expected, f"lost: {len(expected - set(stored))}, extra: {set(stored) - expected}"
    assert max(stored.values()) == 1, [t for t, c in stored.items() if c > 1]

    # Each user's turns reached the extractor in the order they were accepted; a turn cut off
    # by the kill is extracted again right after the restart, never after a later one.
    order: dict[int, list[int]] = {}
    for pair in log.read_text().splitlines():
        user, n = map(int, pair.split())
        seen = order.setdefault(user, [])
        if not seen or seen[-1] != n:
            seen.append(n)
    assert all(seq == list(range(TURNS)) for seq in order.values()), order


def _turns(*texts: str) -> tuple[Turn, ...]:
    return tuple(Turn(role=Role.USER, content=t, turn_id=f"id-{i}") for i, t in enumerate(texts))


AT = datetime(2026, 5, 1, tzinfo=UTC)


def test_the_inbox_keeps_what_is_pending_across_reopens_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    shard = FactShard(tmp_path / "shard", dim=8)
    first = shard.accept_turns("acme:ann", "s1", _turns("I sail on Sundays"), AT)
    second = shard.accept_turns("acme:bo", "s2", _turns("I collect stamps", "and coins"), AT)
    shard.turns_done("acme:ann", first)
    shard.turns_done("acme:ann", first)  # twice is once
    shard.close()
    inbox = tmp_path / "shard" / "inbox"
    with open(segment_path(inbox, list_segments(inbox)[-1]), "ab") as log:
        log.write(b"\x40\x00\x00\x00torn")  # an append the crash cut short
    shard = FactShard(tmp_path / "shard", dim=8)
    [pending] = shard.pending_turns()
    assert (pending.seq, pending.user_id, pending.session_id) == (second, "acme:bo", "s2")
    assert [t.content for t in pending.turns] == ["I collect stamps", "and coins"]
    assert [t.turn_id for t in pending.turns] == ["id-0", "id-1"] and pending.at == AT
    third = shard.accept_turns("acme:ann", "s1", _turns("I moved to Bergen"), AT)
    assert third > second  # numbers are never reused
    shard.close()


def test_an_erase_takes_the_users_pending_turns_and_their_bytes(tmp_path: Path) -> None:
    shard = FactShard(tmp_path / "shard", dim=8)
    shard.accept_turns("acme:cy", "s", _turns("my locker code is zebra-mango-41"), AT)
    kept = shard.accept_turns("acme:di", "s", _turns("I play the oboe"), AT)
    shard.erase_user("acme:cy")
    assert [b.seq for b in shard.pending_turns()] == [kept]
    shard.close()
    files = b"".join(p.read_bytes() for p in (tmp_path / "shard").rglob("*") if p.is_file())
    assert b"zebra-mango" not in files and b"oboe" in files
    shard = FactShard(tmp_path / "shard", dim=8)
    assert [b.user_id for b in shard.pending_turns()] == ["acme:di"]
    shard.close()


def test_a_long_inbox_log_is_rewritten_down_to_what_still_matters(tmp_path: Path) -> None:
    shard = FactShard(tmp_path / "shard", dim=8)
    for n in range(2100):
        shard.turns_done("acme:ed", shard.accept_turns("acme:ed", "s", _turns(f"turn {n}"), AT))
    shard.close()
    inbox = tmp_path / "shard" / "inbox"
    size = sum(p.stat().st_size for p in inbox.iterdir())
    assert size < 2100 * 40, size  # not every record of 2,100 batches: rewritten at 4,096 records
    reopened = FactShard(tmp_path / "shard", dim=8)
    assert reopened.pending_turns() == []
    reopened.close()


def test_a_sessions_window_is_kept_in_its_users_shard_across_reopens_and_rewrites(tmp_path: Path) -> None:
    shard = FactShard(tmp_path / "shard", dim=8, window_turns=3)
    shard.extend_window("acme:fay", "s", _turns("I brew cider", "from my own apples"))
    pending = shard.accept_turns("acme:fay", "s", _turns("my orchard has forty trees"), AT)
    shard.extend_window("acme:gus", "s", _turns("my bike lock code is otter-plum-77"))
    assert [t.content for t in shard.window("acme:fay", "s")] == [
        "I brew cider",
        "from my own apples",
        "my orchard has forty trees",
    ]
    erased = shard.erase_user("acme:gus")  # rewrites the log: windows, then the pending batch
    assert (erased.window_turns, erased.pending_batches) == (1, 0)
    shard.close()
    files = b"".join(p.read_bytes() for p in (tmp_path / "shard").rglob("*") if p.is_file())
    assert b"otter-plum" not in files

    shard = FactShard(tmp_path / "shard", dim=8, window_turns=3)
    window = shard.window("acme:fay", "s")
    assert [t.content for t in window] == ["I brew cider", "from my own apples", "my orchard has forty trees"]
    assert [b.seq for b in shard.pending_turns()] == [pending] and shard.window("acme:gus", "s") == []
    shard.turns_done("acme:fay", pending)
    shard.extend_window("acme:fay", "s", _turns("and a pear tree"))
    assert [t.content for t in shard.window("acme:fay", "s")][-2:] == [
        "my orchard has forty trees",
        "and a pear tree",
    ]
    assert len(shard.window("acme:fay", "s")) == 3
    shard.close()
