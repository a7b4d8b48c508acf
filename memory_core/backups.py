"""Taking a backup of a service's stores, and rebuilding a data dir from one.

The layout is :mod:`memory_core.store.backup`'s. What a backup holds is what was acknowledged
when each shard was copied; what is lost when a disk dies is everything acknowledged after the
last backup (README, "Backups").
"""

from __future__ import annotations

import time
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel, Field

from memory_core.errors import ConfigError, StorageError
from memory_core.settings import LimitSettings
from memory_core.store.backup import backup_id, download, find_backup, shard_part, write_manifest
from memory_core.store.facts import FactStore, open_manifest, read_manifest, shard_dir
from memory_core.store.profile import DuckDBProfileStore, ProfileStore


class ShardCopy(BaseModel):
    """One shard as its backup holds it."""

    shard: int
    seq: int = Field(description="The shard's snapshot sequence number in the backup.")
    users: int
    facts: int
    bytes: int


class BackupRecord(BaseModel):
    """A backup taken (or found, for a restore)."""

    id: str
    uri: str = Field(description="Where it is: restore from this URI.")
    created_at: datetime
    shards: list[ShardCopy]
    profile_entries: int
    dim: int
    embedder: str
    seconds: float = Field(description="How long the backup (or the restore) took.")


def take_backup(
    facts: FactStore, profiles: ProfileStore, dim: int, embedder: str, uri: str, at: datetime
) -> BackupRecord:
    """Copy every shard, then the profile store, to a new directory under ``uri``; write its
    manifest last.

    Raises:
        ConfigError: the URI cannot be opened.
        StorageError: a copy failed; the directory has no manifest, so it is never restored.
    """
    began = time.perf_counter()
    ident = backup_id(at)
    target = f"{uri.rstrip('/')}/{ident}"
    shards = [ShardCopy(shard=no, **copy) for no, copy in enumerate(facts.backup(target))]
    entries = profiles.backup(target)
    record = BackupRecord(
        id=ident,
        uri=target,
        created_at=at,
        shards=shards,
        profile_entries=entries,
        dim=dim,
        embedder=embedder,
        seconds=round(time.perf_counter() - began, 3),
    )
    write_manifest(target, record.model_dump(mode="json"))
    return record


def restore_backup(uri: str, data_dir: Path, limits: LimitSettings) -> BackupRecord:
    """Rebuild ``data_dir`` (new or empty) from the backup at ``uri``, or from the newest complete
    one under it. The data dir's own manifest is written last: a restore cut short leaves a data
    dir no service opens, and running it again on an emptied dir finishes it.

    Raises:
        ConfigError: no complete backup there, or ``data_dir`` already holds data.
        StorageError: a file could not be read or written.
    """
    began = time.perf_counter()
    chosen, manifest = find_backup(uri)
    record = BackupRecord.model_validate({**manifest, "uri": chosen})
    if read_manifest(data_dir) is not None:
        raise ConfigError(f"{data_dir} already holds longmem data: restore into a new or empty data dir")
    leftovers = [p for p in data_dir.iterdir()] if data_dir.exists() else []
    if leftovers:
        raise ConfigError(
            f"{data_dir} is not empty ({leftovers[0].name}, ...): restore into a new or empty data dir"
        )
    for copy in record.shards:
        download(f"{chosen}/{shard_part(copy.shard)}", shard_dir(data_dir, copy.shard))
    profiles = DuckDBProfileStore(data_dir / "profile.duckdb", limits)
    try:
        loaded = profiles.restore(chosen)
    finally:
        profiles.close()
    if loaded != record.profile_entries:
        raise StorageError(
            f"backup {chosen} lists {record.profile_entries} profile entries, its file {loaded}"
        )
    open_manifest(data_dir, len(record.shards), record.dim, record.embedder)
    return record.model_copy(update={"seconds": round(time.perf_counter() - began, 3)})
