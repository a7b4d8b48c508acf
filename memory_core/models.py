"""The domain's data shapes: facts, profile entries, turns and recall hits."""

from __future__ import annotations

from datetime import UTC, date, datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, field_validator

from memory_core.errors import ValidationError


class Tag(StrEnum):
    """What kind of thing a fact says about the user."""

    IDENTITY = "identity"
    PREFERENCE = "preference"
    REQUIREMENT = "requirement"
    EVENT = "event"
    OTHER = "other"


class Layer(StrEnum):
    """Which memory layer an item lives in."""

    WORKING = "working"
    FACT = "fact"
    PROFILE = "profile"


class Role(StrEnum):
    """Who spoke a conversation turn."""

    USER = "user"
    ASSISTANT = "assistant"


def as_utc(value: datetime) -> datetime:
    """Return ``value`` as an aware UTC datetime; naive values are taken to be UTC.

    Raises:
        ValidationError: the instant falls outside the years 1-9999 once in UTC.
    """
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValidationError(f"{value.isoformat()} is outside the years 1-9999 in UTC") from None


class _Timestamped(BaseModel):
    @field_validator("created_at", "expire_at", "updated_at", "at", check_fields=False)
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        return None if value is None else as_utc(value)


# Most source turns one fact keeps: a fact said again and again keeps its first and newest.
MAX_SOURCES = 50


class NewFact(_Timestamped):
    """A fact to be stored; the store assigns its id."""

    model_config = ConfigDict(frozen=True)

    user_id: str = Field(description="Owner of the fact.")
    text: str = Field(description="The fact, in the user's own language.")
    tag: Tag = Field(default=Tag.OTHER, description="Kind of fact.")
    layer: Layer = Field(default=Layer.FACT, description="Memory layer.")
    created_at: datetime = Field(description="When the fact was said (UTC).")
    expire_at: datetime | None = Field(
        default=None, description="When a temporary fact stops being true; None for lasting facts."
    )
    source_turn_ids: tuple[str, ...] = Field(
        default=(), description="Ids of the conversation turns the fact came from."
    )
    about: str = Field(
        default="",
        description='Who the fact is about when it is someone other than the user ("sister Ana", '
        '"同事小王"); empty for facts about the user themselves.',
    )
    event_start: date | None = Field(
        default=None,
        description='First day of the time the fact speaks of ("two days ago" resolved against when '
        "it was said); None when it names no time.",
    )
    event_end: date | None = Field(
        default=None, description="Last day of that time (the same day when it is one day)."
    )


class Fact(NewFact):
    """A stored fact. Its embedding lives in the fact shard's index, not on this object."""

    id: int = Field(description="Store-assigned id, unique within the data dir.")
    superseded_by: int | None = Field(
        default=None, description="Id of the fact that replaced this one; superseded facts are not recalled."
    )

    def is_expired(self, now: datetime) -> bool:
        """True when the fact has an expiry time strictly before ``now``."""
        return self.expire_at is not None and self.expire_at < as_utc(now)


class ProfileEntry(_Timestamped):
    """One lasting preference of a user, loaded into every conversation."""

    user_id: str = Field(description="Owner of the entry.")
    key: str = Field(description="Stable key of the entry within the user's profile.")
    text: str = Field(description="The preference, in the user's own language.")
    source: str = Field(default="", description="Where it came from (turn id, 'cli', 'api').")
    updated_at: datetime = Field(description="Last time the entry was written (UTC).")


class Turn(_Timestamped):
    """One message of a conversation."""

    role: Role = Field(description="Who spoke.")
    content: str = Field(description="What was said.")
    at: datetime | None = Field(default=None, description="When it was said (UTC).")
    turn_id: str = Field(default="", description="Caller-supplied id of the turn, kept as a fact source.")


class RecallHit(BaseModel):
    """A fact returned by recall, with the scores that ranked it."""

    fact: Fact = Field(description="The recalled fact.")
    score: float = Field(description="Final ranking score (fused when lexical matching is on).")
    vector_score: float = Field(description="Cosine similarity between question and fact.")
    lexical_score: float = Field(default=0.0, description="Normalised BM25 score in [0, 1].")
    replaced: list[Fact] = Field(
        default_factory=list,
        description="When asked for: the facts this one replaced, newest first (each true from its "
        "created_at until the next one's): what was true before.",
    )
