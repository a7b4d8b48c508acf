"""Request and response bodies of HTTP API v1 (their JSON schemas are the OpenAPI document)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from memory_core.models import MAX_SOURCES, Fact, ProfileEntry, RecallHit, Role, Tag
from memory_core.service import EraseReceipt
from memory_core.write.forget import ForgetResult
from memory_core.write.pipeline import TurnOutcome

# Ids are 63-bit integers: sent as strings, since JavaScript clients lose digits past 2**53.
MemoryId = str
# The longest duration Python represents (a longer ttl could not be turned into an expiry).
_MAX_TTL_S = float(timedelta.max.days * 86_400)


class TurnIn(BaseModel):
    """One conversation turn."""

    role: Role = Field(description="user or assistant.")
    content: str = Field(min_length=1, description="What was said.")
    at: datetime | None = Field(
        default=None, description="When it was said (ISO 8601); the request's at by default."
    )
    turn_id: str = Field(
        default="", max_length=200, description="Your id of the turn, kept as the memory's source."
    )


class IngestIn(BaseModel):
    """Turns to feed through the write path."""

    session_id: str = Field(
        default="default", min_length=1, max_length=200, description="Conversation session."
    )
    turns: list[TurnIn] = Field(min_length=1, description="Turns in order.")
    at: datetime | None = Field(
        default=None, description="When the turns were said; the server's now by default."
    )
    wait: bool = Field(
        default=True,
        description="true: answer when the memories are written; false: answer 202 with a job id.",
    )


class FactOut(BaseModel):
    """A stored memory."""

    id: MemoryId = Field(description="Memory id (a decimal string).")
    text: str = Field(description="The memory, in the user's language.")
    tag: Tag = Field(description="identity / preference / requirement / event / other.")
    created_at: datetime = Field(description="When it was said.")
    expire_at: datetime | None = Field(description="When a temporary memory expires; null for lasting ones.")
    source_turn_ids: list[str] = Field(description="Turns it came from.")
    superseded_by: MemoryId | None = Field(description="Id of the memory that replaced it, if any.")
    about: str = Field(
        default="", description="Who the memory is about when it is another person; empty for the user."
    )
    event_start: date | None = Field(
        default=None, description="First day of the time it speaks of, resolved when it was said."
    )
    event_end: date | None = Field(default=None, description="Last day of that time.")

    @classmethod
    def of(cls, fact: Fact) -> FactOut:
        """From a stored fact (the tenant prefix of its owner is not shown)."""
        return cls(
            id=str(fact.id),
            text=fact.text,
            tag=fact.tag,
            created_at=fact.created_at,
            expire_at=fact.expire_at,
            source_turn_ids=list(fact.source_turn_ids),
            superseded_by=str(fact.superseded_by) if fact.superseded_by is not None else None,
            about=fact.about,
            event_start=fact.event_start,
            event_end=fact.event_end,
        )


class HitOut(FactOut):
    """A recalled memory with its score."""

    score: float = Field(description="Ranking score (cosine, plus lexical when enabled).")
    replaced: list[FactOut] = Field(
        default_factory=list,
        description="With history: the memories this one replaced, newest first (each true from its "
        "created_at until the next one's).",
    )

    @classmethod
    def of_hit(cls, hit: RecallHit) -> HitOut:
        """From a recall hit."""
        return cls(
            **FactOut.of(hit.fact).model_dump(),
            score=round(hit.score, 4),
            replaced=[FactOut.of(f) for f in hit.replaced],
        )


class UserOut(BaseModel):
    """One user of the caller's tenant."""

    user_id: str = Field(description="The user's id, as the caller named it.")
    facts: int = Field(description="Memories stored, earlier versions included.")
    profile_entries: int = Field(description="Entries of the preference profile.")


class UsersOut(BaseModel):
    """A page of the tenant's users, by id."""

    users: list[UserOut]
    next_after: str | None = Field(description="Pass as ``after`` for the next page; null on the last page.")


