"""LoCoMo evidence recall: does a memory system bring back the turns that answer a question?

LoCoMo conversations (``../shared/datasets/locomo/conv-N.json``) are long chats between two
people over many dated sessions, with questions whose answers cite their evidence turns
(``dia_id`` such as ``D3:12``). A system ingests a conversation session by session and
answers each question with its top-k memories; each memory carries the turn ids it came
from. Evidence recall@k of a question is the share of its evidence turns covered by the
sources of those k memories. Category 5 (adversarial: the answer is not in the chat) is
reported but left out of the headline figure, as published work does.

Systems here share one embedder: longmem's real write path (judge, extraction, resolution,
durable stores), raw turns embedded one by one (classic RAG), and the last-N-turns window.
Other systems (mem0) plug in through :class:`System`.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from tqdm import tqdm

from memory_core.clock import ManualClock
from memory_core.dates import find_times
from memory_core.embedding import Embedder
from memory_core.errors import ValidationError
from memory_core.evaluation.answers import judge, summarize
from memory_core.llm.base import LLMEngine
from memory_core.models import RecallHit, Role, Turn
from memory_core.prompt import before_that, event_span
from memory_core.service import open_local_service
from memory_core.settings import Settings
from memory_core.store.fsutil import write_atomically

HEADLINE_EXCLUDED = "5"
_USER = re.compile(r"\bUser\b")
_DIA_ID = re.compile(r"D:?(\d+):(\d+)")
_SESSION_KEY = re.compile(r"session_(\d+)")
_SESSION_TIME = "%I:%M %p on %d %B, %Y"
Progress = Callable[[str], None]


@dataclass(frozen=True)
class LocomoTurn:
    """One turn: its id, speaker and what was said (a shared photo's caption appended)."""

    dia_id: str
    speaker: str
    text: str

    @property
    def content(self) -> str:
        """The turn as every system stores it: ``Speaker: text``."""
        return f"{self.speaker}: {self.text}"


@dataclass(frozen=True)
class LocomoSession:
    """A dated session of turns."""

    number: int
    at: datetime
    turns: tuple[LocomoTurn, ...]


@dataclass(frozen=True)
class LocomoQuestion:
    """A question, its evidence turn ids and its category (kept as the file's number)."""

    question: str
    evidence: tuple[str, ...]
    category: str
    answer: str = ""  # the gold answer (none for category 5, whose answer is not in the chat)


@dataclass(frozen=True)
class LocomoConversation:
    """A conversation with its sessions in order and its questions."""

    id: str
    speakers: tuple[str, str]
    sessions: tuple[LocomoSession, ...]
    questions: tuple[LocomoQuestion, ...]

    @property
    def turns(self) -> list[LocomoTurn]:
        """Every turn, in order."""
        return [turn for session in self.sessions for turn in session.turns]

    def session_dates(self) -> dict[str, str]:
        """Each turn id's session date (``2023-05-08``): what a reader of a raw turn knows of its time."""
        return {t.dia_id: s.at.date().isoformat() for s in self.sessions for t in s.turns}

    @property
    def fingerprint(self) -> str:
        """A digest of the ingested sessions (not the questions): changes when the input does."""
        digest = hashlib.blake2b(digest_size=8)
        for session in self.sessions:
            digest.update(f"{session.number}|{session.at.isoformat()}".encode())
            for turn in session.turns:
                digest.update(f"|{turn.dia_id}|{turn.content}".encode())
        return digest.hexdigest()

    def user_of(self, speaker: str) -> str:
        """The memory user id of one speaker: each speaker is a user of their own."""
        slug = re.sub(r"[^\w.-]+", "-", speaker).strip("-") or "speaker"
        return f"locomo-{self.id}-{slug}"

    def asked_about(self, question: str) -> tuple[str, ...]:
        """Speakers whose memories answer ``question``: the one it names, else both.

        An agent knows whom it talks to; LoCoMo's questions name the person they are about
        ("When did <name> ..."). A question naming both speakers or neither searches both.
        """
        named = [
            s for s in self.speakers if re.search(rf"\b{re.escape(s.split()[0])}\b", question, re.IGNORECASE)
        ]
        return tuple(named) if len(named) == 1 else self.speakers

    def limited(
        self, sessions: int | None = None, questions: int | None = None, turns: int | None = None
    ) -> LocomoConversation:
        """The first ``sessions`` sessions cut after ``turns`` turns in all, and the first
        ``questions`` questions answerable from what is kept."""
        kept: list[LocomoSession] = []
        budget = turns if turns else sum(len(s.turns) for s in self.sessions)
        for session in self.sessions[:sessions] if sessions else self.sessions:
            if budget <= 0:
                break
            kept.append(replace(session, turns=session.turns[:budget]))
            budget -= len(kept[-1].turns)
        ids = {turn.dia_id for session in kept for turn in session.turns}
        asked = [q for q in self.questions if q.evidence and set(q.evidence) <= ids]
        return replace(self, sessions=tuple(kept), questions=tuple(asked[:questions] if questions else asked))


def parse_session_time(text: str) -> datetime:
    """Parse LoCoMo's ``1:56 pm on 8 May, 2023`` (taken as UTC)."""
    try:
        return datetime.strptime(text.strip(), _SESSION_TIME).replace(tzinfo=UTC)
    except ValueError as exc:
        raise ValidationError(f"not a LoCoMo session time: {text!r}") from exc


def parse_evidence(items: Iterable[str]) -> tuple[str, ...]:
    """Turn ids cited as evidence; tolerates the data set's ``D8:6; D9:17`` and ``D:11:26`` forms."""
    found = [f"D{a}:{b}" for item in items for a, b in _DIA_ID.findall(item)]
    return tuple(dict.fromkeys(found))


def _turn(raw: dict[str, Any]) -> LocomoTurn:
    text = str(raw["text"]).strip()
    if raw.get("blip_caption"):
        text = f"{text} [shares {raw['blip_caption']}]"
    return LocomoTurn(dia_id=str(raw["dia_id"]), speaker=str(raw["speaker"]), text=text)


def parse_conversation(conv_id: str, data: dict[str, Any]) -> LocomoConversation:
    """Build a conversation from one LoCoMo JSON object.

    Raises:
        ValidationError: a required field is missing or malformed.
    """
    try:
        numbers = sorted(int(m.group(1)) for key in data if (m := _SESSION_KEY.fullmatch(key)))
        sessions = tuple(
            LocomoSession(
                number=n,
                at=parse_session_time(data[f"session_{n}_date_time"]),
                turns=tuple(_turn(raw) for raw in data[f"session_{n}"]),
            )
            for n in numbers
        )
        # An evidence id naming no turn of the conversation (one in the shared set) cannot be covered.
        known = {turn.dia_id for session in sessions for turn in session.turns}
        questions = tuple(
            LocomoQuestion(
                question=str(q["question"]),
                evidence=tuple(e for e in parse_evidence(q.get("evidence", [])) if e in known),
                category=str(q["category"]),
                answer=str(q.get("answer", "")),
            )
            for q in data["qa"]
        )
        speakers = (str(data["speaker_a"]), str(data["speaker_b"]))
    except (KeyError, TypeError) as exc:
        raise ValidationError(f"{conv_id}: not a LoCoMo conversation (missing {exc})") from exc
    if not sessions:
        raise ValidationError(f"{conv_id}: no sessions")
    return LocomoConversation(conv_id, speakers, sessions, questions)


def load_locomo(
    directory: Path, limit: int | None = None, ids: Sequence[str] | None = None
) -> list[LocomoConversation]:
    """The conversations ``conv-*.json`` of ``directory``, sorted by name, at most ``limit``.

    Args:
        directory: the data set's folder.
        limit: keep the first ``limit`` conversations.
        ids: keep only these conversations (file names without ``.json``, e.g. ``conv-30``).

    Raises:
        ValidationError: the directory holds no conversation, an id names none, or a file is
            malformed.
    """
    files = sorted(directory.glob("conv-*.json"))
    if not files:
        raise ValidationError(f"no LoCoMo conversations (conv-*.json) in {directory}")
    if ids:
        missing = sorted(set(ids) - {f.stem for f in files})
        if missing:
            raise ValidationError(f"no conversation {', '.join(missing)} in {directory}")
        files = [f for f in files if f.stem in ids]
    out = []
    for path in files[:limit] if limit else files:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValidationError(f"cannot read {path}: {exc}") from exc
        out.append(parse_conversation(path.stem, data))
    return out


@dataclass(frozen=True)
class Retrieved:
    """One recalled memory and the turn ids it came from."""

    text: str
    sources: tuple[str, ...]
    score: float = 0.0
    context: str = ""  # what an answering LLM reads of it (dated); ``text`` when empty


@dataclass
class ConversationRun:
    """What a system did with one conversation: its cost and its answers (one list per question)."""

    conversation: str
    results: list[list[Retrieved]]
    memories: int = 0
    llm_calls: int = 0
    llm_tokens: int = 0
    ingest_seconds: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)
    # Per question, what the system puts before its recalled memories whatever the question
    # (longmem's profiles): part of the answering context.
    background: list[list[str]] = field(default_factory=list)

    def context(self, n: int) -> list[str]:
        """What question ``n`` is answered from: the background, then each memory's context."""
        lines = self.background[n] if self.background else []
        return [*lines, *(r.context or r.text for r in self.results[n])]


