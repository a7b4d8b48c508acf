"""The real app on a Ray cluster of three nodes made on this machine: a head and two data nodes,
each with a resource and a data root of its own. The shard actors spread over the data nodes,
the expiry sweep job run from the head sweeps them, and a dead data node's shards come back
from a backup on a new node."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from deployments.writers import writer_of
from memory_core.backups import restore_backup
from memory_core.routing import shard_of
from memory_core.settings import LimitSettings
from memory_core.store.facts import shard_dir
from memory_core.tenancy import scoped
from tests.ray_cluster import ENV, LocalCluster
from tests.serve_app import ADMIN_KEY, OPERATOR_KEY, client, free_port

T = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
NAMESPACE = "longmem-multinode"
SHARDS = 4
# Shard i runs on the node advertising RESOURCES[i % 2]: shards 0 and 2 (and the sweeper)
# on data-a, shards 1 and 3 on data-b.
RESOURCES = ["longmem_data_a", "longmem_data_b"]


@dataclass
class ClusterApp:
    cluster: LocalCluster
    config: dict
    data_dir: Path
    acme: httpx.Client
    serving: subprocess.Popen[str]


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ClusterApp]:
    root = tmp_path_factory.mktemp("multinode")
    cluster = LocalCluster(root)
    serving: subprocess.Popen[str] | None = None
    try:
        cluster.start_head({"head": 1})
        cluster.add_node("data-a", {RESOURCES[0]: 1})
        cluster.add_node("data-b", {RESOURCES[1]: 1})
        port = free_port()
        # Each data node has a data root of its own (on a real cluster: the same path on each
        # node's disk; here, on one machine, two paths).
        data_dir = root / "data-a"
        config = {
            "storage": {
                "data_dir": str(data_dir),
                "node_data_dirs": {RESOURCES[1]: str(root / "data-b")},
                "shards": SHARDS,
                "backup_uri": str(root / "backups"),
            },
            "serve": {
                "host": "127.0.0.1",
                "port": port,
                "ray_address": cluster.address,
                "namespace": NAMESPACE,
                "shard_resources": RESOURCES,
                "ingress_replicas": 1,
                "api_keys": [
                    {"key": ADMIN_KEY, "tenant": "acme", "admin": True},
                    {"key": OPERATOR_KEY, "tenant": "ops", "operator": True},
                ],
            },
            "sweep": {"schedule_every": 0},
        }
        (root / "app.json").write_text(json.dumps(config))
        log = root / "serve.log"
        with log.open("w") as out:
            serving = subprocess.Popen(
                [sys.executable, "-m", "longmem", "--config", str(root / "app.json"), "serve"],
                stdout=out,
                stderr=subprocess.STDOUT,
                text=True,
                env=ENV,
            )
        deadline = time.monotonic() + 600
        while "longmem is serving on" not in log.read_text(errors="replace"):
            if serving.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    "longmem serve did not start:\n" + log.read_text(errors="replace")[-4000:]
                )
            time.sleep(1)
        yield ClusterApp(cluster, config, data_dir, client(f"http://127.0.0.1:{port}", ADMIN_KEY), serving)
    finally:
        if serving is not None and serving.poll() is None:
            serving.send_signal(signal.SIGTERM)
            try:
                serving.wait(120)
            except subprocess.TimeoutExpired:
                serving.kill()
        cluster.stop()


def _placement(app: ClusterApp) -> dict:
    """Each node's resources and the node each shard actor runs on, asked of the cluster."""
    code = f"""
import json, ray
from deployments.stores import shard_actor_name
ray.init(address=ADDRESS, namespace={NAMESPACE!r}, log_to_driver=False)
nodes = {{n["NodeID"]: sorted(n["Resources"]) for n in ray.nodes() if n["Alive"]}}
shards = []
for shard_no in range({SHARDS}):
    ok, health = ray.get(ray.get_actor(shard_actor_name(shard_no)).invoke.remote("health"))
    shards.append(health["node"])
print(json.dumps({{"nodes": nodes, "shards": shards}}))
"""
    return json.loads(app.cluster.python(code).strip().splitlines()[-1])  # type: ignore[no-any-return]


def _expected_nodes(placement: dict) -> list[str]:
    """The node each shard should run on: the one advertising its resource."""
    by_resource = {resource: node for node, resources in placement["nodes"].items() for resource in resources}
    return [by_resource[RESOURCES[n % len(RESOURCES)]] for n in range(SHARDS)]