class ProfileOut(BaseModel):
    """A lasting preference."""

    key: str = Field(description="Stable key within the user's profile.")
    text: str = Field(description="The preference.")
    source: str = Field(description="Where it came from.")
    updated_at: datetime = Field(description="Last written.")

    @classmethod
    def of(cls, entry: ProfileEntry) -> ProfileOut:
        """From a profile entry."""
        return cls(key=entry.key, text=entry.text, source=entry.source, updated_at=entry.updated_at)


class TurnResult(BaseModel):
    """What the write path did with one user turn."""

    turn_id: str
    skipped: str | None = Field(
        description=(
            "Why nothing was considered (pre-filter reason, judge, forget: a forget request that "
            "told nothing else, error)."
        )
    )
    memories: list[FactOut] = Field(description="Memories written.")
    profile_entries: int = Field(description="Wishes about replies written to the profile.")
    profile_full: int = Field(
        description="Wishes not written: the profile is at its cap and every entry in it was set on "
        "purpose (API, CLI)."
    )
    quoted: int = Field(description="Wishes dropped as quoted or pasted text, not the user's own words.")
    duplicates: int
    echoes: int = Field(description="Extracted facts dropped as the other party's words, not the user's.")
    repeated: list[MemoryId] = Field(
        description="Stored memories this turn said again: the turn joined their sources."
    )
    superseded: list[MemoryId]
    forgotten: list[MemoryId] = Field(description="Memories a forget request in this turn deleted.")
    error: str | None

    @classmethod
    def of(cls, outcome: TurnOutcome) -> TurnResult:
        """From a write-path outcome."""
        forgotten = outcome.forgotten.facts if outcome.forgotten else []
        return cls(
            turn_id=outcome.turn_id,
            skipped=outcome.skipped,
            memories=[FactOut.of(f) for f in outcome.facts],
            profile_entries=outcome.profile_entries,
            profile_full=outcome.profile_full,
            quoted=outcome.quoted,
            duplicates=outcome.duplicates,
            echoes=outcome.echoes,
            repeated=[str(i) for i in outcome.repeated],
            superseded=[str(i) for i in outcome.superseded],
            forgotten=[str(f.id) for f in forgotten],
            error=outcome.error,
        )


class JobOut(BaseModel):
    """An ingest job run after the answer (async ingest, or the write after a chat reply)."""

    job_id: str
    status: Literal["queued", "running", "done", "failed", "cancelled"]
    results: list[TurnResult] = Field(default_factory=list, description="Per user turn, once done.")
    error: str | None = None


class IngestOut(BaseModel):
    """Synchronous ingest result."""

    results: list[TurnResult]


class RememberItem(BaseModel):
    """A memory stored as given, without the LLM."""

    text: str = Field(min_length=1)
    tag: Tag = Tag.OTHER
    ttl_seconds: float | None = Field(
        default=None, gt=0, le=_MAX_TTL_S, description="Makes it temporary (at most 999999999 days)."
    )
    expire_at: datetime | None = Field(default=None, description="Makes it temporary.")
    source_turn_ids: list[str] = Field(default_factory=list, max_length=MAX_SOURCES)


class RememberIn(BaseModel):
    """Memories to store directly."""

    memories: list[RememberItem] = Field(min_length=1)
    at: datetime | None = None


class MemoriesOut(BaseModel):
    """A list of memories."""

    memories: list[FactOut]


class RecallIn(BaseModel):
    """A recall question."""

    query: str = Field(min_length=1)
    k: int | None = Field(default=None, ge=1, le=50, description="Most memories (server default 5).")
    threshold: float | None = Field(
        default=None, ge=-1, le=2, description="Least score (embedder's default)."
    )
    at: datetime | None = Field(default=None, description="Recall as of this time; now by default.")
    history: bool = Field(
        default=False, description="Also return what each memory replaced (where the user lived before)."
    )


class RecallOut(BaseModel):
    """What the prompt builder gets for a question: memories and the whole profile."""

    memories: list[HitOut]
    profile: list[ProfileOut]


