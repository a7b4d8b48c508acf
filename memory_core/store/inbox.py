"""A shard's inbox: conversation turns accepted for a later write, on disk before they are
acknowledged, until the write path has written them; the working window of each session (its
last turns, whichever ingress replica received them); and the answers given to write calls
with an idempotency key, for their repeats.

It is a log of its own beside the shard's fact log (``<shard>/inbox/wal-N.log``, the same record
format): a ``TURNS_ACCEPTED`` record holds a batch of turns with its sequence number (its turns
join their session's window too), a ``TURNS_DONE`` record ends it, a ``WINDOW`` record holds
turns that only join a window, an ``ANSWER`` record keeps an answer. Whatever is accepted and
not done when a process dies is pending when the shard opens again. Rewriting the log keeps
only the windows, the pending batches and the answers still kept, in a new segment written
whole before the old ones go, so a crash in the middle loses nothing and revives nothing done.
The log is rewritten on every erase, and when it holds over twice the records that still matter.
"""

from __future__ import annotations

import json
import shutil
import struct
import threading
from collections import OrderedDict, deque
from collections.abc import Collection
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memory_core.errors import CorruptionError, StorageError
from memory_core.models import Role, Turn, as_utc
from memory_core.store import wal
from memory_core.store.fsutil import fsync_dir

_SEQ = struct.Struct("<Q")
_COMPACT_AFTER = 4096  # records in the log before it may be rewritten
_MAX_SESSIONS = 10_000  # windows kept per shard; the least recently used session goes first


@dataclass(frozen=True)
class StoredAnswer:
    """The answer a write call with an idempotency key got, for a repeat of that call."""

    user_id: str
    key: str
    fingerprint: str  # of the request: the same key with another request is refused
    status: int
    body: str
    at: datetime


@dataclass(frozen=True)
class PendingTurns:
    """A batch of one user's turns accepted and not written yet."""

    seq: int  # order of acceptance in this shard
    user_id: str
    session_id: str
    turns: tuple[Turn, ...]
    at: datetime  # when they were received


@dataclass(frozen=True)
class InboxCopy:
    """What an inbox holds of some users, as another shard's inbox takes it."""

    windows: tuple[tuple[str, str, tuple[Turn, ...]], ...]  # (user, session, turns no batch holds)
    pending: tuple[PendingTurns, ...]  # in the order they were accepted
    answers: tuple[StoredAnswer, ...]  # oldest first


@dataclass(frozen=True)
class InboxErasure:
    """What erasing a user took from a shard's inbox."""

    batches: int  # accepted turn batches not written yet
    window_turns: int  # turns of the user's working windows


def _encode_turns(user_id: str, session_id: str, turns: tuple[Turn, ...], **more: object) -> bytes:
    listed = [
        {
            "role": t.role.value,
            "content": t.content,
            "at": t.at.isoformat() if t.at else None,
            "turn_id": t.turn_id,
        }
        for t in turns
    ]
    body = {**more, "user": user_id, "session": session_id, "turns": listed}
    return json.dumps(body, ensure_ascii=False).encode("utf-8")


def _decode_turns(raw: dict[str, Any]) -> tuple[Turn, ...]:
    return tuple(
        Turn(
            role=Role(t["role"]),
            content=t["content"],
            at=datetime.fromisoformat(t["at"]) if t["at"] else None,
            turn_id=t["turn_id"],
        )
        for t in raw["turns"]
    )


def _encode(batch: PendingTurns) -> bytes:
    return _encode_turns(batch.user_id, batch.session_id, batch.turns, seq=batch.seq, at=batch.at.isoformat())


def _decode(payload: bytes) -> PendingTurns:
    raw = json.loads(payload)
    return PendingTurns(
        raw["seq"], raw["user"], raw["session"], _decode_turns(raw), as_utc(datetime.fromisoformat(raw["at"]))
    )


def _encode_answer(answer: StoredAnswer) -> bytes:
    return json.dumps({**asdict(answer), "at": answer.at.isoformat()}, ensure_ascii=False).encode("utf-8")


def _decode_answer(payload: bytes) -> StoredAnswer:
    raw = json.loads(payload)
    return StoredAnswer(**{**raw, "at": as_utc(datetime.fromisoformat(raw["at"]))})


def _unbatched(
    windows: OrderedDict[tuple[str, str], deque[Turn]], batches: list[PendingTurns]
) -> list[tuple[tuple[str, str], tuple[Turn, ...]]]:
    """Each window's turns that none of its session's pending ``batches`` holds: those turns join
    the window again when the batch is replayed, after the others (a user's writes run in order:
    they came last)."""
    pending = {(b.user_id, b.session_id, id(turn)) for b in batches for turn in b.turns}
    return [
        (key, tuple(t for t in window if (*key, id(t)) not in pending)) for key, window in windows.items()
    ]


