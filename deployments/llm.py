"""The judge/extractor/reply LLM as a Serve deployment (vLLM on GPUs, llama.cpp on CPUs), and its client."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ray import serve
from ray.exceptions import RayError, RayTaskError
from ray.serve.exceptions import RayServeException
from ray.serve.handle import DeploymentHandle

from memory_core.errors import LLMError, LLMUnavailableError
from memory_core.llm.base import ChatMessage, Completion
from memory_core.llm.factory import make_engine
from memory_core.settings import LLMSettings


@serve.deployment(name="llm")
class LLMDeployment:
    """Owns one engine built from the settings. Calls run on worker threads, up to
    ``llm.max_concurrent_calls`` at once, so an engine that batches (vLLM's async engine, an
    OpenAI-compatible server) gets them together; llama.cpp in-process takes them one at a time."""

    def __init__(self, settings: LLMSettings) -> None:
        self._engine = make_engine(settings)
        self._pool = ThreadPoolExecutor(settings.max_concurrent_calls, thread_name_prefix="longmem-llm")

    async def _run(self, call: Callable[..., Completion], *args: Any) -> Completion:
        return await asyncio.get_running_loop().run_in_executor(self._pool, call, *args)

    def name(self) -> str:
        """Engine and model."""
        return self._engine.name

    async def complete_json(
        self, messages: list[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        """See :meth:`memory_core.llm.base.LLMEngine.complete_json`."""
        return await self._run(self._engine.complete_json, messages, schema, max_tokens)

    async def complete_choice(self, messages: list[ChatMessage], choices: list[str]) -> Completion:
        """See :meth:`memory_core.llm.base.LLMEngine.complete_choice`."""
        return await self._run(self._engine.complete_choice, messages, choices)

    async def complete_text(self, messages: list[ChatMessage], max_tokens: int) -> Completion:
        """See :meth:`memory_core.llm.base.LLMEngine.complete_text`."""
        return await self._run(self._engine.complete_text, messages, max_tokens)

    def __del__(self) -> None:
        self._pool.shutdown(wait=False)
        self._engine.close()


class RemoteEngine:
    """The LLM deployment seen as a :class:`~memory_core.llm.base.LLMEngine`."""

    def __init__(self, handle: DeploymentHandle, name: str) -> None:
        self._handle = handle
        self.name = name

    def _call(self, method: str, *args: Any) -> Completion:
        """One call to the deployment. A replica that died, or none to take the call, is the LLM
        unavailable (a queued write waits for it); the engine's own errors come through as raised.

        Raises:
            LLMError: the engine's, or LLMUnavailableError for the deployment not answering.
        """
        try:
            return getattr(self._handle, method).remote(*args).result()  # type: ignore[no-any-return]
        except (LLMError, RayTaskError):  # raised by the engine (a RayTaskError of an LLMError is one)
            raise
        except (RayError, RayServeException) as exc:
            raise LLMUnavailableError(f"the LLM deployment did not answer ({type(exc).__name__})") from None

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        return self._call("complete_json", list(messages), schema, max_tokens)

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        return self._call("complete_choice", list(messages), list(choices))

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        return self._call("complete_text", list(messages), max_tokens)

    def close(self) -> None:
        """The deployment owns the model; nothing to release here."""
