"""Erasing a user is complete (no byte of their text or id left in any file of the data dir,
whatever became of their facts before), retry-safe and idempotent, reaches the same user from
the CLI as from the API, and nothing about them goes to the logs. Real shards and DuckDB."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from longmem.cli import main
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import StorageError
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import ServeSettings, Settings
from memory_core.store import snapshot
from tests.asgi_app import local_api
from tests.scripted_engine import ScriptedEngine, facts_json

CANARY = "CANARY-erase-4be1-金丝雀"
USER = "user-9d3f70"


def _files_holding(root: Path, needle: str) -> list[Path]:
    data = needle.encode("utf-8")
    return [p for p in root.rglob("*") if p.is_file() and data in p.read_bytes()]


def _snapshot_all(svc: MemoryService) -> None:
    for shard in svc.facts.shards:  # type: ignore[attr-defined]
        shard.snapshot()


def test_a_user_whose_facts_are_all_gone_still_erases_every_byte(
    open_service: Callable[[], MemoryService], clock: ManualClock, data_dir: Path
) -> None:
    svc = open_service()
    forgotten = svc.remember(USER, [Remember(f"{CANARY} forgotten {i}") for i in range(3)])
    svc.remember(USER, [Remember(f"{CANARY} expired", ttl=timedelta(hours=1))])
    svc.remember("bystander", [Remember("bystander keeps this")])
    _snapshot_all(svc)  # the canary is in a snapshot, which the next one keeps as its fallback
    svc.forget_ids(USER, [f.id for f in forgotten])
    clock.advance(timedelta(hours=2))
    assert svc.sweep().deleted == 1
    entry = svc.set_preference(USER, f"{CANARY} answers in haiku")
    svc.delete_preference(USER, entry.key)
    _snapshot_all(svc)
    assert svc.list_facts(USER) == [] and svc.profile(USER) == []
    assert _files_holding(data_dir, CANARY)  # nothing left to recall, but still on disk

    receipt = svc.erase(USER)
    assert (receipt.facts, receipt.profile_entries) == (0, 0)
    assert _files_holding(data_dir, CANARY) == [] and _files_holding(data_dir, USER) == []
    svc.close()
    again = open_service()
    assert [f.text for f in again.list_facts("bystander")] == ["bystander keeps this"]
    assert again.list_facts(USER) == [] and _files_holding(data_dir, CANARY) == []


def test_an_erase_that_failed_changed_nothing_and_its_retry_erases_all(
    open_service: Callable[[], MemoryService], data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    svc = open_service()
    svc.remember(USER, [Remember(f"{CANARY} fact {i}") for i in range(4)])
    svc.set_preference(USER, f"{CANARY} short answers")
    svc.remember("bystander", [Remember("bystander keeps this")])
    write_snapshot = snapshot.write_snapshot

    def disk_full(*args: object) -> None:
        raise StorageError("No space left on device")

    monkeypatch.setattr(snapshot, "write_snapshot", disk_full)
    with pytest.raises(StorageError):
        svc.erase(USER)
    assert len(svc.list_facts(USER)) == 4  # not half-erased: the retry has everything to do
    monkeypatch.setattr(snapshot, "write_snapshot", write_snapshot)

    receipt = svc.erase(USER)
    assert (receipt.facts, receipt.profile_entries) == (4, 1)
    assert _files_holding(data_dir, CANARY) == []
    repeated = svc.erase(USER)  # idempotent: nothing left, nothing wrong
    assert (repeated.facts, repeated.profile_entries) == (0, 0) and _files_holding(data_dir, CANARY) == []
    svc.close()
    again = open_service()
    assert again.list_facts(USER) == [] and again.profile(USER) == []
    assert [f.text for f in again.list_facts("bystander")] == ["bystander keeps this"]


def test_the_cli_erases_the_user_the_server_stored(
    settings: Settings,
    clock: ManualClock,
    embedder: Embedder,
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    settings.serve = ServeSettings(local_only=True)
    svc = open_local_service(settings, clock, embedder)
    with TestClient(local_api(svc)) as client:
        stored = client.post("/v1/users/alice/memories", json={"memories": [{"text": f"{CANARY} fact"}]})
        assert stored.status_code == 201, stored.text
        assert client.post("/v1/users/alice/profile", json={"text": f"{CANARY} pref"}).status_code == 201
    svc.close()

    monkeypatch.setenv("LONGMEM_STORAGE__SHARDS", str(settings.storage.shards))
    assert main(["--data-dir", str(data_dir), "erase", "--user", "alice"]) == 0
    receipt = capsys.readouterr().out
    assert '"facts": 1' in receipt and '"profile_entries": 1' in receipt
    assert _files_holding(data_dir, CANARY) == []
    assert main(["--data-dir", str(data_dir), "erase", "--user", "alice", "--tenant", "No:Such"]) == 2


def test_no_log_line_holds_memory_text_or_a_user_id(
    settings: Settings, clock: ManualClock, embedder: Embedder, caplog: pytest.LogCaptureFixture
) -> None:
    engine = ScriptedEngine()
    # Chinese facts for an English message fail the language check (twice: the retry too), and
    # a forget target that is not JSON fails to parse: each error quoted the model's output.
    said_here = "canary-said-51d2"
    wrong_language = facts_json((f"{CANARY} 住在长沙", "identity", "fact", False))
    engine.script("extract", wrong_language, wrong_language)
    engine.script("forget_target", f"{CANARY} not json", f"{CANARY} not json")
    settings.serve = ServeSettings(local_only=True)
    svc = open_local_service(settings, clock, embedder, engine=engine)
    caplog.set_level(logging.DEBUG)
    try:
        with TestClient(local_api(svc)) as client:
            said = {
                "session_id": "s",
                "wait": True,
                "turns": [{"role": "user", "content": f"I live in Lisbon, {said_here}"}],
            }
            ingest = client.post(f"/v1/users/{USER}/turns", json=said)
            assert ingest.status_code == 200 and ingest.json()["results"][0]["error"], ingest.text
            forget = client.post(f"/v1/users/{USER}/forget", json={"utterance": f"forget {said_here}"})
            assert forget.status_code == 502, forget.text
    finally:
        svc.close()
    # The service's own log lines (the test's HTTP client logs the URLs it calls).
    lines = [
        logging.Formatter().format(r) for r in caplog.records if not r.name.startswith(("httpx", "httpcore"))
    ]
    leaks = [line for line in lines if any(secret in line for secret in (CANARY, said_here, USER))]
    assert leaks == []
    assert any("not written" in line for line in lines) and any("answered 502" in line for line in lines)
