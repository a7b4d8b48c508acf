"""Every error longmem raises on purpose derives from :class:`LongmemError`.

The tree::

    LongmemError
    ├── ValidationError          bad input; nothing was stored
    │   ├── InvalidUserIdError   user id empty, too long or with forbidden characters
    │   ├── InvalidTextError     text empty or over the length limit
    │   ├── InvalidVectorError   wrong dimension, NaN/inf, zero norm
    │   └── FutureCutoffError    a sweep cut-off after the server's clock
    ├── NotFoundError            a memory id the user does not own (or that does not exist)
    ├── ProfileFullError         a new profile entry would pass the per-user cap; nothing changed
    ├── WriteQueueFullError      too many writes wait already; this one was not queued (retry later)
    ├── ConfigError              settings that cannot work (e.g. shard count changed on a data dir)
    ├── LLMError                 the judge/extractor LLM failed; the turn is not written
    │   ├── LLMUnavailableError  the engine cannot be loaded or reached (a queued write waits for it)
    │   ├── LLMRejectedError     the LLM server refused the request itself (too long, invalid)
    │   └── LLMOutputError       output still invalid after one retry
    ├── SweepError               the expiry sweep did not do all it was asked to
    │   ├── SweepBusyError       a sweep is already running; this one was refused
    │   └── SweepIncompleteError some shards failed after retries; the others were swept
    ├── ReshardBusyError         a reshard is running already; this one was refused
    ├── RemoteError              a longmem server answered a client call with an error status
    ├── StaleRoutingError        the shard asked does not own the user (the caller's routing is old)
    └── StorageError             the disk refused; the operation was not acknowledged
        ├── CorruptionError      a log or snapshot is damaged in a way that could lose acked data
        └── SlotMovingError      the user's slot is moving to another shard: retry after the move

The HTTP ingress maps these to status codes; nothing below it knows about HTTP.
"""

from __future__ import annotations

from datetime import datetime


def rebuild(cls: type[LongmemError], message: str, state: dict[str, object]) -> LongmemError:
    """An error of class ``cls`` with ``message`` and fields ``state``, without calling its
    ``__init__`` (whose arguments differ per class): for unpickling, and for the SDK, which gets
    only a class name and a message from the server."""
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class LongmemError(Exception):
    """Root of every error longmem raises on purpose."""

    def __reduce__(self) -> tuple[object, ...]:
        # Subclasses take their fields, not the message, in __init__: rebuild from the message and
        # the fields so an error raised inside a Ray actor reaches the caller as itself.
        return (rebuild, (type(self), str(self), dict(self.__dict__)))


class ValidationError(LongmemError):
    """Input was rejected before anything was written."""


class InvalidUserIdError(ValidationError):
    """A user id is empty, too long, or contains forbidden characters."""

    def __init__(self, user_id: object, reason: str) -> None:
        self.user_id = user_id
        self.reason = reason
        super().__init__(f"invalid user id {user_id!r}: {reason}")


class InvalidTextError(ValidationError):
    """A memory text is empty or longer than the configured limit."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid text: {reason}")


class InvalidVectorError(ValidationError):
    """An embedding has the wrong dimension, non-finite values or zero norm."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(f"invalid vector: {reason}")


class FutureCutoffError(ValidationError):
    """A sweep was asked for a cut-off after the server's clock: it would delete facts that have
    not expired yet."""

    def __init__(self, cutoff: datetime, clock: datetime) -> None:
        self.cutoff = cutoff
        self.clock = clock
        super().__init__(
            f"sweep cut-off {cutoff.isoformat()} is after the server's clock {clock.isoformat()}: "
            "a sweep deletes only facts that have already expired"
        )


class NotFoundError(LongmemError):
    """An id is unknown to the user who asked (it may belong to nobody or to someone else)."""

    def __init__(self, user_id: str, ids: list[int] | list[str]) -> None:
        self.user_id = user_id
        self.ids = ids
        super().__init__(f"user {user_id!r} has nothing with ids {ids}")


