"""Child process of the crash test: writes facts to a 2-shard store and reports every ack.

Run as ``python tests/crash_writer.py DATA_DIR --seed N ...`` (see ``--help``; the parent
passes the store settings it reopens the store with). It adds ``fact-<n>`` facts in
batches of 1-20 (users mixed, so most batches span both shards), now and then deletes a few
of its own earlier facts, and snapshots every shard at a few points, until the parent kills
it. Every line on stdout is flushed before the next store call starts:

    TRY ADD <first n> <count>          before an add call (facts fact-<first n> ...)
    ADD <id> <user> <text> <vec hex>   per fact, after the add call returned
    TRY DEL <user> <id> ...            before a delete call
    DEL <id>                           per id, after the delete call returned
    SNAP <shard no> <seq>              after that shard's snapshot returned
    DONE                               every fact was written (the parent should not see this)

Only the last TRY line can lack its acks, so the parent knows which call was in flight.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np

from memory_core.models import Fact, NewFact
from memory_core.settings import LimitSettings, StorageSettings
from memory_core.store.facts import LocalFactStore

_EPOCH = datetime(2024, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Plan:
    """What to write and with which store settings."""

    data_dir: Path
    seed: int
    total: int
    dim: int
    shards: int
    snapshot_every: int
    users: int
    embedder: str
    snapshot_at: tuple[int, ...]


def _emit(lines: list[str]) -> None:
    sys.stdout.write("".join(line + "\n" for line in lines))
    sys.stdout.flush()


def _unit_rows(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
    matrix = rng.standard_normal((rows, dim)).astype(np.float32)
    return matrix / np.linalg.norm(matrix, axis=1, keepdims=True)


def run(plan: Plan) -> None:
    """Write the planned facts (with deletes and snapshots in between), reporting each ack."""
    rng = np.random.default_rng(plan.seed)
    storage = StorageSettings(data_dir=plan.data_dir, shards=plan.shards, snapshot_every=plan.snapshot_every)
    store = LocalFactStore(storage, LimitSettings(), plan.dim, plan.embedder)
    users = [f"user-{i}" for i in range(plan.users)]
    live: dict[str, list[int]] = {user: [] for user in users}
    snapshots_due = sorted(plan.snapshot_at)
    n = 0
    while n < plan.total:
        count = min(int(rng.integers(1, 21)), plan.total - n)
        new = [
            NewFact(
                user_id=users[int(rng.integers(len(users)))],
                text=f"fact-{n + i}",
                created_at=_EPOCH + timedelta(seconds=n + i),
            )
            for i in range(count)
        ]
        vectors = _unit_rows(rng, count, plan.dim)
        _emit([f"TRY ADD {n} {count}"])
        stored: list[Fact] = store.add(new, vectors)
        _emit(
            [
                f"ADD {fact.id} {fact.user_id} {fact.text} {vector.tobytes().hex()}"
                for fact, vector in zip(stored, vectors, strict=True)
            ]
        )
        for fact in stored:
            live[fact.user_id].append(fact.id)
        n += count

        if rng.random() < 0.1:
            owners = [user for user, ids in live.items() if ids]
            user = owners[int(rng.integers(len(owners)))]
            picks = rng.choice(
                len(live[user]), size=min(len(live[user]), int(rng.integers(1, 4))), replace=False
            )
            doomed = [live[user][int(i)] for i in picks]
            _emit([f"TRY DEL {user} " + " ".join(map(str, doomed))])
            store.delete(user, doomed)
            _emit([f"DEL {fact_id}" for fact_id in doomed])
            live[user] = [i for i in live[user] if i not in doomed]

        if snapshots_due and n >= snapshots_due[0]:
            snapshots_due.pop(0)
            for shard_no, shard in enumerate(store.shards):
                _emit([f"SNAP {shard_no} {shard.snapshot()}"])
    store.close()
    _emit(["DONE"])


def main() -> None:
    """Parse the command line and run the writer."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("data_dir", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--total", type=int, default=10_000, help="facts to write")
    parser.add_argument("--dim", type=int, default=16)
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--snapshot-every", type=int, default=100, help="log records per automatic snapshot")
    parser.add_argument("--users", type=int, default=7)
    parser.add_argument("--embedder", default="crash-test", help="embedder name in the data dir manifest")
    parser.add_argument(
        "--snapshot-at", type=int, nargs="*", default=[], help="snapshot every shard after this many facts"
    )
    args = parser.parse_args()
    run(
        Plan(
            data_dir=args.data_dir,
            seed=args.seed,
            total=args.total,
            dim=args.dim,
            shards=args.shards,
            snapshot_every=args.snapshot_every,
            users=args.users,
            embedder=args.embedder,
            snapshot_at=tuple(args.snapshot_at),
        )
    )


if __name__ == "__main__":
    main()
