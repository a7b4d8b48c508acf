"""Python SDK for longmem's HTTP API v1: :class:`Client` (sync) and :class:`AsyncClient`.

Both are the same code: every call is written once, as a method that builds a request, and the
two clients differ only in how they send it. Bodies and answers are the server's own pydantic
models (``deployments.api.dto``); error answers come back as the server's exception classes
(:mod:`memory_core.errors`), with ``status`` and ``detail`` attached; answers 429 and 503 (nothing
was stored) are retried with backoff, honouring ``Retry-After``. Writes carry an
``Idempotency-Key`` (one per call, the same on each retry), so a write that timed out is sent
again without being written twice.

    from longmem.client import Client

    with Client("http://localhost:8000", api_key=KEY) as memory:
        memory.ingest("alice", [{"role": "user", "content": "I moved to Porto last month"}])
        for hit in memory.recall("alice", "where do I live?").memories:
            print(hit.score, hit.text)
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import random
import re
import time
import uuid
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload
from urllib.parse import quote

import httpx
import pydantic

from deployments.api.dto import (
    ChatIn,
    ChatOut,
    DeletedOut,
    EraseOut,
    FactOut,
    ForgetIn,
    ForgetOut,
    IngestIn,
    IngestOut,
    JobOut,
    MemoriesOut,
    ProfileIn,
    ProfileListOut,
    ProfileOut,
    PromptIn,
    PromptOut,
    RecallIn,
    RecallOut,
    RememberIn,
    RememberItem,
    SweepIn,
    TurnIn,
    UsersOut,
)
from memory_core import errors
from memory_core.backups import BackupRecord
from memory_core.errors import LongmemError, RemoteError, ValidationError
from memory_core.sweep import SweepRecord

P = ParamSpec("P")
T = TypeVar("T")
RETRIED = frozenset({429, 503})  # the server stored nothing: safe to send again


@dataclass(frozen=True)
class Request(Generic[T]):
    """One call, ready to send: what the two clients share."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: dict[str, Any] | None = None
    params: dict[str, Any] = field(default_factory=dict)
    key: str | None = None  # Idempotency-Key, the same for every retry of this call

    def headers(self) -> dict[str, str]:
        """The call's own headers."""
        return {"Idempotency-Key": self.key} if self.key else {}


# The writes the server answers once per Idempotency-Key: a retry of one is never a second write.
_KEYED = re.compile(r"/v1/users/[^/]+/(turns|chat|memories|forget|profile)(/|$)")


def _keyed(request: Request[T]) -> Request[T]:
    if request.method == "GET" or not _KEYED.match(request.path):
        return request
    return replace(request, key=uuid.uuid4().hex)


def _model(cls: type[pydantic.BaseModel]) -> Callable[[httpx.Response], Any]:
    return lambda response: cls.model_validate(response.json())


def _body(cls: type[pydantic.BaseModel], **fields: Any) -> dict[str, Any]:
    """The request body, checked here first: bad input fails before anything is sent."""
    try:
        model = cls(**{k: v for k, v in fields.items() if v is not None})
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ValidationError(f"invalid {cls.__name__}: {problems}") from None
    return model.model_dump(mode="json", exclude_none=True)


def _user(user_id: str, *rest: str) -> str:
    return "/".join(["/v1/users", quote(user_id, safe=""), *(quote(part, safe="") for part in rest)])


def error_of(response: httpx.Response) -> LongmemError:
    """The exception an error answer stands for: the server's own class when it is one of
    :mod:`memory_core.errors` (``ValidationError``, ``NotFoundError``, ``ProfileFullError``,
    ``StorageError`` ...), else :class:`RemoteError`. Either has ``status`` and ``detail``."""
    try:
        body = response.json()
        name, detail = str(body["error"]), body["detail"]
    except (ValueError, KeyError, TypeError):
        name, detail = "", response.text
    text = detail if isinstance(detail, str) else str(detail)
    cls = getattr(errors, name, None)
    if isinstance(cls, type) and issubclass(cls, LongmemError) and cls is not RemoteError:
        error = errors.rebuild(cls, text, {})
    else:
        error = RemoteError(response.status_code, text)
    error.status = response.status_code  # type: ignore[attr-defined]
    error.detail = detail  # type: ignore[attr-defined]
    return error