def _sweep_job(app: ClusterApp, data_dir: str, now: datetime) -> dict:
    """``python -m jobs.expiry_sweep`` as a driver on the head, with a settings file of its own."""
    settings = {"storage": {**app.config["storage"], "data_dir": data_dir}, "serve": {**app.config["serve"]}}
    job_config = app.data_dir.parent / "job.json"
    job_config.write_text(json.dumps(settings))
    command = [
        sys.executable,
        "-m",
        "jobs.expiry_sweep",
        "--config",
        str(job_config),
        "--now",
        now.isoformat(),
    ]
    command += ["--address", app.cluster.address]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=ENV)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _store(app: ClusterApp, users: list[str]) -> dict[str, set[str]]:
    """Two expired and one lasting memory per user; the ids of the lasting ones."""
    kept = {}
    for user in users:
        memories = [
            {"text": f"{user} parked on level {n}", "expire_at": (T - timedelta(hours=n)).isoformat()}
            for n in (1, 2)
        ] + [{"text": f"{user} keeps a lasting note"}]
        out = app.acme.post(
            f"/v1/users/{user}/memories",
            json={"memories": memories, "at": (T - timedelta(days=3)).isoformat()},
        )
        assert out.status_code == 201, out.text
        kept[user] = {m["id"] for m in out.json()["memories"] if "lasting" in m["text"]}
    return kept


def _listed(app: ClusterApp, user: str) -> set[str]:
    return {m["id"] for m in app.acme.get(f"/v1/users/{user}/memories").json()["memories"]}


