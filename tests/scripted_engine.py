"""A test engine that answers from a script: for unit tests of the logic around the LLM only.

The same behaviours are also tested against the real packaged model (test_write_path_real.py).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from typing import Any

from memory_core.llm.base import ChatMessage, Completion
from memory_core.llm.structured import PING_SYSTEM
from memory_core.write import prompts

Answer = str | Callable[[str], str]


class ScriptedEngine:
    """Answers each kind of write-path prompt from its own queue (or a default)."""

    name = "scripted"

    def __init__(self) -> None:
        self.queues: dict[str, list[Answer]] = {}
        self.defaults: dict[str, Answer] = {
            "judge": "yes",
            "extract": json.dumps({"facts": []}),
            "resolve": "different",
            "forget_intent": "yes",
            "forget_target": json.dumps({"target": "x"}),
            "forget_match": "no",
            "ping": "yes",
        }
        self.calls: list[str] = []
        self.latency_s = 0.0  # a fixed time per call, as a real engine would take

    def script(self, kind: str, *answers: Answer) -> None:
        self.queues.setdefault(kind, []).extend(answers)

    def _kind(self, messages: Sequence[ChatMessage]) -> str:
        system = messages[0].content
        kinds = {
            prompts.JUDGE_SYSTEM: "judge",
            prompts.EXTRACT_SYSTEM: "extract",
            prompts.RESOLVE_SYSTEM: "resolve",
            prompts.FORGET_INTENT_SYSTEM: "forget_intent",
            prompts.FORGET_TARGET_SYSTEM: "forget_target",
            prompts.FORGET_MATCH_SYSTEM: "forget_match",
            PING_SYSTEM: "ping",
        }
        return kinds[system]

    def _answer(self, messages: Sequence[ChatMessage]) -> Completion:
        kind = self._kind(messages)
        self.calls.append(kind)
        time.sleep(self.latency_s)
        queue = self.queues.get(kind)
        answer = queue.pop(0) if queue else self.defaults[kind]
        text = answer(messages[-1].content) if callable(answer) else answer
        return Completion(text=text, prompt_tokens=10, completion_tokens=2)

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        return self._answer(messages)

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        return self._answer(messages)

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        self.calls.append("reply")
        return Completion(text="(scripted reply)", prompt_tokens=10, completion_tokens=3)

    def close(self) -> None:
        pass


def facts_json(*facts: tuple[str, str, str, bool] | tuple[str, str, str, bool, str]) -> str:
    """Extraction output for (text, tag, layer, temporary[, about]) tuples."""
    return json.dumps(
        {
            "facts": [
                {
                    "about": fact[4] if len(fact) > 4 else "",
                    "text": fact[0],
                    "tag": fact[1],
                    "layer": fact[2],
                    "temporary": fact[3],
                }
                for fact in facts
            ]
        },
        ensure_ascii=False,
    )
