"""kill -9 of every process of a running ``longmem serve`` (driver, GCS, raylet, Serve proxy,
replicas, shard, profile and writer actors) while clients are writing and turns answered 202
wait for their write; ``longmem serve`` again on the same data dir holds every acknowledged
fact and profile entry, each once, and writes every accepted turn, each once. And kill -9 of
one of two ingress replicas, then of a writer, then of every process, with 1,000 accepted turns
of 100 users pending: each is written once, each user's in order.

The app runs as its own process with its own local Ray (``RAY_ADDRESS=local``), so the kill
does not touch the Ray instance other tests share. Its LLM is an OpenAI-compatible server in
this process that answers after a fixed latency (the queue is under test, not the model).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from benchmarks.write_throughput import fixed_latency_server
from memory_core.routing import shard_of
from tests.serve_app import free_port

KEY = "cluster-kill-key-0123456789"
USERS = [f"writer{n}" for n in range(6)]
TALKERS = [f"talker{n}" for n in range(20)]
ACKS_BEFORE_KILL = 60
TURNS_BEFORE_KILL = 200


@dataclass
class Ledger:
    """What the clients sent and what the server acknowledged."""

    facts: dict[str, dict[str, str]] = field(default_factory=lambda: {u: {} for u in USERS})  # id -> text
    profile: dict[str, dict[str, str]] = field(default_factory=lambda: {u: {} for u in USERS})  # key -> text
    sent: dict[str, set[str]] = field(default_factory=lambda: {u: set() for u in USERS})
    accepted: dict[str, list[str]] = field(default_factory=lambda: {u: [] for u in TALKERS})  # turns (202)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def turns(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.accepted.values())

    def acks(self) -> int:
        with self.lock:
            return sum(len(v) for v in self.facts.values()) + sum(len(v) for v in self.profile.values())


def _serve(config: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "LONGMEM_CONFIG": str(config), "RAY_ADDRESS": "local"}
    with open(log, "ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "longmem", "serve"], env=env, stdout=out, stderr=subprocess.STDOUT
        )


def _wait_ready(url: str, server: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert server.poll() is None, f"longmem serve exited: {log.read_text()[-3000:]}"
        try:
            if httpx.get(f"{url}/livez", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise AssertionError(f"longmem serve did not answer in 600 s: {log.read_text()[-3000:]}")


def _kill_everything(server: subprocess.Popen[bytes]) -> int:
    """SIGKILL the server and every process below it, all in one sweep; returns how many."""
    root = psutil.Process(server.pid)
    victims = [root, *root.children(recursive=True)]
    for proc in victims:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(victims, timeout=30)
    server.wait(timeout=30)
    return len(victims)


def _write(url: str, user: str, ledger: Ledger, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as api:
        n = 0
        while not stop.is_set():
            text = f"{user} logged observation {n} about the tide pools"
            with ledger.lock:
                ledger.sent[user].add(text)
            try:
                answer = api.post(f"/v1/users/{user}/memories", json={"memories": [{"text": text}]})
                if answer.status_code == 201:
                    with ledger.lock:
                        ledger.facts[user][answer.json()["memories"][0]["id"]] = text
                if n % 3 == 0:
                    key, wish = f"pref{n}", f"{user} wants reply style {n}"
                    answer = api.put(f"/v1/users/{user}/profile/{key}", json={"text": wish})
                    if answer.status_code == 200:
                        with ledger.lock:
                            ledger.profile[user][key] = wish
            except httpx.HTTPError:
                return  # the server died mid-call: that write was never acknowledged
            n += 1


def _talk(url: str, user: str, ledger: Ledger, stop: threading.Event) -> None:
    """Send turns without waiting for their write (202), one after another."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as api:
        n = 0
        while not stop.is_set():
            said = f"{user} counted {n} herons at the estuary"
            body = {"wait": False, "turns": [{"role": "user", "content": said}]}
            try:
                if api.post(f"/v1/users/{user}/turns", json=body).status_code == 202:
                    with ledger.lock:
                        ledger.accepted[user].append(said)
            except httpx.HTTPError:
                return
            n += 1


