"""Snapshots of a fact shard: Arrow IPC files with a CRC sidecar.

``snap-N.arrow`` holds every live fact after all log segments below N were applied.
``snap-N.crc`` is written after it; a snapshot without a matching sidecar is incomplete or
damaged and is skipped in favour of an older one (whose log segments are still kept).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from memory_core.store.fsutil import write_atomically

_CHUNK = 1 << 22


@dataclass(frozen=True)
class Snapshot:
    """A snapshot read back from disk."""

    seq: int
    table: pa.Table


def snapshot_path(directory: Path, seq: int) -> Path:
    """Path of snapshot ``seq`` in ``directory``."""
    return directory / f"snap-{seq:08d}.arrow"


def snapshot_files(directory: Path, seq: int) -> list[Path]:
    """The files of snapshot ``seq``: the table and its checksum sidecar."""
    path = snapshot_path(directory, seq)
    return [path, _crc_path(path)]


def _crc_path(path: Path) -> Path:
    return path.with_suffix(".crc")


def _file_crc(path: Path) -> int:
    crc = 0
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            crc = zlib.crc32(chunk, crc)
    return crc


def list_snapshots(directory: Path) -> list[int]:
    """Sequence numbers of snapshot files in ``directory``, newest first."""
    return sorted((int(p.name[5:13]) for p in directory.glob("snap-*.arrow")), reverse=True)


def write_snapshot(directory: Path, seq: int, table: pa.Table) -> Path:
    """Write ``table`` as snapshot ``seq`` durably (temp file, fsync, rename, then sidecar).

    Raises:
        StorageError: the snapshot could not be written; older snapshots are untouched.
    """
    path = snapshot_path(directory, seq)

    def write_table(handle) -> None:  # type: ignore[no-untyped-def]
        with pa.ipc.new_file(handle, table.schema) as writer:
            writer.write_table(table, max_chunksize=65_536)

    write_atomically(path, write_table)
    crc = _file_crc(path)
    write_atomically(_crc_path(path), lambda h: h.write(f"{crc:08x}\n".encode()))
    return path


def read_snapshot(directory: Path, seq: int) -> Snapshot | None:
    """Read snapshot ``seq``; None if it is incomplete or its bytes do not match the sidecar."""
    path = snapshot_path(directory, seq)
    try:
        expected = int(_crc_path(path).read_text().strip(), 16)
        if _file_crc(path) != expected:
            return None
        with pa.memory_map(str(path)) as source:
            table = pa.ipc.open_file(source).read_all()
    except (OSError, ValueError, pa.ArrowException):
        return None
    return Snapshot(seq, table)


def remove_snapshot(directory: Path, seq: int) -> None:
    """Delete snapshot ``seq`` and its sidecar."""
    path = snapshot_path(directory, seq)
    _crc_path(path).unlink(missing_ok=True)
    path.unlink(missing_ok=True)
