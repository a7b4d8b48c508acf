"""The write path after each conversation turn: judge, extract, resolve against stored facts, write."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import numpy as np

from memory_core import telemetry
from memory_core.dates import Period, find_times, resolve_times
from memory_core.embedding import Embedder
from memory_core.errors import LLMError, LLMUnavailableError, NotFoundError, ProfileFullError
from memory_core.llm.structured import StructuredLLM
from memory_core.models import Fact, Layer, NewFact, Role, Tag, Turn
from memory_core.settings import Settings
from memory_core.store.facts import FactStore
from memory_core.store.profile import learned_source
from memory_core.text import Tokenizer
from memory_core.write.analyze import TurnAnalyzer, has_near_time_cue, places_within_days
from memory_core.write.forget import ForgetResult, Forgetter
from memory_core.write.prefilter import sentences
from memory_core.write.prompts import resolve_messages
from memory_core.write.quoted import quoted_wish
from memory_core.write.schemas import RELATIONS, ExtractedFact
from memory_core.write.speakers import agrees, borrowed_words, echoed, listener_names, statements

log = logging.getLogger("longmem.write")

# A turn is the server's to fail, reported with the error instead of waited for, after this many
# tries in a row, over at least this many seconds, that failed as unavailable (not busy or
# limited: 429, 503) while the LLM answered a minimal request right after each.
TRIES_WHILE_LLM_ANSWERS = 5
FAILING_WHILE_LLM_ANSWERS_S = 300.0


@dataclass
class TurnOutcome:
    """What the write path did with one user turn."""

    turn_id: str
    skipped: str | None = None  # pre-filter reason, "judge", or "error"
    facts: list[Fact] = field(default_factory=list)
    profile_entries: int = 0
    profile_full: int = 0  # wishes not stored: the profile is at its cap with entries set on purpose
    quoted: int = 0  # profile items dropped as wishes of quoted or pasted text, not the user's
    duplicates: int = 0
    echoes: int = 0  # extracted facts dropped as the other party's words, not the user's
    # Stored facts this turn said again: the turn joined their sources.
    repeated: list[int] = field(default_factory=list)
    superseded: list[int] = field(default_factory=list)
    forgotten: ForgetResult | None = None
    llm_calls: int = 0
    llm_tokens: int = 0
    seconds: float = 0.0
    error: str | None = None


@dataclass
class _Plan:
    """Writes decided for one turn, applied together."""

    new: list[tuple[ExtractedFact, np.ndarray, Period | None]] = field(default_factory=list)
    replaces: dict[int, int] = field(default_factory=dict)  # index in ``new`` -> old fact id
    repeats: list[int] = field(default_factory=list)  # stored facts the turn says again
    profile: list[ExtractedFact] = field(default_factory=list)
    quoted: int = 0
    duplicates: int = 0
    echoes: int = 0


class _OwnFailures:
    """One turn's tries in a row that failed as unavailable while the LLM answered a minimal
    request at once after each, and did not say it was busy or limited."""

    def __init__(self) -> None:
        self.tries = 0
        self._since = 0.0

    def add(self, exc: LLMUnavailableError, answered: bool) -> bool:
        """Count a failed try (``answered``: the minimal request after it was answered at once);
        True when the turn is the server's to fail."""
        if not answered or exc.overloaded:
            self.tries = 0
            return False
        self.tries += 1
        if self.tries == 1:
            self._since = time.monotonic()
        return (
            self.tries >= TRIES_WHILE_LLM_ANSWERS
            and time.monotonic() - self._since >= FAILING_WHILE_LLM_ANSWERS_S
        )