@contextmanager
def _server(tmp_path: Path, llm_latency_s: float, ingress_replicas: int) -> Iterator[tuple[Path, Path, str]]:
    """Settings for ``longmem serve`` over a fixed-latency LLM: config file, log, URL; every
    process of the app is killed afterwards."""
    port = free_port()
    config = tmp_path / "longmem.json"
    llm_url, stop_llm = fixed_latency_server(llm_latency_s)
    settings = {
        "storage": {"data_dir": str(tmp_path / "data"), "shards": 2},
        "serve": {
            "host": "127.0.0.1",
            "port": port,
            "api_keys": [{"key": KEY, "tenant": "acme"}],
            "ingress_replicas": ingress_replicas,
        },
        "llm": {"engine": "openai", "base_url": llm_url, "model_path": "fixed-latency"},
        "write": {"concurrency": 8},
    }
    config.write_text(json.dumps(settings))
    try:
        yield config, tmp_path / "serve.log", f"http://127.0.0.1:{port}"
    finally:
        stop_llm()
        for proc in _app_processes(config):
            proc.kill()


def _app_processes(config: Path, title: str = "") -> list[psutil.Process]:
    """The processes of the app started with ``config`` (Ray's workers inherit its environment)
    whose command line holds ``title``."""
    found = []
    for proc in psutil.process_iter(["environ", "cmdline"]):
        try:
            if (proc.info["environ"] or {}).get("LONGMEM_CONFIG") == str(config):
                if title in " ".join(proc.info["cmdline"] or ()):
                    found.append(proc)
        except psutil.Error:
            pass
    return found


@pytest.fixture
def server_files(tmp_path: Path) -> Iterator[tuple[Path, Path, str]]:
    with _server(tmp_path, llm_latency_s=0.05, ingress_replicas=1) as files:
        yield files


def test_every_acknowledged_write_survives_kill_9_of_the_whole_cluster(
    server_files: tuple[Path, Path, str],
) -> None:
    config, log, url = server_files
    server = _serve(config, log)
    _wait_ready(url, server, log)

    ledger, stop = Ledger(), threading.Event()
    writers = [threading.Thread(target=_write, args=(url, user, ledger, stop)) for user in USERS]
    writers += [threading.Thread(target=_talk, args=(url, user, ledger, stop)) for user in TALKERS]
    for writer in writers:
        writer.start()
    deadline = time.monotonic() + 300
    while (
        ledger.acks() < ACKS_BEFORE_KILL or ledger.turns() < TURNS_BEFORE_KILL
    ) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ledger.acks() >= ACKS_BEFORE_KILL, "the writers were too slow"
    assert ledger.turns() >= TURNS_BEFORE_KILL, "the talkers were too slow"
    killed = _kill_everything(server)  # writes are in flight now
    stop.set()
    for writer in writers:
        writer.join(timeout=120)
    assert killed >= 5  # driver, GCS, raylet and worker processes
    assert not any(w.is_alive() for w in writers)

    server = _serve(config, log)
    _wait_ready(url, server, log)
    acked_facts = sum(len(v) for v in ledger.facts.values())
    found_facts = 0
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as api:
        for user in USERS:
            memories = api.get(f"/v1/users/{user}/memories").json()["memories"]
            texts = [m["text"] for m in memories]
            assert len(texts) == len(set(texts)), f"{user}: a write was stored twice"
            assert set(texts) <= ledger.sent[user], f"{user}: a text nobody sent"
            by_id = {m["id"]: m["text"] for m in memories}
            assert ledger.facts[user].items() <= by_id.items(), f"{user}: an acknowledged fact is missing"
            found_facts += len(memories)
            profile = {e["key"]: e["text"] for e in api.get(f"/v1/users/{user}/profile").json()["profile"]}
            assert ledger.profile[user].items() <= profile.items(), (
                f"{user}: an acknowledged entry is missing"
            )
        # Every turn answered 202 is written once after the restart, none lost, none twice.
        accepted = ledger.turns()
        deadline = time.monotonic() + 600
        while True:
            written = {
                user: [m["text"] for m in api.get(f"/v1/users/{user}/memories").json()["memories"]]
                for user in TALKERS
            }
            missing = [t for u in TALKERS for t in ledger.accepted[u] if not any(t in m for m in written[u])]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(2)
        assert not missing, f"{len(missing)} of {accepted} accepted turns never written, e.g. {missing[:3]}"
        for user in TALKERS:
            assert len(written[user]) == len(set(written[user])), f"{user}: a turn was written twice"
            assert len(written[user]) <= len(ledger.accepted[user]) + 1  # + the one a kill cut off
    print(
        f"killed {killed} processes; facts acknowledged {acked_facts}, found {found_facts}; "
        f"turns accepted {accepted}, all written once"
    )
    server.send_signal(signal.SIGINT)
    server.wait(timeout=300)


