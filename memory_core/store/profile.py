"""The long-term preference profile of each user, in one DuckDB file with one owner."""

from __future__ import annotations

import hashlib
import os
import threading
import unicodedata
from datetime import datetime
from pathlib import Path
from typing import Protocol

import duckdb

from memory_core.errors import NotFoundError, StorageError
from memory_core.models import ProfileEntry, as_utc
from memory_core.settings import LimitSettings
from memory_core.store.fsutil import fsync_dir
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


def entry_key(text: str) -> str:
    """Default key of an entry: a digest of its normalised text, so re-stating it is idempotent."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    normalised = " ".join(folded.split())
    return hashlib.blake2b(normalised.encode("utf-8"), digest_size=8).hexdigest()


class ProfileStore(Protocol):
    """Per-user preference entries."""

    def get(self, user_id: str) -> list[ProfileEntry]:
        """The user's entries, oldest first."""
        ...

    def upsert(
        self, user_id: str, text: str, source: str, at: datetime, key: str | None = None
    ) -> ProfileEntry:
        """Write an entry durably; same key replaces the old text."""
        ...

    def delete(self, user_id: str, key: str) -> None:
        """Delete one entry; raises NotFoundError."""
        ...

    def erase_user(self, user_id: str) -> int:
        """Delete all of the user's entries and every byte of them on disk."""
        ...

    def close(self) -> None:
        """Release the database file."""
        ...


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
            db = duckdb.connect(str(self.path))
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

        Args:
            user_id: owner.
            text: the preference, in the user's language.
            source: where it came from.
            at: time of the write.
            key: stable key; defaults to a digest of the text.

        Raises:
            ValidationError: bad user id, text or key.
            StorageError: the write was not committed.
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
            self._run(
                "INSERT OR REPLACE INTO profile VALUES (?, ?, ?, ?, ?)",
                [entry.user_id, entry.key, entry.text, entry.source, entry.updated_at.replace(tzinfo=None)],
            )
        return entry

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

    def erase_user(self, user_id: str) -> int:
        """Delete the user's entries, and every byte of them (or of entries they deleted before)
        on disk.

        The live rows of everyone else are copied into a fresh file that replaces the old one:
        DuckDB reuses freed blocks without zeroing them, so a DELETE alone leaves the text in
        the file. The copy is made before anything changes, so an erase that fails leaves the
        store as it was and its retry does all of it again; erasing twice is erasing once.

        Returns:
            How many entries were deleted (0 when the user had none left).

        Raises:
            StorageError: the fresh file could not be written or swapped in.
        """
        check_user_id(user_id, self._limits.max_user_id_chars)
        with self._lock:
            [(count,)] = self._run("SELECT count(*) FROM profile WHERE user_id = ?", [user_id])
            self._rewrite_without(user_id)
        return int(count)

    def _rewrite_without(self, user_id: str) -> None:
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
                    "INSERT INTO fresh.profile SELECT * FROM profile WHERE user_id <> ?", [user_id]
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

    def ping(self) -> bool:
        """Whether the database is open and answers a query (health checks)."""
        with self._lock:
            return self._run("SELECT 1") == [(1,)]

    def close(self) -> None:
        """Checkpoint and close the database."""
        with self._lock:
            self._db.close()
