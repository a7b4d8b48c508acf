"""Benchmark of the fact store at scale: bulk add, recall, expiry, snapshots, memory.

Synthetic data, seeded: ``--facts`` random unit vectors spread uniformly at random over
``--users`` users (about 100 facts per user at the defaults), short synthetic texts; 10 % of
the facts expire before the sweep time, another 10 % after it, the rest never. Figures:

1. bulk add rate through :meth:`LocalFactStore.add`, ``--batch`` facts per call (each call
   is one fsynced log record per shard);
2. recall latency of ``store.search(user, q, k=5, now)`` for random users (goal: p99 at
   most 0.5 ms), against the naive design on the same queries: one shard-wide
   ``IndexIDMap2(IndexFlatIP)`` searched with a user filter
   (``SearchParameters(sel=IDSelectorBatch(user's live ids))``, selector built per query);
   optionally the recall of a global HNSW index with post-filtering by user, mem0 style;
3. wall time of ``store.expire(now)`` and the deleted count against the planted count;
4. snapshot write time, load time (close, then open the same data dir in a fresh process:
   log replay only before the snapshot, snapshot load after it), and on-disk size;
5. resident memory per fact: RSS growth of that fresh process while opening the store,
   divided by the facts it loaded.

Queries are a stored vector of the asking user plus noise (cosine about 0.8), so each
query has a true best match. Figures are printed (no assertions); ``--json PATH`` writes
the summary as JSON too.

Usage::

    python -m benchmarks.bench_store [--facts 1000000] [--users 10000] [--shards 4]
        [--dim 384] [--queries 2000] [--data-dir PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import faiss
import numpy as np
import psutil
from tqdm import tqdm

from memory_core.models import NewFact, Tag
from memory_core.routing import shard_of
from memory_core.settings import LimitSettings, StorageSettings
from memory_core.store.facts import LocalFactStore

EMBEDDER = "synthetic"
K = 5
T0 = datetime(2025, 1, 1, tzinfo=UTC)
SWEEP_AT = T0 + timedelta(days=30)
LASTING, EXPIRED, FUTURE = 0, 1, 2
NOISE = 0.75  # norm of the noise added to a stored vector to make a query (cosine ~0.8)

_WHO = ["I", "my sister", "my boss", "our team", "my dog", "my doctor", "we", "my son"]
_VERB = ["likes", "hates", "needs", "prefers", "visited", "booked", "forgot", "bought"]
_WHAT = ["green tea", "Berlin", "short replies", "a new laptop", "yoga", "sushi", "the dentist", "Rust"]
_TAGS = list(Tag)


# ----------------------------------------------------------------------------- data


def user_name(user_no: int) -> str:
    """The user id of synthetic user ``user_no``."""
    return f"user-{user_no:06d}"


@dataclass(frozen=True)
class Plan:
    """Who owns each synthetic fact and whether it expires."""

    owners: np.ndarray  # (facts,) int32 user numbers
    kinds: np.ndarray  # (facts,) int8: LASTING, EXPIRED or FUTURE
    seed: int
    dim: int

    @classmethod
    def make(cls, facts: int, users: int, dim: int, seed: int) -> Plan:
        rng = np.random.default_rng(seed)
        owners = rng.integers(0, users, size=facts, dtype=np.int32)
        kinds = np.full(facts, LASTING, dtype=np.int8)
        order = rng.permutation(facts)
        tenth = facts // 10
        kinds[order[:tenth]] = EXPIRED
        kinds[order[tenth : 2 * tenth]] = FUTURE
        return cls(owners, kinds, seed, dim)

    @property
    def expired(self) -> int:
        """How many facts expire before the sweep time."""
        return int((self.kinds == EXPIRED).sum())

    def batch(self, start: int, stop: int) -> tuple[list[NewFact], np.ndarray]:
        """Facts ``start..stop`` and their unit vectors (same values on every call)."""
        rng = np.random.default_rng([self.seed, start])
        vectors = rng.standard_normal((stop - start, self.dim), dtype=np.float32)
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        words = rng.integers(0, len(_WHO), size=(stop - start, 4))
        facts: list[NewFact] = []
        for row, i in enumerate(range(start, stop)):
            created = T0 + timedelta(milliseconds=i)
            kind = self.kinds[i]
            expire_at = (
                created + timedelta(days=1)
                if kind == EXPIRED
                else SWEEP_AT + timedelta(days=30)
                if kind == FUTURE
                else None
            )
            w = words[row]
            facts.append(
                NewFact(
                    user_id=user_name(int(self.owners[i])),
                    text=f"{_WHO[w[0]]} {_VERB[w[1]]} {_WHAT[w[2]]} (note {i})",
                    tag=_TAGS[w[3] % len(_TAGS)],
                    created_at=created,
                    expire_at=expire_at,
                    source_turn_ids=(f"turn-{i}",),
                )
            )
        return facts, vectors


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """``matrix`` with every row scaled to unit length, as C-contiguous float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    return np.ascontiguousarray(matrix / np.linalg.norm(matrix, axis=1, keepdims=True))


