"""Tokenizing Chinese and English text: token estimates for budgets, terms for lexical matching."""

from __future__ import annotations

import logging
import math
import re
import threading
import unicodedata
from typing import Any

_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_STOPWORDS = frozenset(
    "a an the and or but of to in on at for with is are was were be been am i me my you your we our it its "
    "this that these those do does did what which who whom how when where why please can could would should "
    "的 了 是 我 你 他 她 它 们 吗 呢 吧 啊 在 和 与 就 都 也 还 有 没 要 会 个 这 那 "
    "什么 怎么 哪 哪个 哪里 一 上 下".split()
)


_SOMEONE_ELSE = re.compile(
    r"\b(?:my|our)\s+(?:\w+\s+)?(?:kids?|child(?:ren)?|son|daughter|wife|husband|partner|boyfriend|girlfriend"
    r"|mum|mom|mother|dad|father|parents?|sister|brother|siblings?|cousin|aunt|uncle|niece|nephew"
    r"|grand\w+|friend|colleague|co-?worker|boss|manager|neighbou?r|roommate|flatmate|dog|cat|pet|family)"
    r"|我(?:的)?(?:孩子|儿子|女儿|老公|老婆|丈夫|妻子|爱人|对象|男朋友|女朋友|爸|妈|父亲|母亲|父母|哥|姐|弟|妹"
    r"|表|堂|爷爷|奶奶|外公|外婆|姥姥|姥爷|朋友|闺蜜|同事|老板|领导|邻居|室友|同学|狗|猫|宠物|家人)",
    re.IGNORECASE,
)


def asks_about_someone_else(question: str) -> bool:
    """Whether ``question`` asks about someone in the user's life ("my kid", "我女儿"), named or not."""
    return _SOMEONE_ELSE.search(question) is not None


def has_cjk(text: str) -> bool:
    """Whether ``text`` contains Chinese, Japanese or Korean characters."""
    return _CJK.search(text) is not None


def estimate_tokens(text: str) -> int:
    """Rough LLM token count: one per CJK character, 1.3 per other word."""
    cjk = len(_CJK.findall(text))
    words = len(_WORD.findall(_CJK.sub(" ", text)))
    return cjk + math.ceil(words * 1.3)


class Tokenizer:
    """Splits text into lowercase lexical terms; Chinese goes through jieba's search mode.

    jieba's dictionary (a few MB) is loaded on first use, not at import.
    """

    def __init__(self) -> None:
        self._jieba: Any = None
        self._lock = threading.Lock()

    def _segmenter(self) -> Any:
        with self._lock:
            if self._jieba is None:
                import jieba

                jieba.setLogLevel(logging.WARNING)
                jieba.initialize()
                self._jieba = jieba
        return self._jieba

    def terms(self, text: str) -> list[str]:
        """Lexical terms of ``text`` without stopwords or punctuation."""
        folded = unicodedata.normalize("NFKC", text).casefold()
        if _CJK.search(folded):
            pieces = self._segmenter().lcut_for_search(folded)
        else:
            pieces = _WORD.findall(folded)
        stripped = (piece.strip() for piece in pieces)
        return [p for p in stripped if p and _WORD.fullmatch(p) and p not in _STOPWORDS]
