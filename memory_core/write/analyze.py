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


# A name the speaker greets, thanks or calls out ("Hey Maria!", "Thanks, Caroline!", "Cool, John.")
# belongs to the person they talk to.
_NAME_CALL = re.compile(r"\b([A-Z][a-z]+)(?=\s*[!,.?])")
_BEFORE_CALL = re.compile(
    r"(?:^|[,.!?]|\b(?:hey|hi|hello|thanks|thank you|bye|wow|woah|whoa|oh|aw+|cool|nice|great|yeah|yes|sorry|"
    r"congrats|sure|okay|ok))\s*$",
    re.IGNORECASE,
)
# Agreeing ("me too", "same here") makes what the other party said of themselves true of the user.
_AGREES = re.compile(r"\b(me too|same here|so do I|me neither|I do too|likewise)\b|我也|同感", re.IGNORECASE)
_CALLED = re.compile(r"^User(?:'s name)? is (?:called |named )?(\w+)")


def addressed_names(message: str) -> set[str]:
    """Capitalised names ``message`` addresses its listener by."""
    return {m.group(1) for m in _NAME_CALL.finditer(message) if _BEFORE_CALL.search(message[: m.start()])}


def names_listener_as_user(fact: str, addressed: set[str]) -> bool:
    """Whether ``fact`` says the user is someone the message was addressed to ("User is Maria")."""
    called = _CALLED.match(fact)
    return called is not None and called.group(1) in addressed


def agrees(message: str) -> bool:
    """Whether ``message`` says the other party's words hold for the speaker too ("me too")."""
    return _AGREES.search(message) is not None


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
                raise ValueError(f"facts not in the message's language: {wrong}")
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
