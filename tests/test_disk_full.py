"""A data dir on a filesystem that fills up: a tmpfs of a few MB mounted for the test (root).

Real FAISS shards with their DuckDB profile files, and the embedder, behind the HTTP API: while
the disk is full, writes answer 503 and nothing is half-stored; reads keep answering; once space is freed
writes succeed again, and a restart holds every acknowledged fact and profile entry, once.
"""

from __future__ import annotations

import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.service import open_local_service
from memory_core.settings import ApiKey, ServeSettings, Settings, StorageSettings
from tests.asgi_app import local_api

KEY = "disk-full-key-0123456789"
AUTH = {"Authorization": f"Bearer {KEY}"}
SIZE_MB = 8


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A fresh tmpfs of SIZE_MB megabytes, unmounted afterwards."""
    mount = tmp_path / "disk"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={SIZE_MB}m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"this test mounts a tmpfs and needs root: {done.stderr.strip()}"
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


def _fill(disk: Path) -> Path:
    """Write a ballast file until the filesystem refuses another byte."""
    ballast = disk / "ballast"
    with open(ballast, "wb", buffering=0) as handle:
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    handle.write(b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
    return ballast


def _remember(client: TestClient, user: str, text: str) -> int:
    return client.post(
        f"/v1/users/{user}/memories", json={"memories": [{"text": text}]}, headers=AUTH
    ).status_code


def _prefer(client: TestClient, user: str, text: str) -> int:
    return client.post(f"/v1/users/{user}/profile", json={"text": text}, headers=AUTH).status_code


def _facts(client: TestClient, user: str) -> list[str]:
    answer = client.get(f"/v1/users/{user}/memories", headers=AUTH)
    assert answer.status_code == 200, answer.text
    return sorted(m["text"] for m in answer.json()["memories"])


def _profile(client: TestClient, user: str) -> list[str]:
    answer = client.get(f"/v1/users/{user}/profile", headers=AUTH)
    assert answer.status_code == 200, answer.text
    return sorted(e["text"] for e in answer.json()["profile"])


def test_a_full_disk_refuses_writes_with_503_keeps_reads_and_loses_nothing_acknowledged(
    tiny_disk: Path, clock: ManualClock, embedder: Embedder
) -> None:
    settings = Settings(
        storage=StorageSettings(data_dir=tiny_disk / "data", shards=2),
        serve=ServeSettings(api_keys=[ApiKey(key=KEY, tenant="acme")]),
    )
    acked: dict[str, list[str]] = {"ana": [], "ben": []}
    acked_profiles: dict[str, list[str]] = {}
    refused: list[str] = []
    service = open_local_service(settings, clock, embedder)
    with TestClient(local_api(service)) as client:
        for i in range(4):
            for user in acked:
                text = f"{user} keeps record number {i} of the garden log"
                assert _remember(client, user, text) == 201
                acked[user].append(text)
        assert _prefer(client, "ana", "Short answers") == 201
        acked_profiles["ana"] = ["Short answers"]

        ballast = _fill(tiny_disk)
        for i in range(6):
            text = f"ana wrote entry {i} while the disk was full"
            answer = client.post("/v1/users/ana/memories", json={"memories": [{"text": text}]}, headers=AUTH)
            if answer.status_code == 201:  # a block freed by a cut-off failed append can take one
                acked["ana"].append(text)
                continue
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "StorageError"
            assert "No space left on device" in answer.json()["detail"]
            refused.append(text)
        assert len(refused) >= 5
        # DuckDB fits commits into the last page of its log while it has room; then it refuses.
        wish = ("Answer in Spanish, " + "and keep it brief " * 40).strip()
        for i in range(10):
            answer = client.post(f"/v1/users/p{i}/profile", json={"text": wish}, headers=AUTH)
            if answer.status_code == 201:
                acked_profiles[f"p{i}"] = [wish]
                continue
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"] == "StorageError"
            break
        assert answer.status_code == 503

        # Reads keep working and show exactly what was acknowledged.
        assert _facts(client, "ana") == sorted(acked["ana"])
        assert _facts(client, "ben") == sorted(acked["ben"])
        assert _profile(client, "ana") == acked_profiles["ana"]
        recalled = client.post("/v1/users/ben/recall", json={"query": "garden log record"}, headers=AUTH)
        assert recalled.status_code == 200 and recalled.json()["memories"], recalled.text

        ballast.unlink()
        for user in acked:
            text = f"{user} wrote this after space was freed"
            assert _remember(client, user, text) == 201
            acked[user].append(text)
        assert _prefer(client, "ben", "Use metric units") == 201
        acked_profiles["ben"] = ["Use metric units"]
    service.close()

    service = open_local_service(settings, clock, embedder)
    with TestClient(local_api(service)) as client:
        for user in acked:
            assert _facts(client, user) == sorted(acked[user])  # each once, none of the refused
        for user in ("ana", "ben", *(f"p{i}" for i in range(10))):
            assert _profile(client, user) == acked_profiles.get(user, [])
    service.close()
    assert not any(text in _facts_text(tiny_disk) for text in refused if text.startswith("ana wrote"))
    acked_facts = sum(len(texts) for texts in acked.values())
    print(f"acked {acked_facts} facts, {len(acked_profiles)} profiles, all found; refused {len(refused)}")


def _facts_text(disk: Path) -> str:
    """Every byte under the data dir, decoded loosely: a refused write must not sit in any file."""
    return "".join(
        p.read_bytes().decode("utf-8", "replace") for p in (disk / "data").rglob("*") if p.is_file()
    )