class System(Protocol):
    """A memory system under evaluation."""

    name: str

    def run(self, conversation: LocomoConversation, k: int) -> ConversationRun:
        """Ingest the conversation's sessions in order, then answer each question with k memories."""
        ...


def evidence_recall(evidence: Sequence[str], retrieved: Sequence[Retrieved]) -> float:
    """Share of ``evidence`` turn ids found among the sources of ``retrieved``."""
    covered = {source for item in retrieved for source in item.sources}
    return sum(1 for e in evidence if e in covered) / len(evidence)


def paired_turns(session: LocomoSession) -> list[tuple[LocomoTurn, LocomoTurn | None]]:
    """Each turn with the other speaker's turn just before it (its context), if any."""
    out: list[tuple[LocomoTurn, LocomoTurn | None]] = []
    for i, turn in enumerate(session.turns):
        before = session.turns[i - 1] if i else None
        out.append((turn, before if before is not None and before.speaker != turn.speaker else None))
    return out


def merge_top_k(lists: Iterable[Sequence[Retrieved]], k: int) -> list[Retrieved]:
    """The k best-scored memories of several users' result lists."""
    return sorted((r for got in lists for r in got), key=lambda r: -r.score)[:k]


def _top_k(matrix: np.ndarray, query: np.ndarray, k: int) -> list[tuple[int, float]]:
    if len(matrix) == 0:
        return []
    scores = matrix @ query
    order = np.argsort(-scores, kind="stable")[:k]
    return [(int(i), float(scores[i])) for i in order]