class WritePath:
    """Turns conversation turns into durable memories."""

    def __init__(
        self,
        settings: Settings,
        llm: StructuredLLM,
        embedder: Embedder,
        facts: FactStore,
        forgetter: Forgetter,
        tokenizer: Tokenizer,
    ) -> None:
        self._settings = settings
        self._tokenizer = tokenizer
        self._llm = llm
        self._analyzer = TurnAnalyzer(llm)
        self._embedder = embedder
        self._facts = facts
        self.forgetter = forgetter

    def process(
        self,
        user_id: str,
        turns: Sequence[Turn],
        at: datetime,
        session: Sequence[Turn] = (),
        wait_for_llm: Callable[[], bool] | None = None,
    ) -> list[TurnOutcome]:
        """Run the write path over the user turns of ``turns`` (assistant turns give context;
        ``session``: the session's other turns, which tell whom the user talks to).

        A turn whose LLM calls fail is reported with ``error`` and writes nothing; the other
        turns go on. With ``wait_for_llm``, a turn the LLM could not be reached for is not given
        up: ``wait_for_llm`` waits and says whether to go on (True) or stop (False), and the turn
        is tried again once the LLM answers a minimal request. When that request was answered at
        once after each of :data:`TRIES_WHILE_LLM_ANSWERS` tries in a row, over at least
        :data:`FAILING_WHILE_LLM_ANSWERS_S`, and none was refused as busy or limited, it is not
        an outage but a turn the server fails on (times out on, answers 500 to), reported with
        the error: waited for, it held its user's lane, and as the probe of an outage every
        user's queued turns, for good.

        Raises:
            StorageError: a write was not made durable (earlier turns' writes stand).
            LLMUnavailableError: ``wait_for_llm`` said stop; the turns from the one that could
                not be written on are not written (earlier turns' writes stand).
        """
        outcomes: list[TurnOutcome] = []
        context = ""
        listeners = frozenset(listener_names([*session, *turns]))
        for turn in turns:
            if turn.role is Role.ASSISTANT:
                context = turn.content
                continue
            before = self._llm.stats.snapshot()
            start = time.perf_counter()
            with telemetry.span("longmem.write.turn") as traced:
                # What a try deleted before the LLM was lost: the next try must not look again.
                forgotten: list[ForgetResult] = []
                own = _OwnFailures()
                while True:
                    try:
                        outcome = self._process_turn(
                            user_id,
                            turn,
                            context,
                            turn.at or at,
                            listeners,
                            wait_for_llm is not None,
                            forgotten,
                        )
                        break
                    except LLMUnavailableError as exc:  # raised only with wait_for_llm: try again
                        if wait_for_llm is None:
                            raise
                        answered = self._await_llm(wait_for_llm)
                        if answered is None:
                            raise
                        if own.add(exc, answered):
                            said = f"the LLM answers other requests but failed this turn {own.tries} times"
                            outcome = self._failed(turn, exc, forgotten, f"{said}: {exc}")
                            break
                traced.set_attributes(
                    {
                        "longmem.skipped": outcome.skipped or "",
                        "longmem.facts_written": len(outcome.facts),
                        "longmem.profile_entries_written": outcome.profile_entries,
                        "longmem.superseded": len(outcome.superseded),
                        "longmem.repeated": len(outcome.repeated),
                    }
                )
            used = self._llm.stats.minus(before)
            outcome.llm_calls = used.calls
            outcome.llm_tokens = used.prompt_tokens + used.completion_tokens
            outcome.seconds = time.perf_counter() - start
            outcomes.append(outcome)
            context = ""
        return outcomes

    def _await_llm(self, wait_for_llm: Callable[[], bool]) -> bool | None:
        """After a turn failed as unavailable: wait, then send the LLM the shortest request,
        until it is answered (in an outage each retry costs that request, not a turn's prompt).

        Returns:
            True when the first was answered (the failure was the turn's own, not an outage's),
            False when a later one was, None when ``wait_for_llm`` said stop.
        """
        at_once = True
        while wait_for_llm():
            if self._llm.answers():
                return at_once
            at_once = False
        return None

    def _process_turn(
        self,
        user_id: str,
        turn: Turn,
        context: str,
        at: datetime,
        listeners: frozenset[str],
        raise_unavailable: bool = False,
        forgotten: list[ForgetResult] | None = None,
    ) -> TurnOutcome:
        """One user turn through the write path; an LLM failure is reported in the outcome, but
        with ``raise_unavailable`` the LLM not being reached is raised. ``forgotten`` holds what
        an earlier try of this turn deleted (and gets what this one deletes): tried again, the
        turn must not look for the deleted memories, nor let the new facts repeat them."""
        outcome = TurnOutcome(turn_id=turn.turn_id)
        done = [] if forgotten is None else forgotten
        try:
            # Forgetting runs first: a turn can drop an old fact and tell its replacement
            # ("forget my old address, I live on Quay Street now"), and the new fact must stay.
            asks_to_forget = bool(done)
            if not done:
                with telemetry.span("forget_intent"):
                    asks_to_forget = self._analyzer.asks_to_forget(turn.content)
            if asks_to_forget:
                if not done:
                    with telemetry.span("forget"):
                        done.append(self.forgetter.forget(user_id, turn.content, at))
                outcome.forgotten = done[0]
                # No judge here: it said no to a third of the new facts told with a request and
                # yes to a third of the bare requests.
                with telemetry.span("extract") as extracting:
                    extracted = self._analyzer.extract_beside_forgetting(
                        turn.content,
                        context,
                        outcome.forgotten.named(),
                        self._tokenizer.terms,
                        listeners,
                    )
                    extracting.set_attribute("longmem.extracted", len(extracted))
                if not extracted:
                    outcome.skipped = "forget"
                    return outcome
            else:
                # The judge sees the message alone: with the assistant's previous words in front
                # of it, the small default model judged plain personal facts "not worth remembering".
                verdict = self._analyzer.judge(turn.content)
                if not verdict.worth:
                    outcome.skipped = verdict.skipped.value if verdict.skipped else "judge"
                    return outcome
                with telemetry.span("extract") as extracting:
                    extracted = self._analyzer.extract(turn.content, context, listeners)
                    extracting.set_attribute("longmem.extracted", len(extracted))
            with telemetry.span("resolve"):
                plan = self._plan(user_id, extracted, at, turn.content, context)
        except LLMError as exc:
            if raise_unavailable and isinstance(exc, LLMUnavailableError):
                raise
            return self._failed(turn, exc, done)
        with telemetry.span("store"):
            self._apply(user_id, turn, plan, at, outcome)
        return outcome

    @staticmethod
    def _failed(
        turn: Turn, exc: LLMError, forgotten: list[ForgetResult], said: str | None = None
    ) -> TurnOutcome:
        """A turn not written for ``exc`` (``said``: the error to report, when not the
        exception's own words); what a forget request deleted before it stands."""
        # The class only: no user id, turn id or message (which may quote the turn) in logs;
        # the caller gets the whole error in the outcome.
        log.warning("a turn was not written: %s", type(exc).__name__)
        outcome = TurnOutcome(turn_id=turn.turn_id, skipped="error", error=said or str(exc))
        outcome.forgotten = forgotten[0] if forgotten else None
        return outcome

    def _plan(
        self, user_id: str, extracted: list[ExtractedFact], at: datetime, message: str, context: str
    ) -> _Plan:
        plan = _Plan()
        fact_items = [f for f in extracted if f.layer == "fact"]
        said_texts = [f.text for f in fact_items]  # before dates are written in: those are not borrowed
        periods = [self._dated(f, message, at) for f in fact_items]
        wishes = [f for f in extracted if f.layer == "profile"]
        plan.profile = [f for f in wishes if not quoted_wish(f.text, message, self._tokenizer.terms)]
        plan.quoted = len(wishes) - len(plan.profile)
        # What the other party stated, if the user does not agree with it ("me too!"), is
        # embedded with the facts: a fact nearer to it than to the user's own words is theirs.
        # A question ("Do you have pets?") only frames the reply.
        heard = statements(context) if fact_items and not agrees(message) else []
        said = sentences(message) if heard else []
        vectors = self._embedder.embed_passages([f.text for f in fact_items] + said + heard)
        vectors, said_vectors, heard_vectors = np.split(
            vectors, [len(fact_items), len(fact_items) + len(said)]
        )
        borrowed = np.array(
            [borrowed_words(text, message, heard, self._tokenizer.terms) for text in said_texts], dtype=bool
        )
        echoes = echoed(vectors, said_vectors, heard_vectors, self._embedder.echo_margin, borrowed)
        for item, vector, echo, period in zip(fact_items, vectors, echoes, periods, strict=True):
            if echo:
                plan.echoes += 1
                continue
            if any(float(vector @ v) >= self._embedder.duplicate_threshold for _, v, _ in plan.new):
                plan.duplicates += 1
                continue
            # Only a fact of the same kind about the same person can be the same or be replaced (a
            # city by a city, not a company by a wish, nor the user's job by their sister's): the
            # small model called unrelated pairs "update".
            about = item.about.strip().casefold()
            hits = [
                (fact, score)
                for fact, score in self._facts.search(user_id, vector, 3, at)
                if fact.tag == item.tag
                and fact.about.casefold() == about
                and score >= self._embedder.related_threshold
            ]
            if hits:
                old, score = hits[0]
                relation = (
                    "same"
                    if score >= self._embedder.duplicate_threshold
                    else self._llm.choose(resolve_messages(old.text, item.text), RELATIONS)
                )
                if relation == "same":
                    # Said again: one memory, with every turn that said it as a source (a
                    # question about the later turn finds it too).
                    plan.duplicates += 1
                    if old.id not in plan.repeats and old.id not in plan.replaces.values():
                        plan.repeats.append(old.id)
                    continue
                if relation == "update":
                    plan.replaces[len(plan.new)] = old.id
                    if old.id in plan.repeats:  # replaced now: what it repeated lives on in the new one
                        plan.repeats.remove(old.id)
            plan.new.append((item, vector, period))
        return plan

    def _dated(self, item: ExtractedFact, message: str, at: datetime) -> Period | None:
        """Rewrite ``item``'s relative times as the dates they meant when said at ``at`` ("two days
        ago" means nothing a week later); the period it speaks of, or None.

        An event whose text lost the time its message gave ("my flight is tomorrow" → "User has a
        flight") takes the message's, when the message names exactly one; anything else takes a
        day already past that its own sentence names ("lost my job yesterday, so …" → "User lost
        their job and …"), which makes it history.
        """
        item.text, period = resolve_times(item.text.strip(), at)
        if period is not None:
            return period
        if item.tag is Tag.EVENT:
            said = {found.period for found in find_times(message, at)}
            return said.pop() if len(said) == 1 else None
        own = {found.period for found in find_times(self._own_sentence(item.text, message), at)}
        past = own.pop() if len(own) == 1 else None
        return past if past is not None and past.end < at.date() else None

    def _own_sentence(self, text: str, message: str) -> str:
        """The sentence of ``message`` a fact was written from: the one sharing most of its words
        ("" when none shares one)."""
        terms = set(self._tokenizer.terms(text))
        shared = [(len(terms.intersection(self._tokenizer.terms(s))), s) for s in sentences(message)]
        count, sentence = max(shared, key=lambda pair: pair[0], default=(0, ""))
        return sentence if count else ""

    def _expiry(
        self, item: ExtractedFact, message: str, at: datetime, period: Period | None
    ) -> datetime | None:
        # What happened on a day already past when it was said ("lost my job yesterday", "上个月去了
        # 成都") is the user's history, true from then on: expired, it would answer no question
        # about when it happened. The lifetimes are for current situations and plans.
        if period is not None and period.end < at.date():
            return None
        if not self._temporary(item, message, at):
            return None
        ttl = self._settings.temporary_ttl.for_tag(item.tag)
        if item.ttl_days is not None:
            ttl = timedelta(days=item.ttl_days)
        expire = at + ttl
        # A plan for next month stays true until next month is over, whatever its tag's lifetime.
        if period is not None:
            expire = max(expire, datetime.combine(period.end + timedelta(days=1), datetime.min.time(), UTC))
        return expire

    def _temporary(self, item: ExtractedFact, message: str, at: datetime) -> bool:
        """Whether ``item`` soon stops being true. An event is when the small model says so or the
        message places it near ("right now", "下周二": a boarding call must not become a lasting
        fact). Anything else must be placed in time by its own sentence: on a long chat the small
        model called a third of what was told temporary (ongoing things: a book being read, a
        project being worked on), and swept, it answered no later question; and it kept an errand
        of this week ("这周在给孩子挑自行车") as a lasting requirement, its "这周" dropped."""
        if item.tag is Tag.EVENT:
            return item.temporary or has_near_time_cue(message)
        own = self._own_sentence(item.text, message)
        if not has_near_time_cue(own) and not find_times(own, at):
            return item.temporary and item.ttl_days is not None  # a lifetime the message gave
        return item.temporary or (item.tag in (Tag.REQUIREMENT, Tag.OTHER) and places_within_days(own))

    def _apply(self, user_id: str, turn: Turn, plan: _Plan, at: datetime, outcome: TurnOutcome) -> None:
        sources = (turn.turn_id,) if turn.turn_id else ()
        new_facts = [
            NewFact(
                user_id=user_id,
                text=item.text,
                tag=item.tag,
                layer=Layer.FACT,
                created_at=at,
                expire_at=self._expiry(item, turn.content, at, period),
                source_turn_ids=sources,
                about=item.about.strip(),
                event_start=period.start if period else None,
                event_end=period.end if period else None,
            )
            for item, _, period in plan.new
        ]
        if new_facts:
            vectors = np.vstack([vector for _, vector, _ in plan.new])
            outcome.facts = self._facts.add(new_facts, vectors)
        # New facts are durable before old ones are hidden: never lose both.
        for index, old_id in plan.replaces.items():
            self._facts.supersede(user_id, old_id, outcome.facts[index].id)
            outcome.superseded.append(old_id)
        for item in plan.profile:
            try:
                self._facts.set_profile(user_id, item.text, learned_source(turn.turn_id), at)
            except ProfileFullError:
                outcome.profile_full += 1
            else:
                outcome.profile_entries += 1
        # Last: a write resumed after a crash skips a turn some memory names as its source.
        for old_id in plan.repeats if sources else []:
            try:
                self._facts.add_sources(user_id, old_id, sources)
            except NotFoundError:
                continue  # expired or forgotten since it was found: nothing to add to
            outcome.repeated.append(old_id)
        outcome.quoted = plan.quoted
        outcome.duplicates = plan.duplicates
        outcome.echoes = plan.echoes
