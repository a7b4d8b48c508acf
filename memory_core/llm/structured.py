"""Typed LLM calls: a pydantic model's JSON schema drives decoding and parses the answer."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

import pydantic
from opentelemetry.util.types import AttributeValue

from memory_core import telemetry
from memory_core.errors import LLMError, LLMOutputError, LLMUnavailableError
from memory_core.llm.base import ChatMessage, Completion, LLMEngine

T = TypeVar("T", bound=pydantic.BaseModel)

# The shortest request there is: answered, the engine is up.
PING_SYSTEM = "You check that a chat model answers. Reply yes."
_PING = (ChatMessage(role="system", content=PING_SYSTEM), ChatMessage(role="user", content="Are you there?"))


@dataclass
class LLMStats:
    """Running totals of LLM use."""

    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0
    invalid_outputs: int = 0

    def snapshot(self) -> LLMStats:
        """A copy of the current totals."""
        return LLMStats(**self.__dict__)

    def minus(self, before: LLMStats) -> LLMStats:
        """The usage between ``before`` and now."""
        return LLMStats(**{k: getattr(self, k) - getattr(before, k) for k in self.__dict__})


class StructuredLLM:
    """Asks an engine for pydantic-typed answers and fixed choices, counting every call."""

    def __init__(self, engine: LLMEngine, retries: int = 1) -> None:
        self.engine = engine
        self.stats = LLMStats()
        self._retries = retries
        self._lock = threading.Lock()
        self._in_flight = 0

    @property
    def in_flight(self) -> int:
        """Calls sent to the engine and not answered yet."""
        with self._lock:
            return self._in_flight

    @contextmanager
    def _call(self, kind: str, **attributes: AttributeValue) -> Iterator[None]:
        with self._lock:
            self._in_flight += 1
        try:
            with telemetry.span(f"llm.{kind}", model=self.engine.name, **attributes):
                yield
        finally:
            with self._lock:
                self._in_flight -= 1

    def _count(self, completion: Completion, seconds: float) -> None:
        telemetry.count_llm_call(completion.prompt_tokens, completion.completion_tokens)
        with self._lock:
            self.stats.calls += 1
            self.stats.prompt_tokens += completion.prompt_tokens
            self.stats.completion_tokens += completion.completion_tokens
            self.stats.seconds += seconds

    def ask(
        self,
        messages: Sequence[ChatMessage],
        model: type[T],
        max_tokens: int = 384,
        context: dict[str, Any] | None = None,
    ) -> T:
        """Generate an instance of ``model`` under its JSON schema.

        Invalid output (unparseable, or failing the model's validators, which see ``context``)
        is retried once.

        Raises:
            LLMOutputError: still invalid after the retry.
            LLMUnavailableError: the engine failed.
        """
        schema = model.model_json_schema()
        problem = ""
        for _ in range(self._retries + 1):
            start = time.perf_counter()
            with self._call("json", schema=model.__name__):
                completion = self.engine.complete_json(messages, schema, max_tokens)
                self._count(completion, time.perf_counter() - start)
            try:
                return model.model_validate_json(completion.text, context=context)
            except pydantic.ValidationError as exc:
                with self._lock:
                    self.stats.invalid_outputs += 1
                # The problem, never the output itself: output holds memory text, and this
                # message reaches logs and job records.
                first = exc.errors()[0]
                where = ".".join(str(part) for part in first["loc"]) or "output"
                problem = f"{exc.error_count()} error(s), e.g. {where}: {first['type']}"
        raise LLMOutputError(model.__name__, problem)

    def choose(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> str:
        """Generate one of ``choices``.

        Raises:
            LLMOutputError: the engine answered something else, twice.
            LLMUnavailableError: the engine failed.
        """
        answer = ""
        for _ in range(self._retries + 1):
            start = time.perf_counter()
            with self._call("choice", choices=len(choices)):
                completion = self.engine.complete_choice(messages, choices)
                self._count(completion, time.perf_counter() - start)
            answer = completion.text.strip().strip('"')
            if answer in choices:
                return answer
            with self._lock:
                self.stats.invalid_outputs += 1
        raise LLMOutputError("choice", f"expected one of {list(choices)}, got {len(answer)} other characters")

    def answers(self) -> bool:
        """Whether the engine answers a minimal request now (a short call, counted like the
        others, and asked again once if answered off its two choices). After a
        request failed as unavailable it tells an outage (False) from a request that fails on
        its own (True): a prompt the server times out on, or answers 5xx to, every time."""
        try:
            self.choose(_PING, ("yes", "no"))
        except LLMUnavailableError:
            return False
        except LLMError:  # refused, or answered off the choices: it is up
            return True
        return True

    def reply(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        """A free-text answer (no schema), counted like every other call.

        Raises:
            LLMUnavailableError: the engine failed.
        """
        start = time.perf_counter()
        with self._call("text"):
            completion = self.engine.complete_text(messages, max_tokens)
            self._count(completion, time.perf_counter() - start)
        return completion