def _turn_retrieved(turn: LocomoTurn, dates: dict[str, str], score: float = 0.0) -> Retrieved:
    return Retrieved(
        turn.content, (turn.dia_id,), score, context=f"(said {dates[turn.dia_id]}) {turn.content}"
    )


class RawTurnsSystem:
    """Classic RAG: every turn embedded on its own, questions answered by the k nearest turns."""

    name = "raw_turns"

    def __init__(self, embedder: Embedder) -> None:
        self._embedder = embedder

    def run(self, conversation: LocomoConversation, k: int) -> ConversationRun:
        """Embed the turns (timed as ingest), then search them."""
        turns = conversation.turns
        start = time.perf_counter()
        matrix = self._embedder.embed_passages([t.content for t in turns])
        ingest = time.perf_counter() - start
        queries = self._embedder.embed_queries([q.question for q in conversation.questions])
        dates = conversation.session_dates()
        results = [
            [_turn_retrieved(turns[i], dates, score) for i, score in _top_k(matrix, q, k)] for q in queries
        ]
        return ConversationRun(conversation.id, results, memories=len(turns), ingest_seconds=ingest)


class WindowSystem:
    """What pasting recent history keeps: the last ``turns`` turns, whatever the question."""

    name = "window"

    def __init__(self, turns: int) -> None:
        self.turns = turns

    def run(self, conversation: LocomoConversation, k: int) -> ConversationRun:
        """Every question gets the same window (``k`` does not apply)."""
        dates = conversation.session_dates()
        window = [_turn_retrieved(t, dates) for t in conversation.turns[-self.turns :]]
        return ConversationRun(
            conversation.id,
            [window for _ in conversation.questions],
            memories=len(window),
            extra={"window_turns": self.turns},
        )


