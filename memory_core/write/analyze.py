"""Deciding what a user turn means for memory: skip it, extract facts from it, or forget."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence, Set
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationInfo, model_validator

from memory_core import telemetry
from memory_core.llm.structured import StructuredLLM
from memory_core.text import has_cjk
from memory_core.write.prefilter import SkipReason, prefilter, speaks_to_listener, substance
from memory_core.write.prompts import extract_messages, forget_intent_messages, judge_messages
from memory_core.write.quoted import own_words
from memory_core.write.schemas import ExtractedFact, Extraction
from memory_core.write.speakers import (
    addressed_names,
    is_courtesy,
    names_listener_as_user,
    only_names_someone,
    other_person,
    own_name_as_user,
)

# A cheap trigger: only a message with one of these words can ask to erase a memory, and only
# such a message costs the LLM call that decides whether it really does ("don't forget…", a
# quotation and text to translate do not). "forgot" is no cue: the past tense never asks the
# assistant for anything, and the small model took "I forgot it at the station" for a request.
_FORGET_CUE = re.compile(
    r"\b(forget|delete|erase|remove|wipe|scrub|purge|clear|drop|stop remembering|unlearn)"
    r"|\b(don'?t|do not|no longer|stop)\s+(keep|store|remember|hold)"
    r"|忘|删|抹掉|抹去|清除|清空|去掉|移除|(?:别|不要|不用|无需)再?(?:记|存|保存|留着)",
    re.IGNORECASE,
)


# Cues that place a thing near without placing it within days: "now" and "正在" a state at the
# present ("I use a wheelchair now"), a stay's words ("until", "这几天", "for a couple of
# nights", "还要半个小时") a stay without its end, a bare weekday as often a habit ("每周六去游泳")
# as a date. The rest place a thing within days, a stay or a plan that ends.
_NEAR_NO_DAY = (
    r"\b(right now|now|currently|at present|at the moment|for now|for the time being|these (few )?days"
    r"|until|till|for (a few |a couple of |another |an? |one |two |three |\d+ )(more )?(minute|hour|day"
    r"|night|week)s?|monday|tuesday|wednesday|thursday|friday|saturday|sunday)\b"
    r"|现在|目前|眼下|正在|这几天|这两天|这阵子|暂时|还要[^，。,.！？!?]{0,4}(小时|分钟|天)"
    r"|周[一二三四五六日末]|星期[一二三四五六日天]"
)
_NEAR_DAYS = (
    r"\b(today|tonight|tomorrow|this (morning|afternoon|evening|week|weekend)|next "
    r"(week|month|monday|tuesday|wednesday|thursday|friday|saturday|sunday)|in \d+ (minutes|hours|days))\b"
    r"|今天|今晚|明天|后天|这周|本周|下周|下个月|\d+分钟后"
)
_NEAR_TIME = re.compile(f"{_NEAR_NO_DAY}|{_NEAR_DAYS}", re.IGNORECASE)
_WITHIN_DAYS = re.compile(_NEAR_DAYS, re.IGNORECASE)


def has_near_time_cue(text: str) -> bool:
    """Whether ``text`` places something at the present or in the near future ("right now", "下周二")."""
    return _NEAR_TIME.search(text) is not None


def places_within_days(text: str) -> bool:
    """Whether ``text`` places something within the next days ("this week", "明天"), not just now."""
    return _WITHIN_DAYS.search(text) is not None


# A plain request to erase, said in the user's own voice: an erase verb in a clause that is not
# a question and not negated before the verb ("别把…删了", "I never asked you to delete…").
# The small model said no to many of these ("不要再记我的手机号了", "Please forget that …"), so
# such a clause is a request without asking it; everything else with a cue goes to the LLM.
_ERASE = re.compile(
    r"(?:忘掉|删掉|删了|删除|清除|清掉|抹掉|抹去)"
    r"|(?P<stop>(?:不要|别|不用|无需)再(?:记着|记住|记))"
    r"|^\s*(?:please\s+|ok,?\s+|and\s+)?(?:forget|delete|erase|wipe|remove)\s+(?!it\b|about it\b|the\b)"
    r"|\b(?:can|could|would|will) you (?:please )?(?:forget|delete|erase|wipe|remove)\b"
    r"|\bstop (?:remembering|storing|keeping)\b",
    re.IGNORECASE,
)
_NOT_ASKED = re.compile(
    r"别|不要|没|不用|千万|不能|不会|怎么|如何|吗|\bhow\b|\bdon'?t\b|\bnever\b|\bnot\b", re.IGNORECASE
)
_CLAUSE = re.compile(r"[^，。！？,.!?；;\n]+[？?]?")


def plainly_asks_to_forget(text: str) -> bool:
    """Whether a clause of ``text`` in the user's own words (not quoted or pasted) plainly asks
    the assistant to erase something."""
    for clause in _CLAUSE.findall(own_words(text)):
        match = _ERASE.search(clause)
        if match is None or clause.rstrip().endswith(("?", "？")):
            continue
        if match["stop"] or not _NOT_ASKED.search(clause[: match.start()]):
            return True
    return False


def has_forget_cue(text: str) -> bool:
    """Whether ``text`` has a word that could ask to erase a memory (the LLM decides if it does)."""
    return _FORGET_CUE.search(text) is not None


# Where the parts of a message end: "forget my old number - the new one is …", "…删掉，新的是…".
# A full stop or comma ends a part only before a space (not inside "a.b@c.org" or "1,500"). A
# verb that puts something in the old thing's place starts a part too ("… and use <new> instead",
# "…删掉换成…"); a bare "and" does not ("forget my brother and sister's addresses").
_PART_END = re.compile(
    r"[。！？；;，：\n—–]|[.,!?:](?=\s|$)|\s-\s"
    r"|\s(?=and (?:then )?(?:save|use|keep|note|store|remember|record|put|add|write)\b)"
    r"|(?=(?:并且|然后|再)?(?:换成|改成|改为|记成|记为|存成))",
    re.IGNORECASE,
)


def beside_forgetting(message: str) -> tuple[str, str]:
    """The parts of a forget request that ask to forget, and the rest it tells with them
    ("Forget my old number; the new one is 0433 …" → the first clause, the second)."""
    asked: list[str] = []
    told: list[str] = []
    for part in _PART_END.split(message):
        (asked if has_forget_cue(part) else told).append(part)
    return " ".join(asked), " ".join(told)


# How the extraction prompt writes a wish about replies ("User wants …", "用户希望…"). A
# profile item in another form ("User is passionate about schools") is a fact the small model
# put in the wrong layer: the profile is loaded into every conversation and recall never sees it.
_WISH = re.compile(
    r"^User (?:(?:always|also|really|strongly|would) )?(?:wants|would like|would rather|rather|prefers|asks|"
    r"expects|does not want|doesn't want|never wants|does not like|doesn't like|dislikes|likes|hates|"
    r"is not to|should)\b"
    r"|^用户(?:希望|想要|想|要求|要|不希望|不想|不要|别|偏好|更喜欢|喜欢|不喜欢|讨厌|请|让|需要)"
)


def is_wish(text: str) -> bool:
    """Whether a profile item is written as a wish about how to be answered, as the prompt asks."""
    return _WISH.match(text.strip()) is not None


# A wish about how the assistant answers, said in the user's own words: "no more tables in your
# replies", "answer me in Dutch", "以后回复用繁体字". The small judge said no to some of these
# (a request about replies, "revealing nothing about the user"), and a lost style wish is a
# profile entry the user must state again. Such a message goes to extraction without the judge.
_ANSWERS = r"\b(?:your|the) (?:answers?|repl(?:y|ies)|responses?|messages?|explanations?)\b"
_ASKING = (
    r"\b(?:keep|make|stop|don't|do not|never|always|please|from now on|going forward|no more"
    r"|i(?: want| prefer| need| would like|'d like))\b"
)
_REPLY_STYLE = re.compile(
    rf"{_ANSWERS}.*{_ASKING}|{_ASKING}.*{_ANSWERS}"
    r"|\b(?:answer|reply|respond|write|talk|speak)(?: to me| me)? (?:in|using|like|more|less)\b"
    r"|(?:以后|今后|之后|从现在起|别|不要|请)[^。！？!?]{0,12}(?:回答|回复|回我|答复|跟我说话)"
    r"|(?:回答|回复)[^。！？!?]{0,6}(?:简短|短一点|简洁|详细|别|不要|用)",
    re.IGNORECASE,
)


def asks_for_reply_style(message: str) -> bool:
    """Whether ``message`` says, in the user's own words (not in what it quotes or pastes), how
    the assistant should answer."""
    return _REPLY_STYLE.search(own_words(message)) is not None


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

    def asks_to_forget(self, message: str) -> bool:
        """Whether ``message`` asks to erase something remembered: a cheap word trigger, then the LLM.

        Raises:
            LLMError: the LLM failed.
        """
        if not has_forget_cue(message):
            return False
        if plainly_asks_to_forget(message):
            return True
        return self._llm.choose(forget_intent_messages(message), ["yes", "no"]) == "yes"

    def judge(self, message: str) -> Verdict:
        """Whether ``message`` holds anything worth remembering.

        Raises:
            LLMError: the judge failed (the caller treats the turn as not written).
        """
        with telemetry.span("prefilter") as filtered:
            reason = prefilter(message)
            filtered.set_attribute("longmem.skipped", reason.value if reason else "")
        if reason is not None:
            return Verdict(False, reason)
        if asks_for_reply_style(message):
            return Verdict(True, None)
        with telemetry.span("judge"):
            answer = self._llm.choose(judge_messages(substance(message)), ["yes", "no"])
        return Verdict(answer == "yes", None)

    def extract_beside_forgetting(
        self,
        message: str,
        context: str,
        forgotten: Sequence[str],
        terms: Callable[[str], list[str]],
        listeners: Set[str] = frozenset(),
    ) -> list[ExtractedFact]:
        """The facts a forget request tells besides the request (``forgotten``: its target and
        the memories it deleted). Asked to extract from the whole message, the small model wrote
        the forgotten thing again ("User's old number is …"), or the request itself ("用户不再记
        手机号"). So a part of a fact that asks to forget, or repeats a number only the request
        says, is cut off, and a fact is kept when what is left has a word of the message's other
        parts that neither the request nor what it made forget has. A request that says nothing
        else costs no LLM call.

        Raises:
            LLMOutputError: the extraction was still invalid after a retry.
        """
        asked, told = beside_forgetting(message)
        new = set(terms(told)).difference(terms(asked), *map(terms, forgotten))
        if not new or prefilter(told) is not None:  # nothing else, or only "thanks"
            return []
        # Pieces of a number the request says and the rest does not ("0100" of "0161 555 0100",
        # when the new one is "0161 555 0199").
        numbers = {term for term in set(terms(asked)) - set(terms(told)) if any(c.isdigit() for c in term)}
        kept = []
        for fact in self.extract(message, context, listeners):
            parts = [part.strip() for part in _PART_END.split(fact.text) if part.strip()]
            left = [part for part in parts if not has_forget_cue(part) and not numbers & set(terms(part))]
            if left != parts:
                fact.text = ("，" if has_cjk(fact.text) else ", ").join(left)
            if new & set(terms(fact.text)):
                kept.append(fact)
        return kept

    def extract(self, message: str, context: str, listeners: Set[str] = frozenset()) -> list[ExtractedFact]:
        """The facts in ``message``, in its language; invalid output is retried once.
        ``listeners``: the names the user called the other party by in the session.

        Raises:
            LLMOutputError: still invalid after the retry.
        """
        result = self._llm.ask(
            extract_messages(message, context),
            CheckedExtraction,
            max_tokens=400,
            context={"cjk": has_cjk(message)},
        )
        # "Hey Sofia!" made the small model write "User is Sofia" for Sofia's friend; a name the
        # assistant called the user by made the user's news a friend's. A message that calls its
        # listener by name and never says "you" tells nothing about them: "Hey Ana! I won my first
        # chess cup" became "User's friend Ana won a chess cup".
        addressed, own = addressed_names(message), addressed_names(context)
        if not speaks_to_listener(message):
            own |= addressed
        unique: dict[str, ExtractedFact] = {}
        for fact in result.facts:
            says_nothing = only_names_someone(fact.text, fact.about) or is_courtesy(
                fact.text, addressed | listeners
            )
            if not names_listener_as_user(fact.text, addressed) and not says_nothing:
                fact.text, about = own_name_as_user(fact.text.strip(), fact.about, own)
                fact.about = other_person(fact.text, about)
                if fact.layer == "profile" and not is_wish(fact.text):
                    fact.layer = "fact"
                unique.setdefault(fact.text, fact)
        return list(unique.values())
