"""A fact shard: the facts and profiles of a set of users, searchable per user, durable on disk.

The searchable state lives in :class:`Partitions` (one exact FAISS index per user).
Durability: every change is appended to the write-ahead log and fsynced before the call
returns. Snapshots are written every ``snapshot_every`` records; on open the newest valid
snapshot is loaded and the log after it replayed. The users' profile entries are in the
shard's own DuckDB file (:mod:`memory_core.store.profile`), which moves and is backed up with it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import shutil
import struct
import threading
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pyarrow as pa

from memory_core.errors import (
    CorruptionError,
    NotFoundError,
    SlotMovingError,
    StaleRoutingError,
    StorageError,
    ValidationError,
)
from memory_core.models import Fact, NewFact, ProfileEntry, Turn, as_utc
from memory_core.routing import RoutingTable, slot_of
from memory_core.settings import LimitSettings, WorkingSettings
from memory_core.store import snapshot as snap
from memory_core.store import wal
from memory_core.store.arrow_codec import (
    batch_to_facts,
    batch_to_ipc,
    fact_schema,
    facts_to_batch,
    ipc_to_table,
)
from memory_core.store.backup import PROFILE_FILE, upload
from memory_core.store.fsutil import TEMP_SUFFIX, lock_directory, write_atomically
from memory_core.store.inbox import InboxCopy, PendingTurns, StoredAnswer, TurnInbox
from memory_core.store.partitions import Partitions
from memory_core.store.profile import DuckDBProfileStore
from memory_core.validation import check_text, check_user_id, check_vectors

_STAGING = ".backup-"  # a backup's staged copy inside the shard directory, removed after upload
_FENCE = "FENCE"  # the slots of a move in flight from this shard, whose writes are refused
PROFILE_DB = "profile.duckdb"  # the profile entries of the shard's users


@dataclass(frozen=True)
class UserErasure:
    """What erasing a user took from a shard."""

    facts: int
    profile_entries: int
    pending_batches: int  # accepted turn batches not written yet
    window_turns: int  # turns of the user's working windows


@dataclass(frozen=True)
class SlotCopy:
    """The users of some slots as one shard exports them and another imports them."""

    users: int
    facts: int
    fact_rows: bytes  # facts with their vectors, as the log's ADD record holds them
    inbox: InboxCopy
    profile: list[ProfileEntry]


@dataclass(frozen=True)
class RecoveryReport:
    """What opening a shard found on disk."""

    snapshot_seq: int | None
    skipped_snapshots: tuple[int, ...]
    replayed_records: int
    torn_tail: wal.TornTail | None


class FactShard:
    """Owns the facts of the users routed to one shard directory.

    Not safe for concurrent use from several processes; one process owns a shard directory.
    Calls from several threads are serialized.
    """

    def __init__(
        self,
        directory: Path,
        dim: int,
        limits: LimitSettings | None = None,
        snapshot_every: int = 50_000,
        window_turns: int = WorkingSettings().turns,
        routing: RoutingTable | None = None,
        shard_no: int = 0,
    ) -> None:
        """Open (or create) the shard in ``directory``, recovering from snapshot + log; each
        session's working window keeps its last ``window_turns`` turns. With ``routing``, it is
        shard ``shard_no`` of a store and refuses users the table gives another shard
        (StaleRoutingError); without, it takes any user (a shard opened alone, e.g. by a restore).

        Raises:
            CorruptionError: the log is damaged where acknowledged data could be lost, or the
                log segments a usable snapshot needs are missing.
            StorageError: the directory cannot be created or written.
        """
        faiss.omp_set_num_threads(1)
        self.directory = directory
        self.dim = dim
        self._limits = limits or LimitSettings()
        self._snapshot_every = snapshot_every
        self._lock = threading.RLock()
        # Held by whatever purges old files (an erase, a purging snapshot, a reshard's drop, whose
        # snapshot is written without the lock): one at a time, so none deletes what another
        # writes, and no snapshot older than an erase appears after it.
        self._compacting = threading.Lock()
        self._mem = Partitions(dim)
        self._records_since_snapshot = 0
        self._snapshot_due = snapshot_every
        self._snapshot_failures = 0
        self.routing = routing  # None: any user (a shard opened alone)
        self._shard_no = shard_no
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create shard directory {directory}: {exc}") from exc
        # Two writers on one log would interleave records: the second opener is refused.
        self._dir_lock = lock_directory(directory)
        # A move this shard was the source of, and that its process died in, holds until the
        # reshard settles it.
        fence = directory / _FENCE
        self._moving: frozenset[int] = frozenset(json.loads(fence.read_text()) if fence.exists() else ())
        # A backup the process died in has left its staged copy; the backup itself has no
        # manifest, so nothing reads it.
        for staged in directory.glob(f"{_STAGING}*"):
            shutil.rmtree(staged, ignore_errors=True)
        # Recovery allocates a million small objects that all live on: the cyclic GC would
        # rescan them over and over (15-30 % of load time at 1M facts) without freeing any.
        gc.disable()
        try:
            with contextlib.ExitStack() as opened:  # what opened is closed again if a later part fails
                opened.callback(self._dir_lock.close)
                self.recovery = self._recover()
                self._wal = wal.WalWriter(directory, self._current_seq)
                opened.callback(self._wal.close)
                self._inbox = TurnInbox(directory / "inbox", window_turns)
                opened.callback(self._inbox.close)
                self.profiles = DuckDBProfileStore(directory / PROFILE_DB, self._limits)
                opened.pop_all()
        finally:
            gc.enable()

    # ----------------------------------------------------------------- recovery

    def _recover(self) -> RecoveryReport:
        skipped: list[int] = []
        loaded: snap.Snapshot | None = None
        for seq in snap.list_snapshots(self.directory):
            loaded = snap.read_snapshot(self.directory, seq)
            if loaded is not None:
                break
            skipped.append(seq)
        start = loaded.seq if loaded else 0
        if loaded is not None:
            facts, vectors = batch_to_facts(loaded.table)
            self._mem.insert(facts, vectors)
        segments = [s for s in wal.list_segments(self.directory) if s >= start]
        # snapshot() creates segment N before snapshot N, and pruning only removes a prefix, so
        # the segments from ``start`` on are contiguous; anything else lost acked records.
        fresh = loaded is None and not skipped and not segments
        contiguous = segments == list(range(start, start + len(segments)))
        if not fresh and not (segments and contiguous):
            raise CorruptionError(
                str(self.directory),
                f"recovering from snapshot {start if loaded else 'none'} needs log segments {start}, "
                f"{start + 1}, ... without gaps; found {segments}",
            )
        replayed = 0
        torn: wal.TornTail | None = None
        for _, records, tail in wal.iter_records(self.directory, segments):
            for record in records:
                self._apply(record)
            replayed += len(records)
            torn = tail or torn
        self._current_seq = segments[-1] if segments else start
        self._records_since_snapshot = replayed
        return RecoveryReport(loaded.seq if loaded else None, tuple(skipped), replayed, torn)

    def _apply(self, record: wal.Record) -> None:
        if record.op is wal.Op.ADD:
            facts, vectors = batch_to_facts(ipc_to_table(record.payload))
            self._mem.insert(facts, vectors)
        elif record.op is wal.Op.DELETE:
            self._mem.remove(np.frombuffer(record.payload, dtype=np.int64).tolist())
        elif record.op is wal.Op.ERASE_USER:
            # Erase now compacts instead of logging; logs written before that still replay.
            self._mem.drop_user(record.payload.decode("utf-8"))
        elif record.op is wal.Op.SUPERSEDE:
            pairs = np.frombuffer(record.payload, dtype=np.int64).reshape(-1, 2)
            self._mem.mark_superseded([(int(a), int(b)) for a, b in pairs])
        elif record.op is wal.Op.SOURCES:
            added = json.loads(record.payload)
            self._mem.add_sources(added["id"], added["turns"])

    # ----------------------------------------------------------------- logging

    def _log(self, op: wal.Op, payload: bytes) -> None:
        self._wal.append(op, payload)
        self._records_since_snapshot += 1

    def _maybe_snapshot(self) -> None:
        if self._records_since_snapshot < self._snapshot_due:
            return
        try:
            self.snapshot()
        except StorageError:
            # The record that got here is logged and applied, so failing its call would make the
            # caller retry a stored write. A snapshot only shortens the next replay: try again
            # after another snapshot_every records; stats() counts the failures for health checks.
            self._snapshot_failures += 1
            self._snapshot_due = self._records_since_snapshot + self._snapshot_every

    # --------------------------------------------------------------- public API

    def validate(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> tuple[list[str], np.ndarray]:
        """Check a batch without storing it.

        Returns:
            The cleaned texts and the unit-normalised vectors.

        Raises:
            ValidationError: a user id, text or vector is invalid, or the batch is too big.
        """
        if len(new_facts) > self._limits.max_batch:
            raise ValidationError(f"batch of {len(new_facts)} facts, limit is {self._limits.max_batch}")
        unit = check_vectors(vectors, self.dim, len(new_facts))
        texts = [check_text(f.text, self._limits.max_text_chars) for f in new_facts]
        for item in new_facts:
            check_user_id(item.user_id, self._limits.max_user_id_chars)
        return texts, unit

    def add(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> list[Fact]:
        """Validate and store facts with their vectors as one atomic, durable batch.

        Args:
            new_facts: the facts; texts are stored stripped of surrounding whitespace.
            vectors: (len(new_facts), dim) array; rows are normalised to unit length.

        Returns:
            The stored facts with their assigned ids, in input order.

        Raises:
            ValidationError: a user id, text or vector is invalid, or the batch is too big;
                nothing of the batch is stored.
            StorageError: the batch was not logged; nothing of it is stored.
        """
        if not new_facts:
            return []
        texts, unit = self.validate(new_facts, vectors)
        with self._lock:
            self._admit({f.user_id for f in new_facts}, write=True)
            facts: list[Fact] = []
            taken: set[int] = set()
            for item, text in zip(new_facts, texts, strict=True):
                fact_id = self._mem.new_id(taken)
                taken.add(fact_id)
                fields = {**dict(item), "text": text}
                facts.append(Fact.model_construct(**fields, id=fact_id, superseded_by=None))
            vectors = unit
            batch = facts_to_batch(facts, vectors, self.dim)
            self._log(wal.Op.ADD, batch_to_ipc(batch))
            self._mem.insert(facts, vectors)
            self._maybe_snapshot()
            return facts

    def search(self, user_id: str, vector: np.ndarray, k: int, now: datetime) -> list[tuple[Fact, float]]:
        """Exact top-``k`` cosine search inside ``user_id``'s partition.

        Superseded facts and facts expired at ``now`` are never returned.

        Returns:
            (fact, cosine) pairs, best first.
        """
        with self._lock:
            self._admit([user_id], write=False)
            return self._mem.search(user_id, vector, k, now)

    def recall(
        self, user_id: str, vector: np.ndarray, k: int, now: datetime
    ) -> tuple[list[tuple[Fact, float]], list[ProfileEntry]]:
        """:meth:`search` and the user's profile entries, as one call."""
        with self._lock:
            return self.search(user_id, vector, k, now), self.profile(user_id)

    def _check_owned(self, user_id: str, fact_ids: Sequence[int]) -> None:
        self._admit([user_id], write=False)
        missing = [i for i in fact_ids if self._mem.owner(i) != user_id]
        if missing:
            raise NotFoundError(user_id, missing)

    def get(self, user_id: str, fact_id: int) -> Fact:
        """Return one of ``user_id``'s facts.

        Raises:
            NotFoundError: the id does not exist or belongs to another user.
        """
        with self._lock:
            self._check_owned(user_id, [fact_id])
            return self._mem.fact(fact_id)

    def list_user(self, user_id: str, include_superseded: bool = False) -> list[Fact]:
        """All of ``user_id``'s facts, oldest first."""
        with self._lock:
            self._admit([user_id], write=False)
            facts = self._mem.user_facts(user_id)
        if not include_superseded:
            facts = [f for f in facts if f.superseded_by is None]
        return sorted(facts, key=lambda f: (f.created_at, f.id))

    def users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        """``tenant``'s users in this shard (see :meth:`~memory_core.store.facts.UserFacts.users`)."""
        with self._lock:
            table, here = self.routing, self._shard_no
            if table is None:
                return self._mem.users(tenant, after, limit)
            # Not the copies a move in flight has imported here before its switch.
            return self._mem.users(tenant, after, limit, lambda user: table.shard_of(user) == here)

    def replaced(self, user_id: str, fact_ids: Sequence[int]) -> dict[int, list[Fact]]:
        """For each of the user's ``fact_ids`` that replaced older facts, those facts down the
        chain, newest first (each was true from its created_at until the next one's)."""
        with self._lock:
            self._admit([user_id], write=False)
            return self._mem.replaced(user_id, fact_ids)

    def user_ids(self) -> set[str]:
        """Every user this shard holds anything of: facts, profile entries, pending turns,
        windows, kept answers."""
        with self._lock:
            return self._mem.user_ids() | self._inbox.user_ids() | self.profiles.user_ids()

    def vectors_of(self, user_id: str, fact_ids: Sequence[int]) -> np.ndarray:
        """The stored vectors of some of ``user_id``'s facts, in the given order.

        Raises:
            NotFoundError: an id is not one of the user's facts.
        """
        with self._lock:
            self._check_owned(user_id, fact_ids)
            rows = [self._mem.vector(user_id, int(i)) for i in fact_ids]
        return np.vstack(rows) if rows else np.zeros((0, self.dim), dtype=np.float32)

    def delete(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        """Delete some of ``user_id``'s facts durably, with the older facts each one superseded:
        forgetting a fact must not leave its earlier versions behind.

        Returns:
            Every deleted id: the given ones first, then their history.

        Raises:
            NotFoundError: an id is not one of the user's facts; nothing is deleted.
            StorageError: the deletion was not logged; nothing is deleted.
        """
        with self._lock:
            self._admit([user_id], write=True)
            unique = list(dict.fromkeys(int(i) for i in fact_ids))
            self._check_owned(user_id, unique)
            if not unique:
                return []
            unique = self._mem.with_history(user_id, unique)
            self._log(wal.Op.DELETE, np.asarray(unique, dtype=np.int64).tobytes())
            removed = self._mem.remove(unique)
            self._maybe_snapshot()
            return removed

    def supersede(self, user_id: str, old_id: int, new_id: int) -> None:
        """Mark ``old_id`` as replaced by ``new_id``; it stays stored but is no longer recalled.

        Raises:
            NotFoundError: either id is not one of the user's facts.
        """
        with self._lock:
            self._admit([user_id], write=True)
            self._check_owned(user_id, [old_id, new_id])
            self._log(wal.Op.SUPERSEDE, struct.pack("<qq", old_id, new_id))
            self._mem.mark_superseded([(old_id, new_id)])
            self._maybe_snapshot()

    def add_sources(self, user_id: str, fact_id: int, turn_ids: Sequence[str]) -> Fact:
        """Durably add turns to the sources of one of the user's facts (a turn that said it again);
        the fact as it is now.

        Raises:
            NotFoundError: the id is not one of the user's facts.
        """
        with self._lock:
            self._admit([user_id], write=True)
            self._check_owned(user_id, [fact_id])
            fact = self._mem.fact(fact_id)
            if set(turn_ids) <= set(fact.source_turn_ids):
                return fact  # a write resumed after a crash: said and kept already
            self._log(wal.Op.SOURCES, json.dumps({"id": fact_id, "turns": list(turn_ids)}).encode("utf-8"))
            self._mem.add_sources(fact_id, turn_ids)
            self._maybe_snapshot()
            return self._mem.fact(fact_id)

    def expire(self, now: datetime, limit: int | None = None, tenant: str | None = None) -> list[int]:
        """Durably delete up to ``limit`` facts whose ``expire_at`` is before ``now``.

        Args:
            now: the cut-off.
            limit: most facts deleted by this call (all due when None).
            tenant: delete only the facts of this tenant's users (every tenant's when None).

        Returns:
            The deleted ids (empty when nothing is due).
        """
        with self._lock:
            if self._moving:
                raise SlotMovingError(min(self._moving))
            due = self._mem.pop_due(as_utc(now), limit, tenant)
            if not due:
                return []
            ids = [fact_id for _, fact_id in due]
            try:
                self._log(wal.Op.DELETE, np.asarray(ids, dtype=np.int64).tobytes())
            except StorageError:
                self._mem.requeue(due)
                raise
            removed = self._mem.remove(ids)
            self._maybe_snapshot()
            return removed

    def count_due(self, now: datetime, tenant: str | None = None) -> int:
        """How many stored facts (of ``tenant``'s users, or of everyone) have ``expire_at``
        before ``now`` (for dry runs)."""
        with self._lock:
            return self._mem.count_due(as_utc(now), tenant)

    def erase_user(self, user_id: str) -> UserErasure:
        """Remove every trace of ``user_id``: their facts, profile entries, pending turns and
        working windows, and every file that ever held them.

        The shard is compacted whether or not the user has facts left, since the text of facts
        already deleted, expired or superseded still sits in older log segments and in the
        fallback snapshot. The compacted snapshot is written before the user leaves memory, so
        an erase that fails changes nothing and its retry does all of it again; erasing twice
        is erasing once.

        Returns:
            How much was deleted (0 facts when the user had none left).

        Raises:
            StorageError: the compaction was not written; the user is as before. Or old files
                could not be removed after it; the user is gone and a retry removes the files.
        """
        with self._compacting, self._lock:
            self._admit([user_id], write=True)
            count = len(self._mem.user_facts(user_id))
            inbox = self._inbox.erase_user(user_id)
            self._write_snapshot(purge=True, without={user_id})
            entries = self.profiles.erase_user(user_id)
            return UserErasure(count, entries, pending_batches=inbox.batches, window_turns=inbox.window_turns)

    # ------------------------------------------------------------------ resharding

    def _admit(self, users: Iterable[str], write: bool) -> None:
        """Refuse users this shard does not own by its table, and writes of slots on the move
        (called with the lock held, so a fence set after this waits for the call to finish)."""
        table = self.routing
        if table is None:
            return
        for user_id in users:
            slot = table.slot_of(user_id)
            if table.owners[slot] != self._shard_no:
                raise StaleRoutingError(table.version)
            if write and slot in self._moving:
                raise SlotMovingError(slot)

    def adopt(self, routing: RoutingTable) -> None:
        """Serve by ``routing`` from now on (a reshard switched); an older table is ignored."""
        with self._lock:
            if self.routing is None or routing.version >= self.routing.version:
                self.routing = routing

    def fence(self, slots: Collection[int]) -> None:
        """Refuse writes of the users in ``slots`` (SlotMovingError: the store retries them) until
        :meth:`unfence`, across a restart too (the fence is a file in the shard's directory);
        every write already running has finished when this returns.

        Raises:
            StorageError: the fence was not written; writes are taken as before.
        """
        with self._lock:
            write_atomically(self.directory / _FENCE, lambda h: h.write(json.dumps(sorted(slots)).encode()))
            self._moving = frozenset(slots)

    def unfence(self) -> None:
        """Take writes of every slot the shard owns again.

        Raises:
            StorageError: the fence file could not be removed (writes stay refused).
        """
        with self._lock:
            try:
                (self.directory / _FENCE).unlink(missing_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot lift the fence of {self.directory}: {exc}") from exc
            self._moving = frozenset()

    def _slot_users(self, slots: Collection[int], slot_count: int) -> set[str]:
        wanted = set(slots)
        return {user for user in self.user_ids() if slot_of(user, slot_count) in wanted}

    def export_slots(self, slots: Collection[int], slot_count: int) -> SlotCopy:
        """Everything of the users in ``slots`` (of ``slot_count``): facts with their history
        and vectors, profile entries, pending turns, working windows, kept answers (a reshard
        copies it)."""
        with self._lock:
            users = self._slot_users(slots, slot_count)
            facts, vectors = self._mem.export(only=users)
            batch = facts_to_batch(facts, vectors, self.dim)
            inbox, profile = self._inbox.export(users), self.profiles.export(users)
            return SlotCopy(len(users), len(facts), batch_to_ipc(batch), inbox, profile)

    def import_slots(self, copy: SlotCopy) -> None:
        """Take what another shard exported, durably, ids and supersede links as they were.

        Raises:
            StorageError: a fact id is in use here, or the copy was not all written (a reshard
                then drops the slots here again).
        """
        with self._lock:
            facts, vectors = batch_to_facts(ipc_to_table(copy.fact_rows))
            clashes = self._mem.clashes(f.id for f in facts)
            if clashes:
                raise StorageError(
                    f"fact ids {clashes[:3]} of the moved slots are in use in {self.directory}"
                )
            if facts:
                self._log(wal.Op.ADD, copy.fact_rows)
                self._mem.insert(facts, vectors)
            self._inbox.take(copy.inbox)
            self.profiles.take(copy.profile)
            self._maybe_snapshot()

    def drop_slots(self, slots: Collection[int], slot_count: int) -> int:
        """Remove every trace of the users in ``slots`` (moved to another shard), files included,
        as :meth:`erase_user` does; returns how many users went. Dropping twice is dropping once.

        The shard serves other users meanwhile: the drop is logged and a new log segment begun
        with its lock held, the snapshot without the users is encoded and written without it
        (facts are replaced, never changed in place, so the list taken is one point in time),
        then the older files go. Erases and purging snapshots wait for it.

        Raises:
            StorageError: not written. When the log took the drop and the snapshot failed, the
                users are gone but older files may still hold them: a retry writes the snapshot
                and removes those files (a reshard's recovery drops again).
        """
        with self._compacting:
            with self._lock:
                users = self._slot_users(slots, slot_count)
                self._inbox.drop(users)
                ids = [fact.id for user in users for fact in self._mem.user_facts(user)]
                if ids:
                    self._log(wal.Op.DELETE, np.asarray(ids, dtype=np.int64).tobytes())
                for user in users:
                    self._mem.drop_user(user)
                seq = self._rotate()
                facts, vectors = self._mem.export()
            snap.write_snapshot(self.directory, seq, self._encode(facts, vectors))
            with self._lock:
                self._prune(keep_from=seq, strays=True)
            # Fenced and given away: nobody writes these users' entries here meanwhile.
            self.profiles.drop_users(users)
            return len(users)

    # ------------------------------------------------------------------- profiles

    def profile(self, user_id: str) -> list[ProfileEntry]:
        """The user's profile entries, oldest first."""
        with self._lock:
            self._admit([user_id], write=False)
            return self.profiles.get(user_id)

    def set_profile(
        self, user_id: str, text: str, source: str, at: datetime, key: str | None = None
    ) -> ProfileEntry:
        """Write one of the user's profile entries durably (see :meth:`DuckDBProfileStore.upsert`).

        Raises:
            ValidationError: bad user id, text or key.
            ProfileFullError: a new key at the cap with nothing it may replace; nothing changed.
            StorageError: not committed; nothing changed.
        """
        with self._lock:
            self._admit([user_id], write=True)
            return self.profiles.upsert(user_id, text, source, at, key)

    def delete_profile(self, user_id: str, key: str) -> None:
        """Delete one of the user's profile entries.

        Raises:
            NotFoundError: the user has no entry with this key.
        """
        with self._lock:
            self._admit([user_id], write=True)
            self.profiles.delete(user_id, key)

    def take_profile(self, user_id: str, entries: Sequence[ProfileEntry]) -> None:
        """Make ``entries`` the user's profile, stored as they are (keys, sources and times kept;
        the cap is not applied): a data dir's profile file from before profiles lived in shards.

        Raises:
            StorageError: not committed; nothing changed.
        """
        with self._lock:
            self._admit([user_id], write=True)
            self.profiles.take(e for e in entries if e.user_id == user_id)

    def profile_users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        """``tenant``'s users with profile entries in this shard (not a move's copies), each with
        how many it has (see :meth:`users`)."""
        table, here = self.routing, self._shard_no
        if table is None:
            return self.profiles.users(tenant, after, limit)
        return self.profiles.users(tenant, after, limit, lambda user: table.shard_of(user) == here)

    # ----------------------------------------------------------------- turn inbox

    def accept_turns(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> int:
        """Keep turns for a later write, durably (see :class:`TurnInbox`); their batch number.

        Raises:
            StorageError: not written; nothing was accepted.
        """
        with self._lock:
            self._admit([user_id], write=True)
            return self._inbox.accept(user_id, session_id, tuple(turns), at)

    def extend_window(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> None:
        """Add turns to a session's working window, durably, without a write.

        Raises:
            StorageError: not written; the window is as before.
        """
        with self._lock:
            self._admit([user_id], write=True)
            self._inbox.extend_window(user_id, session_id, tuple(turns))

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The session's last turns, oldest first."""
        with self._lock:
            self._admit([user_id], write=False)
            return self._inbox.window(user_id, session_id)

    def turns_done(self, user_id: str, seq: int) -> None:
        """Mark one of ``user_id``'s accepted batches written.

        Raises:
            StorageError: not written; the batch stays pending.
        """
        with self._lock:
            self._admit([user_id], write=True)
            self._inbox.done(user_id, seq)

    def pending_turns(self) -> list[PendingTurns]:
        """The batches accepted and not written yet, in the order they were accepted (of the
        users this shard owns: not the copies a move in flight has imported before its switch)."""
        with self._lock:
            table, here = self.routing, self._shard_no
            batches = self._inbox.pending()
        return [b for b in batches if table is None or table.shard_of(b.user_id) == here]

    def keep_answer(self, answer: StoredAnswer, forget_before: datetime) -> None:
        """Keep the answer to a call with an idempotency key (see :meth:`TurnInbox.keep_answer`)."""
        with self._lock:
            self._admit([answer.user_id], write=True)
            self._inbox.keep_answer(answer, forget_before)

    def answer(self, user_id: str, key: str, since: datetime) -> StoredAnswer | None:
        """The answer kept for ``user_id``'s call with ``key`` at ``since`` or later, if any."""
        with self._lock:
            self._admit([user_id], write=False)
            return self._inbox.answer(user_id, key, since)

    def snapshot(self, purge: bool = False) -> int:
        """Write a snapshot of every live fact and start a new log segment.

        Args:
            purge: delete every older snapshot and log segment (and temp files left by writes
                cut short), instead of keeping the previous snapshot and its log as a fallback.

        Returns:
            The new snapshot's sequence number.
        """
        with self._compacting if purge else contextlib.nullcontext(), self._lock:
            return self._write_snapshot(purge, without=())

    def backup(self, uri: str) -> dict[str, Any]:
        """Copy the shard to ``uri`` as one point in time: a new snapshot, the empty log segment
        after it and the turn inbox. Writes are held only while they are staged (hard links and
        an inbox copy in the shard's directory), not for the upload.

        Returns:
            The snapshot's sequence number, the users and facts it holds, the files written
            (:data:`memory_core.store.backup.FileSums`).

        Raises:
            StorageError: the snapshot, the staging or the copy failed (the shard is unharmed).
        """
        with self._lock:
            seq = self._write_snapshot(purge=False, without=())
            users, facts = self._mem.counts()
            staging = self.directory / f"{_STAGING}{seq}"
            try:
                staging.mkdir()
                for path in snap.snapshot_files(self.directory, seq):
                    os.link(path, staging / path.name)  # snapshots are never rewritten
                wal.segment_path(staging, seq).touch()  # the segment after a new snapshot is empty
            except OSError as exc:
                shutil.rmtree(staging, ignore_errors=True)
                raise StorageError(f"cannot stage shard {self.directory} for a backup: {exc}") from exc
            try:
                self._inbox.stage(staging / "inbox")
                entries = self.profiles.write_parquet(staging / PROFILE_FILE)
            except StorageError:
                shutil.rmtree(staging, ignore_errors=True)
                raise
        try:
            files = upload(staging, uri)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        return {"seq": seq, "users": users, "facts": facts, "profile_entries": entries, "files": files}

    def _rotate(self) -> int:
        """Begin the next log segment (with the lock held); its number, which the snapshot of
        the state as it stands now takes."""
        seq = self._current_seq + 1
        self._take_segment(wal.WalWriter(self.directory, seq), seq)
        return seq

    def _take_segment(self, new_wal: wal.WalWriter, seq: int) -> None:
        self._wal.close()
        self._wal = new_wal
        self._current_seq = seq
        self._records_since_snapshot = 0
        self._snapshot_due = self._snapshot_every

    def _write_snapshot(self, purge: bool, without: Collection[str]) -> int:
        seq = self._current_seq + 1
        # The segment exists before the snapshot does, so a usable snapshot without its
        # segment means lost records (see _recover), never a crash between the two steps.
        new_wal = wal.WalWriter(self.directory, seq)
        try:
            snap.write_snapshot(self.directory, seq, self._table(without))
        except StorageError:
            new_wal.close()
            # Best effort: an empty newer segment is harmless to replay.
            with contextlib.suppress(OSError):
                wal.segment_path(self.directory, seq).unlink()
            raise
        # From here the snapshot without the erased user is what a restart loads.
        self._take_segment(new_wal, seq)
        for user_id in without:
            self._mem.drop_user(user_id)
        self._prune(keep_from=seq if purge else self._previous_snapshot(seq), strays=purge)
        return seq

    def _previous_snapshot(self, seq: int) -> int:
        unusable = set(self.recovery.skipped_snapshots)
        older = [s for s in snap.list_snapshots(self.directory) if s < seq and s not in unusable]
        # Without an older snapshot the fallback is a replay of the log from its start.
        return older[0] if older else 0

    def _prune(self, keep_from: int, strays: bool) -> None:
        try:
            for old in snap.list_snapshots(self.directory):
                if old < keep_from:
                    snap.remove_snapshot(self.directory, old)
            for old in wal.list_segments(self.directory):
                if old < keep_from:
                    wal.segment_path(self.directory, old).unlink()
            if strays:
                # Temp files of writes a crash cut short may hold any text. This process owns the
                # directory and holds the shard's lock, so no write of its own is in flight.
                for stray in self.directory.glob(f"*{TEMP_SUFFIX}"):
                    stray.unlink()
        except OSError as exc:
            raise StorageError(f"cannot prune old files in {self.directory}: {exc}") from exc

    def _table(self, without: Collection[str] = ()) -> pa.Table:
        return self._encode(*self._mem.export(without))

    def _encode(self, facts: list[Fact], vectors: np.ndarray) -> pa.Table:
        batch = facts_to_batch(facts, vectors, self.dim)
        return pa.Table.from_batches([batch], schema=fact_schema(self.dim))

    def stats(self) -> dict[str, int]:
        """Counts for health checks and metrics."""
        with self._lock:
            users, facts = self._mem.counts()
            return {
                "users": users,
                "facts": facts,
                "log_seq": self._current_seq,
                "records_since_snapshot": self._records_since_snapshot,
                "snapshot_failures": self._snapshot_failures,
                "moving_slots": len(self._moving),
                "profile_entries": self.profiles.count(),
            }

    def health(self) -> dict[str, Any]:
        """Where the shard's files are, whether its log takes writes and its profile file answers,
        and its counts."""
        return {
            "directory": str(self.directory),
            "log_writable": self.log_writable(),
            "profile_open": self.profiles.ping(),
            **self.stats(),
        }

    def log_writable(self) -> bool:
        """Whether the open log segment can still be appended to (health checks)."""
        with self._lock:
            return self._wal.writable()

    def close(self) -> None:
        """Close the logs and release the directory; the shard must not be used afterwards."""
        with self._lock:
            self._wal.close()
            self._inbox.close()
            self.profiles.close()
            self._dir_lock.close()

    def destroy(self) -> None:
        """Close the shard and delete its directory (tests, benchmarks)."""
        self.close()
        shutil.rmtree(self.directory, ignore_errors=True)
