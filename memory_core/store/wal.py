"""Write-ahead log segments of a fact shard.

A segment is a sequence of records ``[length u32][crc32 u32][op u8][payload]``; the CRC
covers op and payload. :meth:`WalWriter.append` returns only after ``fsync``, so a record
that was acknowledged is whole on disk. A crash mid-append can leave one torn record at the
end of the newest segment: it was never acknowledged, so it is cut off and reported. Damage
anywhere else means acknowledged data may be lost, and opening fails with CorruptionError.
"""

from __future__ import annotations

import os
import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from enum import IntEnum
from pathlib import Path

from memory_core.errors import CorruptionError, StorageError
from memory_core.store.fsutil import fsync_dir

_HEADER = struct.Struct("<IIB")
_MAX_RECORD = 1 << 31


class Op(IntEnum):
    """Kinds of log record."""

    ADD = 1  # payload: Arrow IPC stream of facts + vectors
    DELETE = 2  # payload: int64 ids
    ERASE_USER = 3  # payload: UTF-8 user id (no longer written: erase compacts; old logs replay it)
    SUPERSEDE = 4  # payload: int64 pairs (old id, new id)
    TURNS_ACCEPTED = 5  # a turn inbox's (memory_core.store.inbox): a batch of turns, JSON
    TURNS_DONE = 6  # a turn inbox's: uint64 sequence number of a batch written
    ANSWER = 7  # a turn inbox's: the answer given to a write call with an Idempotency-Key, JSON
    WINDOW = 8  # a turn inbox's: turns joining a session's working window without a write, JSON
    SOURCES = 9  # payload: JSON {"id": fact id, "turns": [turn ids a repeat added]}


@dataclass(frozen=True)
class Record:
    """One decoded log record."""

    op: Op
    payload: bytes


@dataclass(frozen=True)
class TornTail:
    """An unacknowledged partial record that was cut off the end of a segment."""

    path: Path
    offset: int
    dropped_bytes: int


def segment_path(directory: Path, seq: int) -> Path:
    """Path of log segment ``seq`` in ``directory``."""
    return directory / f"wal-{seq:08d}.log"


def read_segment(path: Path, is_newest: bool) -> tuple[list[Record], TornTail | None]:
    """Read every record of a segment.

    Args:
        path: the segment file.
        is_newest: whether appends may have been cut short in this segment.

    Returns:
        The records, and the torn tail that was found (and truncated) if any.

    Raises:
        CorruptionError: a damaged record that is not a torn tail of the newest segment.
    """
    data = path.read_bytes()
    records: list[Record] = []
    pos = 0
    while pos < len(data):
        problem = _check_record(data, pos)
        if problem is None:
            length, _, op = _HEADER.unpack_from(data, pos)
            start = pos + _HEADER.size
            records.append(Record(Op(op), data[start : start + length]))
            pos = start + length
            continue
        reaches_end, reason = problem
        if is_newest and reaches_end and not _whole_record_after(data, pos):
            torn = TornTail(path, pos, len(data) - pos)
            _truncate(path, pos)
            return records, torn
        raise CorruptionError(str(path), f"{reason} at offset {pos} with data after it")
    return records, None


def _check_record(data: bytes, pos: int) -> tuple[bool, str] | None:
    """None if the record at ``pos`` is whole; else (does the damage reach EOF, why)."""
    if len(data) - pos < _HEADER.size:
        return True, "short header"
    length, crc, op = _HEADER.unpack_from(data, pos)
    end = pos + _HEADER.size + length
    if length > _MAX_RECORD or end > len(data):
        return True, "record runs past the end of the file"
    if zlib.crc32(data[pos + 8 : end]) != crc:
        # A torn append is the last thing in the file; zeros after it are unwritten blocks.
        return not any(data[end:]), "checksum mismatch"
    if op not in Op._value2member_map_:
        return not any(data[end:]), f"unknown op {op}"
    return None


def _whole_record_after(data: bytes, pos: int) -> bool:
    """Whether a whole, checksummed record starts anywhere after offset ``pos``.

    Acknowledged records are whole, so one behind the damage means the damage is not a torn
    append: e.g. a flipped length field that points past the end of the file.
    """
    for start in range(pos + 1, len(data) - _HEADER.size + 1):
        length, crc, op = _HEADER.unpack_from(data, start)
        end = start + _HEADER.size + length
        if op in Op._value2member_map_ and end <= len(data) and zlib.crc32(data[start + 8 : end]) == crc:
            return True
    return False


def _truncate(path: Path, size: int) -> None:
    with open(path, "r+b") as handle:
        handle.truncate(size)
        handle.flush()
        os.fsync(handle.fileno())


def list_segments(directory: Path) -> list[int]:
    """Sequence numbers of the log segments in ``directory``, ascending."""
    return sorted(int(p.name[4:12]) for p in directory.glob("wal-*.log"))


class WalWriter:
    """Appends records to one segment; every append is durable when it returns."""

    def __init__(self, directory: Path, seq: int) -> None:
        self.seq = seq
        self.path = segment_path(directory, seq)
        self._broken = False
        created = not self.path.exists()
        try:
            # Unbuffered: a buffer would keep the bytes of a failed write and flush them later.
            self._handle = open(self.path, "ab", buffering=0)
            self._size = self._handle.seek(0, os.SEEK_END)
            if created:
                fsync_dir(directory)
        except OSError as exc:
            raise StorageError(f"cannot open log {self.path}: {exc}") from exc

    def append(self, op: Op, payload: bytes) -> None:
        """Write one record and fsync it.

        Raises:
            StorageError: the write or fsync failed; the record is not written. If the log
                could not be put back as it was, every later append fails too, until reopen.
        """
        if self._broken:
            raise StorageError(f"log {self.path} is in an unknown state after a failed write")
        body = bytes([op]) + payload
        header = struct.pack("<II", len(payload), zlib.crc32(body))
        try:
            record = memoryview(header + body)
            while record:
                record = record[self._handle.write(record) :]
            os.fsync(self._handle.fileno())
        except OSError as exc:
            self._undo()
            raise StorageError(f"cannot append to {self.path}: {exc}") from exc
        self._size += len(header) + len(body)

    def writable(self) -> bool:
        """Whether appends can still succeed: the file is open, not broken, and on a writable disk."""
        if self._broken or self._handle.closed:
            return False
        return os.access(self.path, os.W_OK) and os.statvfs(self.path).f_bavail > 0

    def _undo(self) -> None:
        """Cut a failed append off, so that a replay never revives an unacknowledged record."""
        try:
            self._handle.truncate(self._size)
            os.fsync(self._handle.fileno())
        except OSError:
            self._broken = True

    def close(self) -> None:
        """Close the segment file."""
        self._handle.close()


def iter_records(directory: Path, seqs: list[int]) -> Iterator[tuple[int, list[Record], TornTail | None]]:
    """Read the given segments in order; only the last may have a torn tail."""
    for i, seq in enumerate(seqs):
        records, torn = read_segment(segment_path(directory, seq), is_newest=i == len(seqs) - 1)
        yield seq, records, torn