def _retry_after(response: httpx.Response | None, attempt: int, backoff_s: float, max_wait_s: float) -> float:
    """Seconds to wait before attempt ``attempt + 1``: the server's Retry-After, else exponential
    backoff with jitter; at most ``max_wait_s``."""
    header = response.headers.get("Retry-After") if response is not None else None
    wait = None
    if header:
        try:
            wait = float(header)
        except ValueError:
            try:
                wait = (parsedate_to_datetime(header) - datetime.now(UTC)).total_seconds()
            except (TypeError, ValueError):
                wait = None
    if wait is None:
        wait = backoff_s * (2**attempt) * (0.5 + random.random() / 2)
    return max(0.0, min(wait, max_wait_s))


@dataclass(frozen=True)
class RetryPolicy:
    """How answers 429/503 and unreachable servers are retried."""

    retries: int = 3
    backoff_s: float = 0.5
    max_wait_s: float = 30.0

    def delay(self, request: Request[Any], outcome: httpx.Response | Exception, attempt: int) -> float | None:
        """Seconds to wait before sending ``request`` again, or None to give up."""
        if attempt >= self.retries:
            return None
        if isinstance(outcome, httpx.Response):
            if outcome.status_code not in RETRIED:
                return None
            return _retry_after(outcome, attempt, self.backoff_s, self.max_wait_s)
        # A connection never made stored nothing; any other failure may have reached the server,
        # so only reads, and writes the server answers once per key, are sent again.
        if isinstance(outcome, httpx.ConnectError) or request.method == "GET" or request.key:
            return _retry_after(None, attempt, self.backoff_s, self.max_wait_s)
        return None


def _exchange(
    request: Request[T], retry: RetryPolicy, base_url: str
) -> Generator[float | None, httpx.Response | Exception | None, T]:
    """The whole call, without I/O: yields None to have the request sent (and gets back the
    answer or the transport error) or seconds to sleep; returns the parsed result or raises."""
    attempt = 0
    while True:
        outcome = yield None
        assert outcome is not None
        wait = retry.delay(request, outcome, attempt)
        if wait is None:
            break
        yield wait
        attempt += 1
    if isinstance(outcome, Exception):
        raise RemoteError(0, f"cannot reach {base_url}: {type(outcome).__name__}: {outcome}") from None
    if outcome.status_code >= 400:
        raise error_of(outcome)
    return request.parse(outcome)


class _Endpoint(Generic[P, T]):
    """A call of the API, written once: builds its :class:`Request`; the client it is read from
    sends it (returning the result, or an awaitable of it for :class:`AsyncClient`)."""

    def __init__(self, build: Callable[Concatenate[Any, P], Request[T]]) -> None:
        self._build = build

    @overload
    def __get__(self, obj: None, owner: type) -> _Endpoint[P, T]: ...
    @overload
    def __get__(self, obj: Client, owner: type) -> Callable[P, T]: ...
    @overload
    def __get__(self, obj: AsyncClient, owner: type) -> Callable[P, Awaitable[T]]: ...
    def __get__(self, obj: Any, owner: type) -> Any:
        if obj is None:
            return self
        build = self._build

        @functools.wraps(build)
        def call(*args: P.args, **kwargs: P.kwargs) -> Any:
            return obj._send(_keyed(build(obj, *args, **kwargs)))

        built = inspect.signature(build)  # help() shows the call, not the request builder
        call.__signature__ = built.replace(  # type: ignore[attr-defined]
            parameters=list(built.parameters.values())[1:], return_annotation=inspect.Signature.empty
        )
        return call


