"""Resharding a data dir: slots move between shards with everything of their users (facts with
history and vectors, pending turns, windows, kept answers), the routing table switches after the
copy is durable, and a kill -9 at any step leaves the store exact when it opens again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from memory_core.backups import restore_backup, take_backup
from memory_core.errors import ConfigError, StorageError
from memory_core.models import NewFact, ProfileEntry, Role, Turn
from memory_core.routing import SLOTS, RoutingTable, SlotMove, read_routing, shard_of, write_routing
from memory_core.settings import LimitSettings, StorageSettings, WorkingSettings
from memory_core.store import resharding
from memory_core.store.backup import upload_bytes
from memory_core.store.facts import LocalFactStore, shard_dir
from memory_core.store.inbox import StoredAnswer
from memory_core.store.profile import DuckDBProfileStore, learned_source
from memory_core.store.resharding import SLOTS_PER_MOVE
from memory_core.store.shard import FactShard

DIM = 8
NOW = datetime(2026, 5, 1, tzinfo=UTC)
USERS = [f"acme:user{n:03d}" for n in range(60)]  # none a prefix of another


def _open(data_dir: Path, shards: int = 2) -> LocalFactStore:
    return LocalFactStore(
        StorageSettings(data_dir=data_dir, shards=shards), LimitSettings(), DIM, "test-embedder"
    )


def _vectors(n: int, seed: int) -> np.ndarray:
    rows = np.random.default_rng(seed).standard_normal((n, DIM)).astype(np.float32)
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def _fill(store: LocalFactStore) -> None:
    """Three facts per user (the first replaced by the third), a pending batch, a window and a
    kept answer for every third user, two profile entries for every other."""
    for n, user in enumerate(USERS):
        facts = store.add(
            [
                NewFact(user_id=user, text=f"fact {k} of {user}", created_at=NOW + timedelta(minutes=k))
                for k in range(3)
            ],
            _vectors(3, n),
        )
        store.supersede(user, facts[0].id, facts[2].id)
        if n % 3 == 0:
            turn = Turn(role=Role.USER, content=f"hello from {user}", at=NOW, turn_id=f"t{n}")
            store.extend_window(user, "s1", [turn])
            store.accept_turns(user, "s2", [turn], NOW)
            store.keep_answer(StoredAnswer(user, f"key{n}", "fp", 202, "{}", NOW), NOW - timedelta(days=1))
        if n % 2 == 0:
            store.set_profile(user, f"answers of {user} in short lines", "api", NOW)
            store.set_profile(user, f"{user} likes tables", learned_source(f"t{n}"), NOW, key="tables")


def _state(store: LocalFactStore) -> dict[str, object]:
    """Everything the store holds of each user, as the service reads it."""
    pending = sorted((b.user_id, b.session_id, b.turns) for b in store.pending_turns())
    state: dict[str, object] = {"pending": pending}
    for n, user in enumerate(USERS):
        facts = store.list_user(user, include_superseded=True)
        ids = [f.id for f in facts]
        state[user] = (
            [(f.id, f.text, f.superseded_by) for f in facts],
            np.round(store.vectors_of(user, ids), 5).tolist(),
            [(f.id, round(score, 5)) for f, score in store.search(user, _vectors(1, 1000 + n)[0], 5, NOW)],
            store.window(user, "s1") + store.window(user, "s2"),
            store.answer(user, f"key{n}", NOW - timedelta(days=1)),
            store.profile(user),
        )
    return state


def _counts(store: LocalFactStore) -> list[int]:
    return [shard.stats()["facts"] for shard in store.shards]


def test_a_legacy_table_routes_as_the_modulo_of_a_data_dir_never_resharded() -> None:
    for shards in (1, 2, 3, 7):
        table = RoutingTable.legacy(shards)
        assert len(table.owners) >= SLOTS and len(table.owners) % shards == 0
        assert all(table.shard_of(user) == shard_of(user, shards) for user in USERS)


def test_a_plan_spreads_slots_evenly_and_moves_only_what_it_must() -> None:
    table = RoutingTable.legacy(2)
    moves = table.plan(4)
    assert sum(len(m.slots) for m in moves) == len(table.owners) // 2  # half the slots stay
    for move in moves:
        table = table.moved(move)
    assert [len(table.slots_of(s)) for s in range(4)] == [256] * 4 and table.version == len(moves)
    assert table.plan(4) == []
    shrunk = table
    for move in table.plan(3):
        assert move.source == 3
        shrunk = shrunk.moved(move)
    assert sorted(len(shrunk.slots_of(s)) for s in range(3)) == [341, 341, 342]
    with pytest.raises(ConfigError):
        table.plan(0)
    with pytest.raises(ConfigError):
        table.plan(len(table.owners) + 1)


def test_resharding_2_4_8_3_keeps_every_users_facts_history_vectors_turns_and_answers(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    before = _state(store)
    total = sum(_counts(store))
    for goal in (4, 8, 3):
        report = store.reshard(goal)
        assert report.shards_after == goal == len(store.shards) == store.routing.shards
        assert sum(m.facts for m in report.moves) > 0
        assert sum(_counts(store)) == total  # nothing lost, nothing held twice
        assert _state(store) == before
        for no, shard in enumerate(store.shards):  # every user on the shard its slot names
            assert all(store.routing.shard_of(u) == no for u in shard.user_ids())
    assert not shard_dir(tmp_path, 3).exists()
    store.close()
    reopened = _open(tmp_path)  # settings still say 2: the routing table says 3
    assert len(reopened.shards) == 3 and _state(reopened) == before
    new = reopened.add([NewFact(user_id=USERS[0], text="later", created_at=NOW)], _vectors(1, 99))
    assert reopened.get(USERS[0], new[0].id).text == "later"
    reopened.close()


def test_the_routing_table_says_how_many_shards_a_resharded_data_dir_has(tmp_path: Path) -> None:
    from memory_core.store.facts import open_manifest

    store = _open(tmp_path)
    store.reshard(3)
    store.close()
    for placement in (None, []):  # in this process, and as a served app's shard actors see it
        assert open_manifest(tmp_path, 2, DIM, "test-embedder", placement).shards == 3
    with pytest.raises(ConfigError, match="embedder"):
        open_manifest(tmp_path, 3, DIM, "other-embedder")


def test_an_interrupted_reshard_must_be_finished_before_another(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    (tmp_path / "reshard.json").write_text(json.dumps({"goal": 4, "move": None}))
    with pytest.raises(ConfigError, match="interrupted"):
        store.reshard(5)
    assert store.reshard(4).shards_after == 4 and not (tmp_path / "reshard.json").exists()
    store.close()


def test_a_reshard_is_on_disk_when_its_start_is_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The admin API answers 202 when start() returns: a coordinator killed right after must find
    # the goal to resume, however long the reshard's first steps (a slow shard) take.
    store = _open(tmp_path)
    _fill(store)
    resharder = store.resharder
    slow_shard, recover = threading.Event(), resharder.recover

    def recover_slowly() -> None:
        slow_shard.wait(60)
        recover()

    monkeypatch.setattr(resharder, "recover", recover_slowly)
    runner = resharding.ReshardRunner(resharder)
    assert runner.start(add=2)["state"] == "running"
    try:
        assert resharding.interrupted_goal(tmp_path) == 4
    finally:
        slow_shard.set()
        runner.wait()
    assert runner.status()["state"] == "done" and resharding.interrupted_goal(tmp_path) is None
    store.close()


_CRASH = """
import os, signal, sys
from pathlib import Path
sys.path.insert(0, {tests!r})
import test_resharding as t
from memory_core.store import resharding, shard

