"""Benchmark of resharding a data dir while it serves: 2 -> 4 -> 8 shards (and back to 3).

``--facts`` facts (default 200,000, random unit vectors, bench_store's data) over ``--users``
users (2,000), with one in ten facts superseded by a newer one, a profile entry for every user,
and a pending turn batch, a working window and a kept answer for every tenth user. After each
reshard (``longmem shards add`` underneath, the store opened alone) it prints the wall time, the
slots, users and facts moved, and checks against the store before any reshard:

- facts: the total, and every user's facts (ids, texts, supersede links) and vectors, the same
  (a lost or duplicated fact shows as a difference);
- recall: the top-5 of ``--queries`` random users' queries, the same ids and scores;
- results of another user: 0 (every hit belongs to the asking user);
- each user on the shard its slot names, profile entries, pending turns, windows and kept
  answers all there;
- recall latency p50 / p99 after the reshard against before it (same queries, same run): the
  moved users' indexes search as fast as before.

A live client writes facts and profile entries (to 50 users of its own) and recalls (facts and
profile of random users, one call) on a thread of its own the whole time: its recall p99 during
each reshard is printed against its p99 between them, and at the end every fact it had
acknowledged must be in the store once, the last entry it set under each key there, and none of
its recalls may have returned another user's fact.

Usage::

    python -m benchmarks.bench_reshard [--facts 200000] [--users 2000] [--steps 4,8,3]
        [--data-dir PATH] [--json PATH]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import tempfile
import threading
import time
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_store import (
    SWEEP_AT,
    T0,
    K,
    Plan,
    latency_ms,
    noisy,
    open_store,
    time_calls,
    unit_rows,
    user_name,
)
from memory_core.errors import LongmemError
from memory_core.models import NewFact, Role, Turn
from memory_core.store.facts import LocalFactStore
from memory_core.store.inbox import StoredAnswer
from memory_core.store.resharding import ReshardReport

_BATCH = 5_000


def fill(store: LocalFactStore, plan: Plan, facts: int, users: int) -> float:
    """Add the plan's facts, supersede one in ten, give every user a profile entry and every
    tenth user turns and an answer."""
    began = time.perf_counter()
    newest: dict[str, int] = {}
    for start in range(0, facts, _BATCH):
        batch, vectors = plan.batch(start, min(start + _BATCH, facts))
        for fact in store.add(batch, vectors):
            older = newest.get(fact.user_id)
            if older is not None and fact.id % 10 == 0:
                store.supersede(fact.user_id, older, fact.id)
            newest[fact.user_id] = fact.id
    for user_no in range(users):
        store.set_profile(user_name(user_no), f"style of user {user_no}", "api", T0, key="style")
    for user_no in range(0, users, 10):
        user = user_name(user_no)
        turn = Turn(role=Role.USER, content=f"turn of {user}", at=T0, turn_id=f"t-{user_no}")
        store.extend_window(user, "window", [turn])
        store.accept_turns(user, "pending", [turn], T0)
        store.keep_answer(StoredAnswer(user, "key", "fp", 202, "{}", T0), T0 - timedelta(days=1))
    return time.perf_counter() - began


def digest(store: LocalFactStore, users: int) -> tuple[int, str, str]:
    """(facts, a digest of every user's facts and vectors, a digest of profiles, turns, windows,
    answers)."""
    facts, inbox = hashlib.blake2b(), hashlib.blake2b()
    total = 0
    for user_no in range(users):
        user = user_name(user_no)
        rows = store.list_user(user, include_superseded=True)
        total += len(rows)
        # str(): a datetime read back from Arrow has an equal tzinfo that reprs otherwise
        facts.update(repr([(f.id, f.text, f.superseded_by, str(f.expire_at)) for f in rows]).encode())
        facts.update(store.vectors_of(user, [f.id for f in rows]).tobytes())
        kept = (store.profile(user), store.window(user, "window"), store.answer(user, "key", T0))
        inbox.update(repr(kept).encode())
    inbox.update(repr(sorted((b.user_id, b.turns) for b in store.pending_turns())).encode())
    return total, facts.hexdigest(), inbox.hexdigest()


def recall_probe(store: LocalFactStore, plan: Plan, queries: int) -> tuple[list[Any], int, list[int]]:
    """(every query's hits, hits of another user, latencies in ns) for the same seeded queries."""
    rng = np.random.default_rng(plan.seed + 1)
    users = [user_name(int(u)) for u in rng.choice(np.unique(plan.owners), size=queries)]
    picks = [store.list_user(u)[0].id for u in users]
    vectors = noisy(np.vstack([store.vectors_of(u, [i]) for u, i in zip(users, picks, strict=True)]), rng)
    hits = [
        [(f.user_id, f.id, round(s, 4)) for f, s in store.search(u, vectors[n], K, SWEEP_AT)]
        for n, u in enumerate(users)
    ]
    strangers = sum(hit[0] != users[n] for n, found in enumerate(hits) for hit in found)
    samples = time_calls(lambda n: store.search(users[n], vectors[n], K, SWEEP_AT), queries)
    return hits, strangers, samples


class LiveClient:
    """A client that keeps writing (to users of its own) and recalling (the plan's users) on a
    thread of its own; its recall latencies go to the bucket named by :meth:`measure`."""

    def __init__(self, store: LocalFactStore, plan: Plan, users: int) -> None:
        self._store = store
        self._plan = plan
        self._users = users
        self.acked: dict[str, list[int]] = {}
        self.entries: dict[tuple[str, str], str] = {}  # the last text set under each key
        self.latencies: dict[str, list[int]] = {}
        self.strangers = 0
        self.errors: list[str] = []
        self._bucket = "idle"
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="live-client")

    def measure(self, bucket: str) -> None:
        self._bucket = bucket

    def __enter__(self) -> LiveClient:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        rng = np.random.default_rng(self._plan.seed + 2)
        n = 0
        while not self._stop.is_set():
            writer, reader = f"live-{n % 50:03d}", user_name(int(rng.integers(self._users)))
            vector = unit_rows(rng.standard_normal((1, self._plan.dim), dtype=np.float32))
            try:
                [fact] = self._store.add([NewFact(user_id=writer, text=f"live {n}", created_at=T0)], vector)
                self.acked.setdefault(writer, []).append(fact.id)
                key = f"live-{n % 3}"
                self._store.set_profile(writer, f"live entry {n}", "api", T0, key=key)
                self.entries[(writer, key)] = f"live entry {n}"
                began = time.perf_counter_ns()
                hits, _ = self._store.recall(reader, vector[0], K, SWEEP_AT)
                self.latencies.setdefault(self._bucket, []).append(time.perf_counter_ns() - began)
            except LongmemError as exc:
                self.errors.append(f"{type(exc).__name__}: {exc}")
                return
            self.strangers += sum(f.user_id != reader for f, _ in hits)
            n += 1

    def lost_or_duplicated(self) -> int:
        """Acknowledged writes missing from the store, plus facts of its users held twice, plus
        keys whose last entry is not there once."""
        bad = 0
        for user, ids in self.acked.items():
            stored = [f.id for f in self._store.list_user(user)]
            bad += len(set(ids) - set(stored)) + len(stored) - len(set(stored))
        for (user, key), text in self.entries.items():
            bad += [e.text for e in self._store.profile(user) if e.key == key] != [text]
        return bad