def test_shards_spread_over_two_data_nodes_and_a_job_from_the_head_sweeps_them(app: ClusterApp) -> None:
    placement = _placement(app)
    print("placement:", json.dumps(placement))
    assert len(placement["nodes"]) == 3
    assert placement["shards"] == _expected_nodes(placement)
    assert len(set(placement["shards"])) == 2
    users = [f"mn{n}" for n in range(4)]
    kept = _store(app, users)
    # The head holds no data dir: the job is given the path the data node has, which does not
    # exist here, and must ask the cluster rather than read this disk.
    record = _sweep_job(app, "/nonexistent/longmem-data", T)
    assert record["status"] == "ok" and record["trigger"] == "job"
    assert record["deleted"] == 2 * len(users)
    for user in users:
        assert _listed(app, user) == kept[user]
    status = subprocess.run(
        [
            sys.executable,
            "-m",
            "longmem",
            "shards",
            "status",
            "--url",
            str(app.acme.base_url),
            "--api-key",
            OPERATOR_KEY,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert status.returncode == 0, status.stderr
    layout = json.loads(status.stdout)
    print("longmem shards status:", json.dumps(layout))
    assert [s["node"] for s in layout["shards"]] == placement["shards"]
    assert sum(s["facts"] for s in layout["shards"]) >= len(users)


def test_a_dead_data_node_is_replaced_by_a_node_restored_from_the_last_backup(app: ClusterApp) -> None:
    users = [f"mn-keep{n}" for n in range(6)]
    on_b = [u for u in users if shard_of(f"acme:{u}", SHARDS) % 2 == 1]
    on_a = [u for u in users if u not in on_b]
    assert on_a and on_b
    for user in users:
        out = app.acme.post(
            f"/v1/users/{user}/memories", json={"memories": [{"text": f"{user} grows tomatoes"}]}
        )
        assert out.status_code == 201, out.text
    before = {user: _listed(app, user) for user in users}
    with client(str(app.acme.base_url), OPERATOR_KEY) as operator:
        made = operator.post("/v1/admin/backup")
    assert made.status_code == 200, made.text
    backup = made.json()
    # Acknowledged after the backup, on each node: what the README says a dead disk loses is what
    # data-b held after it; data-a's shards live on.
    late = {}
    for user in (on_a[0], on_b[0]):
        out = app.acme.post(
            f"/v1/users/{user}/memories", json={"memories": [{"text": f"{user} bought a kayak"}]}
        )
        assert out.status_code == 201
        late[user] = out.json()["memories"][0]["id"]
    app.cluster.kill_node("data-b")
    disk_b = Path(app.config["storage"]["node_data_dirs"][RESOURCES[1]])
    assert shard_dir(disk_b, 1).is_dir() and not shard_dir(app.data_dir, 1).exists()
    shutil.rmtree(disk_b)  # its disk died with it
    restore_backup(backup["uri"], disk_b, LimitSettings(), shards=[1, 3])
    began = time.monotonic()
    app.cluster.add_node("data-b2", {RESOURCES[1]: 1})
    # Ray restarts shards 1 and 3 on the new node, where they load the restored files.
    deadline = time.monotonic() + 240
    while True:
        answer = app.acme.get(f"/v1/users/{on_b[0]}/memories")
        if answer.status_code == 200 or time.monotonic() > deadline:
            break
        time.sleep(2)
    print(f"serving again {time.monotonic() - began:.1f} s after the new node joined")
    assert answer.status_code == 200, answer.text
    _write_through_every_writer(app, time.monotonic() + 240)
    print(f"taking writes again {time.monotonic() - began:.1f} s after the new node joined")
    for user in users:
        assert _listed(app, user) == before[user] | ({late[user]} if user == on_a[0] else set())
    placement = _placement(app)
    assert placement["shards"] == _expected_nodes(placement)


def _write_through_every_writer(app: ClusterApp, deadline: float) -> None:
    """A write through each writer actor, as a client does it: a writer that ran on the dead node
    answers 503 (not acknowledged) until Ray has restarted it, and the write is sent again with
    its Idempotency-Key, which makes the repeat safe."""
    users: dict[int, str] = {}
    n = 0
    while len(users) < SHARDS:
        users.setdefault(writer_of(scoped("acme", f"mn-w{n}"), SHARDS), f"mn-w{n}")
        n += 1
    for writer, user in sorted(users.items()):
        body = {"memories": [{"text": f"{user} fixed the gate"}]}
        headers = {"Idempotency-Key": f"after-node-loss-{writer}"}
        while (
            out := app.acme.post(f"/v1/users/{user}/memories", json=body, headers=headers)
        ).status_code == 503:
            assert time.monotonic() < deadline, out.text
            time.sleep(2)
        assert out.status_code == 201, out.text
        assert len(app.acme.get(f"/v1/users/{user}/memories").json()["memories"]) == 1


def _longmem_shards(app: ClusterApp, *args: str) -> dict:
    """``longmem shards … --url`` against the app, as an operator; its JSON."""
    command = [sys.executable, "-m", "longmem", "shards", *args]
    command += ["--url", str(app.acme.base_url), "--api-key", OPERATOR_KEY]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def _actor_pid(app: ClusterApp, name: str) -> int:
    """The process of the app's actor ``name`` (the sweeper, which coordinates reshards, or a
    shard)."""
    code = f"""
import os, ray
ray.init(address=ADDRESS, namespace={NAMESPACE!r}, log_to_driver=False)
actor = ray.get_actor({name!r})
print(ray.get(actor.__ray_call__.remote(lambda actor: os.getpid())))
"""
    return int(app.cluster.python(code).strip().splitlines()[-1])


def _killed_as_it_starts(app: ClusterApp, reshard: dict, actor: str) -> dict:
    """Start a reshard (``{"add"|"remove": N}``), kill the process of ``actor`` with SIGKILL 0.3 s
    later; the reshard's state once it no longer runs."""
    victim = _actor_pid(app, actor)
    with client(str(app.acme.base_url), OPERATOR_KEY) as operator:
        started = operator.post("/v1/admin/shards", json=reshard)
        assert started.status_code == 202, started.text
        time.sleep(0.3)
        os.kill(victim, signal.SIGKILL)
        while (layout := operator.get("/v1/admin/shards")).status_code != 200 or layout.json()["reshard"][
            "state"
        ] == "running":
            time.sleep(1)
    print(f"after {actor}'s kill:", json.dumps(layout.json()["reshard"]))
    return layout.json()["reshard"]  # type: ignore[no-any-return]


def test_resharding_4_8_4_while_a_client_writes_and_recalls_loses_nothing(app: ClusterApp) -> None:
    users = [f"mn-rs{n}" for n in range(16)]
    stored: dict[str, set[str]] = {user: set() for user in users}
    for user in users:
        body = {"memories": [{"text": f"{user} keeps note {k}"} for k in range(5)]}
        out = app.acme.post(f"/v1/users/{user}/memories", json=body)
        assert out.status_code == 201, out.text
        stored[user] |= {m["id"] for m in out.json()["memories"]}
    stop = threading.Event()
    latencies: dict[str, list[float]] = {"idle": [], "moving": []}
    phase = ["idle"]
    problems: list[str] = []
    # A write that met the killed shard answers 503: not acknowledged, yet it may have been
    # stored before the process died. Those are allowed to be there, nothing else.
    maybe: set[str] = set()
    # Each key's last acknowledged text (None: none yet), then those of later 503s.
    entries: dict[tuple[str, str], list[str | None]] = {}

    def client_loop() -> None:
        with client(str(app.acme.base_url), ADMIN_KEY) as http:
            n = 0
            while not stop.is_set():
                user = users[n % len(users)]
                out = http.post(
                    f"/v1/users/{user}/memories", json={"memories": [{"text": f"{user} live {n}"}]}
                )
                if out.status_code == 503:
                    maybe.add(f"{user} live {n}")
                elif out.status_code != 201:
                    problems.append(f"write {out.status_code}: {out.text[:200]}")
                else:
                    stored[user].add(out.json()["memories"][0]["id"])
                key = f"k{n % 3}"
                put = http.put(f"/v1/users/{user}/profile/{key}", json={"text": f"{user} wish {n}"})
                if put.status_code == 200:
                    entries[(user, key)] = [f"{user} wish {n}"]
                elif put.status_code == 503:
                    entries.setdefault((user, key), [None]).append(f"{user} wish {n}")
                else:
                    problems.append(f"profile {put.status_code}: {put.text[:200]}")
                began = time.monotonic()
                hits = http.post(f"/v1/users/{user}/recall", json={"query": "note", "threshold": -1})
                latencies[phase[0]].append(time.monotonic() - began)
                if hits.status_code != 200:
                    problems.append(f"recall {hits.status_code}: {hits.text[:200]}")
                elif any(not h["text"].startswith(f"{user} ") for h in hits.json()["memories"]):
                    problems.append(f"recall of {user} returned another user's memory")
                n += 1

    worker = threading.Thread(target=client_loop)
    worker.start()
    try:
        time.sleep(20)  # idle figures first
        phase[0] = "moving"
        # Shard 0 (the first moves' source, on data-a) killed as the grow starts: Ray restarts it,
        # still fenced; the reshard goes on, or stops and is resumed.
        after_shard_kill = _killed_as_it_starts(app, {"add": 4}, "longmem-shard-0000")
        grown = after_shard_kill if after_shard_kill["state"] == "done" else _longmem_shards(app, "resume")
        eight = _longmem_shards(app, "status")
        # The coordinator (the sweeper actor, on data-a) killed as the shrink starts: Ray restarts
        # it, it settles the move in flight, and the shrink is resumed.
        assert _killed_as_it_starts(app, {"remove": 4}, "longmem-sweeper")["interrupted_goal"] == 4
        shrunk = _longmem_shards(app, "resume")
    finally:
        stop.set()
        worker.join()
    print("reshard 4 -> 8:", json.dumps(grown["report"]))
    print("reshard 8 -> 4:", json.dumps(shrunk["report"]))
    idle, moving = (sorted(latencies[k]) for k in ("idle", "moving"))
    p99 = {k: v[int(0.99 * (len(v) - 1))] for k, v in (("idle", idle), ("moving", moving))}
    print(
        f"recall p99 idle {p99['idle'] * 1000:.0f} ms, during the moves {p99['moving'] * 1000:.0f} ms "
        f"(ratio {p99['moving'] / p99['idle']:.2f}; {len(idle)} and {len(moving)} recalls)"
    )
    assert problems == []
    assert grown["report"]["shards_after"] == 8 and shrunk["report"]["shards_after"] == 4
    print(f"writes that met the killed shard (503, not acknowledged): {len(maybe)}")
    for user in users:
        listed = app.acme.get(f"/v1/users/{user}/memories").json()["memories"]
        ids = [m["id"] for m in listed]
        assert len(ids) == len(set(ids)) and stored[user] <= set(ids)  # every acknowledged write, once
        assert all(m["text"] in maybe for m in listed if m["id"] not in stored[user])
        profile = {e["key"]: e["text"] for e in app.acme.get(f"/v1/users/{user}/profile").json()["profile"]}
        for (owner, key), texts in entries.items():
            if owner == user:
                assert profile.get(key) in texts, (user, key)  # the last acknowledged entry, or a later 503's
    nodes = [shard["node"] for shard in eight["shards"]]
    print("8 shards on nodes:", nodes)
    placement = _placement(app)
    by_resource = {r: node for node, resources in placement["nodes"].items() for r in resources}
    assert nodes == [by_resource[RESOURCES[n % 2]] for n in range(8)]
    assert placement["shards"] == _expected_nodes(placement)


def test_with_no_app_running_the_job_opens_the_shards_on_their_data_nodes(app: ClusterApp) -> None:
    users = ["mn-late0", "mn-late1", "mn-late2"]
    kept = _store(app, users)
    app.serving.send_signal(signal.SIGTERM)
    assert app.serving.wait(120) == 0
    began = time.monotonic()
    record = _sweep_job(app, str(app.data_dir), T)
    print(f"job with no app: {time.monotonic() - began:.1f} s, {json.dumps(record)}")
    assert record["status"] == "ok" and record["deleted"] == 2 * len(users)
    placement = _placement(app)
    assert placement["shards"] == _expected_nodes(placement)
    left = json.loads(
        app.cluster.python(
            f"""
import json, ray
from deployments.stores import shard_actor_name
ray.init(address=ADDRESS, namespace={NAMESPACE!r}, log_to_driver=False)
ids = []
for shard_no in range({SHARDS}):
    for user in {[f"acme:{u}" for u in users]!r}:
        ok, facts = ray.get(ray.get_actor(shard_actor_name(shard_no)).invoke.remote("list_user", user))
        ids += [str(f.id) for f in facts] if ok else []  # a shard refuses a user it does not own
print(json.dumps(ids))
"""
        )
        .strip()
        .splitlines()[-1]
    )
    assert sorted(left) == sorted(fid for user in users for fid in kept[user])
