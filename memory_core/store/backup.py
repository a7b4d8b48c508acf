"""Backups of a data dir to a pyarrow filesystem URI (a local or mounted path; ``s3://…`` the same
way), and restores from them.

Beside the backups, ``<uri>/erasures/`` records every user erased since (a digest of the id,
never the id): a restore erases them again, so an erasure is not undone by restoring a backup
taken before it.

A backup is a directory ``<uri>/<id>/``: for each shard, its newest snapshot, the (empty) log
segment that follows it, its turn inbox (pending turns, working windows, kept answers) and its
users' profile entries as Parquet; and ``backup.json``, written last, which lists every file with its
size and CRC-32. A backup without ``backup.json`` was cut short and is never restored; a file
that does not match its listing fails the restore. Each shard is staged by the process that owns
it (the shard actor on its node) with its writes held — hard links to its snapshot, a copy of its
inbox — and uploaded after the writes go on, so the copy is one point in time for that shard.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.fs as pafs

from memory_core.errors import ConfigError, StorageError
from memory_core.store.fsutil import fsync_dir, write_atomically

BACKUP_MANIFEST = "backup.json"
ERASURES = "erasures"  # beside the backups: who was erased when (a digest of the id, not the id)
PROFILE_FILE = "profile.parquet"
_FORMAT = 2
_CHUNK = 1 << 20
# Credentials a URI may carry: user:password@ and the S3/GCS key parameters pyarrow reads.
_USERINFO = re.compile(r"(://)[^/@?#]*@")
_SECRET_PARAMS = re.compile(r"([?&](?:access_key|secret_key|session_token)=)[^&#]*", re.IGNORECASE)

FileSums = dict[str, dict[str, int]]
"""Each file of a backup part, by its path relative to the part: its ``bytes`` and ``crc32``."""


def backup_id(at: datetime) -> str:
    """A backup's directory name: its UTC time, so names sort by age."""
    return at.astimezone(UTC).strftime("%Y%m%dT%H%M%S%fZ")


def shard_part(shard_no: int) -> str:
    """Directory of shard ``shard_no`` inside a backup."""
    return f"shard-{shard_no:04d}"