class PromptIn(BaseModel):
    """A question to build a prompt for."""

    query: str = Field(min_length=1)
    session_id: str = Field(default="default", min_length=1, max_length=200)
    k: int | None = Field(default=None, ge=1, le=50)


class PromptOut(BaseModel):
    """The prompt text, memories quoted as data."""

    prompt: str


class ChatIn(BaseModel):
    """One user message of an agent conversation."""

    message: str = Field(min_length=1)
    session_id: str = Field(default="default", min_length=1, max_length=200)
    k: int | None = Field(default=None, ge=1, le=50)


class ChatOut(BaseModel):
    """The reply, what it was built from, and the job writing memories from the message."""

    reply: str
    memories: list[HitOut]
    profile: list[ProfileOut]
    write_job_id: str = Field(description="Poll GET /v1/jobs/{id}: the memory write runs after the reply.")


class ForgetIn(BaseModel):
    """A forget request in the user's words."""

    utterance: str = Field(min_length=1)
    at: datetime | None = None


class ForgetOut(BaseModel):
    """What was forgotten."""

    target: str = Field(description="What the request named, as a search phrase.")
    memories: list[FactOut] = Field(description="The memories deleted (their earlier versions went too).")
    profile_keys: list[str] = Field(description="Keys of the profile entries deleted.")
    earlier_versions: int = Field(description="Older versions of the deleted memories, deleted with them.")
    kept: list[str] = Field(description="Memories looked at that the request did not name: kept.")
    reply: str = Field(description="What to tell the user.")

    @classmethod
    def of(cls, result: ForgetResult) -> ForgetOut:
        """From a forget result."""
        return cls(
            target=result.target,
            memories=[FactOut.of(f) for f in result.facts],
            profile_keys=[e.key for e in result.profile_entries],
            earlier_versions=result.earlier_versions,
            kept=result.kept,
            reply=result.reply,
        )


class ProfileIn(BaseModel):
    """A preference to add or replace."""

    text: str = Field(min_length=1)


class ProfileListOut(BaseModel):
    """The user's profile."""

    profile: list[ProfileOut]


class EraseOut(BaseModel):
    """Receipt of a user's erasure."""

    user_id: str
    memories: int
    profile_entries: int
    working_turns: int
    write_jobs: int = Field(
        description="Queued or finished write jobs of the user dropped with their results."
    )

    @classmethod
    def of(cls, user_id: str, receipt: EraseReceipt, write_jobs: int) -> EraseOut:
        """From the service's receipt, under the caller's own user id."""
        return cls(
            user_id=user_id,
            memories=receipt.facts,
            profile_entries=receipt.profile_entries,
            working_turns=receipt.working_turns,
            write_jobs=write_jobs,
        )


class DeletedOut(BaseModel):
    """Ids deleted."""

    deleted: list[str]


class ReshardIn(BaseModel):
    """A reshard request (operators): add shards, remove shards, or neither to resume one that
    was interrupted."""

    add: int = Field(default=0, ge=0, le=1024, description="Shards to add.")
    remove: int = Field(default=0, ge=0, le=1024, description="Shards to remove (the last ones).")

    @model_validator(mode="after")
    def _one_change(self) -> ReshardIn:
        if self.add and self.remove:
            raise ValueError("add or remove shards, not both")
        return self


class SweepIn(BaseModel):
    """An expiry sweep request (admin)."""

    now: datetime | None = Field(
        default=None,
        description="Cut-off: facts expiring before it go; the server's clock by default, never after it.",
    )
    dry_run: bool = Field(default=False, description="Only count what would go.")
    all_tenants: bool = Field(
        default=False, description="Sweep every tenant, not only the caller's (operator keys only)."
    )


class ErrorOut(BaseModel):
    """Every error answer."""

    error: str = Field(description="Error class, e.g. ValidationError.")
    detail: Any = Field(description="What was wrong.")
