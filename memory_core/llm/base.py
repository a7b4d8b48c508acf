"""The LLM engine boundary: chat messages in, schema-constrained text out.

Engines only generate; parsing and retrying live in :mod:`memory_core.llm.structured`, so a
new engine (or a test engine) implements three methods.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, Field


class ChatMessage(BaseModel):
    """One message of a chat prompt."""

    role: Literal["system", "user", "assistant"] = Field(description="Who speaks.")
    content: str = Field(description="What is said.")


@dataclass(frozen=True)
class Completion:
    """What an engine generated, with its cost."""

    text: str
    prompt_tokens: int
    completion_tokens: int


class LLMEngine(Protocol):
    """A chat model that can be constrained to a JSON schema or to a fixed set of answers."""

    @property
    def name(self) -> str:
        """Engine and model, for stats and logs."""
        ...

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        """Generate a JSON document valid under ``schema`` (guided decoding, temperature 0).

        Raises:
            LLMUnavailableError: the engine cannot run or be reached.
        """
        ...

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        """Generate exactly one of ``choices`` (guided decoding, temperature 0).

        Raises:
            LLMUnavailableError: the engine cannot run or be reached.
        """
        ...

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        """Generate a free-text reply (the chat endpoint's answer), temperature 0.

        Raises:
            LLMUnavailableError: the engine cannot run or be reached.
        """
        ...

    def close(self) -> None:
        """Release the model."""
        ...
