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
from memory_core.store.backup import (
    PROFILE_FILE,
    FileSums,
    absolute_uri,
    backup_id,
    check_visible,
    download,
    find_backup,
    join_uri,
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
from memory_core.store.profile import DuckDBProfileStore, ProfileStore


class ShardCopy(BaseModel):
    """One shard as its backup holds it."""

    shard: int
    seq: int = Field(description="The shard's snapshot sequence number in the backup.")
    users: int
    facts: int
    files: FileSums = Field(description="Each file of the shard's copy: its bytes and CRC-32.")


class BackupRecord(BaseModel):
    """A backup taken (or found, for a restore)."""

    id: str
    uri: str = Field(description="Where it is (credentials left out): restore from this URI.")
    created_at: datetime
    shards: list[ShardCopy]
    profile_entries: int
    profile_files: FileSums
    dim: int
    embedder: str
    seconds: float = Field(description="How long the backup (or the restore) took.")

    @property
    def bytes(self) -> int:
        """The size of every file of the backup."""
        parts = [copy.files for copy in self.shards] + [self.profile_files]
        return sum(entry["bytes"] for files in parts for entry in files.values())


def take_backup(
    facts: FactStore, profiles: ProfileStore, dim: int, embedder: str, uri: str, at: datetime
) -> BackupRecord:
    """Copy every shard, then the profile store, to a new directory under ``uri``; check that
    every file is there as this process sees it, then write the manifest.

    Raises:
        ConfigError: the URI cannot be opened.
        StorageError: a copy failed, or the location is not one every node reaches; the
            directory has no manifest, so it is never restored.
    """
    began = time.perf_counter()
    ident = backup_id(at)
    target = join_uri(absolute_uri(uri), ident)
    shards = [ShardCopy(shard=no, **copy) for no, copy in enumerate(facts.backup(target))]
    profile = profiles.backup(target)
    for copy in shards:
        check_visible(join_uri(target, shard_part(copy.shard)), copy.files)
    check_visible(target, profile["files"])
    record = BackupRecord(
        id=ident,
        uri=redact_uri(target),
        created_at=at,
        shards=shards,
        profile_entries=profile["entries"],
        profile_files=profile["files"],
        dim=dim,
        embedder=embedder,
        seconds=round(time.perf_counter() - began, 3),
    )
    write_manifest(target, record.model_dump(mode="json", exclude={"uri"}))
    return record


def restore_backup(uri: str, data_dir: Path, limits: LimitSettings) -> BackupRecord:
    """Rebuild ``data_dir`` (new or empty) from the backup at ``uri``, or from the newest complete
    one under it, every file checked against the backup's listing. A marker written first and
    removed last keeps a restore cut short from being opened as a data dir; running the restore
    again starts it over.

    Raises:
        ConfigError: no complete backup there, or ``data_dir`` already holds data.
        StorageError: a file could not be read or written, or is not what the backup listed.
    """
    began = time.perf_counter()
    chosen, manifest = find_backup(uri)
    record = BackupRecord.model_validate({**manifest, "uri": redact_uri(chosen)})
    if not restore_marker(data_dir).exists():
        if read_manifest(data_dir) is not None:
            raise ConfigError(f"{data_dir} already holds longmem data: restore into a new or empty data dir")
        leftovers = list(data_dir.iterdir()) if data_dir.exists() else []
        if leftovers:
            raise ConfigError(
                f"{data_dir} is not empty ({leftovers[0].name}, ...): restore into a new or empty data dir"
            )
    begin_restore(data_dir)
    for copy in record.shards:
        download(join_uri(chosen, shard_part(copy.shard)), copy.files, shard_dir(data_dir, copy.shard))
    download(chosen, record.profile_files, restore_scratch(data_dir))
    profiles = DuckDBProfileStore(data_dir / "profile.duckdb", limits)
    try:
        loaded = profiles.restore(restore_scratch(data_dir) / PROFILE_FILE)
    finally:
        profiles.close()
    if loaded != record.profile_entries:
        raise StorageError(
            f"backup {record.uri} lists {record.profile_entries} profile entries, its file {loaded}"
        )
    finish_restore(data_dir, len(record.shards), record.dim, record.embedder)
    return record.model_copy(update={"seconds": round(time.perf_counter() - began, 3)})
