"""The memory service a conversation talks to: one object over the three layers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from memory_core import telemetry
from memory_core.backups import BackupRecord, take_backup
from memory_core.clock import Clock, SystemClock
from memory_core.embedding import Embedder, make_embedder
from memory_core.errors import ConfigError, ValidationError
from memory_core.llm.base import LLMEngine
from memory_core.llm.structured import StructuredLLM
from memory_core.models import Fact, Layer, NewFact, ProfileEntry, RecallHit, Role, Tag, Turn, as_utc
from memory_core.prompt import build_messages, build_prompt
from memory_core.recall import Recaller
from memory_core.settings import Settings
from memory_core.store.backup import record_erasure
from memory_core.store.facts import FactStore, LocalFactStore
from memory_core.sweep import SweepLog, SweepRecord, SweepRunner
from memory_core.telemetry import configure_tracing
from memory_core.tenancy import check_tenant
from memory_core.text import Tokenizer
from memory_core.validation import check_text, check_user_id
from memory_core.working import WorkingMemory
from memory_core.write.forget import ForgetResult, Forgetter
from memory_core.write.pipeline import TurnOutcome, WritePath
from memory_core.write.speakers import other_person


@dataclass(frozen=True)
class EraseReceipt:
    """What erasing a user deleted."""

    user_id: str
    facts: int
    profile_entries: int
    working_turns: int


@dataclass(frozen=True)
class UserSummary:
    """One user of a tenant as listed: what each layer stores of them."""

    user_id: str  # the stored id, ``tenant:user``
    facts: int  # superseded ones included
    profile_entries: int


@dataclass(frozen=True)
class ChatReply:
    """One agent turn: the reply and what memory it was built from."""

    reply: str
    hits: list[RecallHit]
    profile: list[ProfileEntry]
    turns: tuple[Turn, Turn]  # the user's message and the reply, for the write that follows
    prompt_tokens: int
    completion_tokens: int


@dataclass(frozen=True)
class Remember:
    """One fact to remember, as given by a caller (CLI, API, extractor)."""

    text: str
    tag: Tag = Tag.OTHER
    ttl: timedelta | None = None
    expire_at: datetime | None = None
    source_turn_ids: tuple[str, ...] = ()


class MemoryService:
    """Working window, facts and profile of every user, behind one facade."""

    def __init__(
        self,
        settings: Settings,
        embedder: Embedder,
        facts: FactStore,
        clock: Clock | None = None,
        tokenizer: Tokenizer | None = None,
        llm: StructuredLLM | None = None,
        sweep_log: SweepLog | None = None,
    ) -> None:
        """Wire the layers together; without ``llm`` the service stores and recalls but cannot
        ingest conversations or forget by words; without ``sweep_log`` it cannot sweep."""
        self.settings = settings
        self.embedder = embedder
        self.facts = facts
        self.clock = clock or SystemClock()
        self.working = WorkingMemory(settings.working, facts)
        tokenizer = tokenizer or Tokenizer()
        self.recaller = Recaller(facts, embedder, settings.recall, tokenizer)
        self.llm = llm
        self._write: WritePath | None = None
        if llm is not None:
            forgetter = Forgetter(llm, self.recaller, facts, embedder, tokenizer)
            self._write = WritePath(settings, llm, embedder, facts, forgetter, tokenizer)
        self.sweeper: SweepRunner | None = None
        if sweep_log is not None:
            self.sweeper = SweepRunner(facts.shards, settings.sweep, sweep_log, clock=self.clock)

    def _write_path(self) -> WritePath:
        if self._write is None:
            raise ConfigError("this service has no LLM: open it with an engine to ingest or forget by words")
        return self._write

    def ingest(
        self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime | None = None
    ) -> list[TurnOutcome]:
        """Feed conversation turns through the write path (working window, judge, extraction, writes).

        Args:
            user_id: the user.
            session_id: the conversation session (working window key).
            turns: user and assistant turns in order; a turn's own ``at`` wins over ``at``.
            at: when the turns were said (the clock's now by default).

        Returns:
            One outcome per user turn: skipped, written facts, profile entries, superseded ids,
            LLM calls and tokens.

        Raises:
            ValidationError: a bad user id or an empty/oversized turn; nothing written.
            ConfigError: the service has no LLM.
            StorageError: a write was not made durable.
        """
        self.check_turns(user_id, turns)
        self.working.append(user_id, session_id, turns)
        return self.write_turns(user_id, turns, at, session_id)

    def check_turns(self, user_id: str, turns: Sequence[Turn]) -> None:
        """Refuse a bad user id or turn, or any turn when the service has no LLM.

        Raises:
            ValidationError: a bad user id or an empty/oversized turn.
            ConfigError: the service has no LLM.
        """
        self._write_path()
        self._user(user_id)
        for turn in turns:
            check_text(turn.content, self.settings.limits.max_text_chars)

    def write_turns(
        self,
        user_id: str,
        turns: Sequence[Turn],
        at: datetime | None = None,
        session_id: str | None = None,
        wait_for_llm: Callable[[], bool] | None = None,
    ) -> list[TurnOutcome]:
        """The write path alone (no working-window append): what runs after a chat reply. The
        session's window (``session_id``) tells whom the user talks to; ``wait_for_llm`` is
        :meth:`WritePath.process`'s (a queued write waits for the LLM instead of losing a turn).

        Raises:
            as for :meth:`ingest`, and LLMUnavailableError when ``wait_for_llm`` gave up.
        """
        self.check_turns(user_id, turns)
        session = self.working.window(user_id, session_id) if session_id else []
        at = as_utc(at) if at else self.clock.now()
        return self._write_path().process(user_id, turns, at, session, wait_for_llm)

    def chat(
        self,
        user_id: str,
        session_id: str,
        message: str,
        k: int | None = None,
        history: Sequence[Turn] | None = None,
        instructions: str = "",
        max_tokens: int = 256,
    ) -> ChatReply:
        """Answer one user message with memory: profile + recalled facts + working window → LLM reply.

        Nothing is stored: the caller accepts ``ChatReply.turns`` for their write (which puts
        them in the session's working window, see ``UserWrites.write_after_reply``), so that the
        write can run after the reply is sent.

        Args:
            user_id: the user.
            session_id: the session whose working window frames the reply.
            message: what the user just said.
            k: memories to recall (settings' default when None).
            history: the conversation so far as the caller keeps it (OpenAI-style clients send it
                with every request); when given it replaces the stored working window.
            instructions: the agent's own system prompt, kept above the memory blocks.
            max_tokens: longest reply.

        Raises:
            ValidationError: bad user id or message.
            ConfigError: the service has no LLM.
            LLMError: no reply could be generated; nothing was changed.
        """
        llm = self.llm
        if llm is None:
            raise ConfigError("this service has no LLM: open it with an engine to chat")
        self.check_turns(user_id, [Turn(role=Role.USER, content=message)])
        now = self.clock.now()
        with telemetry.span("longmem.chat"):
            hits, profile = self.recall_with_profile(user_id, message, k, history=True)
            window = list(history) if history is not None else self.working.window(user_id, session_id)
            messages = build_messages(message, hits, profile, window, instructions)
            completion = llm.reply(messages, max_tokens)
        asked = Turn(role=Role.USER, content=message, at=now)
        answered = Turn(role=Role.ASSISTANT, content=completion.text.strip(), at=now)
        return ChatReply(
            reply=answered.content,
            hits=hits,
            profile=profile,
            turns=(asked, answered),
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
        )

    def forget(self, user_id: str, utterance: str, at: datetime | None = None) -> ForgetResult:
        """Resolve a forget request ("forget my home address") to memories and delete them.

        Raises:
            ConfigError: the service has no LLM.
            LLMError: the request could not be resolved; nothing deleted.
        """
        write = self._write_path()
        self._user(user_id)
        check_text(utterance, self.settings.limits.max_text_chars)
        with telemetry.span("longmem.forget"):
            return write.forgetter.forget(user_id, utterance, as_utc(at) if at else self.clock.now())

    def _user(self, user_id: str) -> str:
        return check_user_id(user_id, self.settings.limits.max_user_id_chars)

    def remember(self, user_id: str, items: Sequence[Remember], at: datetime | None = None) -> list[Fact]:
        """Embed and store facts for a user, durably, as one batch.

        Args:
            user_id: the owner.
            items: the facts; ``ttl`` or ``expire_at`` make a fact temporary.
            at: when they were said (the clock's now by default).

        Returns:
            The stored facts with their ids.

        Raises:
            ValidationError: bad user id or text, or an expiry before ``at``; nothing stored.
            StorageError: not written; nothing stored.
        """
        self._user(user_id)
        when = as_utc(at) if at else self.clock.now()
        texts = [check_text(item.text, self.settings.limits.max_text_chars) for item in items]
        new_facts = []
        for item, text in zip(items, texts, strict=True):
            expire_at = as_utc(item.expire_at) if item.expire_at else None
            if item.ttl is not None:
                try:
                    expire_at = when + item.ttl
                except OverflowError:
                    raise ValidationError(f"a ttl of {item.ttl} expires after the year 9999") from None
            if expire_at is not None and expire_at <= when:
                raise ValidationError(f"expiry {expire_at.isoformat()} is not after {when.isoformat()}")
            new_facts.append(
                NewFact(
                    user_id=user_id,
                    text=text,
                    tag=item.tag,
                    layer=Layer.FACT,
                    created_at=when,
                    expire_at=expire_at,
                    source_turn_ids=item.source_turn_ids,
                    # Written as "User's sister Ana ...", a fact given directly is hers too.
                    about=other_person(text, ""),
                )
            )
        if not new_facts:
            return []
        return self.facts.add(new_facts, self.embedder.embed_passages(texts))

    def recall(
        self,
        user_id: str,
        question: str,
        k: int | None = None,
        threshold: float | None = None,
        at: datetime | None = None,
        history: bool = False,
    ) -> list[RecallHit]:
        """The user's facts that matter for ``question`` (at most k, above the threshold).

        Args:
            user_id: the asking user; only their facts are searched.
            question: the question or current message.
            k: most memories (settings' default when None).
            threshold: least score (settings' or the embedder's default when None).
            at: recall as of this time (facts expired by then are left out); the clock's now by default.
            history: with each hit, the facts it replaced (what was true before it).
        """
        return self.recaller.recall(
            user_id, question, self._asked(user_id, question, at), k, threshold, history
        )

    def recall_with_profile(
        self,
        user_id: str,
        question: str,
        k: int | None = None,
        threshold: float | None = None,
        at: datetime | None = None,
        history: bool = False,
    ) -> tuple[list[RecallHit], list[ProfileEntry]]:
        """:meth:`recall`, and the user's profile, read in the same call to their shard."""
        when = self._asked(user_id, question, at)
        return self.recaller.recall_with_profile(user_id, question, when, k, threshold, history)

    def _asked(self, user_id: str, question: str, at: datetime | None) -> datetime:
        """Check a recall's user id and question; the time it recalls as of."""
        self._user(user_id)
        check_text(question, self.settings.limits.max_text_chars)
        return as_utc(at) if at else self.clock.now()

    def profile(self, user_id: str) -> list[ProfileEntry]:
        """The user's lasting preferences."""
        return self.facts.profile(self._user(user_id))

    def set_preference(
        self, user_id: str, text: str, source: str = "api", key: str | None = None
    ) -> ProfileEntry:
        """Add or replace a profile entry, durably.

        Args:
            user_id: the owner.
            text: how they want to be answered.
            source: who set it ("api", "cli"); an entry set here is never displaced by one learned
                from conversation.
            key: stable key; defaults to a digest of the text (restating it replaces it).

        Raises:
            ValidationError: bad user id, text or key; nothing changed.
            ProfileFullError: a new key while the profile holds ``limits.max_profile_entries``
                entries; nothing changed.
            StorageError: not written; nothing changed.
        """
        return self.facts.set_profile(self._user(user_id), text, source, self.clock.now(), key)

    def delete_preference(self, user_id: str, key: str) -> None:
        """Delete one profile entry; raises NotFoundError."""
        self.facts.delete_profile(self._user(user_id), key)

    def add_turn(self, user_id: str, session_id: str, turn: Turn) -> None:
        """Append a turn to the session's working window (no write).

        Raises:
            ValidationError: a bad user id or turn.
            StorageError: not written.
        """
        check_text(turn.content, self.settings.limits.max_text_chars)
        self.working.append(self._user(user_id), session_id, [turn])

    def build_prompt(self, user_id: str, session_id: str, question: str, k: int | None = None) -> str:
        """Prompt for answering ``question``: profile, recalled memories, working window."""
        hits, profile = self.recall_with_profile(user_id, question, k, history=True)
        return build_prompt(question, hits, profile, self.working.window(user_id, session_id))

    def list_facts(self, user_id: str, include_superseded: bool = False) -> list[Fact]:
        """All of the user's facts, oldest first."""
        return self.facts.list_user(self._user(user_id), include_superseded)

    def users(self, tenant: str, after: str = "", limit: int = 100) -> list[UserSummary]:
        """``tenant``'s users with facts or profile entries, by stored id.

        Args:
            tenant: whose users.
            after: a stored id; only users after it are listed (the last id of the page before).
            limit: most users.

        Raises:
            ValidationError: an invalid tenant, or a limit below 1.
        """
        check_tenant(tenant)
        if limit < 1:
            raise ValidationError(f"limit must be at least 1, got {limit}")
        facts = dict(self.facts.users(tenant, after, limit))
        entries = dict(self.facts.profile_users(tenant, after, limit))
        return [
            UserSummary(user_id=user, facts=facts.get(user, 0), profile_entries=entries.get(user, 0))
            for user in sorted(facts.keys() | entries.keys())[:limit]
        ]

    def get_fact(self, user_id: str, fact_id: int) -> Fact:
        """One of the user's facts; raises NotFoundError for anyone else's."""
        return self.facts.get(self._user(user_id), fact_id)

    def forget_ids(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        """Delete some of the user's facts by id; raises NotFoundError if one is not theirs."""
        return self.facts.delete(self._user(user_id), fact_ids)

    def sweep(
        self, now: datetime | None = None, dry_run: bool = False, tenant: str | None = None
    ) -> SweepRecord:
        """Delete every fact whose expiry is before ``now``, shard by shard in paced batches.

        Args:
            now: the cut-off (the clock's now by default); a fact expiring exactly then is kept.
            dry_run: only count what is due.
            tenant: sweep only this tenant's users (every tenant's when None).

        Returns:
            The run record (also in the sweep log); its status is partial if a shard failed.

        Raises:
            ConfigError: the service has no sweep log.
            SweepBusyError: a sweep is already running.
            StorageError: the run record could not be logged.
        """
        if self.sweeper is None:
            raise ConfigError("this service has no sweep log: open it with one to sweep")
        return self.sweeper.run(as_utc(now) if now else self.clock.now(), dry_run=dry_run, tenant=tenant)

    def shards(self) -> dict[str, Any]:
        """How users are routed and each shard's place (its Ray node, when it is an actor),
        files and counts: what ``longmem shards status`` prints."""
        routing = self.facts.routing
        return {
            "routing": {
                "version": routing.version,
                "slots": len(routing.owners),
                "rule": "slot = blake2b-64(user id) mod slots; each slot belongs to one shard",
            },
            "shards": self.facts.health(),
        }

    def backup(self, uri: str) -> BackupRecord:
        """Copy every shard (facts, profiles, turns) to a new backup under ``uri`` (a path or a
        pyarrow filesystem URI); see :func:`memory_core.backups.take_backup`. Named by the wall
        clock, not the service's (which may be simulated): backups of one store sort by when
        they were taken."""
        return take_backup(self.facts, self.embedder.dim, self.embedder.name, uri, datetime.now(UTC))

    def count_due(self, now: datetime | None = None) -> int:
        """How many facts a sweep at ``now`` would delete."""
        return self.facts.count_due(as_utc(now) if now else self.clock.now())

    def erase(self, user_id: str) -> EraseReceipt:
        """Remove every trace of a user: facts (and the files that held them), profile, working window.

        With ``storage.backup_uri`` set, the erasure is first recorded beside the backups, so that
        restoring one taken before it erases the user again (timed by the wall clock, as backups
        are named).

        Raises:
            StorageError: the record or the erasure was not written (a retry does it all again).
        """
        self._user(user_id)
        if self.settings.storage.backup_uri:
            record_erasure(self.settings.storage.backup_uri, user_id, datetime.now(UTC))
        erased = self.facts.erase_user(user_id)
        return EraseReceipt(
            user_id=user_id,
            facts=erased.facts,
            profile_entries=erased.profile_entries,
            working_turns=erased.window_turns,
        )

    def close(self) -> None:
        """Close the stores (the LLM engine belongs to whoever created it)."""
        self.facts.close()


def open_local_service(
    settings: Settings,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    engine: LLMEngine | None = None,
) -> MemoryService:
    """Build a service on this machine's disk.

    Args:
        settings: all settings; ``storage.data_dir`` is created if missing.
        clock: time source (wall clock by default).
        embedder: an already loaded embedder to share; by default the one ``settings`` name.
        engine: the judge/extractor LLM; without one the service cannot ingest or forget by words.

    Raises:
        ConfigError: the data dir belongs to other settings.
        StorageError: a store cannot be opened.
    """
    configure_tracing(settings.telemetry)
    embedder = embedder or make_embedder(settings.embedder)
    facts = LocalFactStore(
        settings.storage, settings.limits, embedder.dim, embedder.name, settings.working.turns
    )
    llm = StructuredLLM(engine) if engine is not None else None
    sweep_log = SweepLog.for_data_dir(settings.storage.data_dir, settings.sweep.log_keep)
    return MemoryService(settings, embedder, facts, clock, llm=llm, sweep_log=sweep_log)
