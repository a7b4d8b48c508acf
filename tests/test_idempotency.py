"""Idempotency-Key on write calls: a repeat (a client's retry after a timeout) gets the first
answer and writes nothing again, after a restart too; the same key with another request is
refused; an erase takes the kept answers with it. The HTTP API in-process on real shards."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import ServeSettings, Settings
from tests.asgi_app import local_api
from tests.scripted_engine import ScriptedEngine, facts_json

REMEMBER = {"memories": [{"text": "I keep a sourdough starter called Bubbles"}]}


@pytest.fixture
def api(settings: Settings, clock: ManualClock, embedder: Embedder) -> Iterator[Callable[[], TestClient]]:
    """Opens the API over a service on the test's data dir (again after a 'restart')."""
    settings.serve = ServeSettings(local_only=True)
    engine = ScriptedEngine()
    engine.defaults["extract"] = facts_json(("User plays the bagpipes", "identity", "fact", False))
    opened: list[tuple[MemoryService, TestClient]] = []

    def start() -> TestClient:
        for service, client in opened:
            client.app.state.lanes.close(wait=False)  # a restart: what is queued is not written
            client.close()
            service.close()
        opened.clear()
        service = open_local_service(settings, clock, embedder, engine)
        client = TestClient(local_api(service))
        opened.append((service, client))
        return client

    yield start
    for service, client in opened:
        client.app.state.lanes.close()
        client.close()
        service.close()


def _texts(client: TestClient, user: str) -> list[str]:
    return [m["text"] for m in client.get(f"/v1/users/{user}/memories").json()["memories"]]


def test_a_repeated_write_gets_the_first_answer_and_writes_nothing_again(
    api: Callable[[], TestClient], data_dir: Path
) -> None:
    client = api()
    key = {"Idempotency-Key": "3f0c1d5e-remember-1"}
    first = client.post("/v1/users/hal/memories", json=REMEMBER, headers=key)
    again = client.post("/v1/users/hal/memories", json=REMEMBER, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.json() == first.json() and again.headers["Idempotent-Replayed"] == "true"
    assert "Idempotent-Replayed" not in first.headers
    assert _texts(client, "hal") == ["I keep a sourdough starter called Bubbles"]

    other = client.post(
        "/v1/users/hal/memories", json={"memories": [{"text": "something else"}]}, headers=key
    )
    assert other.status_code == 422 and "another request" in other.json()["detail"]
    assert (
        client.post("/v1/users/hal/memories", json=REMEMBER, headers={"Idempotency-Key": " "}).status_code
        == 422
    )

    turn = {"wait": False, "turns": [{"role": "user", "content": "I play the bagpipes"}]}
    accepted = client.post("/v1/users/hal/turns", json=turn, headers={"Idempotency-Key": "turn-7"})
    repeat = client.post("/v1/users/hal/turns", json=turn, headers={"Idempotency-Key": "turn-7"})
    assert accepted.status_code == repeat.status_code == 202
    assert repeat.json()["job_id"] == accepted.json()["job_id"]

    # After a restart the answers are still kept, and the turn accepted once was written once.
    client = api()
    assert client.post("/v1/users/hal/memories", json=REMEMBER, headers=key).json() == first.json()
    assert client.post("/v1/users/hal/turns", json=turn, headers={"Idempotency-Key": "turn-7"}).json() == (
        accepted.json()
    )
    deleted = client.delete(
        f"/v1/users/hal/memories/{first.json()['memories'][0]['id']}", headers={"Idempotency-Key": "d1"}
    )
    assert (
        client.delete(
            f"/v1/users/hal/memories/{first.json()['memories'][0]['id']}", headers={"Idempotency-Key": "d1"}
        ).json()
        == deleted.json()
    )
    _wait_written(client, "hal", "User plays the bagpipes")
    assert _texts(client, "hal") == ["User plays the bagpipes"]

    # An erase takes the kept answers, and their text, with it.
    assert client.delete("/v1/users/hal").status_code == 200
    files = b"".join(p.read_bytes() for p in data_dir.rglob("*") if p.is_file())
    assert b"Bubbles" not in files
    fresh = client.post("/v1/users/hal/memories", json=REMEMBER, headers=key)
    assert fresh.status_code == 201 and "Idempotent-Replayed" not in fresh.headers


def test_repeats_sent_at_once_write_once(api: Callable[[], TestClient]) -> None:
    client = api()
    answers: list[dict[str, object]] = []
    threads = [
        threading.Thread(
            target=lambda: answers.append(
                client.post(
                    "/v1/users/ivy/memories", json=REMEMBER, headers={"Idempotency-Key": "same"}
                ).json()
            )
        )
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 4 and all(a == answers[0] for a in answers)
    assert _texts(client, "ivy") == ["I keep a sourdough starter called Bubbles"]


def _wait_written(client: TestClient, user: str, text: str) -> None:
    import time

    deadline = time.monotonic() + 60
    while text not in _texts(client, user):
        assert time.monotonic() < deadline, _texts(client, user)
        time.sleep(0.05)
