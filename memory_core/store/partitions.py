"""The in-memory half of a fact shard: one exact FAISS index and fact map per user.

A search never looks outside the asking user's partition, so one user's memories cannot
surface for another, and small users are not crowded out by big ones (a global index
filtered by user loses results; see DESIGN.md). Nothing here touches the disk.
"""

from __future__ import annotations

import heapq
import secrets
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import faiss
import numpy as np

from memory_core.models import MAX_SOURCES, Fact, as_utc
from memory_core.tenancy import SEPARATOR, tenant_of

ExpiryEntry = tuple[datetime, int]


@dataclass
class _Partition:
    index: faiss.IndexIDMap2
    facts: dict[int, Fact] = field(default_factory=dict)
    # Facts that may have to be skipped at search time (superseded, or with an expiry).
    maybe_hidden: int = 0
    # Deleted facts whose rows are still in the index (see Partitions.remove).
    dead: list[int] = field(default_factory=list)

    def compact(self) -> None:
        """Take the dead rows out of the index."""
        if self.dead:
            self.index.remove_ids(np.asarray(self.dead, dtype=np.int64))  # type: ignore[arg-type]
            self.dead.clear()


def _hides(fact: Fact) -> bool:
    return fact.superseded_by is not None or fact.expire_at is not None


class Partitions:
    """Per-user exact inner-product indexes over unit vectors, plus an expiry queue per tenant."""

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self._parts: dict[str, _Partition] = {}
        self._owner: dict[int, str] = {}
        # One queue per tenant, so a tenant's sweep takes its own due facts without scanning
        # (or touching) another tenant's.
        self._expiry: dict[str, list[ExpiryEntry]] = {}
        self._dead: set[int] = set()  # ids whose rows wait for compaction: never handed out again

    def owner(self, fact_id: int) -> str | None:
        """The user owning ``fact_id``, or None."""
        return self._owner.get(fact_id)

    def fact(self, fact_id: int) -> Fact:
        """A stored fact by id (KeyError when absent)."""
        return self._parts[self._owner[fact_id]].facts[fact_id]

    def user_facts(self, user_id: str) -> list[Fact]:
        """Every stored fact of the user, superseded ones included."""
        part = self._parts.get(user_id)
        return list(part.facts.values()) if part else []

    def replaced(self, user_id: str, ids: Iterable[int]) -> dict[int, list[Fact]]:
        """For each of ``ids`` that replaced older facts, those facts down the whole chain,
        newest first (what was true before it)."""
        older: dict[int, list[Fact]] = {}  # superseded facts by the id of what replaced them
        for fact in self.user_facts(user_id):
            if fact.superseded_by is not None:
                older.setdefault(fact.superseded_by, []).append(fact)
        chains: dict[int, list[Fact]] = {}
        for fact_id in ids:
            chain: list[Fact] = []
            seen = {fact_id}
            todo = [fact_id]
            while todo:  # down the chain, one step back at a time: newest first
                for fact in older.get(todo.pop(0), ()):
                    if fact.id not in seen:
                        seen.add(fact.id)
                        chain.append(fact)
                        todo.append(fact.id)
            if chain:
                chains[fact_id] = chain
        return chains

    def with_history(self, user_id: str, ids: Iterable[int]) -> list[int]:
        """``ids`` and every fact of the user they superseded, directly or down a chain."""
        found = list(dict.fromkeys(ids))
        chains = self.replaced(user_id, found)
        return list(dict.fromkeys(found + [f.id for i in found for f in chains.get(i, ())]))

    def clashes(self, ids: Iterable[int]) -> list[int]:
        """Those of ``ids`` already in use here (stored, or a dead row waiting for compaction)."""
        return [i for i in ids if i in self._owner or i in self._dead]

    def new_id(self, taken: set[int]) -> int:
        """A random positive 63-bit id not used here nor in ``taken``."""
        while True:
            candidate = secrets.randbits(63)
            if (
                candidate
                and candidate not in self._owner
                and candidate not in taken
                and candidate not in self._dead
            ):
                return candidate

    def insert(self, facts: Sequence[Fact], vectors: np.ndarray) -> None:
        """Add facts with their unit vectors (row i belongs to facts[i])."""
        by_user: dict[str, list[int]] = {}
        for row, fact in enumerate(facts):
            by_user.setdefault(fact.user_id, []).append(row)
        for user_id, rows in by_user.items():
            part = self._parts.get(user_id)
            if part is None:
                part = self._parts[user_id] = _Partition(faiss.IndexIDMap2(faiss.IndexFlatIP(self.dim)))
            ids = np.fromiter((facts[r].id for r in rows), dtype=np.int64, count=len(rows))
            part.index.add_with_ids(np.ascontiguousarray(vectors[rows]), ids)
            for r in rows:
                fact = facts[r]
                part.facts[fact.id] = fact
                self._owner[fact.id] = user_id
                part.maybe_hidden += _hides(fact)
                if fact.expire_at is not None:
                    heapq.heappush(self._expiry.setdefault(tenant_of(user_id), []), (fact.expire_at, fact.id))

    def remove(self, ids: Iterable[int]) -> list[int]:
        """Remove facts by id; unknown ids are ignored. Returns the removed ids.

        A removed fact is gone from the fact map at once; its row stays in the user's index,
        skipped by search, until dead rows are a quarter of the index. FAISS's remove_ids costs
        ~25 us a call however few rows go, and a sweep's batch touches thousands of users:
        removing each at once spent over 80 % of a sweep there.
        """
        by_user: dict[str, list[int]] = {}
        for fact_id in ids:
            user_id = self._owner.pop(fact_id, None)
            if user_id is not None:
                by_user.setdefault(user_id, []).append(fact_id)
        removed: list[int] = []
        for user_id, user_ids in by_user.items():
            part = self._parts[user_id]
            for fact_id in user_ids:
                part.maybe_hidden -= _hides(part.facts.pop(fact_id))
            removed.extend(user_ids)
            if not part.facts:
                self._drop(user_id)
                continue
            part.dead.extend(user_ids)
            self._dead.update(user_ids)
            if 4 * len(part.dead) >= part.index.ntotal:
                self._dead.difference_update(part.dead)
                part.compact()
        return removed

    def _drop(self, user_id: str) -> _Partition | None:
        part = self._parts.pop(user_id, None)
        if part is not None:
            self._dead.difference_update(part.dead)
        return part

    def drop_user(self, user_id: str) -> int:
        """Remove a whole partition; returns how many facts it held."""
        part = self._drop(user_id)
        if part is None:
            return 0
        for fact_id in part.facts:
            self._owner.pop(fact_id, None)
        return len(part.facts)

    def mark_superseded(self, pairs: Sequence[tuple[int, int]]) -> None:
        """Record that each old fact was replaced by the new one."""
        for old, new in pairs:
            user_id = self._owner.get(old)
            if user_id is None:
                continue
            part = self._parts[user_id]
            before = part.facts[old]
            after = before.model_copy(update={"superseded_by": new})
            part.facts[old] = after
            part.maybe_hidden += _hides(after) - _hides(before)

    def add_sources(self, fact_id: int, turn_ids: Sequence[str]) -> None:
        """Append turn ids to a fact's sources (those it holds already are not doubled); past
        MAX_SOURCES, the first turn and the newest are kept."""
        user_id = self._owner.get(fact_id)
        if user_id is None:
            return
        part = self._parts[user_id]
        before = part.facts[fact_id]
        turns = tuple(dict.fromkeys((*before.source_turn_ids, *turn_ids)))
        if len(turns) > MAX_SOURCES:
            turns = turns[:1] + turns[1 - MAX_SOURCES :]
        part.facts[fact_id] = before.model_copy(update={"source_turn_ids": turns})

    def search(self, user_id: str, vector: np.ndarray, k: int, now: datetime) -> list[tuple[Fact, float]]:
        """Exact top-``k`` cosine hits in the user's partition, skipping superseded and expired facts."""
        part = self._parts.get(user_id)
        if part is None:
            return []
        want = min(part.index.ntotal, k + part.maybe_hidden + len(part.dead))
        scores, ids = part.index.search(vector.reshape(1, -1), want)
        now = as_utc(now)
        hits: list[tuple[Fact, float]] = []
        for score, fact_id in zip(scores[0], ids[0], strict=True):
            fact = part.facts.get(int(fact_id))  # None for padding (-1) and dead rows
            if fact is not None and fact.superseded_by is None and not fact.is_expired(now):
                hits.append((fact, float(score)))
                if len(hits) == k:
                    break
        return hits

    def vector(self, user_id: str, fact_id: int) -> np.ndarray:
        """The stored vector of one of the user's facts."""
        return self._parts[user_id].index.reconstruct(fact_id)

    def _queues(self, tenant: str | None) -> list[list[ExpiryEntry]]:
        if tenant is None:
            return list(self._expiry.values())
        return [self._expiry[tenant]] if tenant in self._expiry else []

    def _live(self, entry: ExpiryEntry) -> bool:
        # Entries of facts deleted (or given another expiry) since they were queued are stale.
        return entry[1] in self._owner and self.fact(entry[1]).expire_at == entry[0]

    def pop_due(self, now: datetime, limit: int | None, tenant: str | None = None) -> list[ExpiryEntry]:
        """Take up to ``limit`` queue entries of stored facts expiring before ``now``.

        Args:
            now: the cut-off.
            limit: most entries taken (all due when None).
            tenant: take only the facts of this tenant's users (every tenant's when None).
        """
        due: list[ExpiryEntry] = []
        for queue in self._queues(tenant):
            while queue and queue[0][0] < now and (limit is None or len(due) < limit):
                entry = heapq.heappop(queue)
                if self._live(entry):
                    due.append(entry)
        return due

    def requeue(self, entries: Iterable[ExpiryEntry]) -> None:
        """Put entries taken by :meth:`pop_due` back (their deletion failed)."""
        for entry in entries:
            if self._live(entry):
                heapq.heappush(self._expiry[tenant_of(self._owner[entry[1]])], entry)

    def count_due(self, now: datetime, tenant: str | None = None) -> int:
        """How many stored facts (of ``tenant``'s users, or of everyone) expire before ``now``."""
        return sum(
            1 for queue in self._queues(tenant) for entry in queue if entry[0] < now and self._live(entry)
        )

    def export(
        self, without: Collection[str] = (), only: Collection[str] | None = None
    ) -> tuple[list[Fact], np.ndarray]:
        """Every stored fact (of the users in ``only``, when given; never of those in ``without``)
        and its vector (row i belongs to facts[i])."""
        facts: list[Fact] = []
        blocks: list[np.ndarray] = [np.zeros((0, self.dim), dtype=np.float32)]
        for user_id, part in self._parts.items():
            if user_id in without or (only is not None and user_id not in only):
                continue
            ids = faiss.vector_to_array(part.index.id_map)
            flat = faiss.downcast_index(part.index.index)
            codes = faiss.vector_to_array(flat.codes)  # type: ignore[attr-defined]
            block = codes.view(np.float32).reshape(-1, self.dim)
            if part.dead:
                live = ~np.isin(ids, part.dead)
                ids, block = ids[live], block[live]
            blocks.append(block)
            facts.extend(part.facts[int(i)] for i in ids)
        return facts, np.vstack(blocks)

    def users(
        self, tenant: str, after: str, limit: int, keep: Callable[[str], bool] = lambda _: True
    ) -> list[tuple[str, int]]:
        """``tenant``'s users after ``after`` by id for whom ``keep`` holds, at most ``limit``,
        with their stored facts."""
        prefix = f"{tenant}{SEPARATOR}"
        found = [
            (user, len(part.facts))
            for user, part in self._parts.items()
            if user.startswith(prefix) and keep(user)
        ]
        return heapq.nsmallest(limit, (entry for entry in found if entry[0] > after))

    def user_ids(self) -> set[str]:
        """Every user with stored facts."""
        return set(self._parts)

    def counts(self) -> tuple[int, int]:
        """(users, facts) stored."""
        return len(self._parts), len(self._owner)
