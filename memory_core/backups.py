"""Taking a backup of a service's stores, and rebuilding a data dir from one.

The layout is :mod:`memory_core.store.backup`'s. What a backup holds is what was acknowledged
when each shard was copied; what is lost when a disk dies is everything acknowledged after the
last backup (README, "Backups").
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pydantic import BaseModel, Field

from memory_core.clock import Clock
from memory_core.errors import ConfigError, LongmemError, StorageError
from memory_core.routing import RoutingTable, read_routing, write_routing
from memory_core.settings import LimitSettings
from memory_core.store.backup import (
    PROFILE_FILE,
    FileSums,
    absolute_uri,
    backup_id,
    check_visible,
    download,
    erasure_key,
    erasures_since,
    find_backup,
    join_uri,
    parent_uri,
    redact_uri,
    shard_part,
    write_manifest,
)
from memory_core.store.facts import (
    FactStore,
    begin_restore,
    finish_restore,
    read_manifest,
    restore_marker,
    restore_scratch,
    shard_dir,
)
from memory_core.store.profile import DuckDBProfileStore
from memory_core.store.shard import PROFILE_DB, FactShard
from memory_core.sweep.schedule import Scheduler, every_period

# Erasures recorded up to this long before a backup began are applied again by its restore: the
# clocks of the node that erased and the one that started the backup may differ a little.
CLOCK_SLACK = timedelta(minutes=1)


class ShardCopy(BaseModel):
    """One shard as its backup holds it."""

    shard: int
    seq: int = Field(description="The shard's snapshot sequence number in the backup.")
    users: int
    facts: int
    profile_entries: int = Field(default=0, description="The profile entries of the shard's users.")
    files: FileSums = Field(description="Each file of the shard's copy: its bytes and CRC-32.")


class BackupRecord(BaseModel):
    """A backup taken (or found, for a restore)."""

    id: str
    uri: str = Field(description="Where it is (credentials left out): restore from this URI.")
    created_at: datetime
    shards: list[ShardCopy]
    profile_entries: int = Field(
        description="Every shard's profile entries (before profiles lived in the shards: the one "
        "profile file's, listed in profile_files)."
    )
    profile_files: FileSums = Field(default_factory=dict)
    dim: int
    embedder: str
    seconds: float = Field(description="How long the backup (or the restore) took.")
    erased_again: int = Field(
        default=0, description="A restore: users erased after the backup was taken, erased again."
    )
    routing: dict[str, Any] | None = Field(
        default=None,
        description="The routing table (version, shards, owners of the slots) of a store resharded "
        "since it was made; None: never resharded.",
    )

    @property
    def bytes(self) -> int:
        """The size of every file of the backup."""
        parts = [copy.files for copy in self.shards] + [self.profile_files]
        return sum(entry["bytes"] for files in parts for entry in files.values())


def take_backup(facts: FactStore, dim: int, embedder: str, uri: str, at: datetime) -> BackupRecord:
    """Copy every shard (facts, profiles, turns) to a new directory under ``uri``; check that
    every file is there as this process sees it, then write the manifest.

    Raises:
        ConfigError: the URI cannot be opened.
        StorageError: a copy failed, or the location is not one every node reaches; the
            directory has no manifest, so it is never restored.
    """
    began = time.perf_counter()
    ident = backup_id(at)
    target = join_uri(absolute_uri(uri), ident)
    facts.refresh()
    routing = facts.routing
    shards = [ShardCopy(shard=no, **copy) for no, copy in enumerate(facts.backup(target))]
    # Shards are copied one after another: a slot moved between two copies would be in both, or
    # in neither. Such a backup gets no manifest, so it is never restored.
    if any(shard["moving_slots"] for shard in facts.health()) or facts.routing.version != routing.version:
        raise StorageError("a reshard moved slots while the backup ran: back up again once it is over")
    for copy in shards:
        check_visible(join_uri(target, shard_part(copy.shard)), copy.files)
    record = BackupRecord(
        id=ident,
        uri=redact_uri(target),
        created_at=at,
        shards=shards,
        profile_entries=sum(copy.profile_entries for copy in shards),
        dim=dim,
        embedder=embedder,
        seconds=round(time.perf_counter() - began, 3),
        routing=json.loads(routing.to_json()) if routing.version > 0 else None,
    )
    write_manifest(target, record.model_dump(mode="json", exclude={"uri"}))
    return record


class BackupSchedule:
    """Backups every ``every`` (multiples of it since the epoch: hourly on the hour), and how the
    last ones went, for the admin API and the metrics."""

    def __init__(
        self, take: Callable[[datetime], BackupRecord], every: timedelta, clock: Clock | None = None
    ) -> None:
        """``take(at)`` makes one backup (:func:`take_backup`); nothing runs until :meth:`start`."""
        self._take = take
        self.every = every
        self.last: BackupRecord | None = None
        self.last_error: str | None = None
        self.taken = 0
        self.failures = 0
        self._scheduler = Scheduler("backup", self._run, every_period(every), clock)

    def _run(self, at: datetime) -> None:
        try:
            self.last = self._take(at)
        except LongmemError as exc:
            self.failures += 1
            self.last_error = f"{type(exc).__name__}: {exc}"
            raise
        self.taken += 1
        self.last_error = None

    def start(self) -> datetime | None:
        """Start the schedule; the first backup time (None: the schedule is off)."""
        return self._scheduler.start()

    def stop(self) -> None:
        """Stop the schedule (a backup in progress finishes first)."""
        self._scheduler.stop()

    def status(self) -> dict[str, Any]:
        """The period, the next time, how many backups were taken and failed, the last record and
        the last error (None after a success)."""
        due = self._scheduler.next_run if self._scheduler.is_running() else None
        return {
            "every_s": self.every.total_seconds(),
            "next": due.isoformat() if due else None,
            "taken": self.taken,
            "failures": self.failures,
            "last": self.last.model_dump(mode="json") if self.last else None,
            "last_error": self.last_error,
        }


def restore_backup(
    uri: str, data_dir: Path, limits: LimitSettings, shards: Collection[int] | None = None
) -> BackupRecord:
    """Rebuild ``data_dir`` from the backup at ``uri``, or from the newest complete one under it,
    every file checked against the backup's listing: the whole data dir (new or empty), or only
    ``shards`` (a node that held them died) beside the
    shards other nodes hold. A marker written first and removed last keeps a restore cut short
    from being opened; running the restore again clears what it wrote and starts over.

    Raises:
        ConfigError: no complete backup there, a shard it does not hold, or the data dir already
            holds what would be restored.
        StorageError: a file could not be read or written, or is not what the backup listed.
    """
    began = time.perf_counter()
    chosen, manifest = find_backup(uri)
    record = BackupRecord.model_validate({**manifest, "uri": redact_uri(chosen)})
    held = {copy.shard for copy in record.shards}
    wanted = held if shards is None else set(shards)
    if not wanted <= held:
        raise ConfigError(f"backup {record.uri} holds shards {sorted(held)}, not {sorted(wanted - held)}")
    owned = [shard_dir(data_dir, no) for no in sorted(wanted)]
    if not restore_marker(data_dir).exists():
        _check_free(data_dir, record, owned, whole=shards is None)
    begin_restore(data_dir, owned)
    for copy in record.shards:
        if copy.shard in wanted:
            directory = shard_dir(data_dir, copy.shard)
            download(join_uri(chosen, shard_part(copy.shard)), copy.files, directory)
            if PROFILE_FILE in copy.files:
                staged = directory / PROFILE_FILE
                _load_profiles(directory, _read_parquet(staged), copy.profile_entries, limits)
                staged.unlink()
    if record.profile_files:
        # A backup from before profiles lived in the shards: its one file, split by the routing.
        download(chosen, record.profile_files, restore_scratch(data_dir))
        table = _read_parquet(restore_scratch(data_dir) / PROFILE_FILE)
        routing = RoutingTable.from_json(record.routing) if record.routing else None
        routing = routing or RoutingTable.legacy(len(record.shards))
        owners = np.array([routing.shard_of(user) for user in table.column("user_id").to_pylist()])
        if shards is None and table.num_rows != record.profile_entries:
            listed = record.profile_entries
            raise StorageError(
                f"backup {record.uri} lists {listed} profile entries, its file {table.num_rows}"
            )
        for no in sorted(wanted):
            mine = table.filter(pa.array(owners == no, type=pa.bool_()))
            _load_profiles(shard_dir(data_dir, no), mine, mine.num_rows, limits)
    erased = erasures_since(parent_uri(chosen), record.created_at - CLOCK_SLACK)
    again: set[str] = set()
    # Opening a shard loads all of it: only done when someone was erased since the backup.
    for no in sorted(wanted) if erased else []:
        shard = FactShard(shard_dir(data_dir, no), record.dim, limits)
        try:
            again |= _erase_again(shard, erased)
        finally:
            shard.close()
    if record.routing is not None and shards is None:
        write_routing(data_dir, RoutingTable.from_json(record.routing))
    finish_restore(data_dir, len(record.shards), record.dim, record.embedder)
    return record.model_copy(
        update={"seconds": round(time.perf_counter() - began, 3), "erased_again": len(again)}
    )


def _read_parquet(path: Path) -> pa.Table:
    """The profile entries a backup's file holds.

    Raises:
        StorageError: the file cannot be read (its bytes matched the listing: a bad copy at the
            source).
    """
    try:
        return pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"cannot read the backup's profile file {path.name}: {exc}") from None


def _load_profiles(directory: Path, table: pa.Table, expected: int, limits: LimitSettings) -> None:
    """Load a backup's profile entries into the new profile file of the shard in ``directory``.

    Raises:
        StorageError: not loaded, or not as many entries as the backup lists.
    """
    profiles = DuckDBProfileStore(directory / PROFILE_DB, limits)
    try:
        loaded = profiles.restore(table)
    finally:
        profiles.close()
    if loaded != expected:
        raise StorageError(
            f"the backup lists {expected} profile entries of {directory.name}, its file {loaded}"
        )


def _erase_again(store: FactShard, erased: set[str]) -> set[str]:
    """Erase from ``store`` the users whose :func:`erasure_key` is in ``erased``; who they were."""
    found = {user for user in store.user_ids() if erasure_key(user) in erased}
    for user in sorted(found):
        store.erase_user(user)
    return found


def _check_free(data_dir: Path, record: BackupRecord, owned: list[Path], whole: bool) -> None:
    """Refuse a restore over data: a whole one needs a new or empty data dir, a partial one a data
    dir of the same settings without the files it would write."""
    found = read_manifest(data_dir)
    if whole:
        if found is not None:
            raise ConfigError(f"{data_dir} already holds longmem data: restore into a new or empty data dir")
        leftovers = list(data_dir.iterdir()) if data_dir.exists() else []
        if leftovers:
            raise ConfigError(
                f"{data_dir} is not empty ({leftovers[0].name}, ...): restore into a new or empty data dir"
            )
        return
    here = read_routing(data_dir, int(found["shards"])).shards if found is not None else None
    if found is not None and (here, found.get("embedder")) != (len(record.shards), record.embedder):
        raise ConfigError(f"{data_dir} holds another store (its manifest: {found}): restore elsewhere")
    present = [path.name for path in owned if path.exists()]
    if present:
        raise ConfigError(f"{data_dir} already holds {present[0]}: remove it, or restore elsewhere")
