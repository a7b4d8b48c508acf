"""Admin calls act on the caller's tenant only; a cluster-wide sweep needs an operator key; no
sweep runs with a cut-off after the server's clock; backups and recall history over HTTP. The HTTP API
in-process, on real shards."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from fastapi.testclient import TestClient

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import ApiKey, ServeSettings, Settings
from tests.asgi_app import local_api

ACME = "acme-admin-key-0123456789"
GLOBEX = "globex-admin-key-0123456789"
OPS = "ops-operator-key-0123456789"


@pytest.fixture
def api(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> Iterator[tuple[TestClient, MemoryService]]:
    settings.serve = ServeSettings(
        api_keys=[
            ApiKey(key=ACME, tenant="acme", admin=True),
            ApiKey(key=GLOBEX, tenant="globex", admin=True),
            ApiKey(key=OPS, tenant="ops", operator=True),
        ]
    )
    service = open_local_service(settings, clock, embedder)
    with TestClient(local_api(service)) as client:
        yield client, service
    service.close()


def _as(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def _texts(service: MemoryService, user: str) -> set[str]:
    return {f.text for f in service.list_facts(user)}


def _plant(service: MemoryService, clock: ManualClock) -> None:
    """Each tenant's user: a fact already expired, one expiring next year, one lasting."""
    for user in ("acme:alice", "globex:bob"):
        service.remember(
            user,
            [
                Remember(f"{user} at the airport", ttl=timedelta(hours=1)),
                Remember(f"{user} trip next year", ttl=timedelta(days=365)),
                Remember(f"{user} allergic to peanuts"),
            ],
        )
    clock.advance(timedelta(hours=2))


def test_a_tenant_admin_cannot_sweep_the_future_or_other_tenants(
    api: tuple[TestClient, MemoryService], clock: ManualClock
) -> None:
    client, service = api
    _plant(service, clock)
    everything = {u: _texts(service, u) for u in ("acme:alice", "globex:bob")}

    future = client.post("/v1/admin/sweep", json={"now": "9999-12-31T00:00:00Z"}, headers=_as(ACME))
    assert future.status_code == 422 and future.json()["error"] == "FutureCutoffError", future.text
    assert "after the server's clock" in future.json()["detail"]
    assert {u: _texts(service, u) for u in everything} == everything  # nothing deleted
    one_second_ahead = (clock.now() + timedelta(seconds=1)).isoformat()
    ahead = client.post("/v1/admin/sweep", json={"now": one_second_ahead, "dry_run": True}, headers=_as(ACME))
    assert ahead.status_code == 422

    swept = client.post("/v1/admin/sweep", json={}, headers=_as(ACME))
    assert swept.status_code == 200, swept.text
    assert swept.json()["deleted"] == 1 and swept.json()["tenant"] == "acme"
    assert _texts(service, "acme:alice") == everything["acme:alice"] - {"acme:alice at the airport"}
    assert _texts(service, "globex:bob") == everything["globex:bob"]  # another tenant's: untouched

    everyone = client.post("/v1/admin/sweep", json={"all_tenants": True}, headers=_as(ACME))
    assert everyone.status_code == 403 and everyone.json()["error"] == "AuthError"
    assert _texts(service, "globex:bob") == everything["globex:bob"]


