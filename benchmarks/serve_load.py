"""What the serve benchmark's clients send, and how, and what else the machine was doing.

Requests are built from the retrieval data set (``benchmarks/data/retrieval_zh_en.jsonl``);
load is closed-loop: N client threads, each with its own connection, send requests back to
back until told to stop. A watcher notes other Ray clusters started on the machine meanwhile.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx
import numpy as np
import psutil
from tqdm import tqdm

from benchmarks.bench_store import latency_ms
from benchmarks.embedders import DATA
from memory_core.tenancy import LOCAL_TENANT

# Varies the questions' texts (the data set has ~90); nothing in the app caches, but a client might.
_OPENERS = ["", "Quick question: ", "Remind me, ", "请问，"]


@dataclass(frozen=True)
class Request:
    """One request to send; ``relevant`` (recalls only) names memory texts that answer it."""

    method: str
    path: str
    body: dict[str, Any] | None = None
    relevant: frozenset[str] | None = None


@dataclass
class Load:
    """What the clients of one load phase saw."""

    latencies_ns: list[int] = field(default_factory=list)  # successful requests only
    errors: int = 0
    seconds: float = 0.0
    judged: int = 0  # successful recalls that had relevant memories to find
    found: int = 0  # ... and returned at least one of them

    def figures(self) -> dict[str, float]:
        """p50/p99/mean in ms, rps (successful requests per wall second), counts, hit rate."""
        out = latency_ms(self.latencies_ns) if self.latencies_ns else {"p50": 0.0, "p99": 0.0, "mean": 0.0}
        out.update(
            rps=len(self.latencies_ns) / self.seconds, requests=len(self.latencies_ns), errors=self.errors
        )
        if self.judged:
            out["hit_rate"] = self.found / self.judged
        return out


@dataclass(frozen=True)
class Probe:
    """A user of the retrieval data set: real facts, questions and the facts that answer them."""

    user: str  # HTTP user id
    facts: list[str]
    queries: list[tuple[str, frozenset[str]]]


def read_probes() -> list[Probe]:
    """The retrieval data set's users."""
    probes = []
    for line in DATA.read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            text = {f["id"]: f["text"] for f in row["facts"]}
            queries = [(q["q"], frozenset(text[r] for r in q["relevant"])) for q in row["queries"]]
            probes.append(Probe(f"probe-{row['user']}", list(text.values()), queries))
    return probes


def bulk_user(n: int) -> str:
    """The HTTP user id of synthetic user ``n``."""
    return f"user-{n:06d}"


def stored(user: str) -> str:
    """The id the shards keep for an HTTP user of a local-only server."""
    return f"{LOCAL_TENANT}:{user}"


def recall_request(probes: Sequence[Probe], users: int) -> Callable[[np.random.Generator], Request]:
    """A random data-set question, asked by its probe user half of the time, else by a bulk user."""

    def make(rng: np.random.Generator) -> Request:
        probe = probes[int(rng.integers(len(probes)))]
        text, relevant = probe.queries[int(rng.integers(len(probe.queries)))]
        body = {"query": _OPENERS[int(rng.integers(len(_OPENERS)))] + text}
        if rng.integers(2):
            return Request("POST", f"/v1/users/{probe.user}/recall", body, relevant)
        return Request("POST", f"/v1/users/{bulk_user(int(rng.integers(users)))}/recall", body)

    return make


def profile_request(users: int) -> Callable[[np.random.Generator], Request]:
    """The baseline: a bulk user's profile (auth, routing, one profile-actor call)."""
    return lambda rng: Request("GET", f"/v1/users/{bulk_user(int(rng.integers(users)))}/profile")


def timed(seconds: float) -> threading.Event:
    """An event that sets itself after ``seconds``."""
    done = threading.Event()
    timer = threading.Timer(seconds, done.set)
    timer.daemon = True
    timer.start()
    return done


def run_load(
    url: str,
    clients: int,
    make: Callable[[np.random.Generator], Request],
    done: threading.Event,
    label: str,
    seed: int,
) -> Load:
    """Run ``clients`` client threads against ``url`` until ``done`` is set.

    Args:
        url: the server's base URL.
        clients: concurrent clients, each with its own connection and random generator.
        make: builds the next request from the client's generator.
        done: ends the phase (each client finishes the request it is waiting on).
        label: the progress bar's label.
        seed: seeds the clients' generators.

    Returns:
        The merged figures of all clients; a non-200 answer or a transport error is an error.
    """
    parts = [Load() for _ in range(clients)]

    def client_loop(no: int) -> None:
        rng, part = np.random.default_rng([seed, no]), parts[no]
        with httpx.Client(base_url=url, timeout=60) as client:
            while not done.is_set():
                request = make(rng)
                began = time.perf_counter_ns()
                try:
                    response = client.request(request.method, request.path, json=request.body)
                except httpx.HTTPError:
                    part.errors += 1
                    continue
                took = time.perf_counter_ns() - began
                if response.status_code != 200:
                    part.errors += 1
                    continue
                part.latencies_ns.append(took)
                if request.relevant:
                    part.judged += 1
                    part.found += any(m["text"] in request.relevant for m in response.json()["memories"])

    threads = [threading.Thread(target=client_loop, args=(no,), daemon=True) for no in range(clients)]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    with tqdm(desc=label, unit="req", file=sys.stderr) as bar:
        while any(thread.is_alive() for thread in threads):
            time.sleep(0.5)
            bar.update(sum(len(p.latencies_ns) for p in parts) - bar.n)
    return Load(
        latencies_ns=[ns for p in parts for ns in p.latencies_ns],
        errors=sum(p.errors for p in parts),
        seconds=time.perf_counter() - began,
        judged=sum(p.judged for p in parts),
        found=sum(p.found for p in parts),
    )


def raylets() -> int:
    """Ray clusters running on this machine (one raylet each)."""
    return sum(proc.info["name"] == "raylet" for proc in psutil.process_iter(["name"]))


class MachineWatch:
    """Samples, every ``every`` seconds, how many Ray clusters run here and the 1-minute load."""

    def __init__(self, every: float = 2.0) -> None:
        self.samples: list[tuple[int, float]] = []
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._every):
            self.samples.append((raylets(), psutil.getloadavg()[0]))

    def close(self) -> dict[str, float]:
        """Stop sampling; seconds during which another Ray cluster ran, and the highest load."""
        self._stop.set()
        self._thread.join()
        shared = sum(1 for count, _ in self.samples if count > 1)
        peak = max((load for _, load in self.samples), default=0.0)
        return {"other_ray_s": shared * self._every, "peak_load1": peak}


def ray_rss() -> dict[str, int]:
    """Resident bytes of this machine's Ray processes by title (ShardActor, ServeReplica:..., raylet)."""
    out: dict[str, int] = {}
    for proc in psutil.process_iter(["name", "cmdline", "memory_info"]):
        cmd, name = proc.info["cmdline"] or [""], proc.info["name"] or ""
        if cmd[0].startswith("ray::") or name in ("raylet", "gcs_server"):
            title = (
                cmd[0].split()[0].removeprefix("ray::").split(".")[0] if cmd[0].startswith("ray::") else name
            )
            out[title] = out.get(title, 0) + proc.info["memory_info"].rss
    return out
