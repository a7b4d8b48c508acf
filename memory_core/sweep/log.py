"""The sweep log: an append-only JSON Lines file of sweep run records, newest last.

Each append is fsynced before it returns. A crash mid-append leaves at most a torn last line;
readers ignore it and the next append cuts it off, so it never ends up between good lines.
One process writes a data dir's log (the one that owns the shards); others may read it.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from memory_core.errors import CorruptionError, StorageError
from memory_core.store.fsutil import fsync_dir, write_atomically
from memory_core.sweep.record import SweepRecord

LOG_NAME = "sweeps.jsonl"


def _parse(data: bytes, path: Path) -> tuple[list[SweepRecord], int]:
    """The records in ``data`` and the byte length of the part that holds them.

    A damaged line with nothing after it is a torn append and is left out.

    Raises:
        CorruptionError: a damaged line has good lines after it.
    """
    records: list[SweepRecord] = []
    good_end = 0
    for line in data.splitlines(keepends=True):
        end = good_end + len(line)
        if line.strip():
            try:
                records.append(SweepRecord.model_validate_json(line))
            except ValueError as exc:
                if data[end:].strip():
                    reason = f"sweep record at byte {good_end} is damaged: {exc}"
                    raise CorruptionError(str(path), reason) from exc
                break
        good_end = end
    return records, good_end


class SweepLog:
    """Run records of the sweeps of one data dir, at most ``keep`` of them."""

    def __init__(self, directory: Path, keep: int = 1000) -> None:
        """Use ``directory/sweeps.jsonl``; nothing is created until the first append.

        Args:
            directory: where the log lives (created on first append).
            keep: most records kept; older ones are dropped by an atomic rewrite.
        """
        self.path = directory / LOG_NAME
        self._keep = keep
        self._lock = threading.Lock()
        self._count: int | None = None

    @classmethod
    def for_data_dir(cls, data_dir: Path, keep: int = 1000) -> SweepLog:
        """The sweep log of a data dir (``data_dir/sweeps/sweeps.jsonl``)."""
        return cls(data_dir / "sweeps", keep)

    def _read(self) -> bytes:
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise StorageError(f"cannot read {self.path}: {exc}") from exc

    def _prepare(self) -> int:
        """Create the directory and cut a torn tail (once per writer); returns the record count."""
        directory = self.path.parent
        if not directory.exists():
            directory.mkdir(parents=True, exist_ok=True)
            fsync_dir(directory.parent)
        data = self._read()
        records, good_end = _parse(data, self.path)
        unterminated = good_end > 0 and not data[:good_end].endswith(b"\n")
        if good_end < len(data) or unterminated:
            # Appending after a torn tail would glue the next record to it.
            with open(self.path, "r+b") as handle:
                handle.truncate(good_end)
                handle.seek(good_end)
                if unterminated:
                    handle.write(b"\n")
                handle.flush()
                os.fsync(handle.fileno())
        return len(records)

    def append(self, record: SweepRecord) -> None:
        """Add ``record`` durably (fsynced), then drop the oldest records beyond ``keep``.

        Raises:
            StorageError: the record could not be written.
            CorruptionError: the existing log is damaged before its last line.
        """
        line = record.model_dump_json().encode("utf-8") + b"\n"
        with self._lock:
            try:
                if self._count is None:
                    self._count = self._prepare()
                created = not self.path.exists()
                with open(self.path, "ab") as handle:
                    handle.write(line)
                    handle.flush()
                    os.fsync(handle.fileno())
                if created:
                    fsync_dir(self.path.parent)
            except OSError as exc:
                raise StorageError(f"cannot append to {self.path}: {exc}") from exc
            self._count += 1
            if self._count > self._keep:
                self._compact()

    def _compact(self) -> None:
        records, _ = _parse(self._read(), self.path)
        kept = records[-self._keep :]
        body = b"".join(r.model_dump_json().encode("utf-8") + b"\n" for r in kept)
        write_atomically(self.path, lambda handle: handle.write(body))
        self._count = len(kept)

    def list(self, limit: int | None = None, tenant: str | None = None) -> list[SweepRecord]:
        """The kept records, newest first.

        Args:
            limit: at most this many (all kept records by default).
            tenant: only the sweeps of this one tenant (every record when None).

        Returns:
            The records; a torn last line is left out.

        Raises:
            StorageError: the log cannot be read.
            CorruptionError: a line other than the last is damaged.
        """
        records, _ = _parse(self._read(), self.path)
        newest_first = [r for r in reversed(records) if tenant is None or r.tenant == tenant]
        return newest_first if limit is None else newest_first[:limit]
