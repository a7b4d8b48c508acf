"""Shapes of the LLM's answers on the write path; their JSON schemas drive guided decoding.

String lengths and list sizes are capped in the schema itself: unconstrained, a small model's
decoding can run away.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, field_validator

from memory_core.models import Tag


class ExtractedFact(BaseModel):
    """One memory the extractor found in a user's message."""

    # Decided first, so that the statement is written about the right person.
    about: str = Field(
        max_length=40,
        description="Who the fact is about when it is another person (their relation and name: "
        "'cousin Dara', '丈夫'); empty when it is about the user.",
    )
    text: str = Field(
        min_length=2,
        max_length=160,
        description="A short statement about the user, in the same language as the message.",
    )
    tag: Tag = Field(description="identity, preference, requirement, event or other.")
    layer: Literal["fact", "profile"] = Field(
        description="profile: a lasting instruction on how the assistant should reply or behave; "
        "fact: anything else about the user, likes and hobbies included."
    )
    temporary: bool = Field(
        description="True only for a current situation or a scheduled event (now, today, next week, a trip)."
    )
    ttl_days: int | None = Field(
        default=None, ge=1, le=365, description="How long a temporary fact stays true, when the message says."
    )

    @field_validator("ttl_days", mode="before")
    @classmethod
    def _no_hint(cls, value: object) -> object:
        # Grammars cannot bound numbers: a small model writes 0 for "no hint".
        if isinstance(value, int) and value < 1:
            return None
        if isinstance(value, int) and value > 365:
            return 365
        return value


class Extraction(BaseModel):
    """Everything worth remembering in one user message (possibly nothing)."""

    facts: list[ExtractedFact] = Field(max_length=5, description="The memories, at most five.")


class ForgetTarget(BaseModel):
    """What the user asked to forget, as a short search phrase."""

    target: str = Field(
        min_length=1, max_length=80, description="The topic to forget, in the user's language."
    )


Relation = Literal["same", "update", "different"]
RELATIONS: tuple[Relation, ...] = ("same", "update", "different")
