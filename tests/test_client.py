"""The Python SDK (``longmem.client``) against the real Serve app, sync and async; its retry
rules on a scripted transport (a logic test: the same calls run for real above)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from deployments.api.dto import ChatOut, RecallOut
from longmem.client import AsyncClient, Client, Request, RetryPolicy
from memory_core.errors import NotFoundError, ProfileFullError, RemoteError, StorageError, ValidationError
from tests.serve_app import ADMIN_KEY, OTHER_KEY, ServeApp


def test_every_call_round_trips_on_the_real_app(serve_app: ServeApp) -> None:
    with Client(serve_app.url, ADMIN_KEY) as memory:
        stored = memory.remember(
            "sdk-ana",
            [
                "Ana keeps bees on her allotment",
                {"text": "Ana is at a conference in Ghent this week", "tag": "event", "ttl_seconds": 86_400},
            ],
        )
        assert [m.text for m in stored][0] == "Ana keeps bees on her allotment"
        assert stored[1].expire_at is not None
        assert {m.id for m in memory.memories("sdk-ana")} == {m.id for m in stored}
        listed = {u.user_id: u for u in memory.users(after="sdk-am", limit=1000).users}
        assert listed["sdk-ana"].facts == 2 and all(u > "sdk-am" for u in listed)
        assert memory.memory("sdk-ana", stored[0].id).text == stored[0].text

        recalled = memory.recall("sdk-ana", "what animals do I look after?", k=3)
        assert isinstance(recalled, RecallOut) and recalled.memories[0].id == stored[0].id
        assert recalled.memories[0].score > 0

        tone = memory.prefer("sdk-ana", "Short answers", key="tone")
        memory.prefer("sdk-ana", "No emojis")
        assert {e.key for e in memory.profile("sdk-ana")} >= {"tone"}
        assert "Short answers" in memory.prompt("sdk-ana", "any plans?")
        assert memory.delete_preference("sdk-ana", tone.key) == ["tone"]

        assert memory.delete_memory("sdk-ana", stored[1].id) == [stored[1].id]
        with pytest.raises(NotFoundError) as missing:
            memory.memory("sdk-ana", stored[1].id)
        assert missing.value.status == 404  # type: ignore[attr-defined]

        record = memory.sweep(dry_run=True)
        assert record.dry_run and record.tenant == "acme"
        assert any(r.id == record.id for r in memory.sweeps(limit=5))
        assert memory.health()["ok"] is True
        assert "longmem_http_requests_total" in memory.metrics()

        receipt = memory.erase("sdk-ana")
        assert receipt.memories == 1 and receipt.profile_entries == 1
        assert memory.memories("sdk-ana") == []

    with Client(serve_app.url, OTHER_KEY) as other:
        with pytest.raises(NotFoundError):
            other.memory("sdk-ana", stored[0].id)  # another tenant's id is unknown to it
        assert "sdk-ana" not in {u.user_id for u in other.users(limit=1000).users}


def test_errors_come_back_as_the_servers_exception_classes(serve_app: ServeApp) -> None:
    with Client(serve_app.url, ADMIN_KEY) as memory:
        with pytest.raises(ValidationError, match="text"):
            memory.remember("sdk-ben", [""])  # refused before it is sent
        with pytest.raises(ValidationError) as bad_user:
            memory.remember("sdk-ben" + "x" * 500, ["fine text"])  # refused by the server
        assert bad_user.value.status == 422  # type: ignore[attr-defined]
        for n in range(serve_app.settings.limits.max_profile_entries):
            memory.prefer("sdk-ben", f"preference number {n}")
        with pytest.raises(ProfileFullError):
            memory.prefer("sdk-ben", "one too many")
        memory.erase("sdk-ben")
    with Client(serve_app.url, "not-a-key-" * 4) as stranger, pytest.raises(RemoteError) as refused:
        stranger.recall("sdk-ben", "anything")
    assert refused.value.status == 401
    dead = Client("http://127.0.0.1:9", ADMIN_KEY, retry=RetryPolicy(retries=1, backoff_s=0.01))
    with dead, pytest.raises(RemoteError, match="cannot reach") as unreachable:
        dead.memories("sdk-ben")
    assert unreachable.value.status == 0


def test_the_async_client_runs_calls_concurrently_with_the_same_results(serve_app: ServeApp) -> None:
    async def run() -> tuple[list[RecallOut], ChatOut]:
        async with AsyncClient(serve_app.url, ADMIN_KEY) as memory:
            await memory.remember(
                "sdk-cy", ["Cy's cat Miso is a ginger tabby", "Cy works night shifts at a bakery"]
            )
            recalls = await asyncio.gather(
                *(memory.recall("sdk-cy", q, k=1) for q in ("what pet do I have?", "where do I work?"))
            )
            turn = await memory.chat("sdk-cy", "What colour is my cat?", session_id="s")
            deadline = time.monotonic() + 600
            while (await memory.job(turn.write_job_id)).status in ("queued", "running"):
                assert time.monotonic() < deadline
                await asyncio.sleep(0.5)
            await memory.erase("sdk-cy")
            return list(recalls), turn

    recalls, turn = asyncio.run(run())
    assert "Miso" in recalls[0].memories[0].text, recalls[0]
    assert "bakery" in recalls[1].memories[0].text, recalls[1]
    assert turn.reply.strip() and any("Miso" in m.text for m in turn.memories), turn


def _scripted(answers: list[httpx.Response | Exception]) -> tuple[httpx.MockTransport, list[httpx.Request]]:
    sent: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        sent.append(request)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    return httpx.MockTransport(handle), sent


FACT = {
    "id": "1",
    "text": "t",
    "tag": "other",
    "created_at": "2026-01-01T00:00:00Z",
    "expire_at": None,
    "source_turn_ids": [],
    "superseded_by": None,
}


def test_429_and_503_are_retried_honouring_retry_after_and_other_errors_are_not() -> None:
    busy = httpx.Response(429, headers={"Retry-After": "0.2"}, json={"error": "HTTPError", "detail": "busy"})
    down = httpx.Response(503, json={"error": "StorageError", "detail": "No space left on device"})
    transport, sent = _scripted([busy, down, httpx.Response(201, json={"memories": [FACT]})])
    with Client(
        "http://sdk.test", "k", retry=RetryPolicy(retries=3, backoff_s=0.01), transport=transport
    ) as c:
        started = time.monotonic()
        assert [m.id for m in c.remember("u", ["t"])] == ["1"]
        assert time.monotonic() - started >= 0.2  # waited as the server asked
    assert len(sent) == 3 and sent[0].headers["Authorization"] == "Bearer k"

    transport, sent = _scripted([down, down])
    with Client(
        "http://sdk.test", "k", retry=RetryPolicy(retries=1, backoff_s=0.01), transport=transport
    ) as c:
        with pytest.raises(StorageError, match="No space"):
            c.remember("u", ["t"])
    assert len(sent) == 2

    # A write that may have reached the server is sent again only with the same Idempotency-Key
    # (the server answers a repeat with the first answer); one without a key is not; a read is.
    transport, sent = _scripted([httpx.ReadTimeout("slow"), httpx.Response(201, json={"memories": [FACT]})])
    with Client("http://sdk.test", "k", retry=RetryPolicy(backoff_s=0.01), transport=transport) as c:
        assert [m.id for m in c.remember("u", ["t"])] == ["1"]
        first_key = sent[0].headers["Idempotency-Key"]
        assert len(first_key) == 32 and sent[1].headers["Idempotency-Key"] == first_key
    transport, sent = _scripted([httpx.Response(201, json={"memories": [FACT]})] * 2)
    with Client("http://sdk.test", "k", transport=transport) as c:
        c.remember("u", ["t"])
        c.remember("u", ["t"])
    assert sent[0].headers["Idempotency-Key"] != sent[1].headers["Idempotency-Key"]  # a new call, a new key
    transport, sent = _scripted([httpx.ReadTimeout("slow")])
    with Client("http://sdk.test", "k", retry=RetryPolicy(backoff_s=0.01), transport=transport) as c:
        with pytest.raises(RemoteError, match="ReadTimeout"):
            c.erase("u")
    assert len(sent) == 1 and "Idempotency-Key" not in sent[0].headers
    transport, sent = _scripted([httpx.ReadTimeout("slow"), httpx.Response(200, json={"memories": [FACT]})])
    with Client("http://sdk.test", "k", retry=RetryPolicy(backoff_s=0.01), transport=transport) as c:
        assert len(c.memories("u")) == 1
    assert len(sent) == 2

    transport, sent = _scripted(
        [httpx.Response(404, json={"error": "NotFoundError", "detail": "no such memory"})]
    )
    with Client("http://sdk.test", "k", transport=transport) as c, pytest.raises(NotFoundError):
        c.memory("u", "5")
    assert len(sent) == 1


def test_the_async_client_retries_by_the_same_rules() -> None:
    down = httpx.Response(
        503, headers={"Retry-After": "0"}, json={"error": "LLMUnavailableError", "detail": "x"}
    )

    async def handle(request: httpx.Request) -> httpx.Response:
        answers.append(request)
        return down if len(answers) < 3 else httpx.Response(200, json={"memories": [], "profile": []})

    answers: list[httpx.Request] = []

    async def run() -> RecallOut:
        transport = httpx.MockTransport(handle)
        async with AsyncClient("http://sdk.test", "k", transport=transport) as c:
            return await c.recall("u", "q", at=None)

    assert asyncio.run(run()).memories == [] and len(answers) == 3
    assert RetryPolicy(max_wait_s=2).delay(
        _any_request(), httpx.Response(503, headers={"Retry-After": "3600"}), 0
    ) == pytest.approx(2)
    backoff = RetryPolicy(backoff_s=1).delay(_any_request(), httpx.Response(429), 2)
    assert backoff is not None and 2 <= backoff <= 4  # 1 s doubled twice, with jitter


def _any_request() -> Request[None]:
    return Request("POST", "/x", lambda r: None)
