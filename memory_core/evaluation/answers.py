"""Answers, judged: each question answered by the LLM from what a memory system recalled, then
labelled CORRECT or WRONG against the gold answer by the LLM.

The protocol is the one published comparisons of memory systems quote as "J" (the mem0 paper):
one answering prompt and one judging prompt, the same models for every system, generous about
wording (another phrasing, more detail or another date format of the same time is CORRECT), so
that the systems differ only in what they recalled. The judge is asked a yes/no question (does
the answer say what the gold answer says) rather than for a label. Context tokens per answer are reported
beside the score. With the packaged 1.5B model as answerer and judge the figures are weak in
absolute terms: read them side by side, never against published ones.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memory_core.llm.base import ChatMessage, LLMEngine
from memory_core.text import estimate_tokens

ANSWER_MAX_TOKENS = 48
_ANSWER_RULES = (
    "You answer a question about two people who chat with each other, using only the notes below "
    "from their past conversations. Each note says when it was said; a note about an event may "
    "also say when the event happened: a question about when something happened is answered with "
    "that date. When the notes do not say, reply exactly: unknown. Never guess. Reply with the "
    "answer only: a short phrase, at most 12 words."
)
UNKNOWN = "unknown"
_POLAR = frozenset({"yes", "no", "not", "none", "never"})
_HEDGES = _POLAR | {"or", "maybe", "unknown", "unclear", "idea"}
_AROUND = 4
_FILLER = frozenset({"a", "an", "the", "of", "in", "on", "at", "to", "and", "is", "was", "by", "for"})
# A 1.5B judge picking CORRECT/WRONG marked even a verbatim answer WRONG; asked whether the two
# say the same thing it graded ten hand-made pairs right (memory_core/evaluation, 2026-12-06).
_JUDGE_QUESTION = (
    "Does the given answer say the same thing as the gold answer? Other wording, extra detail, or "
    'the same date or period written another way still count as the same. "unknown" is never the '
    "same. Reply yes or no."
)
VERDICTS = ("yes", "no")


@dataclass(frozen=True)
class Judged:
    """One question answered from a system's context and graded."""

    question: str
    category: str
    gold: str
    answer: str
    correct: bool
    context_tokens: int


def answer_messages(question: str, context: Sequence[str]) -> list[ChatMessage]:
    """The answering prompt: the rules, the notes one per line, the question."""
    notes = "\n".join(f"- {line}" for line in context)
    return [
        ChatMessage(role="system", content=_ANSWER_RULES),
        ChatMessage(role="user", content=f"Notes:\n{notes}\n\nQuestion: {question}"),
    ]


def judge_messages(question: str, gold: str, answer: str) -> list[ChatMessage]:
    """The judging prompt: the question, the gold answer, the answer to grade."""
    return [
        ChatMessage(
            role="user",
            content=f"Question: {question}\nGold answer: {gold}\nGiven answer: {answer}\n\n{_JUDGE_QUESTION}",
        )
    ]


def _words(text: str) -> list[str]:
    return [w for w in re.findall(r"\w+", text.casefold()) if w not in _FILLER]


def _contains(answer: str, gold: str) -> bool:
    """Whether the answer is the gold answer with a few words around it ("City hospital" for
    "hospital", which the judge graded WRONG): CORRECT without asking. Not for yes/no golds, nor
    for answers that hedge or negate ("Paris or Rome", "not Rome"): the judge reads those."""
    wanted, said = _words(gold), _words(answer)
    if not wanted or set(wanted) & _POLAR or (_HEDGES & set(said)) - set(wanted):
        return False
    return set(wanted) <= set(said) and len(said) <= len(wanted) + _AROUND


def _says_unknown(answer: str) -> bool:
    return _words(answer) == [UNKNOWN] or not _words(answer)


def judge(engine: LLMEngine, question: str, category: str, gold: str, context: Sequence[str]) -> Judged:
    """Answer ``question`` from ``context`` and grade the answer against ``gold``: "unknown" is
    WRONG, an answer holding every word of the gold answer is CORRECT, the LLM judges the rest.
    No context: the answer is "unknown" without a call (with no notes the model guesses).

    Raises:
        LLMUnavailableError: the engine cannot run.
    """
    answer, correct = UNKNOWN, False
    if context:
        answer = engine.complete_text(answer_messages(question, context), ANSWER_MAX_TOKENS).text.strip()
        correct = not _says_unknown(answer) and (
            _contains(answer, gold)
            or engine.complete_choice(judge_messages(question, gold, answer), VERDICTS).text.strip()
            == VERDICTS[0]
        )
    return Judged(
        question=question,
        category=category,
        gold=gold,
        answer=answer,
        correct=correct,
        context_tokens=estimate_tokens("\n".join(context)),
    )


def summarize(judged: Sequence[Judged], excluded_category: str) -> dict[str, Any]:
    """J (share CORRECT) over the questions outside ``excluded_category``, per category, and the
    mean context tokens per answer; every graded answer listed for reading."""
    scored = [j for j in judged if j.category != excluded_category]
    by_category: dict[str, list[bool]] = {}
    for item in judged:
        by_category.setdefault(item.category, []).append(item.correct)
    return {
        "j": round(sum(j.correct for j in scored) / len(scored), 4) if scored else None,
        "questions": len(scored),
        "j_by_category": {c: round(sum(v) / len(v), 4) for c, v in sorted(by_category.items())},
        "context_tokens_mean": round(sum(j.context_tokens for j in scored) / len(scored), 1)
        if scored
        else None,
        "answers": [j.__dict__ for j in judged],
    }