def misplaced(store: LocalFactStore) -> int:
    """Users held by a shard their slot does not name."""
    return sum(
        store.routing.shard_of(user) != no
        for no, shard in enumerate(store.shards)
        for user in shard.user_ids()
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--facts", type=int, default=200_000)
    parser.add_argument("--users", type=int, default=2_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--steps", default="4,8,3", help="shard counts to reshard to, in order, from 2")
    parser.add_argument("--queries", type=int, default=2_000)
    parser.add_argument("--idle-seconds", type=float, default=10.0, help="the live client alone first")
    parser.add_argument("--data-dir", type=Path, help="kept afterwards (default: a temp dir, removed)")
    parser.add_argument("--json", type=Path, help="write the figures here too")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="longmem-reshard-"))
    plan = Plan.make(args.facts, args.users, args.dim, seed=11)
    store = open_store(data_dir, 2, args.dim, _BATCH)
    try:
        seconds = fill(store, plan, args.facts, args.users)
        print(f"filled {args.facts} facts over {args.users} users on 2 shards in {seconds:.1f} s")
        expected = digest(store, args.users)
        steps: list[dict[str, Any]] = []
        with LiveClient(store, plan, args.users) as live:
            time.sleep(args.idle_seconds)  # the live client's own idle figures first
            # Every probe runs beside the live client: before and after compare alike.
            hits, _, idle = recall_probe(store, plan, args.queries)
            base = latency_ms(idle)
            for goal in (int(part) for part in args.steps.split(",")):
                live.measure(f"to {goal}")
                report = store.reshard(goal)
                live.measure("idle")
                steps.append(check(store, plan, args, report, expected, hits, base, live))
                print(json.dumps(steps[-1]))
        summary = {
            "facts": args.facts,
            "users": args.users,
            "idle_recall_ms": base,
            "live_writes": sum(len(ids) for ids in live.acked.values()),
            "live_profile_keys": len(live.entries),
            "live_lost_or_duplicated": live.lost_or_duplicated(),
            "live_results_of_another_user": live.strangers,
            "live_errors": live.errors,
            "steps": steps,
        }
        print(json.dumps({k: v for k, v in summary.items() if k != "steps"}))
        if args.json:
            args.json.write_text(json.dumps(summary, indent=2))
        live_ok = summary["live_lost_or_duplicated"] == 0 and not live.errors and live.strangers == 0
        steps_ok = all(
            s["facts_lost_or_duplicated"] == 0
            and s["facts_and_vectors_same"]
            and s["recall_same"]
            and s["profiles_turns_windows_answers_same"]
            and s["results_of_another_user"] == 0
            and s["users_misplaced"] == 0
            for s in steps
        )
        return 0 if live_ok and steps_ok else 1
    finally:
        store.close()
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