def join_uri(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path; a query (``s3://b/p?region=…``) stays last."""
    base, mark, query = uri.partition("?") if "://" in uri else (uri, "", "")
    return "/".join([base.rstrip("/"), *parts]) + mark + query


def parent_uri(uri: str) -> str:
    """The location ``uri`` is in (a query stays last, as in :func:`join_uri`)."""
    base, mark, query = uri.partition("?") if "://" in uri else (uri, "", "")
    return base.rstrip("/").rsplit("/", 1)[0] + mark + query


def redact_uri(uri: str) -> str:
    """``uri`` without the credentials it may carry, for messages and records."""
    return _SECRET_PARAMS.sub(r"\1***", _USERINFO.sub(r"\1***@", uri))


def absolute_uri(uri: str) -> str:
    """``uri`` with a local path made absolute, so every process reads it the same way."""
    return uri if "://" in uri else str(Path(uri).expanduser().resolve())


def open_uri(uri: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and path a URI names; a plain path is a local one.

    Raises:
        ConfigError: pyarrow cannot open the URI (unknown scheme, bad credentials).
    """
    if "://" not in uri:
        return pafs.LocalFileSystem(), absolute_uri(uri)
    try:
        fs, path = pafs.FileSystem.from_uri(uri)
    except (pa.ArrowException, ValueError) as exc:
        raise ConfigError(
            f"cannot open backup location {redact_uri(uri)!r}: {redact_uri(str(exc))}"
        ) from None
    return fs, path.rstrip("/")


def _write(fs: pafs.FileSystem, path: str, chunks: Iterator[bytes]) -> dict[str, int]:
    """Write ``chunks`` to ``path``; on a local disk durably (fsync of the file and its
    directory), as an object store is once its upload returns. Its size and CRC-32."""
    size, crc = 0, 0
    if isinstance(fs, pafs.LocalFileSystem):
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        with open(path, "wb") as out:
            for chunk in chunks:
                out.write(chunk)
                size, crc = size + len(chunk), zlib.crc32(chunk, crc)
            out.flush()
            os.fsync(out.fileno())
        fsync_dir(Path(path).parent)
    else:
        fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
        with fs.open_output_stream(path) as stream:
            for chunk in chunks:
                stream.write(chunk)
                size, crc = size + len(chunk), zlib.crc32(chunk, crc)
    return {"bytes": size, "crc32": crc}


def _chunks(handle: BinaryIO) -> Iterator[bytes]:
    while chunk := handle.read(_CHUNK):
        yield chunk


def upload(directory: Path, uri: str) -> FileSums:
    """Copy every file under ``directory`` to ``uri`` (kept relative); what was written.

    Raises:
        StorageError: a file could not be read or written.
    """
    fs, base = open_uri(uri)
    sums: FileSums = {}
    try:
        for path in sorted(p for p in directory.rglob("*") if p.is_file()):
            name = path.relative_to(directory).as_posix()
            with open(path, "rb") as source:
                sums[name] = _write(fs, f"{base}/{name}", _chunks(source))
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"backup to {redact_uri(uri)} failed: {exc}") from None
    return sums


def upload_bytes(data: bytes, uri: str, name: str) -> FileSums:
    """Write ``data`` as ``name`` under ``uri``; what was written.

    Raises:
        StorageError: the write failed.
    """
    fs, base = open_uri(uri)
    try:
        return {name: _write(fs, f"{base}/{name}", iter([data]))}
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"backup to {redact_uri(uri)} failed: {exc}") from None


def download(uri: str, sums: FileSums, directory: Path) -> int:
    """Copy the files ``sums`` lists from ``uri`` into ``directory`` durably, each checked
    against its size and CRC-32; bytes copied.

    Raises:
        StorageError: a file is missing, unreadable or not what the backup listed.
    """
    fs, base = open_uri(uri)
    copied = 0
    try:
        for name, want in sorted(sums.items()):
            target = directory / name
            target.parent.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(f"{base}/{name}") as source:
                got = _write(pafs.LocalFileSystem(), str(target), _chunks(source))
            if got != want:
                raise StorageError(
                    f"backup file {redact_uri(uri)}/{name} is damaged: {got} where the backup lists {want}"
                )
            copied += got["bytes"]
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"restore from {redact_uri(uri)} failed: {exc}") from None
    return copied


def check_visible(uri: str, sums: FileSums) -> None:
    """Check that the files ``sums`` lists are under ``uri``, with their sizes, as this process
    sees it: parts written by processes on other nodes must be where the manifest is.

    Raises:
        StorageError: a file is missing or of another size here.
    """
    fs, base = open_uri(uri)
    try:
        for name, want in sums.items():
            info = fs.get_file_info(f"{base}/{name}")
            if info.type != pafs.FileType.File or info.size != want["bytes"]:
                raise StorageError(
                    f"backup file {redact_uri(uri)}/{name}, written on a shard's node, is not there "
                    "as seen from this node: the backup location must be one that every node "
                    "reaches (a shared mount or an object store)"
                )
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"cannot check backup {redact_uri(uri)}: {exc}") from None


def write_manifest(uri: str, record: dict[str, Any]) -> None:
    """Write ``backup.json`` durably: the backup is complete from here on."""
    fs, base = open_uri(uri)
    body = json.dumps({"format": _FORMAT, **record}, indent=2).encode()
    try:
        if isinstance(fs, pafs.LocalFileSystem):
            write_atomically(Path(base) / BACKUP_MANIFEST, lambda handle: handle.write(body))
        else:
            with fs.open_output_stream(f"{base}/{BACKUP_MANIFEST}") as out:
                out.write(body)
    except (OSError, pa.ArrowException) as exc:
        raise StorageError(f"backup to {redact_uri(uri)} failed: {exc}") from None


def _read_manifest(fs: pafs.FileSystem, base: str) -> dict[str, Any] | None:
    """The manifest of the backup at ``base``, or None where there is none or it is unreadable."""
    try:
        with fs.open_input_stream(f"{base}/{BACKUP_MANIFEST}") as handle:
            found = json.loads(handle.read())
    except (OSError, pa.ArrowException, ValueError):
        return None
    return found if isinstance(found, dict) else None


def find_backup(uri: str) -> tuple[str, dict[str, Any]]:
    """The backup at ``uri``, or the newest complete one under it: (its URI, its manifest).

    Raises:
        ConfigError: no complete backup there, or one in a format this version cannot read.
        StorageError: the location cannot be listed.
    """
    fs, base = open_uri(uri)
    manifest = _read_manifest(fs, base)
    chosen = uri
    if manifest is None:
        try:
            children = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        except (OSError, pa.ArrowException) as exc:
            raise StorageError(f"cannot list backups at {redact_uri(uri)}: {exc}") from None
        for child in sorted(children, key=lambda c: c.base_name, reverse=True):
            if child.type == pafs.FileType.Directory:
                manifest = _read_manifest(fs, child.path)
                if manifest is not None:
                    chosen = join_uri(uri, child.base_name)
                    break
    if manifest is None:
        raise ConfigError(f"no complete backup (with a readable {BACKUP_MANIFEST}) at {redact_uri(uri)}")
    if manifest.get("format") != _FORMAT:
        raise ConfigError(
            f"backup {redact_uri(chosen)} has format {manifest.get('format')!r}; this longmem reads {_FORMAT}"
        )
    return chosen, manifest


def erasure_key(user_id: str) -> str:
    """What an erasure record keeps of a user id: a BLAKE2b digest of it, not the id."""
    return hashlib.blake2b(user_id.encode("utf-8"), digest_size=16, person=b"longmem-erased").hexdigest()


def record_erasure(uri: str, user_id: str, at: datetime) -> None:
    """Write durably, beside the backups under ``uri``, that ``user_id`` was erased at ``at``.

    Raises:
        ConfigError: the URI cannot be opened.
        StorageError: the record was not written.
    """
    key = erasure_key(user_id)
    body = json.dumps({"user": key, "at": at.astimezone(UTC).isoformat()}).encode()
    upload_bytes(body, join_uri(absolute_uri(uri), ERASURES), f"{backup_id(at)}-{key[:16]}.json")


def erasures_since(uri: str, since: datetime) -> set[str]:
    """The keys (:func:`erasure_key`) of the users erased at or after ``since``, by the records
    beside the backups under ``uri``.

    Raises:
        StorageError: the records cannot be listed or one cannot be read.
    """
    fs, base = open_uri(join_uri(uri, ERASURES))
    keys: set[str] = set()
    try:
        for info in fs.get_file_info(pafs.FileSelector(base, allow_not_found=True)):
            if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
                continue
            with fs.open_input_stream(info.path) as handle:
                record = json.loads(handle.read())
            if datetime.fromisoformat(record["at"]) >= since:
                keys.add(record["user"])
    except (OSError, pa.ArrowException, ValueError, KeyError, TypeError) as exc:
        raise StorageError(f"cannot read the erasure records at {redact_uri(uri)}: {exc}") from None
    return keys
