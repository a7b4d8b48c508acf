"""Where ``longmem mcp`` keeps memories: one small protocol, two backends.

:class:`LocalBackend` runs the service in this process on a data dir, as the other CLI commands
do; :class:`RemoteBackend` talks to a running longmem server through the SDK. Both answer with the
HTTP API's own bodies (``deployments.api.dto``), so the MCP tools read the same shapes from either.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, TypeVar

import anyio.to_thread

from deployments.api.dto import FactOut, ForgetOut, HitOut, ProfileOut, RecallOut
from longmem.client import AsyncClient
from memory_core.errors import LLMUnavailableError
from memory_core.llm.base import LLMEngine
from memory_core.llm.factory import make_engine
from memory_core.models import Tag
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import Settings
from memory_core.tenancy import LOCAL_TENANT, scoped_user_id
from memory_core.validation import parse_memory_id

T = TypeVar("T")


class MemoryBackend(Protocol):
    """The calls the MCP tools make, for one user each. Errors are :mod:`memory_core.errors`."""

    async def remember(self, user: str, text: str, tag: Tag, ttl: timedelta | None) -> FactOut:
        """Store one memory as given (no LLM)."""
        ...

    async def recall(self, user: str, query: str, k: int | None) -> RecallOut:
        """The memories that matter for ``query`` (each with what it replaced), and the whole profile."""
        ...

    async def forget(self, user: str, utterance: str) -> ForgetOut:
        """Forget what a request in the user's words names (needs the LLM)."""
        ...

    async def delete_memory(self, user: str, memory_id: str) -> list[str]:
        """Delete one memory (and its earlier versions); returns the deleted ids."""
        ...

    async def memories(self, user: str) -> list[FactOut]:
        """Every current memory of the user, oldest first."""
        ...

    async def profile(self, user: str) -> list[ProfileOut]:
        """The user's lasting preferences."""
        ...

    async def prefer(self, user: str, text: str, key: str | None) -> ProfileOut:
        """Add a preference, or replace the one under ``key``."""
        ...

    async def aclose(self) -> None:
        """Release what the backend holds (stores and LLM, or the connection pool)."""
        ...


class LocalBackend:
    """The service in this process, on ``storage.data_dir``; users are stored as ``local:<name>``,
    the ids the other CLI commands (and a ``--local-only`` server) use for them."""

    def __init__(self, service: MemoryService, engine: LLMEngine | None = None) -> None:
        """Serve ``service``; ``engine`` (the service's LLM, if any) is closed with it."""
        self._svc = service
        self._engine = engine

    @classmethod
    def open(cls, settings: Settings, warn: Callable[[str], None]) -> LocalBackend:
        """Open the data dir with the LLM engine the settings name (forgetting by words needs it).

        Args:
            settings: all settings (``storage.data_dir``, ``llm``).
            warn: told when the LLM cannot be loaded; every tool but ``forget`` works without it.

        Raises:
            ConfigError: the data dir belongs to other settings, or the LLM settings are incomplete.
            StorageError: a store cannot be opened.
        """
        engine: LLMEngine | None
        try:
            engine = make_engine(settings.llm)
        except LLMUnavailableError as exc:
            # Installed without the 'llm' extra, say: storing and recall need no LLM.
            warn(f"no LLM ({exc}): forgetting by words is off, every other tool works")
            engine = None
        try:
            return cls(open_local_service(settings, engine=engine), engine)
        except BaseException:
            if engine is not None:
                engine.close()
            raise

    def _user(self, name: str) -> str:
        return scoped_user_id(LOCAL_TENANT, name, self._svc.settings.limits.max_user_id_chars)

    async def _run(self, call: Callable[[], T]) -> T:
        # The service blocks (embedding, disk, LLM): keep the event loop free for other requests.
        return await anyio.to_thread.run_sync(call)

    async def remember(self, user: str, text: str, tag: Tag, ttl: timedelta | None) -> FactOut:
        item = Remember(text=text, tag=tag, ttl=ttl)
        facts = await self._run(lambda: self._svc.remember(self._user(user), [item]))
        return FactOut.of(facts[0])

    async def recall(self, user: str, query: str, k: int | None) -> RecallOut:
        def call() -> RecallOut:
            stored = self._user(user)
            hits, profile = self._svc.recall_with_profile(stored, query, k, history=True)
            return RecallOut(
                memories=[HitOut.of_hit(h) for h in hits], profile=[ProfileOut.of(e) for e in profile]
            )

        return await self._run(call)

    async def forget(self, user: str, utterance: str) -> ForgetOut:
        return ForgetOut.of(await self._run(lambda: self._svc.forget(self._user(user), utterance)))

    async def delete_memory(self, user: str, memory_id: str) -> list[str]:
        def call() -> list[int]:
            stored = self._user(user)
            return self._svc.forget_ids(stored, [parse_memory_id(memory_id, stored)])

        return [str(i) for i in await self._run(call)]

    async def memories(self, user: str) -> list[FactOut]:
        return [FactOut.of(f) for f in await self._run(lambda: self._svc.list_facts(self._user(user)))]

    async def profile(self, user: str) -> list[ProfileOut]:
        return [ProfileOut.of(e) for e in await self._run(lambda: self._svc.profile(self._user(user)))]

    async def prefer(self, user: str, text: str, key: str | None) -> ProfileOut:
        entry = await self._run(
            lambda: self._svc.set_preference(self._user(user), text, source="mcp", key=key)
        )
        return ProfileOut.of(entry)

    async def aclose(self) -> None:
        try:
            self._svc.close()
        finally:
            if self._engine is not None:
                self._engine.close()


class RemoteBackend:
    """A running longmem server, through the SDK; user names are the API key's tenant's."""

    def __init__(self, client: AsyncClient) -> None:
        """Talk through ``client`` (closed with the backend)."""
        self._client = client

    async def remember(self, user: str, text: str, tag: Tag, ttl: timedelta | None) -> FactOut:
        item = {"text": text, "tag": tag, "ttl_seconds": ttl.total_seconds() if ttl is not None else None}
        facts = await self._client.remember(user, [item])
        return facts[0]

    async def recall(self, user: str, query: str, k: int | None) -> RecallOut:
        return await self._client.recall(user, query, k=k, history=True)

    async def forget(self, user: str, utterance: str) -> ForgetOut:
        return await self._client.forget(user, utterance)

    async def delete_memory(self, user: str, memory_id: str) -> list[str]:
        return await self._client.delete_memory(user, memory_id)

    async def memories(self, user: str) -> list[FactOut]:
        return await self._client.memories(user)

    async def profile(self, user: str) -> list[ProfileOut]:
        return await self._client.profile(user)

    async def prefer(self, user: str, text: str, key: str | None) -> ProfileOut:
        return await self._client.prefer(user, text, key=key)

    async def aclose(self) -> None:
        await self._client.aclose()
