"""kill -9 of every process of a running ``longmem serve`` (driver, GCS, raylet, Serve proxy,
replicas, shard and profile actors) while clients are writing and turns answered 202 wait for
their write; ``longmem serve`` again on the same data dir holds every acknowledged fact and
profile entry, each once, and writes every accepted turn, each once.

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
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil
import pytest

from benchmarks.write_throughput import fixed_latency_server
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


@pytest.fixture
def server_files(tmp_path: Path) -> Iterator[tuple[Path, Path, str]]:
    port = free_port()
    config = tmp_path / "longmem.json"
    llm_url, stop_llm = fixed_latency_server(0.05)
    settings = {
        "storage": {"data_dir": str(tmp_path / "data"), "shards": 2},
        "serve": {"host": "127.0.0.1", "port": port, "api_keys": [{"key": KEY, "tenant": "acme"}]},
        "llm": {"engine": "openai", "base_url": llm_url, "model_path": "fixed-latency"},
        "write": {"concurrency": 8},
    }
    config.write_text(json.dumps(settings))
    yield config, tmp_path / "serve.log", f"http://127.0.0.1:{port}"
    stop_llm()
    for proc in psutil.process_iter(["environ"]):
        try:
            if (proc.info["environ"] or {}).get("LONGMEM_CONFIG") == str(config):
                proc.kill()
        except psutil.Error:
            pass


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
