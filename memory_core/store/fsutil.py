"""File operations that are durable once they return."""

from __future__ import annotations

import fcntl
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from memory_core.errors import StorageError


def fsync_dir(path: Path) -> None:
    """Make renames and creations inside ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


TEMP_SUFFIX = ".tmp"


def write_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """Write a file through a temp file, fsync it, rename it into place and fsync the directory.

    Readers see either the old file or the complete new one, never a torn one. The temp file
    is named for this process and thread, so two writers of one path never share it.

    Raises:
        StorageError: any OS error; the temp file is removed and ``path`` is untouched.
    """
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}{TEMP_SUFFIX}")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"cannot write {path}: {exc}") from exc


def lock_directory(directory: Path) -> BinaryIO:
    """Take an exclusive lock on ``directory`` for this process (released when the returned
    file is closed, or by the OS when the process dies).

    Raises:
        StorageError: another process (or another open of this one) holds the lock.
    """
    handle = open(directory / "LOCK", "ab")
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        handle.close()
        raise StorageError(
            f"{directory} is in use by another process (one process owns a data dir: stop the server "
            f"or the other command first): {exc}"
        ) from exc
    return handle