class TurnInbox:
    """The pending turn batches of one shard's users, their sessions' working windows, and the
    answers kept for repeated calls."""

    def __init__(self, directory: Path, window_turns: int) -> None:
        """Open (or create) the inbox and replay its log; each session's window keeps its last
        ``window_turns`` turns.

        Raises:
            CorruptionError: a damaged record that is not a torn tail.
            StorageError: the directory or log cannot be opened.
        """
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pending: dict[int, PendingTurns] = {}
        self._answers: dict[tuple[str, str], StoredAnswer] = {}  # oldest first
        self._windows: OrderedDict[tuple[str, str], deque[Turn]] = OrderedDict()  # least recent first
        self._window_turns = window_turns
        self._records = 0
        next_seq = 0
        seqs = wal.list_segments(directory)
        for _, records, _ in wal.iter_records(directory, seqs):
            for record in records:
                self._records += 1
                if record.op is wal.Op.TURNS_ACCEPTED:
                    batch = _decode(record.payload)
                    self._pending[batch.seq] = batch
                    self._join_window(batch.user_id, batch.session_id, batch.turns)
                    next_seq = max(next_seq, batch.seq + 1)
                elif record.op is wal.Op.WINDOW:
                    raw = json.loads(record.payload)
                    self._join_window(raw["user"], raw["session"], _decode_turns(raw))
                elif record.op is wal.Op.TURNS_DONE:
                    [seq] = _SEQ.unpack(record.payload)
                    self._pending.pop(seq, None)
                    next_seq = max(next_seq, seq + 1)
                elif record.op is wal.Op.ANSWER:
                    answer = _decode_answer(record.payload)
                    self._answers.pop((answer.user_id, answer.key), None)
                    self._answers[(answer.user_id, answer.key)] = answer
                else:
                    raise CorruptionError(str(directory), f"record {record.op.name} in a turn inbox")
        self._next_seq = next_seq
        self._writer = wal.WalWriter(directory, seqs[-1] if seqs else 0)

    def accept(self, user_id: str, session_id: str, turns: tuple[Turn, ...], at: datetime) -> int:
        """Append a batch durably (fsynced when this returns); returns its sequence number.

        Raises:
            StorageError: not written; nothing was accepted.
        """
        with self._lock:
            batch = PendingTurns(self._next_seq, user_id, session_id, turns, as_utc(at))
            self._next_seq += 1
            self._accept(batch)
            return batch.seq

    def _accept(self, batch: PendingTurns) -> None:
        self._writer.append(wal.Op.TURNS_ACCEPTED, _encode(batch))
        self._records += 1
        self._pending[batch.seq] = batch
        self._join_window(batch.user_id, batch.session_id, batch.turns)

    def extend_window(self, user_id: str, session_id: str, turns: tuple[Turn, ...]) -> None:
        """Add turns to the end of a session's working window, durably, without a write.

        Raises:
            StorageError: not written; the window is as before.
        """
        with self._lock:
            self._writer.append(wal.Op.WINDOW, _encode_turns(user_id, session_id, turns))
            self._records += 1
            self._join_window(user_id, session_id, turns)
            self._maybe_rewrite()

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        """The session's last turns, oldest first (empty for a session never seen or evicted)."""
        with self._lock:
            return list(self._windows.get((user_id, session_id), ()))

    def _join_window(self, user_id: str, session_id: str, turns: tuple[Turn, ...]) -> None:
        key = (user_id, session_id)
        window = self._windows.pop(key, None) or deque(maxlen=self._window_turns)
        window.extend(turns)
        self._windows[key] = window
        while len(self._windows) > _MAX_SESSIONS:
            self._windows.popitem(last=False)

    def done(self, user_id: str, seq: int) -> None:
        """Mark one of ``user_id``'s batches written (durably); unknown or already-done numbers, and
        another user's, are ignored.

        Raises:
            StorageError: not written; the batch stays pending (a restart writes it again).
        """
        with self._lock:
            if seq not in self._pending or self._pending[seq].user_id != user_id:
                return
            self._writer.append(wal.Op.TURNS_DONE, _SEQ.pack(seq))
            self._records += 1
            del self._pending[seq]
            self._maybe_rewrite()

    def keep_answer(self, answer: StoredAnswer, forget_before: datetime) -> None:
        """Keep the answer to a call with an idempotency key, durably (a repeat gets it), and
        drop those kept from before ``forget_before`` (from disk at the next rewrite).

        Raises:
            StorageError: not written.
        """
        with self._lock:
            self._writer.append(wal.Op.ANSWER, _encode_answer(answer))
            self._records += 1
            self._answers.pop((answer.user_id, answer.key), None)
            self._answers[(answer.user_id, answer.key)] = answer
            while self._answers:  # oldest first
                oldest = next(iter(self._answers))
                if self._answers[oldest].at >= forget_before:
                    break
                del self._answers[oldest]
            self._maybe_rewrite()

    def answer(self, user_id: str, key: str, since: datetime) -> StoredAnswer | None:
        """The answer kept for ``user_id``'s call with ``key`` at ``since`` or later, if any."""
        with self._lock:
            found = self._answers.get((user_id, key))
        return found if found is not None and found.at >= since else None

    def pending(self) -> list[PendingTurns]:
        """Every pending batch, in the order it was accepted."""
        with self._lock:
            return [self._pending[seq] for seq in sorted(self._pending)]

    def user_ids(self) -> set[str]:
        """Every user with pending turns, a working window or a kept answer."""
        with self._lock:
            held = [b.user_id for b in self._pending.values()]
            return {*held, *(user for user, _ in self._windows), *(user for user, _ in self._answers)}

    def stage(self, target: Path) -> None:
        """Copy the inbox's log into ``target`` as it stands, with its writes held (a backup
        uploads the copy afterwards).

        Raises:
            StorageError: the copy failed.
        """
        with self._lock:
            try:
                target.mkdir(parents=True)
                for seq in wal.list_segments(self.directory):
                    source = wal.segment_path(self.directory, seq)
                    shutil.copyfile(source, target / source.name)
            except OSError as exc:
                raise StorageError(f"cannot stage inbox {self.directory} for a backup: {exc}") from exc

    def erase_user(self, user_id: str) -> InboxErasure:
        """Drop the user's pending batches and windows, and every byte of them on disk.

        Raises:
            StorageError: the log could not be rewritten; nothing changed.
        """
        with self._lock:
            erased = InboxErasure(
                batches=sum(batch.user_id == user_id for batch in self._pending.values()),
                window_turns=sum(len(w) for (user, _), w in self._windows.items() if user == user_id),
            )
            self._rewrite(without={user_id})
            return erased

    def export(self, users: Collection[str]) -> InboxCopy:
        """What the inbox holds of ``users`` (a reshard copies it to another shard)."""
        with self._lock:
            keep = [b for _, b in sorted(self._pending.items()) if b.user_id in users]
            held = OrderedDict((key, w) for key, w in self._windows.items() if key[0] in users)
            windows = [(user, session, turns) for (user, session), turns in _unbatched(held, keep)]
            answers = [a for a in self._answers.values() if a.user_id in users]
            return InboxCopy(tuple(windows), tuple(keep), tuple(answers))

    def take(self, copy: InboxCopy) -> None:
        """Add what another shard's inbox held of some users, durably: their windows, their
        pending batches (numbered here, in their order) and their kept answers.

        Raises:
            StorageError: not all of it was written (a reshard rolls the move back).
        """
        with self._lock:
            for user_id, session_id, turns in copy.windows:
                if turns:
                    self._writer.append(wal.Op.WINDOW, _encode_turns(user_id, session_id, turns))
                    self._records += 1
                    self._join_window(user_id, session_id, turns)
            for batch in copy.pending:
                # The number stays when it is free here: the writer holding the batch marks it
                # done by that number after the move.
                seq = batch.seq if batch.seq not in self._pending else self._next_seq
                self._next_seq = max(self._next_seq, seq + 1)
                self._accept(PendingTurns(seq, batch.user_id, batch.session_id, batch.turns, batch.at))
            for answer in copy.answers:
                self._writer.append(wal.Op.ANSWER, _encode_answer(answer))
                self._records += 1
                self._answers[(answer.user_id, answer.key)] = answer
            self._answers = dict(sorted(self._answers.items(), key=lambda kept: kept[1].at))

    def drop(self, users: Collection[str]) -> None:
        """Forget ``users``' batches, windows and answers, and every byte of them on disk.

        Raises:
            StorageError: the log could not be rewritten; nothing changed.
        """
        with self._lock:
            self._rewrite(without=users)

    def _maybe_rewrite(self) -> None:
        # Most of a long log is batches done, turns gone from windows and answers forgotten:
        # keep it within twice what lives.
        live = len(self._pending) + len(self._answers) + len(self._windows)
        if self._records >= _COMPACT_AFTER and self._records > 2 * live:
            self._rewrite(without=())

    def _rewrite(self, without: Collection[str]) -> None:
        keep = [b for _, b in sorted(self._pending.items()) if b.user_id not in without]
        answers = {k: a for k, a in self._answers.items() if a.user_id not in without}  # order kept
        windows = OrderedDict((k, w) for k, w in self._windows.items() if k[0] not in without)
        old = wal.list_segments(self.directory)
        fresh = wal.WalWriter(self.directory, self._writer.seq + 1)
        try:
            for (user_id, session_id), written in _unbatched(windows, keep):
                if written:
                    fresh.append(wal.Op.WINDOW, _encode_turns(user_id, session_id, written))
            for batch in keep:
                fresh.append(wal.Op.TURNS_ACCEPTED, _encode(batch))
            for answer in answers.values():
                fresh.append(wal.Op.ANSWER, _encode_answer(answer))
        except Exception:
            fresh.close()
            fresh.path.unlink(missing_ok=True)
            raise
        self._writer.close()
        self._writer = fresh
        for seq in old:
            wal.segment_path(self.directory, seq).unlink(missing_ok=True)
        fsync_dir(self.directory)
        self._pending = {b.seq: b for b in keep}
        self._answers = answers
        self._windows = windows
        self._records = len(keep) + len(answers) + len(windows)

    def close(self) -> None:
        """Close the log file."""
        with self._lock:
            self._writer.close()