class ProfileFullError(LongmemError):
    """A new profile entry would take a user's profile past its cap; nothing was changed."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        super().__init__(
            f"the profile already holds {cap} entries, the most allowed (limits.max_profile_entries): "
            "delete an entry, or replace one under its key, to make room"
        )


class WriteQueueFullError(LongmemError):
    """More writes wait than ``write.max_pending``: this one was refused, not queued."""

    def __init__(self, pending: int, retry_after_s: float) -> None:
        self.pending = pending
        self.retry_after_s = retry_after_s
        super().__init__(f"{pending} writes are waiting already: retry in {retry_after_s:g} s")


class ConfigError(LongmemError):
    """Settings that cannot work with the data or the machine."""


class LLMError(LongmemError):
    """The judge/extractor LLM failed; whatever depended on it was not written."""


class LLMUnavailableError(LLMError):
    """The engine cannot be loaded or reached. ``overloaded``: the server said it is busy or
    limited (429, 503, a gateway's 502/504, 408), which is never the request's own fault."""

    def __init__(self, message: str, overloaded: bool = False) -> None:
        self.overloaded = overloaded
        super().__init__(message)

    def __reduce__(self) -> tuple[type[LLMUnavailableError], tuple[str, bool]]:
        # Raised in the LLM deployment's replica, it reaches the writer pickled.
        return type(self), (str(self), self.overloaded)


class LLMRejectedError(LLMError):
    """The LLM server refused the request itself (a prompt over its context, a body it cannot
    read): asked again, it answers the same, so nothing waits for it."""


class LLMOutputError(LLMError):
    """The LLM's output did not fit the expected shape, even after a retry."""

    def __init__(self, expected: str, problem: str) -> None:
        self.expected = expected
        self.problem = problem
        super().__init__(f"LLM output is not a valid {expected}: {problem}")


class SweepError(LongmemError):
    """The expiry sweep did not do everything it was asked to."""


class SweepBusyError(SweepError):
    """A sweep was started while another one was still running, and was refused."""

    def __init__(self, running_id: str) -> None:
        self.running_id = running_id
        super().__init__(f"sweep {running_id} is still running; a second one was refused")


class SweepIncompleteError(SweepError):
    """Some shards still failed after their retries; every other shard was swept."""

    def __init__(self, sweep_id: str, failed: dict[int, str]) -> None:
        self.sweep_id = sweep_id
        self.failed = failed
        shards = ", ".join(f"shard {n}: {err}" for n, err in sorted(failed.items()))
        super().__init__(f"sweep {sweep_id} is partial; {shards}")


class RemoteError(LongmemError):
    """A longmem server answered a client's call (scenario runner, chat client) with an error status."""

    def __init__(self, status: int, body: str) -> None:
        self.status = status
        self.body = body
        super().__init__(f"server answered {status}: {body[:300]}")


class StorageError(LongmemError):
    """A write or read on disk failed; the operation was not acknowledged."""


class CorruptionError(StorageError):
    """A log or snapshot is damaged in a way that could lose acknowledged data."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


class SlotMovingError(StorageError):
    """A write for a user whose slot is being moved to another shard was refused (nothing was
    written): the fact store retries it once the move is over, at the shard that owns it then."""

    def __init__(self, slot: int) -> None:
        self.slot = slot
        super().__init__(f"slot {slot} is moving to another shard: retry")


class StaleRoutingError(LongmemError):
    """A shard was asked about a user it does not own: the caller's routing table is older than
    the shard's (a reshard moved the user's slot). Nothing was read or written."""

    def __init__(self, version: int) -> None:
        self.version = version
        super().__init__(f"this shard does not own the user (routing version {version}): route again")


class ReshardBusyError(LongmemError):
    """A reshard was asked for while another one runs; it was refused."""

    def __init__(self, goal: int) -> None:
        self.goal = goal
        super().__init__(f"a reshard to {goal} shards is running; wait for it to end")