def test_only_an_operator_sweeps_every_tenant_and_sees_every_record(
    api: tuple[TestClient, MemoryService], clock: ManualClock
) -> None:
    client, service = api
    _plant(service, clock)
    assert client.post("/v1/admin/sweep", json={"dry_run": True}, headers=_as(ACME)).json()["due"] == 1
    cluster = client.post("/v1/admin/sweep", json={"all_tenants": True}, headers=_as(OPS))
    assert cluster.status_code == 200, cluster.text
    assert cluster.json()["deleted"] == 2 and cluster.json()["tenant"] is None
    assert "globex:bob at the airport" not in _texts(service, "globex:bob")
    future = client.post("/v1/admin/sweep", json={"all_tenants": True, "now": "9999-01-01"}, headers=_as(OPS))
    assert future.status_code == 422

    def records(key: str) -> list[tuple[str | None, int]]:
        listed = client.get("/v1/admin/sweeps", headers=_as(key))
        assert listed.status_code == 200, listed.text
        return [(r["tenant"], r["deleted"]) for r in listed.json()["sweeps"]]

    assert records(ACME) == [("acme", 0)]  # its own dry run; not the operator's, not globex's
    assert records(GLOBEX) == []
    assert records(OPS) == [(None, 2), ("acme", 0)]


def test_the_backup_schedule_is_for_operators_and_needs_a_backup_uri(
    api: tuple[TestClient, MemoryService],
) -> None:
    client, _ = api
    assert client.get("/v1/admin/backup", headers=_as(ACME)).status_code == 403
    unset = client.get("/v1/admin/backup", headers=_as(OPS))
    assert unset.status_code == 409 and "backup_uri" in unset.text


def test_recall_over_http_says_what_a_memory_replaced(api: tuple[TestClient, MemoryService]) -> None:
    client, service = api
    old, new = service.remember(
        "acme:alice", [Remember("alice lives in Graz"), Remember("alice lives in Linz")]
    )
    service.facts.supersede("acme:alice", old.id, new.id)
    ask = {"query": "Where did alice live before?", "k": 1}
    plain = client.post("/v1/users/alice/recall", json=ask, headers=_as(ACME)).json()["memories"]
    assert [(m["text"], m["replaced"]) for m in plain] == [("alice lives in Linz", [])]
    both = client.post("/v1/users/alice/recall", json={**ask, "history": True}, headers=_as(ACME)).json()
    (hit,) = both["memories"]
    assert [(m["id"], m["text"]) for m in hit["replaced"]] == [(str(old.id), "alice lives in Graz")]
    assert (
        client.post("/v1/users/alice/recall", json={**ask, "history": True}, headers=_as(GLOBEX)).json()[
            "memories"
        ]
        == []
    )


def test_an_operator_reshards_over_http_while_the_api_serves(api: tuple[TestClient, MemoryService]) -> None:
    client, service = api
    users = [f"u{n}" for n in range(12)]
    for user in users:
        made = client.post(
            f"/v1/users/{user}/memories",
            json={"memories": [{"text": f"{user} keeps bees"}]},
            headers=_as(ACME),
        )
        assert made.status_code == 201, made.text
    assert client.post("/v1/admin/shards", json={"add": 2}, headers=_as(ACME)).status_code == 403
    assert client.post("/v1/admin/shards", json={"remove": 4}, headers=_as(OPS)).status_code == 422
    assert client.post("/v1/admin/shards", json={"add": 1, "remove": 1}, headers=_as(OPS)).status_code == 422
    started = client.post("/v1/admin/shards", json={"add": 2}, headers=_as(OPS))
    assert started.status_code == 202, started.text
    assert started.json()["goal"] == service.settings.storage.shards + 2

    def layout() -> dict:
        return client.get("/v1/admin/shards", headers=_as(OPS)).json()  # type: ignore[no-any-return]

    while (now := layout())["reshard"]["state"] == "running":
        hits = client.post("/v1/users/u0/recall", json={"query": "bees"}, headers=_as(ACME)).json()
        assert all(hit["text"].startswith("u0 ") for hit in hits["memories"])
    assert now["reshard"]["state"] == "done", now["reshard"]
    assert len(now["shards"]) == service.settings.storage.shards + 2
    assert now["routing"]["version"] == now["reshard"]["report"]["routing_version"]
    for user in users:
        listed = client.get(f"/v1/users/{user}/memories", headers=_as(ACME)).json()["memories"]
        assert [m["text"] for m in listed] == [f"{user} keeps bees"]