class _Api:
    """Every call of API v1. User ids are the caller's own (the key decides the tenant)."""

    # --------------------------------------------------------------- write path
    @_Endpoint
    def ingest(
        self,
        user_id: str,
        turns: Sequence[TurnIn | dict[str, Any]],
        session_id: str = "default",
        at: datetime | None = None,
    ) -> Request[IngestOut]:
        """Feed turns through the write path and wait until their memories are written."""
        body = _body(IngestIn, session_id=session_id, turns=list(turns), at=at, wait=True)
        return Request("POST", _user(user_id, "turns"), _model(IngestOut), body)

    @_Endpoint
    def submit(
        self,
        user_id: str,
        turns: Sequence[TurnIn | dict[str, Any]],
        session_id: str = "default",
        at: datetime | None = None,
    ) -> Request[JobOut]:
        """Queue turns for the write path (202); poll the returned job with :meth:`job`."""
        body = _body(IngestIn, session_id=session_id, turns=list(turns), at=at, wait=False)
        return Request("POST", _user(user_id, "turns"), _model(JobOut), body)

    @_Endpoint
    def job(self, job_id: str) -> Request[JobOut]:
        """State and results of a queued write (async ingest, or the write after a chat reply)."""
        return Request("GET", f"/v1/jobs/{quote(job_id, safe='')}", _model(JobOut))

    @_Endpoint
    def remember(
        self,
        user_id: str,
        memories: Sequence[str | RememberItem | dict[str, Any]],
        at: datetime | None = None,
    ) -> Request[list[FactOut]]:
        """Store memories as given (no LLM): texts, or items with a tag, ttl or expiry."""
        items = [{"text": m} if isinstance(m, str) else m for m in memories]
        body = _body(RememberIn, memories=items, at=at)
        return Request(
            "POST", _user(user_id, "memories"), lambda r: MemoriesOut.model_validate(r.json()).memories, body
        )

    @_Endpoint
    def forget(self, user_id: str, utterance: str, at: datetime | None = None) -> Request[ForgetOut]:
        """Forget what a request in the user's words names ("forget my old address")."""
        body = _body(ForgetIn, utterance=utterance, at=at)
        return Request("POST", _user(user_id, "forget"), _model(ForgetOut), body)

    # --------------------------------------------------------------- read path
    @_Endpoint
    def recall(
        self,
        user_id: str,
        query: str,
        k: int | None = None,
        threshold: float | None = None,
        at: datetime | None = None,
        history: bool = False,
    ) -> Request[RecallOut]:
        """The memories that matter for ``query`` (with scores) and the whole profile; with
        ``history``, what each memory replaced (``replaced``)."""
        body = _body(RecallIn, query=query, k=k, threshold=threshold, at=at, history=history)
        return Request("POST", _user(user_id, "recall"), _model(RecallOut), body)

    @_Endpoint
    def prompt(
        self, user_id: str, query: str, session_id: str = "default", k: int | None = None
    ) -> Request[str]:
        """The prompt to send to your LLM: rules, profile, memories quoted as data, the window."""
        body = _body(PromptIn, query=query, session_id=session_id, k=k)
        return Request(
            "POST", _user(user_id, "prompt"), lambda r: PromptOut.model_validate(r.json()).prompt, body
        )

    @_Endpoint
    def chat(
        self, user_id: str, message: str, session_id: str = "default", k: int | None = None
    ) -> Request[ChatOut]:
        """One agent turn answered by the server's LLM; the memory write runs after the reply."""
        body = _body(ChatIn, message=message, session_id=session_id, k=k)
        return Request("POST", _user(user_id, "chat"), _model(ChatOut), body)

    @_Endpoint
    def chat_completion(
        self, user_id: str, messages: Sequence[dict[str, str]], **options: Any
    ) -> Request[dict[str, Any]]:
        """``POST /v1/chat/completions`` (not streamed) for ``user_id``: the OpenAI answer as a dict."""
        body = {"model": "longmem", **options, "messages": list(messages), "user": user_id, "stream": False}
        return Request("POST", "/v1/chat/completions", lambda r: dict(r.json()), body)

    # --------------------------------------------------------------- memories
    @_Endpoint
    def users(self, after: str = "", limit: int = 100) -> Request[UsersOut]:
        """A page of the tenant's users (ids after ``after``); ``next_after`` leads to the next."""
        params: dict[str, Any] = {"limit": limit, **({"after": after} if after else {})}
        return Request("GET", "/v1/users", _model(UsersOut), params=params)

    @_Endpoint
    def memories(self, user_id: str, include_superseded: bool = False) -> Request[list[FactOut]]:
        """Every memory of the user, oldest first (earlier versions too, if asked)."""
        params = {"include_superseded": "true"} if include_superseded else {}
        return Request(
            "GET",
            _user(user_id, "memories"),
            lambda r: MemoriesOut.model_validate(r.json()).memories,
            params=params,
        )

    @_Endpoint
    def memory(self, user_id: str, memory_id: str) -> Request[FactOut]:
        """One memory (NotFoundError for an id that is not this user's)."""
        return Request("GET", _user(user_id, "memories", str(memory_id)), _model(FactOut))

    @_Endpoint
    def delete_memory(self, user_id: str, memory_id: str) -> Request[list[str]]:
        """Delete one memory and its earlier versions; returns the deleted ids."""
        path = _user(user_id, "memories", str(memory_id))
        return Request("DELETE", path, lambda r: DeletedOut.model_validate(r.json()).deleted)

    @_Endpoint
    def erase(self, user_id: str) -> Request[EraseOut]:
        """Erase every trace of the user (memories, profile, windows, queued writes, files)."""
        return Request("DELETE", _user(user_id), _model(EraseOut))

    # --------------------------------------------------------------- profile
    @_Endpoint
    def profile(self, user_id: str) -> Request[list[ProfileOut]]:
        """The user's preference profile."""
        return Request(
            "GET", _user(user_id, "profile"), lambda r: ProfileListOut.model_validate(r.json()).profile
        )

    @_Endpoint
    def prefer(self, user_id: str, text: str, key: str | None = None) -> Request[ProfileOut]:
        """Add a preference (or replace the one under ``key``); ProfileFullError past the cap."""
        body = _body(ProfileIn, text=text)
        if key is None:
            return Request("POST", _user(user_id, "profile"), _model(ProfileOut), body)
        return Request("PUT", _user(user_id, "profile", key), _model(ProfileOut), body)

    @_Endpoint
    def delete_preference(self, user_id: str, key: str) -> Request[list[str]]:
        """Delete one preference; returns the deleted keys."""
        return Request(
            "DELETE", _user(user_id, "profile", key), lambda r: DeletedOut.model_validate(r.json()).deleted
        )

    # --------------------------------------------------------------- admin and operations
    @_Endpoint
    def sweep(
        self, now: datetime | None = None, dry_run: bool = False, all_tenants: bool = False
    ) -> Request[SweepRecord]:
        """Run an expiry sweep of the key's tenant (admin keys; every tenant with an operator key)."""
        body = _body(SweepIn, now=now, dry_run=dry_run, all_tenants=all_tenants)
        return Request("POST", "/v1/admin/sweep", _model(SweepRecord), body)

    @_Endpoint
    def backup(self) -> Request[BackupRecord]:
        """Back up every store to the server's ``storage.backup_uri`` (operator keys)."""
        return Request("POST", "/v1/admin/backup", _model(BackupRecord))

    @_Endpoint
    def shards(self) -> Request[dict[str, Any]]:
        """How users are routed, and each shard's node, directory and counts (operator keys)."""
        return Request("GET", "/v1/admin/shards", lambda r: dict(r.json()))

    @_Endpoint
    def reshard(self, add: int = 0, remove: int = 0) -> Request[dict[str, Any]]:
        """Start adding or removing shards (neither: resume an interrupted reshard; operator
        keys); its status as it starts. :meth:`shards` says how it goes (``reshard``)."""
        return Request("POST", "/v1/admin/shards", lambda r: dict(r.json()), {"add": add, "remove": remove})

    @_Endpoint
    def sweeps(self, limit: int = 50) -> Request[list[SweepRecord]]:
        """The newest sweep records the key may read."""
        parse = lambda r: [SweepRecord.model_validate(s) for s in r.json()["sweeps"]]  # noqa: E731
        return Request("GET", "/v1/admin/sweeps", parse, params={"limit": limit})

    @_Endpoint
    def health(self) -> Request[dict[str, Any]]:
        """The deep health report (ok, parts, age of the probe); a 503 raises."""
        return Request("GET", "/healthz", lambda r: dict(r.json()))

    @_Endpoint
    def metrics(self) -> Request[str]:
        """Prometheus text of the ingress."""
        return Request("GET", "/metrics", lambda r: r.text)


