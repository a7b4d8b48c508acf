"""Cheap rules that skip obvious non-memories before any LLM call.

Conservative on purpose: a turn skipped here is never seen by the judge, so only turns that
cannot carry anything about the user are skipped (greetings, thanks, laughter, emoji, and
questions or task requests that say nothing about the speaker). Everything else goes to the
LLM judge.
"""

from __future__ import annotations

import re
import unicodedata
from enum import StrEnum

# Words that, alone or up to four together, carry nothing about the speaker.
_ACK_SET = frozenset(
    """
    ok okay k kk yes yeah yep no nope sure fine cool nice great good thanks thank you thx ty a lot so
    much hi hello hey there yo bye goodbye see morning night evening afternoon lol lmao haha hahaha hehe
    wow oh ah hmm hm uh um got it i alright right indeed exactly perfect awesome sounds np too
    好 好的 好吧 好滴 嗯 嗯嗯 恩 哦 噢 喔 啊 哈 哈哈 哈哈哈 嘿嘿 呵呵 谢谢 谢了 多谢 感谢 谢谢你 你好 您好 早
    早上好 晚安 明天再聊 再见 拜拜 收到 明白 明白了 知道了 懂了 可以 行 没问题 对 是的 不错 厉害 牛 棒
    """.split()
)
_LAUGH = re.compile(r"(ha|he|hi|ho|lo?l|哈|呵|嘿|嘻|233+|6+)+")
_NOT_WORD = re.compile(r"[\W_]+", re.UNICODE)
# "I" is matched case-sensitively: a lowercase "i" is a loop variable, not the speaker.
_FIRST_PERSON = re.compile(r"\bI\b|\b(?i:i'm|i've|i'd|i'll|me|my|mine|myself|we|we're|our|ours)\b|[我咱俺]")
_SECOND_PERSON = re.compile(r"\b(you|your|yours)\b|[你您]", re.IGNORECASE)
# A request that starts like this asks for work on given material; "帮我/help me" alone says
# nothing about the speaker.
_TASK_START = re.compile(
    r"^(please\s+)?(can you\s+|could you\s+)?(help me\s+)?"
    r"(translate|summari[sz]e|rewrite|paraphrase|proofread|fix|correct|convert|format|explain|define|"
    r"calculate|compute|solve|write|draft|generate|list|give me|tell me|show me)\b"
    r"|^(请)?(帮我|帮忙|麻烦)?(把|给)?.{0,12}?(翻译|总结|概括|改写|润色|修改|解释|计算|注释|排序|排一下|"
    r"起.{0,8}名字|写一|写个|生成|列出|算一下)",
    re.IGNORECASE,
)
_LEADING_HELP = re.compile(
    r"^(please\s+)?((can|could) you\s+)?(help me|give me|tell me|show me|帮我|请帮我|麻烦帮我)", re.IGNORECASE
)
_MATERIAL = re.compile("[:：\"'“”‘’「」]")
_TRAILING_PARTICLES = re.compile(r"[呀啦吧呢啊哦哈嘛]+$")
_QUESTION = re.compile(
    r"[?？]\s*$|^(what|who|whom|whose|when|where|which|why|how|is|are|does|do|did|can|could)\b", re.IGNORECASE
)


class SkipReason(StrEnum):
    """Why the pre-filter skipped a turn."""

    EMPTY = "empty"
    SMALL_TALK = "small_talk"
    IMPERSONAL_QUESTION = "impersonal_question"
    IMPERSONAL_TASK = "impersonal_task"
    ONLY_QUESTIONS = "only_questions"  # asks the other party things, says nothing of the speaker


_SENTENCE = re.compile(r"[^.!?。！？\n]+[.!?。！？]*")
_WORDS = re.compile(r"[\w']+")
# Words of a reaction to the other party's news ("That's so cool!", "Oh wow, congrats!"): a
# leading sentence made of these and names carries nothing about the speaker.
_REACTION = _ACK_SET | frozenset(
    """
    that's thats that it's its is was sounds looks so such what a an how really totally congrats
    congratulations sorry to hear about lovely amazing awesome exciting fun wonderful fantastic
    incredible cute beautiful impressive brilliant sweet wild crazy way woohoo yay whoa omg dear man
    one job news work stuff happy glad for you
    哇 哇塞 天哪 太好了 太棒了 真棒 好厉害 恭喜 恭喜你 嗨 嘿
    """.split()
)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, each with its closing punctuation."""
    return [s.strip() for s in _SENTENCE.findall(text) if s.strip()]


def _is_reaction(sentence: str) -> bool:
    words = _WORDS.findall(unicodedata.normalize("NFKC", sentence))
    # A reaction word first, then reaction words or names ("Hey Sam!", "Oh wow, congrats!").
    return (
        bool(words)
        and words[0].casefold() in _REACTION
        and all(w.casefold() in _REACTION or w[0].isupper() for w in words[1:])
    )


def substance(text: str) -> str:
    """``text`` without the greetings and reactions it opens with ("Hey Sam! That's cool! I …"):
    the small judge said no to news that came after them. The last sentence always stays."""
    parts = sentences(text)
    start = 0
    while start < len(parts) - 1 and _is_reaction(parts[start]):
        start += 1
    return " ".join(parts[start:]) if start else text


def _folded(text: str) -> str:
    return unicodedata.normalize("NFKC", text).casefold().strip()


def speaks_to_listener(text: str) -> bool:
    """Whether ``text`` says "you" (or 你/您) to its listener."""
    return _SECOND_PERSON.search(unicodedata.normalize("NFKC", text)) is not None


def speaks_of_self(text: str) -> bool:
    """Whether ``text`` has its speaker talking about themselves (a first-person word)."""
    return _FIRST_PERSON.search(unicodedata.normalize("NFKC", text)) is not None


def prefilter(text: str) -> SkipReason | None:
    """Return why ``text`` can be skipped without an LLM call, or None if the judge must see it."""
    folded = _folded(text)
    bare = _NOT_WORD.sub(" ", folded).strip()
    if not bare:
        return SkipReason.EMPTY
    squashed = _TRAILING_PARTICLES.sub("", bare.replace(" ", "")) or bare
    if squashed in _ACK_SET or _LAUGH.fullmatch(squashed):
        return SkipReason.SMALL_TALK
    # Sentences made only of acknowledgements ("ok thanks", "好的，谢谢") are small talk too.
    words = [_TRAILING_PARTICLES.sub("", word) or word for word in bare.split()]
    if len(words) <= 4 and all(word in _ACK_SET for word in words):
        return SkipReason.SMALL_TALK
    original = unicodedata.normalize("NFKC", text).strip()
    if _TASK_START.search(folded):
        # The material to work on (after a colon or in quotes) is not about the speaker.
        request = _MATERIAL.split(original, maxsplit=1)[0]
        if not _FIRST_PERSON.search(_LEADING_HELP.sub("", request).strip()):
            return SkipReason.IMPERSONAL_TASK
    if _FIRST_PERSON.search(_LEADING_HELP.sub("", original).strip()):
        return None
    if _QUESTION.search(folded) and not _SECOND_PERSON.search(folded):
        return SkipReason.IMPERSONAL_QUESTION
    if all(s.endswith(("?", "？")) for s in sentences(substance(original))):
        return SkipReason.ONLY_QUESTIONS
    return None
