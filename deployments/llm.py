"""The judge/extractor/reply LLM as a Serve deployment (vLLM on GPUs, llama.cpp on CPUs), and its client."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ray import serve
from ray.serve.handle import DeploymentHandle

from memory_core.llm.base import ChatMessage, Completion
from memory_core.llm.factory import make_engine
from memory_core.settings import LLMSettings


@serve.deployment(name="llm")
class LLMDeployment:
    """Owns one engine built from the settings; the engine serialises its own calls."""

    def __init__(self, settings: LLMSettings) -> None:
        self._engine = make_engine(settings)

    def name(self) -> str:
        """Engine and model."""
        return self._engine.name

    def complete_json(
        self, messages: list[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        """See :meth:`memory_core.llm.base.LLMEngine.complete_json`."""
        return self._engine.complete_json(messages, schema, max_tokens)

    def complete_choice(self, messages: list[ChatMessage], choices: list[str]) -> Completion:
        """See :meth:`memory_core.llm.base.LLMEngine.complete_choice`."""
        return self._engine.complete_choice(messages, choices)

    def complete_text(self, messages: list[ChatMessage], max_tokens: int) -> Completion:
        """See :meth:`memory_core.llm.base.LLMEngine.complete_text`."""
        return self._engine.complete_text(messages, max_tokens)

    def __del__(self) -> None:
        self._engine.close()


class RemoteEngine:
    """The LLM deployment seen as a :class:`~memory_core.llm.base.LLMEngine`."""

    def __init__(self, handle: DeploymentHandle, name: str) -> None:
        self._handle = handle
        self.name = name

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        return self._handle.complete_json.remote(list(messages), schema, max_tokens).result()  # type: ignore[no-any-return]

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        return self._handle.complete_choice.remote(list(messages), list(choices)).result()  # type: ignore[no-any-return]

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        return self._handle.complete_text.remote(list(messages), max_tokens).result()  # type: ignore[no-any-return]

    def close(self) -> None:
        """The deployment owns the model; nothing to release here."""