def _pending(url: str) -> float:
    """The writes queued and not started, over every writer (from any ingress replica)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as api:
        metrics = api.get("/metrics").text
    return sum(
        float(line.split()[-1])
        for line in metrics.splitlines()
        if line.startswith("longmem_write_jobs_pending{")
    )


def _written(url: str, users: list[str]) -> dict[str, list[str]]:
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=120) as api:
        return {u: [m["text"] for m in api.get(f"/v1/users/{u}/memories").json()["memories"]] for u in users}


def _by_shard(written: dict[str, list[str]], shard: dict[str, int]) -> dict[int, int]:
    counts = {0: 0, 1: 0}
    for user, texts in written.items():
        counts[shard[user]] += len(texts)
    return counts


def test_kill_9_of_an_ingress_replica_then_a_writer_then_everything_with_1000_turns_pending(
    tmp_path: Path,
) -> None:
    users, turns = [f"heron{n}" for n in range(100)], 10
    with _server(tmp_path, llm_latency_s=0.2, ingress_replicas=2) as (config, log, url):
        server = _serve(config, log)
        _wait_ready(url, server, log)
        headers = {"Authorization": f"Bearer {KEY}"}

        def accept(user: str) -> list[str]:
            said = []
            with httpx.Client(base_url=url, headers=headers, timeout=60) as api:
                for n in range(turns):
                    text = f"{user} saw {n} kingfishers by the weir"
                    body = {"wait": False, "turns": [{"role": "user", "content": text}]}
                    answer = api.post(f"/v1/users/{user}/turns", json=body)
                    assert answer.status_code == 202, answer.text
                    said.append(text)
            return said

        with ThreadPoolExecutor(max_workers=16) as pool:
            accepted = dict(zip(users, pool.map(accept, users), strict=True))
        assert sum(len(v) for v in accepted.values()) == len(users) * turns

        replicas = _app_processes(config, "ServeReplica:longmem:ingress")
        assert len(replicas) == 2, [p.cmdline() for p in _app_processes(config)]
        replicas[0].send_signal(signal.SIGKILL)
        pending = {"ingress replica": _pending(url)}  # the other replica answers at once
        writers = _app_processes(config, "WriterActor")
        assert len(writers) == 2, [p.cmdline() for p in _app_processes(config)]
        writers[0].send_signal(signal.SIGKILL)
        pending["writer"] = _pending(url)
        assert min(pending.values()) > 0, "every turn was written before the kills"

        # Both shards' writers go on (the killed one restarted), then every process dies at once.
        shard = {user: shard_of(f"acme:{user}", 2) for user in users}
        before = _by_shard(_written(url, users), shard)
        deadline = time.monotonic() + 300
        while any(_by_shard(_written(url, users), shard)[n] < before[n] + 10 for n in (0, 1)):
            assert time.monotonic() < deadline, "a writer did not come back"
            time.sleep(1)
        pending["every process"] = _pending(url)
        assert pending["every process"] > 0, "every turn was written before the last kill"
        killed = _kill_everything(server)
        server = _serve(config, log)
        _wait_ready(url, server, log)

        # Every accepted turn is written once, each user's in the order accepted.
        deadline = time.monotonic() + 900
        while True:
            written = _written(url, users)
            done = sum(len(v) for v in written.values())
            if done >= len(users) * turns or time.monotonic() > deadline:
                break
            time.sleep(2)
        for user in users:
            said = [next(t for t in accepted[user] if t in memory) for memory in written[user]]
            assert said == accepted[user], f"{user}: written {said}, accepted {accepted[user]}"
        kills = ", ".join(f"{what} ({left:.0f} turns pending)" for what, left in pending.items())
        print(
            f"kill -9 of: {kills} ({killed} processes); "
            f"{done} of {len(users) * turns} accepted turns written once, in order"
        )
        server.send_signal(signal.SIGINT)
        server.wait(timeout=300)
