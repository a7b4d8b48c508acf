"""A shard's inbox: conversation turns accepted for a later write, on disk before they are
acknowledged, until the write path has written them; and the answers given to write calls
with an idempotency key, for their repeats.

It is a log of its own beside the shard's fact log (``<shard>/inbox/wal-N.log``, the same record
format): a ``TURNS_ACCEPTED`` record holds a batch of turns with its sequence number, a
``TURNS_DONE`` record ends it, an ``ANSWER`` record keeps an answer. Whatever is accepted and
not done when a process dies is pending when the shard opens again. Rewriting the log keeps
only the pending batches and the answers still kept, in a new segment written whole before
the old ones go, so a crash in the middle loses nothing and revives nothing done. The log is
rewritten on every erase, and when it holds over twice the records that still matter.
"""

from __future__ import annotations

import json
import struct
import threading
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from memory_core.errors import CorruptionError
from memory_core.models import Role, Turn, as_utc
from memory_core.store import wal
from memory_core.store.fsutil import fsync_dir

_SEQ = struct.Struct("<Q")
_COMPACT_AFTER = 4096  # records in the log before it may be rewritten


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


def _encode(batch: PendingTurns) -> bytes:
    turns = [
        {
            "role": t.role.value,
            "content": t.content,
            "at": t.at.isoformat() if t.at else None,
            "turn_id": t.turn_id,
        }
        for t in batch.turns
    ]
    body = {"seq": batch.seq, "user": batch.user_id, "session": batch.session_id, "at": batch.at.isoformat()}
    return json.dumps({**body, "turns": turns}, ensure_ascii=False).encode("utf-8")


def _decode(payload: bytes) -> PendingTurns:
    raw = json.loads(payload)
    turns = tuple(
        Turn(
            role=Role(t["role"]),
            content=t["content"],
            at=datetime.fromisoformat(t["at"]) if t["at"] else None,
            turn_id=t["turn_id"],
        )
        for t in raw["turns"]
    )
    return PendingTurns(
        raw["seq"], raw["user"], raw["session"], turns, as_utc(datetime.fromisoformat(raw["at"]))
    )


def _encode_answer(answer: StoredAnswer) -> bytes:
    return json.dumps({**asdict(answer), "at": answer.at.isoformat()}, ensure_ascii=False).encode("utf-8")


def _decode_answer(payload: bytes) -> StoredAnswer:
    raw = json.loads(payload)
    return StoredAnswer(**{**raw, "at": as_utc(datetime.fromisoformat(raw["at"]))})


class TurnInbox:
    """The pending turn batches of one shard's users, and the answers kept for repeated calls."""

    def __init__(self, directory: Path) -> None:
        """Open (or create) the inbox and replay its log.

        Raises:
            CorruptionError: a damaged record that is not a torn tail.
            StorageError: the directory or log cannot be opened.
        """
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._pending: dict[int, PendingTurns] = {}
        self._answers: dict[tuple[str, str], StoredAnswer] = {}  # oldest first
        self._records = 0
        next_seq = 0
        seqs = wal.list_segments(directory)
        for _, records, _ in wal.iter_records(directory, seqs):
            for record in records:
                self._records += 1
                if record.op is wal.Op.TURNS_ACCEPTED:
                    batch = _decode(record.payload)
                    self._pending[batch.seq] = batch
                    next_seq = max(next_seq, batch.seq + 1)
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
            self._writer.append(wal.Op.TURNS_ACCEPTED, _encode(batch))
            self._next_seq += 1
            self._records += 1
            self._pending[batch.seq] = batch
            return batch.seq

    def done(self, seq: int) -> None:
        """Mark a batch written (durably); unknown or already-done numbers are ignored.

        Raises:
            StorageError: not written; the batch stays pending (a restart writes it again).
        """
        with self._lock:
            if seq not in self._pending:
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

    def erase_user(self, user_id: str) -> int:
        """Drop the user's pending batches and every byte of them on disk; returns how many went.

        Raises:
            StorageError: the log could not be rewritten; nothing changed.
        """
        with self._lock:
            count = sum(batch.user_id == user_id for batch in self._pending.values())
            self._rewrite(without=user_id)
            return count

    def _maybe_rewrite(self) -> None:
        # Most of a long log is batches done and answers forgotten: keep it within twice what lives.
        live = len(self._pending) + len(self._answers)
        if self._records >= _COMPACT_AFTER and self._records > 2 * live:
            self._rewrite(without=None)

    def _rewrite(self, without: str | None) -> None:
        keep = [b for _, b in sorted(self._pending.items()) if b.user_id != without]
        answers = {k: a for k, a in self._answers.items() if a.user_id != without}  # order kept
        old = wal.list_segments(self.directory)
        fresh = wal.WalWriter(self.directory, self._writer.seq + 1)
        try:
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
        self._records = len(keep) + len(answers)

    def close(self) -> None:
        """Close the log file."""
        with self._lock:
            self._writer.close()