def write_path_version() -> str:
    """A digest of longmem's write-path sources: stored ingests are reused only while it holds."""
    digest = hashlib.blake2b(digest_size=6)
    core = Path(__file__).parent.parent
    for path in [*sorted((core / "write").glob("*.py")), core / "dates.py"]:
        digest.update(path.read_bytes())
    return digest.hexdigest()


@dataclass
class _IngestState:
    """Progress of one conversation's ingest, saved after each session so a run can resume."""

    sessions_done: int = 0
    turns: int = 0
    turns_written: int = 0
    errors: int = 0
    llm_calls: int = 0
    llm_tokens: int = 0
    ingest_seconds: float = 0.0

    @classmethod
    def load(cls, path: Path) -> _IngestState:
        if not path.exists():
            return cls()
        return cls(**json.loads(path.read_text(encoding="utf-8")))

    def save(self, path: Path) -> None:
        payload = json.dumps(self.__dict__).encode("utf-8")
        write_atomically(path, lambda out: out.write(payload))


class LongmemSystem:
    """longmem in-process: every turn through the real write path, questions through recall.

    Each speaker is a longmem user of their own; a turn is that speaker's user turn, with the
    other speaker's turn before it as the assistant's (context only, never extracted). Each
    conversation lives in its own data dir under ``work_dir``, named by the engine, the
    embedder, the write path's sources and the conversation's content: a later run with the
    same inputs resumes after the last finished session instead of ingesting again. Recall
    runs as of one day after the last session, top-k with no score threshold, over the
    speaker the question asks about (both, merged by score, when it names neither or both).
    """

    name = "longmem"

    def __init__(
        self,
        settings: Settings,
        engine: LLMEngine,
        embedder: Embedder,
        work_dir: Path,
        progress: bool = True,
    ) -> None:
        self._settings = settings
        self._engine = engine
        self._embedder = embedder
        self._work_dir = work_dir
        self._progress = progress

    def data_dir(self, conversation: LocomoConversation) -> Path:
        """Where this conversation's memories live."""
        key = f"{self._engine.name}|{self._embedder.name}|{write_path_version()}"
        tag = hashlib.blake2b(key.encode(), digest_size=6).hexdigest()
        return self._work_dir / f"longmem-{tag}" / f"{conversation.id}-{conversation.fingerprint}"

    def run(self, conversation: LocomoConversation, k: int) -> ConversationRun:
        """Ingest what is not ingested yet, then recall for every question."""
        data_dir = self.data_dir(conversation)
        settings = self._settings.model_copy(
            update={"storage": self._settings.storage.model_copy(update={"data_dir": data_dir})}
        )
        end = conversation.sessions[-1].at + timedelta(days=1)
        clock = ManualClock(conversation.sessions[0].at)
        state_path = data_dir / "locomo-ingest.json"
        svc = open_local_service(settings, clock, embedder=self._embedder, engine=self._engine)
        try:
            state = _IngestState.load(state_path)
            self._ingest(svc, clock, conversation, state, state_path)
            clock.set(end)

            def recall(speaker: str, question: str) -> list[Retrieved]:
                hits = svc.recall(
                    conversation.user_of(speaker), question, k, threshold=-1.0, at=end, history=True
                )
                # The versions a hit replaced are read with it (dated), so their turns count.
                return [
                    Retrieved(h.fact.text, _shown_sources(h), h.score, _fact_context(h, speaker))
                    for h in hits
                ]

            results = [
                merge_top_k((recall(s, q.question) for s in conversation.asked_about(q.question)), k)
                for q in conversation.questions
            ]
            profiles = {
                s: [f"({s}'s profile) {_as_speaker(e.text, s)}" for e in svc.profile(conversation.user_of(s))]
                for s in conversation.speakers
            }
            background = [
                [line for s in conversation.asked_about(q.question) for line in profiles[s]]
                for q in conversation.questions
            ]
            users = [conversation.user_of(s) for s in conversation.speakers]
            facts = [f for user in users for f in svc.list_facts(user)]
            live = [f for f in facts if f.expire_at is None or f.expire_at > end]
            profile = sum(len(svc.profile(user)) for user in users)
            # Memories of turns that spoke of a time ("two days ago", "上个月"): how many kept it
            # as a date.
            timed = {t.dia_id for s in conversation.sessions for t in s.turns if find_times(t.text, s.at)}
            from_timed = [f for f in live if timed.intersection(f.source_turn_ids)]
        finally:
            svc.close()
        return ConversationRun(
            conversation.id,
            results,
            background=background,
            memories=len(live),
            llm_calls=state.llm_calls,
            llm_tokens=state.llm_tokens,
            ingest_seconds=state.ingest_seconds,
            extra={
                "expired_at_recall": len(facts) - len(live),
                "profile_entries": profile,
                "memories_of_timed_turns": len(from_timed),
                "dated_memories_of_timed_turns": sum(f.event_start is not None for f in from_timed),
                "turns": state.turns,
                "turns_written": state.turns_written,
                "turn_errors": state.errors,
                "data_dir": str(data_dir),
            },
        )

    def _ingest(
        self,
        svc: Any,
        clock: ManualClock,
        conversation: LocomoConversation,
        state: _IngestState,
        state_path: Path,
    ) -> None:
        todo = conversation.sessions[state.sessions_done :]
        bar = tqdm(
            total=sum(len(s.turns) for s in todo),
            desc=f"longmem {conversation.id}",
            unit="turn",
            disable=not self._progress,
        )
        with bar:
            for session in todo:
                start = time.perf_counter()
                for i, (raw, before) in enumerate(paired_turns(session)):
                    at = session.at + timedelta(seconds=i)
                    clock.set(at)
                    turns = [Turn(role=Role.USER, content=raw.text, at=at, turn_id=raw.dia_id)]
                    if before is not None:
                        turns.insert(0, Turn(role=Role.ASSISTANT, content=before.text, at=at))
                    user = conversation.user_of(raw.speaker)
                    for outcome in svc.ingest(user, f"session-{session.number}", turns, at):
                        state.turns += 1
                        state.turns_written += bool(outcome.facts or outcome.profile_entries)
                        state.errors += outcome.error is not None
                        state.llm_calls += outcome.llm_calls
                        state.llm_tokens += outcome.llm_tokens
                    bar.update(1)
                state.sessions_done += 1
                state.ingest_seconds += time.perf_counter() - start
                state.save(state_path)


