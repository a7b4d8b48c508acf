"""Deciding what a user turn means for memory: skip it, extract facts from it, or forget."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import ValidationInfo, model_validator

from memory_core.llm.structured import StructuredLLM
from memory_core.text import has_cjk
from memory_core.write.prefilter import SkipReason, prefilter
from memory_core.write.prompts import extract_messages, judge_messages
from memory_core.write.schemas import ExtractedFact, Extraction
from memory_core.write.speakers import addressed_names, names_listener_as_user

_FORGET = re.compile(
    r"^\s*(请|麻烦)?(你)?(帮我)?(忘掉|忘记|忘了|别记|不要记|别再记|删掉|删除)"
    r"|\bforget\b|\bdon'?t remember\b|\bstop remembering\b"
    r"|\b(delete|erase|remove)\b.{0,40}\b(memor|remember)",
    re.IGNORECASE,
)


_NEAR_TIME = re.compile(
    r"\b(right now|now|today|tonight|tomorrow|this (morning|afternoon|evening|week|weekend)|next "
    r"(week|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|in \d+ (minutes|hours|days))\b"
    r"|现在|正在|今天|今晚|明天|后天|这周|本周|下周|下个月|周[一二三四五六日末]|星期[一二三四五六日天]|\d+分钟后",
    re.IGNORECASE,
)


def has_near_time_cue(text: str) -> bool:
    """Whether ``text`` places something at the present or in the near future ("right now", "下周二")."""
    return _NEAR_TIME.search(text) is not None


def is_forget_request(text: str) -> bool:
    """Whether the user is asking the assistant to forget something."""
    return _FORGET.search(text) is not None


@dataclass(frozen=True)
class Verdict:
    """The judge's decision on one user turn."""

    worth: bool
    skipped: SkipReason | None  # set when the pre-filter decided without an LLM call


class CheckedExtraction(Extraction):
    """An extraction whose facts are in the language of the message (checked at parse time)."""

    @model_validator(mode="after")
    def _same_language(self, info: ValidationInfo) -> CheckedExtraction:
        context: dict[str, Any] = info.context or {}
        if "cjk" in context:
            wrong = [f.text for f in self.facts if has_cjk(f.text) != context["cjk"]]
            if wrong:
                raise ValueError(f"{len(wrong)} fact(s) not in the message's language")
        return self


class TurnAnalyzer:
    """Pre-filter, LLM judge and LLM extraction for user turns."""

    def __init__(self, llm: StructuredLLM) -> None:
        self._llm = llm

    def judge(self, message: str) -> Verdict:
        """Whether ``message`` holds anything worth remembering.

        Raises:
            LLMError: the judge failed (the caller treats the turn as not written).
        """
        reason = prefilter(message)
        if reason is not None:
            return Verdict(False, reason)
        answer = self._llm.choose(judge_messages(message), ["yes", "no"])
        return Verdict(answer == "yes", None)

    def extract(self, message: str, context: str, at: datetime) -> list[ExtractedFact]:
        """The facts in ``message``, in its language; invalid output is retried once.

        Raises:
            LLMOutputError: still invalid after the retry.
        """
        result = self._llm.ask(
            extract_messages(message, context, at),
            CheckedExtraction,
            max_tokens=400,
            context={"cjk": has_cjk(message)},
        )
        # "Hey Maria!" made the small model write "User is Maria" for Maria's friend.
        addressed = addressed_names(message)
        unique: dict[str, ExtractedFact] = {}
        for fact in result.facts:
            if not names_listener_as_user(fact.text, addressed):
                unique.setdefault(fact.text.strip(), fact)
        return list(unique.values())