def _headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class Client(_Api):
    """Blocking client. ``Client(url, api_key=KEY)``; use as a context manager or call close()."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    def _send(self, request: Request[T]) -> T:
        steps = _exchange(request, self.retry, str(self._http.base_url))
        step = next(steps)
        while True:
            try:
                if isinstance(step, float):
                    time.sleep(step)
                    step = steps.send(None)
                else:
                    step = steps.send(self._attempt(request))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def _attempt(self, request: Request[Any]) -> httpx.Response | Exception:
        try:
            return self._http.request(
                request.method,
                request.path,
                json=request.json,
                params=request.params,
                headers=request.headers(),
            )
        except httpx.HTTPError as exc:
            return exc

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class AsyncClient(_Api):
    """asyncio client: the same calls as :class:`Client`, awaited. ``async with AsyncClient(...)``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        timeout_s: float = 600.0,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.retry = retry or RetryPolicy()
        self._http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=_headers(api_key), timeout=timeout_s, transport=transport
        )

    async def _send(self, request: Request[T]) -> T:
        steps = _exchange(request, self.retry, str(self._http.base_url))
        step = next(steps)
        while True:
            try:
                if isinstance(step, float):
                    await asyncio.sleep(step)
                    step = steps.send(None)
                else:
                    step = steps.send(await self._attempt(request))
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _attempt(self, request: Request[Any]) -> httpx.Response | Exception:
        try:
            return await self._http.request(
                request.method,
                request.path,
                json=request.json,
                params=request.params,
                headers=request.headers(),
            )
        except httpx.HTTPError as exc:
            return exc

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()