def _as_speaker(text: str, speaker: str) -> str:
    """A stored note ("User's sister …") with the speaker it belongs to named, for a reader who
    answers questions about both speakers."""
    return _USER.sub(speaker.split()[0], text)


def _shown_sources(hit: RecallHit) -> tuple[str, ...]:
    """The turns behind a hit and behind each version it replaced, first seen first."""
    turns = [t for fact in (hit.fact, *hit.replaced) for t in fact.source_turn_ids]
    return tuple(dict.fromkeys(turns))


def _fact_context(hit: RecallHit, speaker: str) -> str:
    """A recalled fact dated as the chat prompt dates it: when it was said, the time it speaks of,
    and what it replaced."""
    fact = hit.fact
    happened = f"; happened {event_span(fact)}" if fact.event_start is not None else ""
    said = f"(said {fact.created_at.date().isoformat()}{happened}) {_as_speaker(fact.text, speaker)}"
    return said + before_that(hit, lambda text: _as_speaker(text, speaker))


def _per(count: int, turns: int) -> float | None:
    return round(count / turns, 3) if turns else None


def _mean(values: Sequence[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def score_system(
    conversations: Sequence[LocomoConversation], runs: Sequence[ConversationRun]
) -> dict[str, Any]:
    """A system's report entry: headline recall (category 5 out), per category, cost totals."""
    by_category: dict[str, list[float]] = {}
    headline: list[float] = []
    per_conversation = []
    for conversation, run in zip(conversations, runs, strict=True):
        scores = []
        # Each scored question with what was recalled for it: a miss is read from the report.
        asked = []
        for question, retrieved in zip(conversation.questions, run.results, strict=True):
            if not question.evidence:  # nothing to cover: the data set has a few such questions
                continue
            value = evidence_recall(question.evidence, retrieved)
            by_category.setdefault(question.category, []).append(value)
            if question.category != HEADLINE_EXCLUDED:
                headline.append(value)
                scores.append(value)
            asked.append(
                {
                    "question": question.question,
                    "category": question.category,
                    "evidence": list(question.evidence),
                    "evidence_recall": round(value, 4),
                    "recalled": [
                        {"text": r.text, "sources": list(r.sources), "score": round(r.score, 4)}
                        for r in retrieved
                    ],
                }
            )
        per_conversation.append(
            {
                "id": conversation.id,
                "evidence_recall": _mean(scores),
                "memories": run.memories,
                "memories_per_turn": _per(run.memories, len(conversation.turns)),
                "llm_calls": run.llm_calls,
                "llm_tokens": run.llm_tokens,
                "ingest_seconds": round(run.ingest_seconds, 2),
                **run.extra,
                "questions": asked,
            }
        )
    return {
        "evidence_recall": _mean(headline),
        "questions": len(headline),
        "by_category": {c: _mean(v) for c, v in sorted(by_category.items())},
        "questions_by_category": {c: len(v) for c, v in sorted(by_category.items())},
        "memories": sum(r.memories for r in runs),
        "memories_per_turn": _per(sum(r.memories for r in runs), sum(len(c.turns) for c in conversations)),
        "llm_calls": sum(r.llm_calls for r in runs),
        "llm_tokens": sum(r.llm_tokens for r in runs),
        "ingest_seconds": round(sum(r.ingest_seconds for r in runs), 2),
        "per_conversation": per_conversation,
    }


def run_locomo(
    conversations: Sequence[LocomoConversation],
    systems: Sequence[System],
    k: int,
    progress: Progress = lambda _: None,
    qa: LLMEngine | None = None,
) -> dict[str, Any]:
    """Run every system on every conversation and build the JSON report; with ``qa``, also
    answer every question that has a gold answer from each system's context and judge it
    (:mod:`memory_core.evaluation.answers`)."""
    if k < 1:
        raise ValidationError("k must be at least 1")
    start = time.perf_counter()
    report_systems = {}
    for system in systems:
        runs = []
        for conversation in conversations:
            began = time.perf_counter()
            runs.append(system.run(conversation, k))
            progress(f"{system.name} {conversation.id}: {time.perf_counter() - began:.1f} s")
        report_systems[system.name] = score_system(conversations, runs)
        progress(f"{system.name}: evidence recall@{k} = {report_systems[system.name]['evidence_recall']}")
        if qa is not None:
            judged = [
                judge(qa, question.question, question.category, question.answer, run.context(n))
                for conversation, run in zip(conversations, runs, strict=True)
                for n, question in enumerate(conversation.questions)
                if question.answer
            ]
            report_systems[system.name]["qa"] = summarize(judged, HEADLINE_EXCLUDED)
            progress(f"{system.name}: J = {report_systems[system.name]['qa']['j']}")
    return {
        "k": k,
        "conversations": [
            {
                "id": c.id,
                "sessions": len(c.sessions),
                "turns": len(c.turns),
                "questions": len(c.questions),
            }
            for c in conversations
        ],
        "systems": report_systems,
        "qa_engine": qa.name if qa is not None else None,
        "wall_seconds": round(time.perf_counter() - start, 1),
    }


def report_table(report: dict[str, Any]) -> str:
    """The report as a small text table: one row per system (J and context tokens with --qa)."""
    categories = sorted({c for s in report["systems"].values() for c in s["by_category"]})
    qa = any("qa" in s for s in report["systems"].values())
    head = [
        "system",
        f"recall@{report['k']}",
        *[f"cat {c}" for c in categories],
        "memories",
        "per turn",
        "llm calls",
    ]
    head += ["J", "context tokens"] if qa else []
    rows = [head]
    for name, entry in report["systems"].items():
        cells = [entry["by_category"].get(c) for c in categories]
        row = [
            name,
            str(entry["evidence_recall"]),
            *[str(c) for c in cells],
            str(entry["memories"]),
            str(entry["memories_per_turn"]),
            str(entry["llm_calls"]),
        ]
        if qa:
            judged = entry.get("qa", {})
            row += [str(judged.get("j")), str(judged.get("context_tokens_mean"))]
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) for row in rows)