step = {step!r}
original = getattr({owner}, {name!r})
calls = []

def crash(*args, **kwargs):
    calls.append(1)
    if {before} and len(calls) == {nth}:
        os.kill(os.getpid(), signal.SIGKILL)
    result = original(*args, **kwargs)
    if len(calls) == {nth}:
        os.kill(os.getpid(), signal.SIGKILL)
    return result

setattr({owner}, {name!r}, crash)
store = t._open(Path({data_dir!r}))
store.reshard({goal})
"""

# (where the kill lands, owner, function, before the call?, which call): every step of a move,
# of the growth before it and of the shrink after it.
_STEPS = [
    ("grown table written", "resharding", "write_routing", False, 1),
    ("mid import", "shard.TurnInbox", "take", True, 1),
    ("imported, not switched", "shard.FactShard", "import_slots", False, 1),
    ("switched, source not dropped", "resharding", "write_routing", False, 2),
    ("drop logged, its snapshot not written", "shard.snap", "write_snapshot", True, 1),
    ("source dropped, journal not cleared", "shard.FactShard", "drop_slots", False, 1),
    ("second move switched", "resharding", "write_routing", False, 3),
]


@pytest.mark.parametrize(("label", "owner", "name", "before", "nth"), _STEPS, ids=[s[0] for s in _STEPS])
def test_kill_9_anywhere_in_a_reshard_loses_and_duplicates_nothing(
    tmp_path: Path, label: str, owner: str, name: str, before: bool, nth: int
) -> None:
    store = _open(tmp_path)
    _fill(store)
    expected = _state(store)
    total = sum(_counts(store))
    store.close()
    script = _CRASH.format(
        tests=str(Path(__file__).parent),
        step=label,
        owner=owner,
        name=name,
        before=before,
        nth=nth,
        data_dir=str(tmp_path),
        goal=4,
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    reopened = _open(tmp_path)
    assert sum(_counts(reopened)) == total and _state(reopened) == expected
    for no, shard in enumerate(reopened.shards):
        assert all(reopened.routing.shard_of(u) == no for u in shard.user_ids())
    report = reopened.reshard(4)  # `longmem shards resume`
    assert reopened.routing.plan(4) == [] and report.shards_after == 4
    assert sum(_counts(reopened)) == total and _state(reopened) == expected
    reopened.close()


def test_kill_9_in_a_shrink_after_the_switch_deletes_the_emptied_shard_on_open(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    store.reshard(3)
    expected, total = _state(store), sum(_counts(store))
    # one per move of at most SLOTS_PER_MOVE slots, then the smaller table
    switches = sum(-(-len(m.slots) // SLOTS_PER_MOVE) for m in store.routing.plan(2))
    store.close()
    script = _CRASH.format(
        tests=str(Path(__file__).parent),
        step="shrunk table written",
        owner="resharding",
        name="write_routing",
        before=False,
        nth=switches + 1,
        data_dir=str(tmp_path),
        goal=2,
    )
    killed = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert shard_dir(tmp_path, 2).exists()
    shard_dir(tmp_path, 5).mkdir()  # and one past a gap, as a shrink from 6 cut short leaves
    reopened = _open(tmp_path)
    assert len(reopened.shards) == 2 and not shard_dir(tmp_path, 2).exists()
    assert not shard_dir(tmp_path, 5).exists()
    assert not (tmp_path / "reshard.json").exists()
    assert sum(_counts(reopened)) == total and _state(reopened) == expected
    reopened.close()


def test_shards_add_remove_and_status_from_the_cli(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    expected = _state(store)
    store.close()
    env = {**os.environ, "LONGMEM_STORAGE__DATA_DIR": str(tmp_path)}

    def longmem(*args: str) -> dict[str, object]:
        done = subprocess.run(
            [sys.executable, "-m", "longmem", "--data-dir", str(tmp_path), "shards", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)  # type: ignore[no-any-return]

    added = longmem("add", "2")
    assert (added["shards_before"], added["shards_after"]) == (2, 4)
    removed = longmem("remove", "1")
    assert removed["shards_after"] == 3 and removed["routing_version"] > added["routing_version"]
    reopened = _open(tmp_path)
    assert _state(reopened) == expected
    reopened.close()
    bad = subprocess.run(
        [sys.executable, "-m", "longmem", "--data-dir", str(tmp_path), "shards", "remove", "3"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bad.returncode != 0 and "0 shards" in bad.stderr


def test_a_move_whose_fact_ids_are_taken_on_the_target_is_rolled_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path)
    _fill(store)
    store.reshard(4)
    move = next(m for m in store.routing.plan(2) if m.source == 2)
    leaving = next(u for u in USERS if store.routing.slot_of(u) in move.slots)
    staying = next(u for u in USERS if store.routing.shard_of(u) == move.target)
    taken = store.list_user(leaving)[0].id
    monkeypatch.setattr("memory_core.store.partitions.secrets.randbits", lambda _: taken)
    store.add([NewFact(user_id=staying, text="same id, other shard", created_at=NOW)], _vectors(1, 7))
    monkeypatch.undo()
    expected, total = _state(store), sum(_counts(store))
    with pytest.raises(StorageError, match="in use"):
        store.reshard(2)
    assert sum(_counts(store)) == total and _state(store) == expected
    assert all(
        store.routing.shard_of(u) == no for no, shard in enumerate(store.shards) for u in shard.user_ids()
    )
    store.close()


def test_a_backup_of_a_resharded_store_restores_with_its_routing(tmp_path: Path) -> None:
    store = _open(tmp_path / "live")
    _fill(store)
    store.reshard(3)
    expected = _state(store)
    record = take_backup(store, DIM, "test-embedder", str(tmp_path / "backups"), NOW)
    assert record.routing is not None and record.routing["version"] == store.routing.version
    routing = store.routing
    store.close()
    restore_backup(str(tmp_path / "backups"), tmp_path / "restored", LimitSettings())
    restored = _open(tmp_path / "restored")
    assert restored.routing == routing and _state(restored) == expected
    restored.close()


def test_resharding_while_clients_write_and_recall_loses_nothing_and_crosses_no_user(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    before = sum(_counts(store))
    acked: dict[str, list[int]] = {user: [] for user in USERS}
    preferences: dict[tuple[str, str], str] = {}
    strangers: list[tuple[str, str]] = []
    failures: list[BaseException] = []
    stop = threading.Event()

    def write(users: list[str]) -> None:
        n = 0
        while not stop.is_set():
            user = users[n % len(users)]
            try:
                [fact] = store.add([NewFact(user_id=user, text=f"live {n}", created_at=NOW)], _vectors(1, n))
                acked[user].append(fact.id)
                store.extend_window(user, "live", [Turn(role=Role.USER, content=f"live {n}", at=NOW)])
                key = f"live-{n % 3}"
                store.set_profile(user, f"live preference {n}", "api", NOW, key=key)
                preferences[(user, key)] = f"live preference {n}"
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)
                return
            n += 1

    def recall() -> None:
        n = 0
        while not stop.is_set():
            user = USERS[n % len(USERS)]
            try:
                hits = store.search(user, _vectors(1, n)[0], 5, NOW)
            except BaseException as exc:  # noqa: BLE001 - reported by the test thread
                failures.append(exc)
                return
            strangers.extend((user, f.user_id) for f, _ in hits if f.user_id != user)
            n += 1

    threads = [
        threading.Thread(target=write, args=(USERS[:30],)),
        threading.Thread(target=write, args=(USERS[30:],)),
        threading.Thread(target=recall),
    ]
    for thread in threads:
        thread.start()
    try:
        for goal in (4, 8, 3):
            store.reshard(goal)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    assert failures == [] and strangers == []
    written = sum(len(ids) for ids in acked.values())
    assert written > 0 and sum(_counts(store)) == before + written  # none lost, none twice
    for user, ids in acked.items():
        stored = {f.id for f in store.list_user(user)}
        assert set(ids) <= stored
        assert len(store.window(user, "live")) == min(len(ids), WorkingSettings().turns)
    for (user, key), text in preferences.items():  # the last write of each key, once
        assert [e.text for e in store.profile(user) if e.key == key] == [text]
    for no, shard in enumerate(store.shards):
        assert all(store.routing.shard_of(u) == no for u in shard.user_ids())
    store.close()


def test_a_pending_batch_keeps_its_number_through_moves_so_its_writer_can_end_it(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path)
    _fill(store)
    numbers = {b.user_id: b.seq for b in store.pending_turns()}
    store.reshard(4)
    store.reshard(8)
    assert {b.user_id: b.seq for b in store.pending_turns()} == numbers  # moved onto new shards
    store.reshard(3)  # merged: a number taken on the target is renumbered
    renumbered = {b.user_id for b in store.pending_turns() if b.seq != numbers[b.user_id]}
    for user, seq in numbers.items():  # each writer marks its batch done by its old number
        store.turns_done(user, seq)
    assert {b.user_id for b in store.pending_turns()} == renumbered  # no other user's batch ended
    assert len(renumbered) < len(numbers)
    store.close()


def test_a_backup_a_reshard_ran_through_is_refused_and_never_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path / "live")
    _fill(store)
    backups = tmp_path / "backups"
    store.shards[1].fence(store.routing.slots_of(1)[:4])  # a move in flight
    with pytest.raises(StorageError, match="reshard moved slots"):
        take_backup(store, DIM, "test-embedder", str(backups), NOW)
    store.shards[1].unfence()
    copy_all = store.backup

    def copy_then_reshard(uri: str) -> list[dict[str, object]]:  # a reshard between two copies
        copies = copy_all(uri)
        store.reshard(3)
        return copies

    monkeypatch.setattr(store, "backup", copy_then_reshard)
    with pytest.raises(StorageError, match="reshard moved slots"):
        take_backup(store, DIM, "test-embedder", str(backups), NOW + timedelta(minutes=1))
    with pytest.raises(ConfigError):  # neither left a manifest: nothing to restore from
        restore_backup(str(backups), tmp_path / "restored", LimitSettings())
    store.close()


def test_a_shard_that_opens_on_an_older_table_is_given_the_current_one(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    store.reshard(3)
    expected = _state(store)
    stale = RoutingTable.legacy(3)  # as a shard restored on a node without the table opens
    store.shards[1].routing = stale  # type: ignore[attr-defined]
    assert _state(store) == expected  # its users are asked for, refused, and it adopts the table
    assert store.shards[1].routing == store.routing  # type: ignore[attr-defined]
    store.close()


def test_a_move_in_flight_lists_each_user_once(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    listed = store.users("acme", "", 1000)
    assert len(listed) == len(USERS)
    store.reshard(4)  # shard 2 exists; now copy shard 1's slots there without a switch
    store.shards[2].import_slots(store.shards[1].export_slots(store.routing.slots_of(1), SLOTS))
    assert store.shards[2].stats()["users"] > 0 and store.users("acme", "", 1000) == listed
    assert store.shards[2].stats()["profile_entries"] > 0
    with_profiles = [(u, 2) for u, _ in listed if USERS.index(u) % 2 == 0]
    assert store.profile_users("acme", "", 1000) == with_profiles
    # The switch half announced: the target serves by the new table, the source not yet.
    store.shards[2].adopt(store.routing.moved(SlotMove(1, 2, tuple(store.routing.slots_of(1)))))
    assert store.users("acme", "", 1000) == listed
    assert store.profile_users("acme", "", 1000) == with_profiles
    store.close()


def test_no_file_of_a_shard_keeps_the_users_it_gave_away(tmp_path: Path) -> None:
    store = _open(tmp_path)
    _fill(store)
    store.reshard(4)
    for no in range(4):
        held = b"".join(p.read_bytes() for p in shard_dir(tmp_path, no).rglob("*") if p.is_file())
        for user in USERS:
            here = store.routing.shard_of(user) == no
            assert (f"fact 1 of {user}".encode() in held) == here, (user, no)
            assert (f"hello from {user}".encode() in held) == (here and USERS.index(user) % 3 == 0)
            if not here:  # (DuckDB may compress what it holds: only absence is certain in bytes)
                assert f"{user} likes tables".encode() not in held, (user, no)
    store.close()


def test_the_cli_reshards_a_real_data_dir_and_its_status_says_so(tmp_path: Path) -> None:
    def longmem(*args: str) -> str:
        done = subprocess.run(
            [sys.executable, "-m", "longmem", "--data-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, done.stderr
        return done.stdout

    longmem("remember", "--user", "ana", "I sail on weekends")
    added = json.loads(longmem("shards", "add", "2"))
    assert (added["shards_before"], added["shards_after"]) == (4, 6)
    status = json.loads(longmem("shards", "status"))
    assert status["routing"]["version"] == added["routing_version"] and status["routing"]["slots"] == SLOTS
    assert [s["shard"] for s in status["shards"]] == list(range(6))
    assert sum(s["slots"] for s in status["shards"]) == SLOTS and status["reshard"] == {
        "interrupted_goal": None
    }
    assert "I sail on weekends" in longmem("facts", "--user", "ana")


def test_a_switch_or_a_drop_that_fails_is_settled_when_the_reshard_resumes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path)
    _fill(store)
    expected, total = _state(store), sum(_counts(store))
    write_table = resharding.write_routing
    calls = []

    def switch_fails_once(data_dir: Path, table: RoutingTable) -> None:
        calls.append(table.version)
        write_table(data_dir, table)  # the file is written, announcing it fails
        if len(calls) == 2:
            raise StorageError("the disk refused the directory's fsync")

    monkeypatch.setattr(resharding, "write_routing", switch_fails_once)
    with pytest.raises(StorageError, match="fsync"):
        store.reshard(4)
    assert any(shard.stats()["moving_slots"] for shard in store.shards)  # still fenced: no two owners
    monkeypatch.undo()
    drop = FactShard.drop_slots
    failed = []

    def drop_fails_once(self: FactShard, slots: list[int], slot_count: int) -> int:
        if not failed:
            failed.append(slots)
            raise StorageError("no space left for the snapshot")
        return drop(self, slots, slot_count)

    monkeypatch.setattr(FactShard, "drop_slots", drop_fails_once)
    with pytest.raises(StorageError, match="no space"):
        store.reshard(4)  # resumes: settling the half-announced switch, the source's drop fails
    assert failed
    # The source stays fenced until its drop is done: no backup holds the users on both shards.
    assert any(shard.stats()["moving_slots"] for shard in store.shards)
    with pytest.raises(StorageError, match="reshard moved slots"):
        take_backup(store, DIM, "test-embedder", str(tmp_path / "backups"), NOW)
    monkeypatch.undo()
    store.reshard(4)  # resumes again: the failed drop is done now
    assert not any(shard.stats()["moving_slots"] for shard in store.shards)
    assert sum(_counts(store)) == total and _state(store) == expected
    for no in range(4):  # no file keeps the users a shard gave away
        held = b"".join(p.read_bytes() for p in shard_dir(tmp_path, no).rglob("*") if p.is_file())
        assert all((f"fact 1 of {u}".encode() in held) == (store.routing.shard_of(u) == no) for u in USERS)
        assert all(f"{u} likes tables".encode() not in held for u in USERS if store.routing.shard_of(u) != no)
    store.close()


def _old_profile_file(path: Path, store: LocalFactStore) -> list[tuple[str, str, str, str]]:
    """Write every profile entry of ``store`` into one file at ``path``, as a data dir kept them
    before profiles lived in the shards, and take them from the shards; the entries."""
    listed = _entries(store)
    old = DuckDBProfileStore(path, LimitSettings())
    old.take(e for user in USERS for e in store.profile(user))
    old.close()
    for shard in store.shards:
        shard.profiles.drop_users(USERS)
    return listed


def _entries(store: LocalFactStore) -> list[tuple[str, str, str, str]]:
    return sorted((e.user_id, e.key, e.text, e.source) for u in USERS for e in store.profile(u))


def test_a_data_dir_whose_profiles_were_one_file_moves_them_into_the_shards_on_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path)
    _fill(store)
    store.reshard(3)
    old = _old_profile_file(tmp_path / "profile.duckdb", store)
    assert len(old) == len(USERS) and _entries(store) == []
    store.close()
    take = FactShard.take_profile
    calls = []

    def fails_on_the_fifth(self: FactShard, user_id: str, entries: list[ProfileEntry]) -> None:
        calls.append(user_id)
        if len(calls) == 5:
            raise StorageError("the disk went away")
        take(self, user_id, entries)

    monkeypatch.setattr(FactShard, "take_profile", fails_on_the_fifth)
    with pytest.raises(StorageError, match="went away"):
        _open(tmp_path)
    monkeypatch.undo()
    assert (tmp_path / "profile.duckdb").exists()  # kept until every entry is in a shard
    reopened = _open(tmp_path)
    assert _entries(reopened) == old and not (tmp_path / "profile.duckdb").exists()
    for no, shard in enumerate(reopened.shards):
        assert shard.profiles.user_ids() == {u for u in shard.user_ids() if USERS.index(u) % 2 == 0}
        assert all(reopened.routing.shard_of(u) == no for u in shard.profiles.user_ids())
    reopened.close()


def test_a_backup_from_before_profiles_lived_in_the_shards_restores_them_into_the_shards(
    tmp_path: Path,
) -> None:
    store = _open(tmp_path / "live")
    _fill(store)
    store.reshard(3)
    expected = _state(store)
    record = take_backup(store, DIM, "test-embedder", str(tmp_path / "backups"), NOW)
    assert record.profile_entries == len(USERS) and not record.profile_files
    store.close()
    # Rewritten as such a backup was: no profile file in the shards' copies, one beside them.
    where = Path(record.uri)
    manifest = json.loads((where / "backup.json").read_text())
    rows = []
    for copy in manifest["shards"]:
        staged = where / f"shard-{copy['shard']:04d}" / "profile.parquet"
        rows.append(pq.read_table(staged))
        staged.unlink()
        del copy["files"]["profile.parquet"]
        copy.pop("profile_entries")
    manifest["profile_files"] = upload_bytes(_parquet(pa.concat_tables(rows)), str(where), "profile.parquet")
    (where / "backup.json").write_text(json.dumps(manifest))
    restore_backup(str(tmp_path / "backups"), tmp_path / "restored", LimitSettings())
    restored = _open(tmp_path / "restored")
    assert _state(restored) == expected
    restored.close()


def _parquet(table: pa.Table) -> bytes:
    out = pa.BufferOutputStream()
    pq.write_table(table, out)
    return bytes(out.getvalue().to_pybytes())


def test_the_routing_file_never_goes_back_whoever_writes_it(tmp_path: Path) -> None:
    # The switch and the shards of a shared root adopting an older table may write at once.
    table = RoutingTable.legacy(2)
    newer = table.resized(3).moved(table.resized(3).plan(3)[0])
    write_routing(tmp_path, newer)
    write_routing(tmp_path, table.resized(3))  # an older table, adopted late
    assert read_routing(tmp_path, 2) == newer


def test_entries_taken_for_a_user_are_their_whole_profile_there(tmp_path: Path) -> None:
    # A move or an old profile file brings each user's entries as they were: taken again (a move
    # retried, a migration cut short) they are the same, and nothing older stays beside them.
    profiles = DuckDBProfileStore(tmp_path / "profile.duckdb", LimitSettings())
    first = [ProfileEntry(user_id="u", key=k, text=f"{k} text", source="api", updated_at=NOW) for k in "ab"]
    profiles.take(first)
    profiles.take(first)
    assert profiles.get("u") == first
    profiles.take(first[1:])
    assert profiles.get("u") == first[1:]
    profiles.close()
