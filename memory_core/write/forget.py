"""Forgetting by words: "忘掉我上次说的健身计划" / "forget my old gym membership"."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from memory_core.embedding import Embedder
from memory_core.llm.structured import StructuredLLM
from memory_core.models import Fact, ProfileEntry
from memory_core.recall import Recaller
from memory_core.store.facts import FactStore
from memory_core.text import Tokenizer, has_cjk
from memory_core.write.prompts import forget_match_messages, forget_target_messages
from memory_core.write.schemas import ForgetTarget

# How many stored facts are looked at for one request.
_CANDIDATES = 12
# How many of the looked-at memories that were kept the reply names.
_KEPT_SHOWN = 3
# Generic things a request may name. A memory's mean cosine to those of its language is its
# baseline: the embedder puts short "User ..." sentences close to almost any phrase, so a
# memory counts as named only when it stands out above its own baseline.
_PROBES = (
    "phone number", "holiday trip", "job", "family member", "health problem", "hobby",
    "home address", "money", "appointment", "partner", "pet", "school",
    "电话号码", "旅行", "工作", "家人", "健康问题", "爱好", "住址", "钱", "预约", "对象", "宠物", "学校",
)  # fmt: skip
# Words of a target phrase that name nothing by themselves.
_VAGUE = frozenset(
    "user 用户 old new former details detail stuff things info information everything 信息 事".split()
)


@dataclass
class ForgetResult:
    """What a forget request deleted, what it looked at and kept, and the reply to give the user."""

    target: str
    facts: list[Fact] = field(default_factory=list)
    profile_entries: list[ProfileEntry] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    reply: str = ""
    earlier_versions: int = 0  # superseded versions of the deleted facts, deleted with them

    def named(self) -> list[str]:
        """The target and the text of every deleted memory."""
        return [
            self.target,
            *(fact.text for fact in self.facts),
            *(entry.text for entry in self.profile_entries),
        ]


def _reply(utterance: str, target: str, forgotten: list[str], kept: list[str]) -> str:
    zh = has_cjk(utterance)
    if not forgotten:
        text = f"我没有找到与“{target}”有关的记忆。" if zh else f"I have no memories about “{target}”."
    else:
        text = ("好的，已经忘掉：" if zh else "OK, I've forgotten: ") + ("；" if zh else "; ").join(forgotten)
    if kept:
        text += ("。仍然记得：" if zh else ". Still kept: ") + ("；" if zh else "; ").join(kept[:_KEPT_SHOWN])
    return text


class Forgetter:
    """Resolves a forget request to the stored facts and profile entries it names, and deletes them.

    Each memory nearest to the request's target phrase is decided on its own. It is deleted when
    it stands out: its cosine to the target is at least the embedder's ``forget_margin`` above
    its baseline (see ``_PROBES``); or when the LLM says it is about that thing and it either
    shares a word with the target or leads every other memory's lift by ``forget_standout``.
    The small default model answers yes to almost any memory it is shown, so it is never asked
    about a memory that has none of these. A fact about another person is deleted only when the
    request names them.
    """

    def __init__(
        self,
        llm: StructuredLLM,
        recaller: Recaller,
        facts: FactStore,
        embedder: Embedder,
        tokenizer: Tokenizer,
    ) -> None:
        self._llm = llm
        self._recaller = recaller
        self._facts = facts
        self._embedder = embedder
        self._tokenizer = tokenizer
        self._probes: dict[bool, np.ndarray] = {}

    def _baselines(self, texts: list[str], vectors: np.ndarray) -> np.ndarray:
        if not self._probes:
            matrix = self._embedder.embed_queries(_PROBES)
            cjk = np.array([has_cjk(p) for p in _PROBES])
            self._probes = {True: matrix[cjk], False: matrix[~cjk]}
        return np.array(
            [float((self._probes[has_cjk(t)] @ v).mean()) for t, v in zip(texts, vectors, strict=True)]
        )

    def _words(self, text: str) -> set[str]:
        return set(self._tokenizer.terms(text)) - _VAGUE

    def forget(self, user_id: str, utterance: str, now: datetime) -> ForgetResult:
        """Find what ``utterance`` asks to forget among the user's memories and delete it.

        Raises:
            LLMError: the LLM failed; nothing was deleted.
            StorageError: the deletion was not logged.
        """
        target = self._llm.ask(forget_target_messages(utterance), ForgetTarget, max_tokens=60).target.strip()
        asked = self._words(utterance)
        facts = [
            hit.fact
            for hit in self._recaller.recall(user_id, target, now, k=_CANDIDATES, threshold=-1.0)
            # A fact about someone else goes only when the request names them ("my sister's").
            if not hit.fact.about or asked & self._words(hit.fact.about)
        ]
        entries = self._facts.profile(user_id)
        items: list[Fact | ProfileEntry] = [*facts, *entries]
        texts = [item.text for item in items]
        vectors = np.vstack(
            [
                self._facts.vectors_of(user_id, [f.id for f in facts]),
                self._embedder.embed_passages([e.text for e in entries]),
            ]
        )
        cosines = vectors @ self._embedder.embed_query(target)
        lifts = cosines - self._baselines(texts, vectors)
        words = self._words(target)
        ranked = np.argsort(-lifts)
        leader = (
            int(ranked[0])
            if len(ranked) > 1 and lifts[ranked[0]] - lifts[ranked[1]] >= self._embedder.forget_standout
            else None
        )
        doomed: list[Fact | ProfileEntry] = []
        kept: list[str] = []
        for n in np.argsort(-cosines):
            item, text, cosine = items[n], texts[n], float(cosines[n])
            if lifts[n] >= self._embedder.forget_margin or (
                (n == leader or words & self._words(text))
                and self._llm.choose(forget_match_messages(target, text), ["yes", "no"]) == "yes"
            ):
                doomed.append(item)
            elif cosine >= self._embedder.default_threshold:
                kept.append(text)
        doomed_facts = [item for item in doomed if isinstance(item, Fact)]
        doomed_entries = [item for item in doomed if isinstance(item, ProfileEntry)]
        earlier = 0
        if doomed_facts:
            deleted = self._facts.delete(user_id, [f.id for f in doomed_facts])
            earlier = len(deleted) - len(doomed_facts)
        for entry in doomed_entries:
            self._facts.delete_profile(user_id, entry.key)
        forgotten = [item.text for item in doomed]
        return ForgetResult(
            target, doomed_facts, doomed_entries, kept, _reply(utterance, target, forgotten, kept), earlier
        )
