"""Backups of a data dir to a pyarrow filesystem URI (a local or mounted path; ``s3://…`` the same
way), and restores from them.

A backup is a directory ``<uri>/<id>/``: for each shard, its newest snapshot, the (empty) log
segment that follows it and its turn inbox (pending turns, working windows, kept answers); the
profile store as Parquet; and ``backup.json``, written last. A backup without ``backup.json``
was cut short and is never restored. Each shard is copied by the process that owns it (the
shard actor on its node), with its writes held for the copy, so the copy is one point in time
for that shard.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs

from memory_core.errors import ConfigError, StorageError
from memory_core.store.fsutil import fsync_dir

BACKUP_MANIFEST = "backup.json"
PROFILE_FILE = "profile.parquet"
_FORMAT = 1


def backup_id(at: datetime) -> str:
    """A backup's directory name: its UTC time, so names sort by age."""
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def shard_part(shard_no: int) -> str:
    """Directory of shard ``shard_no`` inside a backup."""
    return f"shard-{shard_no:04d}"


def open_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path a URI names; a plain path is a local one.

    Raises:
        ConfigError: pyarrow cannot open the URI (unknown scheme, bad credentials).
    """
    if "://" not in uri:
        return pafs.LocalFileSystem(), str(Path(uri).expanduser().resolve())
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, ValueError) as exc:
        raise ConfigError(f"cannot open backup location {uri!r}: {exc}") from None
    return fs, path.rstrip("/")


def upload(directory: Path, names: Iterable[str], uri: str) -> int:
    """Copy ``names`` of ``directory`` to ``uri``; bytes copied.

    Raises:
        StorageError: a file could not be read or written.
    """
    fs, base = open_uri(uri)
    copied = 0
    try:
        fs.create_dir(base, recursive=True)
        for name in names:
            with open(directory / name, "rb") as source, fs.open_output_stream(f"{base}/{name}") as target:
                shutil.copyfileobj(source, target, 1 << 20)
                copied += source.tell()
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"backup to {uri} failed: {exc}") from None
    return copied


def download(uri: str, directory: Path) -> int:
    """Copy every file under ``uri`` into ``directory`` (kept relative), durably; bytes copied.

    Raises:
        StorageError: the backup could not be read or a file not written.
    """
    fs, base = open_uri(uri)
    copied = 0
    try:
        found = fs.get_file_info(pafs.FileSelector(base, recursive=True))
        for info in sorted(found, key=lambda i: i.path):
            if info.type != pafs.FileType.File:
                continue
            target = directory / info.path[len(base) :].lstrip("/")
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(info.path) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
                out.flush()
                os.fsync(out.fileno())
                copied += out.tell()
            fsync_dir(target.parent)
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"restore from {uri} failed: {exc}") from None
    return copied


def write_manifest(uri: str, record: dict[str, Any]) -> None:
    """Write ``backup.json``: the backup is complete from here on."""
    fs, base = open_uri(uri)
    try:
        with fs.open_output_stream(f"{base}/{BACKUP_MANIFEST}") as out:
            out.write(json.dumps({"format": _FORMAT, **record}, indent=2).encode())
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"backup to {uri} failed: {exc}") from None


def find_backup(uri: str) -> tuple[str, dict[str, Any]]:
    """The backup at ``uri``, or the newest complete one under it: (its URI, its manifest).

    Raises:
        ConfigError: no complete backup there.
    """
    fs, base = open_uri(uri)
    try:
        if fs.get_file_info(f"{base}/{BACKUP_MANIFEST}").type == pafs.FileType.File:
            chosen = uri
        else:
            children = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
            complete = [
                c.base_name
                for c in children
                if c.type == pafs.FileType.Directory
                and fs.get_file_info(f"{c.path}/{BACKUP_MANIFEST}").type == pafs.FileType.File
            ]
            if not complete:
                raise ConfigError(f"no complete backup (with {BACKUP_MANIFEST}) at {uri}")
            chosen = f"{uri.rstrip('/')}/{max(complete)}"
        chosen_fs, chosen_base = open_uri(chosen)
        with chosen_fs.open_input_stream(f"{chosen_base}/{BACKUP_MANIFEST}") as handle:
            manifest = json.loads(handle.read())
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"cannot read backups at {uri}: {exc}") from None
    if manifest.get("format") != _FORMAT:
        raise ConfigError(
            f"backup {chosen} has format {manifest.get('format')!r}; this longmem reads {_FORMAT}"
        )
    return chosen, manifest
