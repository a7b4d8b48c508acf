"""The long-term preference profile of each user, in a DuckDB file per fact shard.

A shard's profile file holds the entries of the users the shard holds (it lies in the shard's
directory and moves with the user's slot); the process that owns the shard owns the file.

A user's profile holds at most ``limits.max_profile_entries`` entries, so that what the extractor
learns cannot grow into an unbounded standing prompt. At the cap an entry set on purpose (API,
CLI) is refused, and a wish learned from conversation takes the place of the oldest entry learned
from conversation; restating an entry (same key) replaces it and is no growth.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import unicodedata
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from memory_core.errors import NotFoundError, ProfileFullError, StorageError
from memory_core.models import ProfileEntry, as_utc
from memory_core.settings import LimitSettings
from memory_core.store.fsutil import fsync_dir
from memory_core.tenancy import SEPARATOR
from memory_core.validation import check_text, check_user_id

_SCHEMA = """
CREATE TABLE IF NOT EXISTS {table} (
    user_id VARCHAR NOT NULL,
    key VARCHAR NOT NULL,
    text VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    updated_at TIMESTAMP NOT NULL,  -- UTC
    PRIMARY KEY (user_id, key)
)
"""


LEARNED = "conversation"


def learned_source(turn_id: str) -> str:
    """Source of an entry the write path learned from the turn ``turn_id`` ("" when it has none)."""
    return f"{LEARNED}:{turn_id}" if turn_id else LEARNED


def is_learned(source: str) -> bool:
    """Whether an entry with ``source`` was learned from conversation (not set on purpose).

    Entries written before sources were marked this way hold a bare turn id and count as set on
    purpose: the cap never displaces them.
    """
    return source == LEARNED or source.startswith(f"{LEARNED}:")


def entry_key(text: str) -> str:
    """Default key of an entry: a digest of its normalised text, so re-stating it is idempotent."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    normalised = " ".join(folded.split())
    return hashlib.blake2b(normalised.encode("utf-8"), digest_size=8).hexdigest()


