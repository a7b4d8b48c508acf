"""The fact layer across shards (facts, profiles, turns of each user): the protocol the service
uses and its in-process implementation."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from operator import methodcaller
from pathlib import Path
from typing import Any, Protocol, TypeVar

import numpy as np

from memory_core.errors import (
    ConfigError,
    InvalidVectorError,
    SlotMovingError,
    StaleRoutingError,
    StorageError,
    ValidationError,
)
from memory_core.models import Fact, NewFact, ProfileEntry, Turn
from memory_core.routing import RoutingTable, read_routing
from memory_core.settings import LimitSettings, StorageSettings, WorkingSettings
from memory_core.store.backup import join_uri, shard_part
from memory_core.store.fsutil import fsync_dir, write_atomically
from memory_core.store.inbox import PendingTurns, StoredAnswer
from memory_core.store.profile import DuckDBProfileStore
from memory_core.store.resharding import Resharder, ReshardReport
from memory_core.store.shard import PROFILE_DB, FactShard, SlotCopy, UserErasure

_MANIFEST = "longmem.json"
_RESTORING = "RESTORING"
_SCRATCH = "restore-scratch"
_FORMAT = 1
_SETTLE_PAUSE_S = 0.05  # between tries while a user's slot moves
T = TypeVar("T")


class UserFacts(Protocol):
    """The per-user calls that a fact store and each of its shards both answer."""

    def add(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> list[Fact]:
        """Store facts durably; see :meth:`FactShard.add`."""
        ...

    def search(self, user_id: str, vector: np.ndarray, k: int, now: datetime) -> list[tuple[Fact, float]]:
        """Exact top-k cosine search in the user's partition; see :meth:`FactShard.search`."""
        ...

    def recall(
        self, user_id: str, vector: np.ndarray, k: int, now: datetime
    ) -> tuple[list[tuple[Fact, float]], list[ProfileEntry]]:
        """:meth:`search` and the user's profile entries, in one call to their shard."""
        ...

    def get(self, user_id: str, fact_id: int) -> Fact:
        """One of the user's facts; raises NotFoundError."""
        ...

    def list_user(self, user_id: str, include_superseded: bool = False) -> list[Fact]:
        """All of the user's facts, oldest first."""
        ...

    def vectors_of(self, user_id: str, fact_ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of some of the user's facts."""
        ...

    def delete(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        """Delete some of the user's facts durably; raises NotFoundError."""
        ...

    def supersede(self, user_id: str, old_id: int, new_id: int) -> None:
        """Hide ``old_id`` from recall in favour of ``new_id``; both are kept."""
        ...

    def add_sources(self, user_id: str, fact_id: int, turn_ids: Sequence[str]) -> Fact:
        """Add turns that said a stored fact again to its sources; see :meth:`FactShard.add_sources`."""
        ...

    def replaced(self, user_id: str, fact_ids: Sequence[int]) -> dict[int, list[Fact]]:
        """What each of the user's ``fact_ids`` replaced, down the chain, newest first."""
        ...

    def count_due(self, now: datetime, tenant: str | None = None) -> int:
        """How many facts (of ``tenant``'s users, or of everyone) have expire_at before ``now``."""
        ...

    def users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        """``tenant``'s users with facts, by stored id after ``after``, at most ``limit``, each
        with how many facts it stores (superseded ones included)."""
        ...

    def erase_user(self, user_id: str) -> UserErasure:
        """Remove every trace of the user's facts, profile, pending turns and working windows."""
        ...

    def profile(self, user_id: str) -> list[ProfileEntry]:
        """The user's profile entries, oldest first."""
        ...

    def set_profile(
        self, user_id: str, text: str, source: str, at: datetime, key: str | None = None
    ) -> ProfileEntry:
        """Write a profile entry durably; see :meth:`FactShard.set_profile`."""
        ...

    def delete_profile(self, user_id: str, key: str) -> None:
        """Delete one profile entry; raises NotFoundError."""
        ...

    def profile_users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        """``tenant``'s users with profile entries (as :meth:`users`), each with how many."""
        ...

    def extend_window(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> None:
        """Add turns to a session's working window, durably, in the user's shard."""
        ...

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The session's last turns, oldest first."""
        ...

    def accept_turns(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> int:
        """Keep turns for a later write, durably, in the user's shard; their batch number there."""
        ...

    def turns_done(self, user_id: str, seq: int) -> None:
        """Mark one of the user's accepted batches written."""
        ...

    def keep_answer(self, answer: StoredAnswer, forget_before: datetime) -> None:
        """Keep, in the user's shard, the answer to a call with an idempotency key."""
        ...

    def answer(self, user_id: str, key: str, since: datetime) -> StoredAnswer | None:
        """The answer kept for the user's call with ``key`` at ``since`` or later, if any."""
        ...

    def close(self) -> None:
        """Release files."""
        ...


class FactStore(UserFacts, Protocol):
    """Facts of all users, each user's facts searchable only by that user."""

    shards: list[ShardHandle]  # in routing order; the expiry sweep walks them one by one
    routing: RoutingTable

    def expire(self, now: datetime, limit: int | None = None, tenant: str | None = None) -> int:
        """Delete facts (of ``tenant``'s users, or of everyone) with expire_at before ``now``;
        returns how many."""
        ...

    def pending_turns(self) -> list[PendingTurns]:
        """Every accepted batch not written yet, each shard's in the order it was accepted."""
        ...

    def backup(self, uri: str) -> list[dict[str, Any]]:
        """Copy every shard under ``uri`` (see :mod:`memory_core.store.backup`); what each held."""
        ...

    def health(self) -> list[dict[str, Any]]:
        """Each shard's place, files, log state and counts, in routing order."""
        ...

    def refresh(self) -> bool:
        """Fetch the current shards and routing table if a reshard elsewhere changed them; whether
        it did."""
        ...


def read_manifest(data_dir: Path) -> dict[str, Any] | None:
    """The settings a data dir was created with (format, shards, dim, embedder), or None if new."""
    path = data_dir / _MANIFEST
    return json.loads(path.read_text()) if path.exists() else None  # type: ignore[no-any-return]


def open_manifest(
    data_dir: Path, shards: int, dim: int, embedder: str, placement: Sequence[str] | None = None
) -> RoutingTable:
    """Create the data dir's manifest, or check that it matches these settings; the data dir's
    routing table.

    ``shards`` is the shard count of a new data dir (checked against one never resharded).
    Once it has been resharded, its routing table says how many shards it has.

    ``placement`` (served apps: ``serve.shard_resources``) is recorded when it spreads shards
    over several nodes, and checked once recorded: another order would open shards on nodes
    that do not hold their files. None (a store opened in this process, which opens every
    shard) is refused on a data root that holds only some of them.

    Raises:
        ConfigError: the data dir was made with another shard count, embedder or placement, or
            a restore into it did not finish.
    """
    if restore_marker(data_dir).exists():
        raise ConfigError(
            f"a restore into {data_dir} did not finish: run longmem restore again (it starts over)"
        )
    wanted = _manifest(shards, dim, embedder)
    spread = list(placement) if placement is not None and len(placement) > 1 else []
    found = read_manifest(data_dir)
    if found is None:
        data_dir.mkdir(parents=True, exist_ok=True)
        _write_manifest(data_dir, {**wanted, **({"placement": spread} if spread else {})})
        return read_routing(data_dir, shards)  # a node's new root given a reshard's table first
    table = read_routing(data_dir, int(found["shards"]))
    for key, value in wanted.items():
        if key == "shards" and table.version > 0:
            continue  # resharded: its table says how many shards it has
        if found.get(key) != value:
            raise ConfigError(
                f"data dir {data_dir} was created with {key}={found.get(key)!r}, "
                f"settings say {value!r}; use a new data dir or the old settings"
            )
    if placement is None:
        if "placement" in found:
            raise ConfigError(
                f"{data_dir} holds only the shards placed on this node (serve.shard_resources="
                f"{found['placement']!r}): ask the server instead (--url)"
            )
        return table
    if "placement" in found and found["placement"] != spread:
        raise ConfigError(
            f"data dir {data_dir} spreads its shards as serve.shard_resources={found['placement']!r}, "
            f"settings say {spread!r}: shards would open on nodes without their files"
        )
    if spread and "placement" not in found:
        _write_manifest(data_dir, {**found, "placement": spread})
    return table


def _manifest(shards: int, dim: int, embedder: str) -> dict[str, Any]:
    return {"format": _FORMAT, "shards": shards, "dim": dim, "embedder": embedder}


def _write_manifest(data_dir: Path, manifest: dict[str, Any]) -> None:
    write_atomically(data_dir / _MANIFEST, lambda h: h.write(json.dumps(manifest).encode()))


def restore_marker(data_dir: Path) -> Path:
    """The file that says a restore into ``data_dir`` has begun and not finished."""
    return data_dir / _RESTORING


def begin_restore(data_dir: Path, owned: Sequence[Path]) -> None:
    """Mark ``data_dir`` as being restored into ``owned`` (the shard directories and files the
    restore writes); what an unfinished restore owned is cleared away first (it was never opened).

    Raises:
        StorageError: the marker cannot be written or the leftovers removed.
    """
    marker = restore_marker(data_dir)
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        names = [str(path.relative_to(data_dir)) for path in [*owned, restore_scratch(data_dir)]]
        if marker.exists():
            unfinished = json.loads(marker.read_text())
            if sorted(unfinished) != sorted(names):
                raise ConfigError(
                    f"an unfinished restore into {data_dir} wrote {unfinished}: run it again with the "
                    "same shards"
                )
            for name in unfinished:
                leftover = data_dir / name
                if leftover.is_dir():
                    shutil.rmtree(leftover)
                else:
                    leftover.unlink(missing_ok=True)
    except (OSError, ValueError) as exc:
        raise StorageError(f"cannot clear the unfinished restore in {data_dir}: {exc}") from exc
    write_atomically(marker, lambda h: h.write(json.dumps(names).encode()))


def finish_restore(data_dir: Path, shards: int, dim: int, embedder: str) -> None:
    """Write the restored data dir's manifest (unless it has one), then remove the restore's
    scratch files and its marker: from here on the data dir opens.

    Raises:
        StorageError: a file could not be written or removed.
    """
    if read_manifest(data_dir) is None:
        _write_manifest(data_dir, _manifest(shards, dim, embedder))
    try:
        shutil.rmtree(restore_scratch(data_dir), ignore_errors=True)
        # The new shard directories' entries are durable before the marker goes.
        if shard_dir(data_dir, 0).parent.is_dir():
            fsync_dir(shard_dir(data_dir, 0).parent)
        fsync_dir(data_dir)
        restore_marker(data_dir).unlink()
        fsync_dir(data_dir)
    except OSError as exc:
        raise StorageError(f"cannot finish the restore into {data_dir}: {exc}") from exc


def restore_scratch(data_dir: Path) -> Path:
    """Where a restore puts files it reads once (the profile's Parquet copy)."""
    return data_dir / _SCRATCH


def move_root_profiles(data_dir: Path, store: ShardedFactStore, limits: LimitSettings) -> int:
    """Move the profile file that ``data_dir`` kept at its root before profiles lived in the
    shards (one file for every user) into the users' shards, then delete it; how many entries
    moved. Run when the data dir is opened, before anything is served: a move cut short is done
    again whole at the next open (each entry is stored as it was, so twice is once).

    Raises:
        StorageError: the old file cannot be read (another process holds it) or removed, or a
            shard did not take its entries; the old file stays.
    """
    path = data_dir / PROFILE_DB
    if not path.exists():
        return 0
    old = DuckDBProfileStore(path, limits)
    try:
        entries = old.export(old.user_ids())
    finally:
        old.close()
    by_user: dict[str, list[ProfileEntry]] = {}
    for entry in entries:
        by_user.setdefault(entry.user_id, []).append(entry)
    for user_id, mine in sorted(by_user.items()):
        store.take_profile(user_id, mine)
    try:
        Path(f"{path}.wal").unlink(missing_ok=True)
        path.unlink()
        fsync_dir(data_dir)
    except OSError as exc:
        raise StorageError(f"cannot remove {path} after moving its entries into the shards: {exc}") from exc
    return len(entries)


class ShardHandle(UserFacts, Protocol):
    """One shard as the store talks to it: a :class:`FactShard` in this process, or a proxy to
    the actor that owns it (``deployments/``). Methods mean what they mean on FactShard."""

    def validate(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> object:
        """Check a batch without storing it; raises ValidationError."""
        ...

    def expire(self, now: datetime, limit: int | None = None, tenant: str | None = None) -> list[int]:
        """Delete up to ``limit`` facts (of ``tenant``'s users, or of everyone) expired before
        ``now``; returns their ids."""
        ...

    def backup(self, uri: str) -> dict[str, Any]:
        """Copy the shard to ``uri`` as one point in time; its snapshot seq, users, facts, files."""
        ...

    def snapshot(self, purge: bool = False) -> int:
        """Write a snapshot; returns its sequence number."""
        ...

    def stats(self) -> dict[str, int]:
        """Counts for health checks and metrics."""
        ...

    def health(self) -> dict[str, Any]:
        """Where the shard runs and its files are, whether its log takes writes, its counts."""
        ...

    def take_profile(self, user_id: str, entries: Sequence[ProfileEntry]) -> None:
        """Store some of the user's profile entries as they are (:meth:`FactShard.take_profile`)."""
        ...

    def pending_turns(self) -> list[PendingTurns]:
        """The shard's accepted batches not written yet, in the order they were accepted."""
        ...

    def export_slots(self, slots: Collection[int], slot_count: int) -> SlotCopy:
        """Everything of the users in ``slots``, for another shard to import."""
        ...

    def import_slots(self, copy: SlotCopy) -> None:
        """Take what another shard exported, durably."""
        ...

    def drop_slots(self, slots: Collection[int], slot_count: int) -> int:
        """Remove every trace of the users in ``slots``; how many users went."""
        ...

    def adopt(self, routing: RoutingTable) -> None:
        """Serve by ``routing`` from now on."""
        ...

    def fence(self, slots: Collection[int]) -> None:
        """Refuse writes of the users in ``slots`` until :meth:`unfence`."""
        ...

    def unfence(self) -> None:
        """Take every owned slot's writes again."""
        ...


class ShardedFactStore:
    """Facts of all users over shards, each user on the shard its slot belongs to."""

    def __init__(
        self,
        shards: Sequence[ShardHandle],
        limits: LimitSettings,
        routing: RoutingTable | None = None,
        refresh: Callable[[RoutingTable], tuple[list[ShardHandle], RoutingTable] | None] | None = None,
        settle_s: float = 30.0,
    ) -> None:
        """Route over ``shards`` by ``routing`` (default: a data dir never resharded; the shards'
        order is the routing order: never reorder a data dir's).

        ``refresh(table)`` returns the current shards and table when they are newer than
        ``table``, else None; the store asks it when a shard says it no longer owns a user (a
        reshard moved the user's slot) or a shard call fails (a shrink retired the shard).
        Without it the table is the one a reshard in this process keeps current. A call waits
        up to ``settle_s`` for the user's shard to settle (a slot on the move refuses writes
        for the move's length) before StorageError.
        """
        self._limits = limits
        self.shards = list(shards)
        self.routing = routing or RoutingTable.legacy(len(self.shards))
        if self.routing.shards != len(self.shards):
            raise ConfigError(f"a routing table of {self.routing.shards} shards over {len(self.shards)}")
        self._refresh = refresh
        self._settle_s = settle_s

    def _shard(self, user_id: str) -> ShardHandle:
        return self.shards[self.routing.shard_of(user_id)]

    def _settled(self, call: Callable[[], T]) -> T:
        """``call()``, again after routing anew while a shard says the user's slot moved or is
        moving."""
        deadline = time.monotonic() + self._settle_s
        while True:
            try:
                return call()
            except (StaleRoutingError, SlotMovingError) as exc:
                if time.monotonic() > deadline:
                    raise StorageError(
                        f"the user's shard did not settle in {self._settle_s:g} s: {exc}"
                    ) from exc
                moved = False
                if isinstance(exc, StaleRoutingError):
                    moved = self.refresh()
                    if exc.version < self.routing.version:
                        # A shard that restarted on an older table (restored on a new node, say).
                        for shard in self.shards:
                            shard.adopt(self.routing)
                if not moved:
                    time.sleep(_SETTLE_PAUSE_S)

    def refresh(self) -> bool:
        """Fetch the current shards and routing table when newer than the store's (a store
        without ``refresh`` keeps its own, which a reshard in this process keeps current); whether
        they were. The shard list changes in place: the sweep runner holds it too."""
        found = self._refresh(self.routing) if self._refresh is not None else None
        if found is None:
            return False
        shards, self.routing = found
        self.shards[:] = shards
        return True

    def _on(self, user_id: str, call: Callable[[ShardHandle], T]) -> T:
        """``call`` on the user's shard (see :meth:`_settled`)."""

        return self._settled(lambda: self._at(self.routing.shard_of(user_id), call))

    def _at(self, shard_no: int, call: Callable[[ShardHandle], T]) -> T:
        """``call`` on shard ``shard_no``; StaleRoutingError when a shrink has retired it."""
        try:
            return call(self.shards[shard_no])
        except SlotMovingError:
            raise
        except StorageError as exc:
            # A shard a shrink retired is gone, and took nothing since it adopted the table that
            # gave its last slot away: route again. Any other failure is the caller's (the call
            # may have been done: never repeated here).
            self.refresh()  # another call may have fetched the newer table already
            if shard_no >= self.routing.shards:
                raise StaleRoutingError(self.routing.version) from exc
            raise

    def add(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> list[Fact]:
        """Store facts durably; see :meth:`FactShard.add`.

        A batch spanning several shards is validated whole before any shard writes; if a
        shard then fails to write, the parts other shards wrote are deleted again before
        the StorageError propagates.
        """
        if len(new_facts) > self._limits.max_batch:
            raise ValidationError(f"batch of {len(new_facts)} facts, limit is {self._limits.max_batch}")
        return self._settled(lambda: self._add(new_facts, vectors))

    def _add(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> list[Fact]:
        if not new_facts:
            return []
        rows_by_shard: dict[int, list[int]] = {}
        for row, fact in enumerate(new_facts):
            rows_by_shard.setdefault(self.routing.shard_of(fact.user_id), []).append(row)
        if len(rows_by_shard) == 1:
            [shard_no] = rows_by_shard
            return self._at(shard_no, lambda shard: shard.add(new_facts, vectors))
        matrix = np.asarray(vectors)
        if matrix.ndim != 2 or matrix.shape[0] != len(new_facts):
            raise InvalidVectorError(f"expected {len(new_facts)} rows, got shape {matrix.shape}")
        for shard_no, rows in rows_by_shard.items():
            # Dry validation first so that no shard writes when another's part is invalid.
            self.shards[shard_no].validate([new_facts[r] for r in rows], matrix[rows])
        stored: list[Fact | None] = [None] * len(new_facts)
        for shard_no, rows in rows_by_shard.items():
            try:
                add = methodcaller("add", [new_facts[r] for r in rows], matrix[rows])
                written = self._at(shard_no, add)
            except (StorageError, StaleRoutingError):
                self._undo_add([f for f in stored if f is not None])
                raise
            for row, fact in zip(rows, written, strict=True):
                stored[row] = fact
        return [f for f in stored if f is not None]

    def _undo_add(self, facts: Sequence[Fact]) -> None:
        """Take back the parts of a failed multi-shard batch that other shards had written."""
        by_user: dict[str, list[int]] = {}
        for fact in facts:
            by_user.setdefault(fact.user_id, []).append(fact.id)
        for user_id, ids in by_user.items():
            self.delete(user_id, ids)

    def search(self, user_id: str, vector: np.ndarray, k: int, now: datetime) -> list[tuple[Fact, float]]:
        """Exact top-k search in the user's partition."""
        return self._on(user_id, lambda shard: shard.search(user_id, vector, k, now))

    def recall(
        self, user_id: str, vector: np.ndarray, k: int, now: datetime
    ) -> tuple[list[tuple[Fact, float]], list[ProfileEntry]]:
        """Exact top-k search in the user's partition and their profile, in one shard call."""
        return self._on(user_id, lambda shard: shard.recall(user_id, vector, k, now))

    def get(self, user_id: str, fact_id: int) -> Fact:
        """One of the user's facts."""
        return self._on(user_id, lambda shard: shard.get(user_id, fact_id))

    def list_user(self, user_id: str, include_superseded: bool = False) -> list[Fact]:
        """All of the user's facts, oldest first."""
        return self._on(user_id, lambda shard: shard.list_user(user_id, include_superseded))

    def vectors_of(self, user_id: str, fact_ids: Sequence[int]) -> np.ndarray:
        """Stored vectors of some of the user's facts."""
        return self._on(user_id, lambda shard: shard.vectors_of(user_id, fact_ids))

    def delete(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        """Delete some of the user's facts durably."""
        return self._on(user_id, lambda shard: shard.delete(user_id, fact_ids))

    def supersede(self, user_id: str, old_id: int, new_id: int) -> None:
        """Hide ``old_id`` from recall in favour of ``new_id``."""
        self._on(user_id, lambda shard: shard.supersede(user_id, old_id, new_id))

    def add_sources(self, user_id: str, fact_id: int, turn_ids: Sequence[str]) -> Fact:
        """Add turns that said one of the user's facts again to its sources, durably."""
        return self._on(user_id, lambda shard: shard.add_sources(user_id, fact_id, turn_ids))

    def replaced(self, user_id: str, fact_ids: Sequence[int]) -> dict[int, list[Fact]]:
        """What each of the user's ``fact_ids`` replaced, down the chain, newest first."""
        return self._on(user_id, lambda shard: shard.replaced(user_id, fact_ids))

    def expire(self, now: datetime, limit: int | None = None, tenant: str | None = None) -> int:
        """Delete expired facts (of ``tenant``'s users, or of everyone) in every shard; ``limit``
        bounds each shard's batch."""
        return sum(len(shard.expire(now, limit, tenant)) for shard in self.shards)

    def count_due(self, now: datetime, tenant: str | None = None) -> int:
        """How many facts (of ``tenant``'s users, or of everyone) in all shards have expire_at
        before ``now``."""
        return sum(shard.count_due(now, tenant) for shard in self.shards)

    def users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        """``tenant``'s users over every shard, by stored id (see :meth:`UserFacts.users`)."""
        # By id: two shards may list a user while a switch is announced.
        merged = dict(user for shard in self.shards for user in shard.users(tenant, after, limit))
        return sorted(merged.items())[:limit]

    def erase_user(self, user_id: str) -> UserErasure:
        """Remove the user's facts, profile, pending turns and windows, and compact their shard so
        no old file holds them."""
        return self._on(user_id, lambda shard: shard.erase_user(user_id))

    def profile(self, user_id: str) -> list[ProfileEntry]:
        """The user's profile entries, from their shard."""
        return self._on(user_id, lambda shard: shard.profile(user_id))

    def set_profile(
        self, user_id: str, text: str, source: str, at: datetime, key: str | None = None
    ) -> ProfileEntry:
        """Write a profile entry in the user's shard; see :meth:`FactShard.set_profile`."""
        return self._on(user_id, lambda shard: shard.set_profile(user_id, text, source, at, key))

    def delete_profile(self, user_id: str, key: str) -> None:
        """Delete one of the user's profile entries."""
        self._on(user_id, lambda shard: shard.delete_profile(user_id, key))

    def take_profile(self, user_id: str, entries: Sequence[ProfileEntry]) -> None:
        """Store some of the user's profile entries as they are; see :meth:`FactShard.take_profile`."""
        self._on(user_id, lambda shard: shard.take_profile(user_id, entries))

    def profile_users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        """``tenant``'s users with profile entries over every shard, by stored id."""
        merged = dict(user for shard in self.shards for user in shard.profile_users(tenant, after, limit))
        return sorted(merged.items())[:limit]  # by id, as in :meth:`users`

    def extend_window(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> None:
        """Add turns to a session's working window in the user's shard."""
        self._on(user_id, lambda shard: shard.extend_window(user_id, session_id, turns))

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The session's last turns, from the user's shard."""
        return self._on(user_id, lambda shard: shard.window(user_id, session_id))

    def accept_turns(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> int:
        """Keep turns for a later write in the user's shard; see :meth:`FactShard.accept_turns`."""
        return self._on(user_id, lambda shard: shard.accept_turns(user_id, session_id, turns, at))

    def turns_done(self, user_id: str, seq: int) -> None:
        """Mark one of the user's accepted batches written."""
        self._on(user_id, lambda shard: shard.turns_done(user_id, seq))

    def pending_turns(self) -> list[PendingTurns]:
        """Every shard's accepted batches not written yet. Each shard lists its own users' (not
        a move's copies), by the current table: one that opened on an older one is given it."""
        self.refresh()
        for shard in self.shards:
            shard.adopt(self.routing)
        return [batch for shard in self.shards for batch in shard.pending_turns()]

    def keep_answer(self, answer: StoredAnswer, forget_before: datetime) -> None:
        """Keep, in the user's shard, the answer to a call with an idempotency key."""
        self._on(answer.user_id, lambda shard: shard.keep_answer(answer, forget_before))

    def answer(self, user_id: str, key: str, since: datetime) -> StoredAnswer | None:
        """The answer kept for the user's call with ``key`` at ``since`` or later, if any."""
        return self._on(user_id, lambda shard: shard.answer(user_id, key, since))

    def backup(self, uri: str) -> list[dict[str, Any]]:
        """Copy each shard to its own directory under ``uri``, one after the other."""
        return [shard.backup(join_uri(uri, shard_part(no))) for no, shard in enumerate(self.shards)]

    def health(self) -> list[dict[str, Any]]:
        """Each shard's :meth:`ShardHandle.health`, in routing order, with its number and slots
        (as the shards are now: a reshard elsewhere may have changed them)."""
        self.refresh()
        return [
            {**shard.health(), "shard": no, "slots": len(self.routing.slots_of(no))}
            for no, shard in enumerate(self.shards)
        ]

    def snapshot(self) -> None:
        """Snapshot every shard (faster next open)."""
        for shard in self.shards:
            shard.snapshot()

    def close(self) -> None:
        """Close every shard's log."""
        for shard in self.shards:
            shard.close()


def shard_dir(data_dir: Path, shard_no: int) -> Path:
    """Directory of shard ``shard_no`` inside a data dir."""
    return data_dir / "facts" / f"shard-{shard_no:04d}"


class LocalFactStore(ShardedFactStore):
    """All shards of a data dir, open in this process."""

    def __init__(
        self,
        storage: StorageSettings,
        limits: LimitSettings,
        dim: int,
        embedder: str,
        window_turns: int = WorkingSettings().turns,
    ) -> None:
        """Open every shard of ``storage.data_dir`` (creating the layout on first use), each
        session's working window keeping ``window_turns`` turns.

        Raises:
            ConfigError: the data dir belongs to other settings.
            CorruptionError: a shard cannot be recovered without losing acknowledged data.
        """
        table = open_manifest(storage.data_dir, storage.shards, dim, embedder)
        self.dim = dim
        self._storage = storage
        self._limits = limits
        self._window_turns = window_turns
        super().__init__([self.open_shard(i, table) for i in range(table.shards)], limits, table)
        self.resharder = Resharder(storage.data_dir, self, self)
        try:
            self.resharder.recover()
            move_root_profiles(storage.data_dir, self, limits)
        except StorageError:
            self.close()
            raise

    def open_shard(self, shard_no: int, routing: RoutingTable) -> FactShard:
        """Open (creating) shard ``shard_no`` of the data dir, serving by ``routing``."""
        storage = self._storage
        return FactShard(
            shard_dir(storage.data_dir, shard_no),
            self.dim,
            self._limits,
            storage.snapshot_every,
            self._window_turns,
            routing,
            shard_no,
        )

    def retire_from(self, shard_no: int) -> None:
        """Delete the directories of shards ``shard_no`` and after (closed already: they own no
        slot and the store holds them no more), all there are: a shrink cut short may have
        deleted some."""
        for directory in shard_dir(self._storage.data_dir, 0).parent.glob("shard-*"):
            if int(directory.name.removeprefix("shard-")) >= shard_no:
                shutil.rmtree(directory)

    def reshard(self, shards: int) -> ReshardReport:
        """Move slots so that ``shards`` shards hold them evenly (see
        :mod:`memory_core.store.resharding`), serving calls from other threads meanwhile.

        Raises:
            ConfigError: not a shard count this data dir can have, or another reshard was
                interrupted (finish that one first).
            StorageError: a step was not written; the data dir is consistent and the same call
                goes on from where it stopped.
        """
        return self.resharder.reshard(shards)
