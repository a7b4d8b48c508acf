"""Backups and restores on real files: FAISS shards, DuckDB profile, turn inboxes, the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from memory_core.backups import BackupRecord, BackupSchedule, restore_backup
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import ConfigError, StorageError
from memory_core.models import Role, Tag, Turn
from memory_core.routing import shard_of
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import Settings, StorageSettings
from memory_core.store import backup as backup_files
from memory_core.store import shard as shard_module
from memory_core.store.backup import BACKUP_MANIFEST, check_visible, join_uri, redact_uri, shard_part
from memory_core.store.facts import shard_dir
from tests.serve_app import OPERATOR_KEY, ServeApp, client

USERS = ["ana", "bo", "eli", "gus"]


def _state(svc: MemoryService) -> dict:
    """Everything the service keeps of USERS, comparable across data dirs."""
    return {
        user: {
            "facts": [
                (f.id, f.text, f.tag, f.expire_at, f.superseded_by, f.created_at)
                for f in svc.list_facts(user, include_superseded=True)
            ],
            "profile": [(e.key, e.text, e.source, e.updated_at) for e in svc.profile(user)],
            "window": [t.content for t in svc.facts.window(user, "s1")],
            "pending": [
                [t.content for t in batch.turns]
                for batch in svc.facts.pending_turns()
                if batch.user_id == user
            ],
        }
        for user in USERS
    }


def _fill(svc: MemoryService) -> None:
    for n, user in enumerate(USERS):
        old, new, _ = svc.remember(
            user,
            [
                Remember(f"{user} lives in town number {n}", Tag.IDENTITY),
                Remember(f"{user} moved to town number {n + 10}", Tag.IDENTITY),
                Remember(f"{user} is at the dentist this afternoon", Tag.EVENT, ttl=timedelta(hours=5)),
            ],
        )
        svc.facts.supersede(user, old.id, new.id)
        svc.set_preference(user, f"{user} wants short answers")
        svc.facts.extend_window(user, "s1", [Turn(role=Role.USER, content=f"{user} said hello")])
        svc.facts.accept_turns(
            user,
            "s1",
            [Turn(role=Role.USER, content=f"{user} waits to be written", turn_id="t9")],
            svc.clock.now(),
        )


def test_a_restored_data_dir_holds_what_the_backup_did_and_nothing_after(
    open_service: Callable[[], MemoryService],
    settings: Settings,
    clock: ManualClock,
    embedder: Embedder,
    tmp_path: Path,
) -> None:
    assert len({shard_of(u, settings.storage.shards) for u in USERS}) == settings.storage.shards
    svc = open_service()
    _fill(svc)
    before = _state(svc)
    record = svc.backup(str(tmp_path / "backups"))
    assert [s.facts for s in record.shards] and sum(s.facts for s in record.shards) == 3 * len(USERS)
    assert record.profile_entries == len(USERS)
    # Acknowledged after the backup: what a dead disk loses.
    svc.remember("ana", [Remember("ana adopted a cat after the backup", Tag.IDENTITY)])
    svc.close()

    restored_dir = tmp_path / "restored"
    found = restore_backup(str(tmp_path / "backups"), restored_dir, settings.limits)
    assert found.id == record.id
    restored_settings = settings.model_copy(
        update={"storage": StorageSettings(data_dir=restored_dir, shards=settings.storage.shards)}
    )
    again = open_local_service(restored_settings, clock, embedder)
    try:
        assert _state(again) == before
        hits = again.recall("bo", "which town does bo live in now?", threshold=-1)
        assert hits and hits[0].fact.text == "bo moved to town number 11"
        # The restored dir takes new writes like any other.
        (cat,) = again.remember("ana", [Remember("ana adopted a cat", Tag.IDENTITY)])
        assert cat.id not in {f[0] for f in before["ana"]["facts"]}
    finally:
        again.close()


def _two_backups(service: MemoryService, to: Path) -> tuple[BackupRecord, BackupRecord]:
    service.remember("ana", [Remember("ana keeps bees", Tag.IDENTITY)])
    return service.backup(str(to)), service.backup(str(to))


def test_restore_refuses_a_data_dir_with_data_and_a_backup_cut_short(
    service: MemoryService, settings: Settings, tmp_path: Path
) -> None:
    first, second = _two_backups(service, tmp_path / "backups")
    assert second.id > first.id
    # A backup cut short has no manifest: the newest complete one is restored instead.
    (tmp_path / "backups" / second.id / BACKUP_MANIFEST).unlink()
    with pytest.raises(ConfigError, match="already holds longmem data"):
        restore_backup(str(tmp_path / "backups"), settings.storage.data_dir, settings.limits)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="not empty"):
        restore_backup(str(tmp_path / "backups"), tmp_path / "busy", settings.limits)
    assert restore_backup(str(tmp_path / "backups"), tmp_path / "fresh", settings.limits).id == first.id
    with pytest.raises(ConfigError, match="no complete backup"):
        restore_backup(str(tmp_path / "nowhere"), tmp_path / "fresh2", settings.limits)


def test_backup_and_restore_from_the_command_line(tmp_path: Path) -> None:
    def longmem(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "longmem", *args], capture_output=True, text=True, timeout=300
        )

    data, restored, backups = tmp_path / "data", tmp_path / "restored", tmp_path / "backups"
    assert longmem("--data-dir", str(data), "remember", "--user", "ana", "I sail on weekends").returncode == 0
    status = longmem("--data-dir", str(data), "shards", "status")
    assert status.returncode == 0, status.stderr
    layout = json.loads(status.stdout)
    assert [s["shard"] for s in layout["shards"]] == [0, 1, 2, 3] and sum(
        s["facts"] for s in layout["shards"]
    ) == 1
    made = longmem("--data-dir", str(data), "backup", "--to", str(backups))
    assert made.returncode == 0, made.stderr
    record = json.loads(made.stdout)
    assert sum(s["facts"] for s in record["shards"]) == 1
    done = longmem("--data-dir", str(restored), "restore", "--from", str(backups))
    assert done.returncode == 0, done.stderr
    listed = longmem("--data-dir", str(restored), "facts", "--user", "ana")
    assert "I sail on weekends" in listed.stdout
    refused = longmem("--data-dir", str(restored), "restore", "--from", str(backups))
    assert refused.returncode == 2 and "already holds longmem data" in refused.stderr


def test_the_served_app_backs_up_on_an_operator_call_and_the_backup_restores(
    serve_app: ServeApp, embedder: Embedder, clock: ManualClock, tmp_path: Path
) -> None:
    users = ["bk-ana", "bk-eli", "bk-gus"]
    for user in users:
        out = serve_app.acme.post(
            f"/v1/users/{user}/memories", json={"memories": [{"text": f"{user} rows boats"}]}
        )
        assert out.status_code == 201, out.text
        assert (
            serve_app.acme.put(f"/v1/users/{user}/profile/style", json={"text": "short answers"}).status_code
            == 200
        )
    refused = serve_app.acme.post("/v1/admin/backup")
    assert refused.status_code == 403
    with client(serve_app.url, OPERATOR_KEY) as operator:
        made = operator.post("/v1/admin/backup")
    assert made.status_code == 200, made.text
    record = made.json()
    assert record["uri"].startswith(serve_app.settings.storage.backup_uri)
    restored = tmp_path / "restored"
    restore_backup(record["uri"], restored, serve_app.settings.limits)
    settings = Settings(storage=StorageSettings(data_dir=restored, shards=serve_app.settings.storage.shards))
    svc = open_local_service(settings, clock, embedder)
    try:
        for user in users:
            served = serve_app.acme.get(f"/v1/users/{user}/memories").json()["memories"]
            assert [str(f.id) for f in svc.list_facts(f"acme:{user}")] == [m["id"] for m in served]
            assert [e.text for e in svc.profile(f"acme:{user}")] == ["short answers"]
    finally:
        svc.close()
    by_cli = subprocess.run(
        [sys.executable, "-m", "longmem", "backup", "--url", serve_app.url, "--api-key", OPERATOR_KEY],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert by_cli.returncode == 0, by_cli.stderr
    assert json.loads(by_cli.stdout)["id"] > record["id"]

    # The app backs itself up too (storage.backup_every), and says how that went.
    with client(serve_app.url, OPERATOR_KEY) as operator:
        deadline = time.monotonic() + 90
        while (status := operator.get("/v1/admin/backup").json())["schedule"]["taken"] == 0:
            assert time.monotonic() < deadline, status
            time.sleep(2)
        metrics = operator.get("/metrics").text
    assert serve_app.acme.get("/v1/admin/backup").status_code == 403
    schedule = status["schedule"]
    assert schedule["every_s"] == 30 and schedule["failures"] == 0 and schedule["last_error"] is None
    assert schedule["next"] > schedule["last"]["created_at"]
    assert (
        Path(serve_app.settings.storage.backup_uri or "") / schedule["last"]["id"] / BACKUP_MANIFEST
    ).exists()
    assert 'longmem_backups_taken{part="schedule"}' in metrics


def test_uris_keep_their_query_and_lose_their_credentials() -> None:
    assert join_uri("s3://bucket/lm?region=eu-west-1", "20260101T000000Z", "shard-0001") == (
        "s3://bucket/lm/20260101T000000Z/shard-0001?region=eu-west-1"
    )
    assert join_uri("/srv/backups/", "x") == "/srv/backups/x"
    assert redact_uri("s3://AKIA:s3cret@bucket/lm?region=eu&secret_key=abc&access_key=AKIA") == (
        "s3://***@bucket/lm?region=eu&secret_key=***&access_key=***"
    )
    with pytest.raises(ValueError, match="relative path"):
        StorageSettings(backup_uri="backups")


def test_a_shard_takes_writes_while_its_backup_uploads(
    service: MemoryService, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service.remember("ana", [Remember("ana keeps bees", Tag.IDENTITY)])
    real_upload = shard_module.upload
    during: list[bool] = []

    def upload_while_writing(directory: Path, uri: str) -> dict:
        if shard_part(shard_of("ana", len(service.facts.shards))) not in uri:
            return real_upload(directory, uri)
        # Another caller writes to the shard while its copy is on its way.
        writer = threading.Thread(
            target=service.remember, args=("ana", [Remember("ana sold the hives", Tag.IDENTITY)])
        )
        writer.start()
        writer.join(20)
        during.append(not writer.is_alive())
        return real_upload(directory, uri)

    monkeypatch.setattr(shard_module, "upload", upload_while_writing)
    record = service.backup(str(tmp_path / "backups"))
    assert during == [True], "a write waited for the upload"
    # The backup is the shard as it was when staged: the write during the upload is not in it.
    assert sum(s.facts for s in record.shards) == 1
    assert len(service.list_facts("ana")) == 2
    assert not [p for s in service.facts.shards for p in s.directory.glob(".backup-*")]


def test_a_restore_cut_short_never_opens_and_runs_again(
    service: MemoryService,
    settings: Settings,
    clock: ManualClock,
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _fill(service)
    before = _state(service)
    service.backup(str(tmp_path / "backups"))
    target = tmp_path / "restored"
    real_download = backup_files.download
    calls: list[str] = []

    def fail_on_the_second(uri: str, sums: dict, directory: Path) -> int:
        calls.append(uri)
        if len(calls) == 2:
            raise StorageError("the network went away")
        return real_download(uri, sums, directory)

    monkeypatch.setattr("memory_core.backups.download", fail_on_the_second)
    with pytest.raises(StorageError, match="network"):
        restore_backup(str(tmp_path / "backups"), target, settings.limits)
    restored_settings = settings.model_copy(
        update={"storage": StorageSettings(data_dir=target, shards=settings.storage.shards)}
    )
    with pytest.raises(ConfigError, match="did not finish"):
        open_local_service(restored_settings, clock, embedder)
    monkeypatch.setattr("memory_core.backups.download", real_download)
    restore_backup(str(tmp_path / "backups"), target, settings.limits)
    again = open_local_service(restored_settings, clock, embedder)
    try:
        assert _state(again) == before
    finally:
        again.close()


def test_a_damaged_backup_file_fails_the_restore_and_a_broken_manifest_is_passed_over(
    service: MemoryService, settings: Settings, tmp_path: Path
) -> None:
    first, second = _two_backups(service, tmp_path / "backups")
    shard = next(s for s in second.shards if s.facts)
    snapshot = next(name for name in shard.files if name.endswith(".arrow"))
    damaged = tmp_path / "backups" / second.id / shard_part(shard.shard) / snapshot
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    with pytest.raises(StorageError, match="damaged"):
        restore_backup(str(tmp_path / "backups" / second.id), tmp_path / "from-second", settings.limits)
    # A manifest that cannot be read is no backup: the newest readable one is chosen.
    (tmp_path / "backups" / second.id / BACKUP_MANIFEST).write_text("{ torn")
    assert restore_backup(str(tmp_path / "backups"), tmp_path / "from-first", settings.limits).id == first.id
    # Files written where this process does not see them fail the check before any manifest.
    with pytest.raises(StorageError, match="every node reaches"):
        check_visible(str(tmp_path / "elsewhere"), shard.files)


def test_the_shards_of_a_dead_node_are_restored_beside_the_others(
    open_service: Callable[[], MemoryService],
    settings: Settings,
    clock: ManualClock,
    embedder: Embedder,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc = open_service()
    _fill(svc)
    before = _state(svc)
    svc.backup(str(tmp_path / "backups"))
    lost = [u for u in USERS if shard_of(u, settings.storage.shards) == 1]
    kept = [u for u in USERS if u not in lost]
    # Written after the backup to the shard that lives on: still there after the restore.
    svc.remember(kept[0], [Remember(f"{kept[0]} adopted a cat after the backup", Tag.IDENTITY)])
    after = _state(svc)
    svc.close()
    data_dir = settings.storage.data_dir
    with pytest.raises(ConfigError, match="already holds shard-0001"):
        restore_backup(str(tmp_path / "backups"), data_dir, settings.limits, shards=[1])
    shutil.rmtree(shard_dir(data_dir, 1))  # the node that held shard 1 died
    real_download = backup_files.download

    def cut_short(uri: str, sums: dict, directory: Path) -> int:
        real_download(uri, sums, directory)
        raise StorageError("the network went away")

    monkeypatch.setattr("memory_core.backups.download", cut_short)
    with pytest.raises(StorageError, match="network"):
        restore_backup(str(tmp_path / "backups"), data_dir, settings.limits, shards=[1])
    with pytest.raises(ConfigError, match="did not finish"):
        open_local_service(settings, clock, embedder)
    monkeypatch.setattr("memory_core.backups.download", real_download)
    with pytest.raises(ConfigError, match="same shards"):
        restore_backup(str(tmp_path / "backups"), data_dir, settings.limits, shards=[0, 1])
    # Running it again clears only what the cut-short restore wrote: shard 0 is untouched.
    restore_backup(str(tmp_path / "backups"), data_dir, settings.limits, shards=[1])
    again = open_local_service(settings, clock, embedder)
    try:
        state = _state(again)
        assert {u: state[u] for u in lost} == {u: before[u] for u in lost}
        assert {u: state[u]["facts"] for u in kept} == {u: after[u]["facts"] for u in kept}
    finally:
        again.close()
    with pytest.raises(ConfigError, match="holds shards"):
        restore_backup(str(tmp_path / "backups"), tmp_path / "other", settings.limits, shards=[7])


def test_a_user_erased_after_a_backup_stays_erased_when_it_is_restored(
    settings: Settings, clock: ManualClock, embedder: Embedder, tmp_path: Path
) -> None:
    backups = tmp_path / "backups"
    with_backups = settings.model_copy(
        update={"storage": settings.storage.model_copy(update={"backup_uri": str(backups)})}
    )
    svc = open_local_service(with_backups, clock, embedder)
    try:
        _fill(svc)
        svc.erase("gus")  # before the backup: nothing of gus in it anyway
        record = svc.backup(str(backups))
        receipt = svc.erase("ana")
        assert receipt.facts == 3 and receipt.profile_entries == 1
    finally:
        svc.close()
    records = list((backups / backup_files.ERASURES).iterdir())
    assert len(records) == 2
    assert not any("ana" in path.read_text() or "gus" in path.read_text() for path in records)

    restored_dir = tmp_path / "restored"
    found = restore_backup(str(backups), restored_dir, settings.limits)
    assert (found.id, found.erased_again) == (record.id, 1)
    restored = settings.model_copy(
        update={"storage": StorageSettings(data_dir=restored_dir, shards=settings.storage.shards)}
    )
    again = open_local_service(restored, clock, embedder)
    try:
        state = _state(again)
        assert state["ana"] == {"facts": [], "profile": [], "window": [], "pending": []}
        assert state["gus"] == state["ana"]
        assert len(state["bo"]["facts"]) == 3 and state["bo"]["profile"] and state["bo"]["pending"]
    finally:
        again.close()
    # Every byte of ana is gone from the restored files, not only from what the store serves.
    assert not any(b"ana " in path.read_bytes() for path in restored_dir.rglob("*") if path.is_file())


def test_an_erase_whose_record_cannot_be_written_erases_nothing(
    settings: Settings, clock: ManualClock, embedder: Embedder, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    with_backups = settings.model_copy(
        update={"storage": settings.storage.model_copy(update={"backup_uri": str(blocked / "backups")})}
    )
    svc = open_local_service(with_backups, clock, embedder)
    try:
        svc.remember("ana", [Remember("ana keeps bees", Tag.IDENTITY)])
        with pytest.raises(StorageError):
            svc.erase("ana")
        assert [f.text for f in svc.list_facts("ana")] == ["ana keeps bees"]
    finally:
        svc.close()


def test_a_backup_schedule_backs_up_on_its_period_and_says_when_it_failed(
    service: MemoryService, tmp_path: Path
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    targets = [str(tmp_path / "backups"), str(blocked / "backups"), str(tmp_path / "backups")]

    def take(at: datetime) -> BackupRecord:
        return service.backup(targets.pop(0) if len(targets) > 1 else targets[0])

    schedule = BackupSchedule(take, timedelta(seconds=1))
    first = schedule.start()
    assert first is not None and first.microsecond == 0  # on the second
    try:
        deadline = time.monotonic() + 30
        while schedule.taken < 2:
            assert time.monotonic() < deadline, schedule.status()
            time.sleep(0.2)
    finally:
        schedule.stop()
    status = schedule.status()
    assert (status["taken"], status["failures"], status["last_error"], status["next"]) == (2, 1, None, None)
    assert len(list((tmp_path / "backups").iterdir())) == 2
    failed = BackupSchedule(lambda at: service.backup(str(blocked / "backups")), timedelta(seconds=1))
    failed.start()
    try:
        deadline = time.monotonic() + 30
        while failed.failures < 1:
            assert time.monotonic() < deadline
            time.sleep(0.2)
    finally:
        failed.stop()
    assert failed.status()["last_error"].startswith("StorageError")