class DuckDBProfileStore:
    """Profile entries in a DuckDB file. Only one process may open the file read-write."""

    def __init__(self, path: Path, limits: LimitSettings | None = None) -> None:
        """Open or create the profile database at ``path``.

        Raises:
            StorageError: the file cannot be opened (e.g. another process holds its lock).
        """
        self.path = path
        self._limits = limits or LimitSettings()
        self._lock = threading.Lock()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot open profile store {path}: {exc}") from exc
        self._db = self._connect()

    def _connect(self) -> duckdb.DuckDBPyConnection:
        try:
            # One thread: a node runs many shards, each with its file, and the queries are small.
            db = duckdb.connect(str(self.path), config={"threads": 1})
            db.execute(_SCHEMA.format(table="profile"))
        except duckdb.Error as exc:
            raise StorageError(f"cannot open profile store {self.path}: {exc}") from exc
        return db

    def _run(self, sql: str, params: list[object] | None = None) -> list[tuple]:
        try:
            return self._db.execute(sql, params or []).fetchall()
        except duckdb.Error as exc:
            raise StorageError(f"profile store {self.path}: {exc}") from exc

    def get(self, user_id: str) -> list[ProfileEntry]:
        """The user's entries, oldest first."""
        check_user_id(user_id, self._limits.max_user_id_chars)
        with self._lock:
            rows = self._run(
                "SELECT key, text, source, updated_at FROM profile WHERE user_id = ? "
                "ORDER BY updated_at, key",
                [user_id],
            )
        return [
            ProfileEntry(user_id=user_id, key=key, text=text, source=source, updated_at=as_utc(at))
            for key, text, source, at in rows
        ]

    def upsert(
        self, user_id: str, text: str, source: str, at: datetime, key: str | None = None
    ) -> ProfileEntry:
        """Write an entry; it is committed (DuckDB's WAL is fsynced) when this returns.

        A key the user already has is replaced in place. A new key when the user is at the cap
        takes the place of their oldest learned entry if ``source`` is learned (:func:`is_learned`),
        in the same transaction; otherwise nothing is written.

        Args:
            user_id: owner.
            text: the preference, in the user's language.
            source: where it came from (:func:`learned_source` for the write path).
            at: time of the write.
            key: stable key; defaults to a digest of the text.

        Returns:
            The entry as stored.

        Raises:
            ValidationError: bad user id, text or key.
            ProfileFullError: a new key at the cap with nothing it may replace; nothing changed.
            StorageError: the write was not committed; nothing changed.
        """
        check_user_id(user_id, self._limits.max_user_id_chars)
        clean = check_text(text, self._limits.max_text_chars)
        entry = ProfileEntry(
            user_id=user_id,
            key=check_text(key, 128) if key is not None else entry_key(clean),
            text=clean,
            source=source[:200],
            updated_at=as_utc(at),
        )
        with self._lock:
            entry, displaced = self._place(entry)
            row = [entry.user_id, entry.key, entry.text, entry.source, entry.updated_at.replace(tzinfo=None)]
            try:
                # One transaction: the displaced entry goes only if the new one is committed.
                self._db.begin()
                if displaced is not None:
                    gone = [user_id, displaced]
                    self._db.execute("DELETE FROM profile WHERE user_id = ? AND key = ?", gone)
                self._db.execute("INSERT OR REPLACE INTO profile VALUES (?, ?, ?, ?, ?)", row)
                self._db.commit()
            except duckdb.Error as exc:
                self._roll_back()
                raise StorageError(f"profile store {self.path}: {exc}") from exc
        return entry

    def _place(self, entry: ProfileEntry) -> tuple[ProfileEntry, str | None]:
        """``entry`` as it is to be stored, and the key it displaces (None: it fits). Hold the lock.

        Raises:
            ProfileFullError: a new key at the cap with nothing it may displace.
        """
        rows = self._run(
            "SELECT key, source FROM profile WHERE user_id = ? ORDER BY updated_at, key", [entry.user_id]
        )
        stored = dict(rows)
        if entry.key in stored:
            # Conversation restating an entry set on purpose must not make it displaceable.
            if is_learned(entry.source) and not is_learned(stored[entry.key]):
                entry = entry.model_copy(update={"source": stored[entry.key]})
            return entry, None
        cap = self._limits.max_profile_entries
        if len(rows) < cap:
            return entry, None
        if is_learned(entry.source):
            oldest = next((key for key, source in rows if is_learned(source)), None)
            if oldest is not None:
                return entry, oldest
        raise ProfileFullError(cap)

    def _roll_back(self) -> None:
        # DuckDB ends a transaction itself when a statement in it fails: then there is nothing
        # left to roll back.
        with contextlib.suppress(duckdb.TransactionException):
            self._db.rollback()

    def delete(self, user_id: str, key: str) -> None:
        """Delete one entry.

        Raises:
            NotFoundError: the user has no entry with this key.
        """
        check_user_id(user_id, self._limits.max_user_id_chars)
        with self._lock:
            rows = self._run(
                "DELETE FROM profile WHERE user_id = ? AND key = ? RETURNING key", [user_id, key]
            )
        if not rows:
            raise NotFoundError(user_id, [key])

    def users(
        self, tenant: str, after: str, limit: int, keep: Callable[[str], bool] | None = None
    ) -> list[tuple[str, int]]:
        """``tenant``'s users with entries, by id after ``after``, at most ``limit``, each with how
        many entries it has; only those ``keep`` accepts, when given."""
        found: list[tuple[str, int]] = []
        while len(found) < limit:
            with self._lock:
                # starts_with, not LIKE: '_' may be in a tenant name and is a LIKE wildcard.
                rows = self._run(
                    "SELECT user_id, count(*) FROM profile WHERE starts_with(user_id, ?) AND user_id > ? "
                    "GROUP BY user_id ORDER BY user_id LIMIT ?",
                    [f"{tenant}{SEPARATOR}", after, limit],
                )
            found += [(user, int(count)) for user, count in rows if keep is None or keep(user)]
            if len(rows) < limit:
                break
            after = rows[-1][0]
        return found[:limit]

    def user_ids(self) -> set[str]:
        """Every user with entries."""
        with self._lock:
            return {user for (user,) in self._run("SELECT DISTINCT user_id FROM profile")}

    def count(self) -> int:
        """How many entries the file holds."""
        with self._lock:
            [(count,)] = self._run("SELECT count(*) FROM profile")
        return int(count)

    def erase_user(self, user_id: str) -> int:
        """Delete the user's entries, and every byte of them (or of entries they deleted before)
        on disk (see :meth:`drop_users`).

        Returns:
            How many entries were deleted (0 when the user had none left).

        Raises:
            StorageError: the fresh file could not be written or swapped in.
        """
        check_user_id(user_id, self._limits.max_user_id_chars)
        return self.drop_users([user_id])

    def drop_users(self, users: Collection[str]) -> int:
        """Delete every entry of ``users``, and every byte of them on disk; how many went.

        The live rows of everyone else are copied into a fresh file that replaces the old one:
        DuckDB reuses freed blocks without zeroing them, so a DELETE alone leaves the text in
        the file. The copy is made before anything changes, so a drop that fails leaves the
        store as it was and its retry does all of it again; dropping twice is dropping once.

        Raises:
            StorageError: the fresh file could not be written or swapped in.
        """
        gone = sorted(set(users))
        with self._lock:
            [(count,)] = self._run("SELECT count(*) FROM profile WHERE list_contains(?, user_id)", [gone])
            self._rewrite_without(gone)
        return int(count)

    def _rewrite_without(self, users: list[str]) -> None:
        fresh = self.path.with_name(self.path.name + ".compact")
        wal = Path(str(self.path) + ".wal")
        try:
            for leftover in (fresh, Path(str(fresh) + ".wal")):
                leftover.unlink(missing_ok=True)
            quoted = str(fresh).replace("'", "''")
            self._db.execute(f"ATTACH '{quoted}' AS fresh")
            try:
                self._db.execute(_SCHEMA.format(table="fresh.profile"))
                self._db.execute(
                    "INSERT INTO fresh.profile SELECT * FROM profile WHERE NOT list_contains(?, user_id)",
                    [users],
                )
                self._db.execute("CHECKPOINT fresh")
            finally:
                self._db.execute("DETACH fresh")
            with open(fresh, "rb") as handle:
                os.fsync(handle.fileno())
        except (OSError, duckdb.Error) as exc:
            fresh.unlink(missing_ok=True)
            raise StorageError(f"cannot compact profile store {self.path}: {exc}") from exc
        try:
            # Closing checkpoints the old file and ends its WAL; a WAL left beside the fresh file
            # would be replayed into it on the next open, erased rows included.
            self._db.close()
            wal.unlink(missing_ok=True)
            fresh.replace(self.path)
            fsync_dir(self.path.parent)
        except (OSError, duckdb.Error) as exc:
            raise StorageError(f"cannot swap in the compacted profile store {self.path}: {exc}") from exc
        finally:
            self._db = self._connect()

    def export(self, users: Collection[str]) -> list[ProfileEntry]:
        """Every entry of ``users`` (a reshard copies them to another shard)."""
        with self._lock:
            rows = self._run(
                "SELECT user_id, key, text, source, updated_at FROM profile "
                "WHERE list_contains(?, user_id) ORDER BY user_id, updated_at, key",
                [sorted(set(users))],
            )
        return [
            ProfileEntry(user_id=user, key=key, text=text, source=source, updated_at=as_utc(at))
            for user, key, text, source, at in rows
        ]

    def take(self, entries: Iterable[ProfileEntry]) -> None:
        """Make the entries given each user's whole profile here, stored as they are (another
        shard's export, an old profile file), in one transaction: taking them twice is once, and
        no entry the user had here before stays beside them.

        Raises:
            StorageError: not committed; nothing changed.
        """
        given = list(entries)
        if not given:
            return
        rows = [[e.user_id, e.key, e.text, e.source, e.updated_at.replace(tzinfo=None)] for e in given]
        users = sorted({e.user_id for e in given})
        with self._lock:
            try:
                self._db.begin()
                self._db.execute("DELETE FROM profile WHERE list_contains(?, user_id)", [users])
                self._db.executemany("INSERT INTO profile VALUES (?, ?, ?, ?, ?)", rows)
                self._db.commit()
            except duckdb.Error as exc:
                self._roll_back()
                raise StorageError(f"profile store {self.path}: {exc}") from exc

    def write_parquet(self, path: Path) -> int:
        """Write every entry to ``path`` as one Parquet file (a backup stages it); how many.

        Raises:
            StorageError: the copy failed.
        """
        with self._lock:
            try:
                table: pa.Table = self._db.sql("SELECT * FROM profile ORDER BY user_id, key").to_arrow_table()
            except duckdb.Error as exc:
                raise StorageError(f"profile backup failed: {exc}") from None
        try:
            pq.write_table(table, path)
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"profile backup failed: {exc}") from None
        return int(table.num_rows)

    def restore(self, table: pa.Table) -> int:
        """Load the entries a backup holds (``table``, as :meth:`write_parquet` wrote them) into
        this empty store; how many.

        Raises:
            StorageError: the store is not empty, or the entries cannot be loaded.
        """
        with self._lock:
            if self._run("SELECT count(*) FROM profile") != [(0,)]:
                raise StorageError(f"profile store {self.path} is not empty: restore into a new data dir")
            try:
                self._db.register("restored", table)
                self._db.execute("INSERT INTO profile BY NAME SELECT * FROM restored")
                self._db.unregister("restored")
                self._db.execute("CHECKPOINT")
            except duckdb.Error as exc:
                raise StorageError(f"profile restore into {self.path} failed: {exc}") from None
        return int(table.num_rows)

    def ping(self) -> bool:
        """Whether the database is open and answers a query (health checks)."""
        with self._lock:
            return self._run("SELECT 1") == [(1,)]

    def close(self) -> None:
        """Checkpoint and close the database."""
        with self._lock:
            self._db.close()
