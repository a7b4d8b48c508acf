"""Recall: the few facts that matter for a question, from the asking user's partition only."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from datetime import datetime

from memory_core import telemetry
from memory_core.dates import Period, period_of
from memory_core.embedding import Embedder
from memory_core.models import Fact, ProfileEntry, RecallHit
from memory_core.settings import RecallSettings
from memory_core.store.facts import FactStore
from memory_core.text import Tokenizer, asks_about_someone_else, has_cjk

_BM25_K1 = 1.2
_BM25_B = 0.75
# Vector search returns this many candidates per wanted hit; lexical matching re-ranks them.
_CANDIDATES_PER_HIT = 4
_MIN_CANDIDATES = 20


def bm25_scores(query_terms: Sequence[str], docs: Sequence[Sequence[str]]) -> list[float]:
    """Okapi BM25 of each doc for the query, with IDF taken over ``docs`` themselves."""
    if not docs or not query_terms:
        return [0.0] * len(docs)
    n = len(docs)
    avg_len = sum(len(d) for d in docs) / n or 1.0
    df = Counter(term for doc in docs for term in set(doc))
    scores = []
    for doc in docs:
        tf = Counter(doc)
        norm = _BM25_K1 * (1 - _BM25_B + _BM25_B * len(doc) / avg_len)
        score = 0.0
        for term in set(query_terms):
            if tf[term]:
                idf = math.log(1 + (n - df[term] + 0.5) / (df[term] + 0.5))
                score += idf * tf[term] * (_BM25_K1 + 1) / (tf[term] + norm)
        scores.append(score)
    return scores


def saturate(score: float) -> float:
    """Map a BM25 score onto [0, 1): about 0.5 for one shared uncommon term."""
    return score / (score + 1.5)


def event_period(fact: Fact) -> Period | None:
    """The days a fact speaks of, when it names a time."""
    if fact.event_start is None or fact.event_end is None:
        return None
    return Period(fact.event_start, fact.event_end)


class Recaller:
    """Ranks a user's facts for a question: exact cosine search, then BM25 fused in."""

    def __init__(
        self, store: FactStore, embedder: Embedder, settings: RecallSettings, tokenizer: Tokenizer
    ) -> None:
        self._store = store
        self._embedder = embedder
        self._settings = settings
        self._tokenizer = tokenizer

    def recall(
        self,
        user_id: str,
        question: str,
        now: datetime,
        k: int | None = None,
        threshold: float | None = None,
        history: bool = False,
    ) -> list[RecallHit]:
        """Return up to ``k`` of ``user_id``'s live facts whose fused score reaches the threshold.

        Args:
            user_id: the asking user; only their partition is searched.
            question: the question or current message.
            now: facts expired at this time are never returned.
            k: how many at most (settings' default when None).
            threshold: least fused score (settings' default when None).
            history: also fetch what each hit replaced (``RecallHit.replaced``): "where did I live
                before?" needs the old city (one more store call).

        Returns:
            Hits, best first.
        """
        return self._recall(user_id, question, now, k, threshold, history, with_profile=False)[0]

    def recall_with_profile(
        self,
        user_id: str,
        question: str,
        now: datetime,
        k: int | None = None,
        threshold: float | None = None,
        history: bool = False,
    ) -> tuple[list[RecallHit], list[ProfileEntry]]:
        """:meth:`recall`, and the user's profile entries fetched in the same store call."""
        return self._recall(user_id, question, now, k, threshold, history, with_profile=True)

    def _recall(
        self,
        user_id: str,
        question: str,
        now: datetime,
        k: int | None,
        threshold: float | None,
        history: bool,
        with_profile: bool,
    ) -> tuple[list[RecallHit], list[ProfileEntry]]:
        k = k or self._settings.k
        if threshold is None:
            threshold = self._settings.threshold
        if threshold is None:
            threshold = self._embedder.default_threshold
        with telemetry.span("longmem.recall", k=k) as traced:
            with telemetry.span("embed"):
                vector = self._embedder.embed_query(question)
            want = max(k * _CANDIDATES_PER_HIT, _MIN_CANDIDATES)
            with telemetry.span("search", candidates_wanted=want) as searched:
                if with_profile:
                    candidates, profile = self._store.recall(user_id, vector, want, now)
                else:
                    candidates, profile = self._store.search(user_id, vector, want, now), []
                searched.set_attribute("longmem.candidates", len(candidates))
            with telemetry.span("rank"):
                ranked = self.rank(question, candidates, period_of(question, now))
                kept = self._cut(question, ranked, threshold)[:k]
            if history and kept:
                with telemetry.span("history"):
                    chains = self._store.replaced(user_id, [hit.fact.id for hit in kept])
                for hit in kept:
                    hit.replaced = chains.get(hit.fact.id, [])
            traced.set_attribute("longmem.hits", len(kept))
        return kept, profile

    def _cut(self, question: str, hits: list[RecallHit], threshold: float) -> list[RecallHit]:
        # A question and a fact in different languages score lower for the same meaning (the
        # embedder's measured gap): the same bar for both would drop every cross-language fact.
        cjk = has_cjk(question)
        gap = self._embedder.cross_language_gap
        bars = [threshold - (gap if has_cjk(h.fact.text) != cjk else 0.0) for h in hits]
        kept = [h for h, bar in zip(hits, bars, strict=True) if h.score >= bar]
        # The best hit alone may sit a little under the bar: a short fact ("User plays the oboe")
        # scores just under it for a plain question about it ("Which instrument do I play?").
        if not kept and hits and hits[0].score >= bars[0] - self._settings.best_hit_slack:
            kept = hits[:1]
        return kept

    def rank(
        self, question: str, candidates: Sequence[tuple[Fact, float]], asked: Period | None = None
    ) -> list[RecallHit]:
        """Fuse cosine and lexical scores of candidate facts; best first.

        A fact about another person ("User's sister Ana lives in Denver") loses
        ``other_person_penalty`` unless the question names them: it must not answer a question
        about the user themselves ("Where do I live?"). When the question asks about a period
        (``asked``: "last week", "去年"), a fact whose event time falls in it gains ``period_bonus``.
        """
        weight = self._settings.lexical_weight
        terms = self._tokenizer.terms(question) if candidates else []
        lexical = [0.0] * len(candidates)
        if weight > 0 and candidates:
            docs = [self._tokenizer.terms(fact.text) for fact, _ in candidates]
            lexical = [saturate(s) for s in bm25_scores(terms, docs)]
        named = set(terms)
        # "How tall is my kid now?" asks about someone in the user's life, if not by name.
        about_others = asks_about_someone_else(question)
        hits = []
        for (fact, cos), lex in zip(candidates, lexical, strict=True):
            score = cos + weight * lex
            if fact.about and not about_others and not named.intersection(self._tokenizer.terms(fact.about)):
                score -= self._settings.other_person_penalty
            when = event_period(fact)
            if asked is not None and when is not None and asked.overlaps(when):
                score += self._settings.period_bonus
            hits.append(RecallHit(fact=fact, score=score, vector_score=cos, lexical_score=lex))
        hits.sort(key=lambda h: h.score, reverse=True)
        return hits