def noisy(vectors: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Queries near ``vectors``: each row plus noise of norm about NOISE, re-normalised."""
    dim = vectors.shape[1]
    return unit_rows(vectors + rng.standard_normal(vectors.shape, dtype=np.float32) * (NOISE / dim**0.5))


# ----------------------------------------------------------------------------- measuring


def rss_bytes() -> int:
    """Resident set size of this process."""
    return int(psutil.Process().memory_info().rss)


def latency_ms(samples_ns: Sequence[int]) -> dict[str, float]:
    """p50 / p99 / mean of latencies given in nanoseconds, in milliseconds."""
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    return {
        "p50": float(np.percentile(ms, 50)),
        "p99": float(np.percentile(ms, 99)),
        "mean": float(ms.mean()),
    }


def time_calls(call: Callable[[int], object], count: int, warmup: int = 100) -> list[int]:
    """Time ``call(i)`` for i in range(count), after ``warmup`` untimed calls."""
    for i in range(min(warmup, count)):
        call(i)
    samples: list[int] = []
    clock = time.perf_counter_ns
    for i in range(count):
        start = clock()
        call(i)
        samples.append(clock() - start)
    return samples


def disk_usage(path: Path) -> dict[str, int]:
    """Bytes under ``path``: snapshots, log segments, everything."""
    sizes = {"snapshots": 0, "logs": 0, "total": 0}
    for file in path.rglob("*"):
        if not file.is_file():
            continue
        size = file.stat().st_size
        sizes["total"] += size
        if file.name.startswith("snap-"):
            sizes["snapshots"] += size
        elif file.name.startswith("wal-"):
            sizes["logs"] += size
    return sizes


def open_store(data_dir: Path, shards: int, dim: int, max_batch: int) -> LocalFactStore:
    """The store under test; snapshots only when asked for."""
    storage = StorageSettings(data_dir=data_dir, shards=shards, snapshot_every=10**9)
    return LocalFactStore(storage, LimitSettings(max_batch=max_batch), dim, EMBEDDER)


def probe_load(data_dir: Path, shards: int, dim: int) -> dict[str, float]:
    """Open the store (in this process, which should be fresh) and measure time and RSS."""
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    store = open_store(data_dir, shards, dim, max_batch=10_000)
    seconds = time.perf_counter() - start
    gc.collect()
    after = rss_bytes()
    facts = sum(shard.stats()["facts"] for shard in store.shards)
    replayed = sum(shard.recovery.replayed_records for shard in store.shards)
    store.close()
    return {"load_s": seconds, "rss_delta": after - before, "facts": facts, "replayed_records": replayed}


def load_in_fresh_process(data_dir: Path, shards: int, dim: int) -> dict[str, float]:
    """Run :func:`probe_load` in a new interpreter (clean RSS, nothing cached in Python)."""
    command = [sys.executable, "-m", "benchmarks.bench_store", "--probe-load", str(data_dir)]
    command += ["--shards", str(shards), "--dim", str(dim)]
    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(command, cwd=root, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- phases


def bulk_add(store: LocalFactStore, plan: Plan, batch: int) -> tuple[float, float]:
    """Add every planned fact, ``batch`` per call.

    Returns:
        Seconds spent inside ``store.add`` and seconds spent making the synthetic batches.
    """
    total = len(plan.owners)
    in_add = in_make = 0.0
    with tqdm(total=total, unit="fact", unit_scale=True, desc="add", file=sys.stderr) as bar:
        for start in range(0, total, batch):
            stop = min(start + batch, total)
            made = time.perf_counter()
            facts, vectors = plan.batch(start, stop)
            began = time.perf_counter()
            store.add(facts, vectors)
            ended = time.perf_counter()
            in_make += began - made
            in_add += ended - began
            bar.update(stop - start)
    return in_add, in_make


@dataclass
class UserData:
    """A user's live facts and their vectors, read back through the store's API."""

    ids: np.ndarray  # (n,) int64
    vectors: np.ndarray  # (n, dim) float32


def read_user(store: LocalFactStore, user_id: str, now: datetime) -> UserData:
    """The user's facts that are live (not expired) at ``now``."""
    facts = [f for f in store.list_user(user_id) if not f.is_expired(now)]
    ids = np.asarray([f.id for f in facts], dtype=np.int64)
    return UserData(ids, store.vectors_of(user_id, ids.tolist()))


def make_queries(
    store: LocalFactStore, users: Sequence[str], now: datetime, rng: np.random.Generator
) -> tuple[list[str], np.ndarray]:
    """For each user (repeats allowed), a query near one of their live facts."""
    asked: list[str] = []
    targets: list[np.ndarray] = []
    for user_id in users:
        data = read_user(store, user_id, now)
        if len(data.ids):
            asked.append(user_id)
            targets.append(data.vectors[rng.integers(len(data.ids))])
    return asked, noisy(np.vstack(targets), rng)


def store_latency(
    store: LocalFactStore, users: Sequence[str], queries: np.ndarray, now: datetime
) -> tuple[dict[str, float], list[list[int]]]:
    """Latency of ``store.search`` over the queries, and the ids each query returned."""
    results: list[list[int]] = [[] for _ in users]

    def call(i: int) -> None:
        results[i] = [fact.id for fact, _ in store.search(users[i], queries[i], K, now)]

    return latency_ms(time_calls(call, len(users))), results


@dataclass
class Baseline:
    """The naive design for one shard: all its vectors in one index, filtered per query."""

    index: faiss.IndexIDMap2
    live_ids: dict[str, np.ndarray]
    vectors: dict[str, np.ndarray]
    build_s: float


def build_baseline(store: LocalFactStore, users: Sequence[str], now: datetime, dim: int) -> Baseline:
    """Read the users' live facts back from the store and index them shard-wide."""
    live: dict[str, np.ndarray] = {}
    vectors: dict[str, np.ndarray] = {}
    for user_id in tqdm(users, desc="read shard", unit="user", file=sys.stderr):
        data = read_user(store, user_id, now)
        live[user_id], vectors[user_id] = data.ids, data.vectors
    start = time.perf_counter()
    index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
    index.add_with_ids(np.vstack(list(vectors.values())), np.concatenate(list(live.values())))
    return Baseline(index, live, vectors, time.perf_counter() - start)


def baseline_latency(
    base: Baseline, users: Sequence[str], queries: np.ndarray
) -> tuple[dict[str, float], list[list[int]]]:
    """Latency of a filtered shard-wide search (selector built per query, as a naive store would)."""
    results: list[list[int]] = [[] for _ in users]

    def call(i: int) -> None:
        params = faiss.SearchParameters(sel=faiss.IDSelectorBatch(base.live_ids[users[i]]))  # type: ignore[call-arg]
        _, ids = base.index.search(queries[i : i + 1], K, params=params)
        results[i] = [int(x) for x in ids[0] if x >= 0]

    return latency_ms(time_calls(call, len(users))), results


def hnsw_postfilter_recall(
    store: LocalFactStore,
    base: Baseline,
    subset: int,
    queries: int,
    now: datetime,
    rng: np.random.Generator,
) -> dict[str, float]:
    """Recall of the user's exact top-K from a global HNSW index over ~``subset`` facts,
    post-filtered by user (fetch 2K and 20K global hits, efSearch 64)."""
    users: list[str] = []
    count = 0
    for user_id, ids in base.live_ids.items():
        if count >= subset:
            break
        users.append(user_id)
        count += len(ids)
    vectors = np.vstack([base.vectors[u] for u in users])
    ids = np.concatenate([base.live_ids[u] for u in users])
    owner = np.concatenate([np.full(len(base.live_ids[u]), n, dtype=np.int32) for n, u in enumerate(users)])
    index = faiss.IndexHNSWFlat(vectors.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
    faiss.omp_set_num_threads(os.cpu_count() or 1)
    start = time.perf_counter()
    index.add(vectors)
    build_s = time.perf_counter() - start
    index.hnsw.efSearch = 64
    picks = rng.integers(0, len(users), size=queries)
    asked = [users[p] for p in picks]
    targets = np.vstack([base.vectors[u][rng.integers(len(base.live_ids[u]))] for u in asked])
    qs = noisy(targets, rng)
    truth = [[f.id for f, _ in store.search(u, qs[i], K, now)] for i, u in enumerate(asked)]
    out: dict[str, float] = {"facts": float(len(ids)), "users": float(len(users)), "build_s": build_s}
    for fetch in (2 * K, 20 * K):
        _, rows = index.search(qs, fetch)
        hits = 0
        for i, p in enumerate(picks):
            mine = [int(ids[r]) for r in rows[i] if r >= 0 and owner[r] == p][:K]
            hits += len(set(mine) & set(truth[i]))
        out[f"recall_fetch{fetch}"] = hits / sum(len(t) for t in truth)
    faiss.omp_set_num_threads(1)
    return out


# ----------------------------------------------------------------------------- report


def human_bytes(n: float) -> str:
    """``n`` bytes as a short string."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def print_table(rows: Sequence[tuple[str, str]]) -> None:
    """Two aligned columns."""
    width = max(len(name) for name, _ in rows)
    print("\n== bench_store summary ==")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")


def report_rows(s: dict[str, float], args: argparse.Namespace) -> list[tuple[str, str]]:
    """The summary as (label, text) rows."""

    def lat(prefix: str) -> str:
        return "p50 {:.3f}  p99 {:.3f}  mean {:.3f} ms".format(
            s[f"{prefix}_p50_ms"], s[f"{prefix}_p99_ms"], s[f"{prefix}_mean_ms"]
        )

    rows = [
        ("data", f"{args.facts:,} facts, {s['users']:,.0f} users, {args.shards} shards, dim {args.dim}"),
        (
            "bulk add",
            f"{s['add_facts_per_s']:,.0f} facts/s ({s['add_s']:.1f} s in add, batch {args.batch:,})",
        ),
        ("search, random users", lat("search") + "  (goal p99 <= 0.5 ms)"),
        ("  same, shard-0 users", lat("search_shard0")),
        ("  naive filtered shard index", lat("naive") + f"  over {s['naive_vectors']:,.0f} vectors"),
        (
            "  naive / store",
            f"p50 x{s['naive_over_store_p50']:.1f}, p99 x{s['naive_over_store_p99']:.1f}; "
            f"same top-{K}: {s['naive_agrees']:.1%}",
        ),
    ]
    if "hnsw_build_s" in s:
        rows.append(
            (
                "  global HNSW + post-filter",
                f"recall@{K} {s[f'hnsw_recall_fetch{2 * K}']:.3f} (fetch {2 * K}), "
                f"{s[f'hnsw_recall_fetch{20 * K}']:.3f} (fetch {20 * K}); "
                f"{s['hnsw_facts']:,.0f} facts / {s['hnsw_users']:,.0f} users, "
                f"build {s['hnsw_build_s']:.1f} s",
            )
        )
    rows += [
        ("search after expire", lat("search_after_expire")),
        (
            "expire",
            f"{s['expire_s']:.2f} s, deleted {s['expire_deleted']:,.0f} (planted {s['expire_planted']:,.0f})",
        ),
        (
            "load, log replay only",
            f"{s['load_replay_s']:.1f} s ({s['load_replay_records']:,.0f} records, fresh process; "
            f"in-process reopen {s['reopen_in_process_s']:.1f} s)",
        ),
        ("snapshot write", f"{s['snapshot_s']:.1f} s"),
        (
            "load, snapshot",
            f"{s['load_snapshot_s']:.1f} s ({s['load_snapshot_facts']:,.0f} facts, fresh process)",
        ),
        (
            "disk",
            f"{human_bytes(s['disk_total_bytes'])} (snapshots {human_bytes(s['disk_snapshots_bytes'])}, "
            f"logs {human_bytes(s['disk_logs_bytes'])}; "
            f"before snapshot {human_bytes(s['disk_before_snapshot_bytes'])})",
        ),
        (
            "RSS per fact",
            f"{s['rss_per_fact']:,.0f} B after snapshot load, fresh process "
            f"({s['rss_after_add_per_fact']:,.0f} B after bulk add, in-process)",
        ),
        ("wall time", f"{s['wall_s']:.1f} s"),
    ]
    return rows


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--facts", type=int, default=1_000_000, help="facts to add")
    parser.add_argument("--users", type=int, default=10_000, help="users the facts are spread over")
    parser.add_argument("--shards", type=int, default=4, help="fact shards")
    parser.add_argument("--dim", type=int, default=384, help="vector dimension")
    parser.add_argument("--queries", type=int, default=2000, help="timed searches per measurement")
    parser.add_argument("--batch", type=int, default=10_000, help="facts per add call")
    parser.add_argument("--hnsw-facts", type=int, default=100_000, help="HNSW post-filter subset (0: skip)")
    parser.add_argument("--seed", type=int, default=7, help="random seed")
    parser.add_argument("--data-dir", type=Path, default=None, help="data dir (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path, default=None, help="also write the summary here")
    parser.add_argument("--probe-load", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.probe_load is not None:
        print(json.dumps(probe_load(args.probe_load, args.shards, args.dim)))
        return 0
    wall = time.perf_counter()
    owned = args.data_dir is None
    data_dir: Path = Path(tempfile.mkdtemp(prefix="longmem-bench-")) if owned else args.data_dir
    if not owned and data_dir.exists() and any(data_dir.iterdir()):
        print(f"{data_dir} is not empty; give an empty or new --data-dir", file=sys.stderr)
        return 2
    rng = np.random.default_rng(args.seed + 1)
    plan = Plan.make(args.facts, args.users, args.dim, args.seed)
    users = [user_name(u) for u in np.unique(plan.owners)]
    summary: dict[str, float] = {"facts": args.facts, "users": len(users), "shards": args.shards}
    summary["dim"] = args.dim
    try:
        gc.collect()
        rss0 = rss_bytes()
        store = open_store(data_dir, args.shards, args.dim, args.batch)

        # 1. bulk add
        in_add, in_make = bulk_add(store, plan, args.batch)
        gc.collect()
        summary["add_facts_per_s"] = args.facts / in_add
        summary["add_s"] = in_add
        summary["make_batches_s"] = in_make
        summary["rss_after_add_per_fact"] = (rss_bytes() - rss0) / args.facts

        # 2. recall latency: the store on random users, then store vs naive on one shard's users
        print("recall ...", file=sys.stderr)
        asked, qs = make_queries(store, rng.choice(users, size=args.queries).tolist(), SWEEP_AT, rng)
        lat_all, _ = store_latency(store, asked, qs, SWEEP_AT)
        shard0 = [u for u in users if shard_of(u, args.shards) == 0]
        base = build_baseline(store, shard0, SWEEP_AT, args.dim)
        asked0, qs0 = make_queries(store, rng.choice(shard0, size=args.queries).tolist(), SWEEP_AT, rng)
        lat_store0, got_store = store_latency(store, asked0, qs0, SWEEP_AT)
        lat_base, got_base = baseline_latency(base, asked0, qs0)
        for name, lat in (("search", lat_all), ("search_shard0", lat_store0), ("naive", lat_base)):
            for stat, value in lat.items():
                summary[f"{name}_{stat}_ms"] = value
        summary["naive_vectors"] = base.index.ntotal
        summary["naive_build_s"] = base.build_s
        summary["naive_over_store_p50"] = lat_base["p50"] / lat_store0["p50"]
        summary["naive_over_store_p99"] = lat_base["p99"] / lat_store0["p99"]
        summary["naive_agrees"] = float(np.mean([a == b for a, b in zip(got_store, got_base, strict=True)]))
        if args.hnsw_facts > 0:
            print("hnsw ...", file=sys.stderr)
            hnsw = hnsw_postfilter_recall(store, base, args.hnsw_facts, args.queries, SWEEP_AT, rng)
            for key, value in hnsw.items():
                summary[f"hnsw_{key}"] = value
        del base
        gc.collect()

        # 3. expiry sweep
        print("expire ...", file=sys.stderr)
        start = time.perf_counter()
        deleted = store.expire(SWEEP_AT)
        summary["expire_s"] = time.perf_counter() - start
        summary["expire_deleted"] = deleted
        summary["expire_planted"] = plan.expired
        lat_after, _ = store_latency(store, asked, qs, SWEEP_AT)
        for stat, value in lat_after.items():
            summary[f"search_after_expire_{stat}_ms"] = value

        # 4./5. load by log replay, snapshot, load from snapshot
        print("load (log replay) ...", file=sys.stderr)
        store.close()
        del store
        gc.collect()
        replay = load_in_fresh_process(data_dir, args.shards, args.dim)
        summary["load_replay_s"] = replay["load_s"]
        summary["load_replay_records"] = replay["replayed_records"]
        summary["disk_before_snapshot_bytes"] = disk_usage(data_dir)["total"]
        start = time.perf_counter()
        store = open_store(data_dir, args.shards, args.dim, args.batch)
        summary["reopen_in_process_s"] = time.perf_counter() - start
        print("snapshot ...", file=sys.stderr)
        start = time.perf_counter()
        store.snapshot()
        summary["snapshot_s"] = time.perf_counter() - start
        store.close()
        del store
        gc.collect()
        disk = disk_usage(data_dir)
        summary["disk_snapshots_bytes"] = disk["snapshots"]
        summary["disk_logs_bytes"] = disk["logs"]
        summary["disk_total_bytes"] = disk["total"]
        print("load (snapshot) ...", file=sys.stderr)
        loaded = load_in_fresh_process(data_dir, args.shards, args.dim)
        summary["load_snapshot_s"] = loaded["load_s"]
        summary["load_snapshot_facts"] = loaded["facts"]
        summary["rss_per_fact"] = loaded["rss_delta"] / max(loaded["facts"], 1)
    finally:
        if owned:
            shutil.rmtree(data_dir, ignore_errors=True)
    summary["wall_s"] = time.perf_counter() - wall

    print_table(report_rows(summary, args))
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