def check(
    store: LocalFactStore,
    plan: Plan,
    args: argparse.Namespace,
    report: ReshardReport,
    expected: tuple[int, str, str],
    hits: list[Any],
    base: dict[str, float],
    live: LiveClient,
) -> dict[str, Any]:
    """One reshard's figures and checks against the store before any reshard; the live
    client's recall p99 during it against its idle p99 (measured between reshards)."""
    found = digest(store, args.users)
    after_hits, strangers, samples = recall_probe(store, plan, args.queries)
    after = latency_ms(samples)
    moving = latency_ms(live.latencies[f"to {report.shards_after}"])
    return {
        "shards": f"{report.shards_before} -> {report.shards_after}",
        "seconds": round(report.seconds, 2),
        "slots_moved": sum(m.slots for m in report.moves),
        "users_moved": sum(m.users for m in report.moves),
        "facts_moved": sum(m.facts for m in report.moves),
        "facts": found[0],
        "facts_lost_or_duplicated": abs(found[0] - expected[0]),
        "facts_and_vectors_same": found[1] == expected[1],
        "profiles_turns_windows_answers_same": found[2] == expected[2],
        "recall_same": after_hits == hits,
        "results_of_another_user": strangers,
        "users_misplaced": misplaced(store),
        "recall_p50_ratio_after": round(after["p50"] / base["p50"], 2),
        "recall_p99_ratio_after": round(after["p99"] / base["p99"], 2),
        "live_recall_p99_ms_between": round(latency_ms(live.latencies["idle"])["p99"], 3),
        "live_recall_p99_ms_during": round(moving["p99"], 3),
        "live_recall_p99_ratio_during": round(moving["p99"] / latency_ms(live.latencies["idle"])["p99"], 2),
        "routing_version": report.routing_version,
    }


if __name__ == "__main__":
    raise SystemExit(main())
