"""Forgetting by words: "忘掉我上次说的出差安排" / "forget my home address"."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from memory_core.embedding import Embedder
from memory_core.llm.structured import StructuredLLM
from memory_core.models import Fact, ProfileEntry
from memory_core.recall import Recaller
from memory_core.store.facts import FactStore
from memory_core.store.profile import ProfileStore
from memory_core.text import has_cjk
from memory_core.write.prompts import forget_match_messages, forget_target_messages
from memory_core.write.schemas import ForgetTarget

# How many stored items the LLM checks one by one for a forget request.
_CANDIDATES = 6
# Candidates may sit a little below the recall threshold: a request names a topic, not a fact.
_THRESHOLD_SLACK = 0.04


@dataclass
class ForgetResult:
    """What a forget request deleted, and the reply to give the user."""

    target: str
    facts: list[Fact] = field(default_factory=list)
    profile_entries: list[ProfileEntry] = field(default_factory=list)
    reply: str = ""


def _reply(utterance: str, target: str, forgotten: list[str]) -> str:
    if has_cjk(utterance):
        if not forgotten:
            return f"我没有找到与“{target}”有关的记忆。"
        return "好的，已经忘掉：" + "；".join(forgotten)
    if not forgotten:
        return f"I have no memories about “{target}”."
    return "OK, I've forgotten: " + "; ".join(forgotten)


class Forgetter:
    """Resolves a forget request to stored facts and profile entries, and deletes them durably."""

    def __init__(
        self,
        llm: StructuredLLM,
        recaller: Recaller,
        facts: FactStore,
        profiles: ProfileStore,
        embedder: Embedder,
    ) -> None:
        self._llm = llm
        self._recaller = recaller
        self._facts = facts
        self._profiles = profiles
        self._embedder = embedder

    def _matches(self, target: str, text: str) -> bool:
        return self._llm.choose(forget_match_messages(target, text), ["yes", "no"]) == "yes"

    def forget(self, user_id: str, utterance: str, now: datetime) -> ForgetResult:
        """Find what ``utterance`` asks to forget among the user's memories and delete it.

        Raises:
            LLMError: the LLM failed; nothing was deleted.
            StorageError: the deletion was not logged.
        """
        target = self._llm.ask(forget_target_messages(utterance), ForgetTarget, max_tokens=60).target.strip()
        threshold = self._embedder.default_threshold - _THRESHOLD_SLACK
        hits = {
            hit.fact.id: hit.fact
            for query in (target, utterance)
            for hit in self._recaller.recall(user_id, query, now, k=_CANDIDATES, threshold=threshold)
        }
        doomed = [fact for fact in hits.values() if self._matches(target, fact.text)]
        entries = self._profiles.get(user_id)
        if entries:
            vectors = self._embedder.embed_passages([e.text for e in entries])
            scores = vectors @ self._embedder.embed_query(target)
            doomed_entries = [
                e
                for e, s in zip(entries, scores, strict=True)
                if s >= threshold and self._matches(target, e.text)
            ]
        else:
            doomed_entries = []
        if doomed:
            self._facts.delete(user_id, [f.id for f in doomed])
        for entry in doomed_entries:
            self._profiles.delete(user_id, entry.key)
        forgotten = [f.text for f in doomed] + [e.text for e in doomed_entries]
        return ForgetResult(target, doomed, doomed_entries, _reply(utterance, target, forgotten))
