"""``longmem mcp`` end to end: the MCP SDK's own client starts ``python -m longmem mcp`` and talks to
it over stdio, on a fresh data dir with the real embedder, FAISS, DuckDB and the packaged LLM; and
the remote mode, the same tools through the SDK to the HTTP API (in-process, no Ray)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import httpx
from mcp import Client, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.types import TextContent
from pydantic import SecretStr

from longmem.client import AsyncClient
from longmem.mcp_backends import RemoteBackend
from longmem.mcp_server import build_server
from memory_core.embedding import Embedder
from memory_core.service import open_local_service
from memory_core.settings import ApiKey, ServeSettings, Settings
from tests.asgi_app import local_api

ROOT = Path(__file__).resolve().parents[1]
USER = "mcp-tester"
NEIGHBOUR = "mcp-neighbour"
TOOLS = {"remember", "recall", "forget", "forget_memory", "list_memories", "get_profile", "set_profile"}


async def _ok(client: Client, tool: str, **arguments: Any) -> Any:
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, result.content
    return result.structured_content


async def _error(client: Client, tool: str, **arguments: Any) -> str:
    result = await client.call_tool(tool, arguments)
    assert result.is_error, result.structured_content
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def _session(data_dir: Path, errlog: Path) -> list[Exception]:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "longmem", "mcp", "--user", USER],
        env={"PYTHONPATH": str(ROOT), "LONGMEM_STORAGE__DATA_DIR": str(data_dir)},
        cwd=ROOT,
    )
    stream_errors: list[Exception] = []  # a line on stdout that is not the protocol lands here

    async def on_message(message: IncomingMessage) -> None:
        if isinstance(message, Exception):
            stream_errors.append(message)

    with errlog.open("w") as stderr:
        async with Client(stdio_client(params, errlog=stderr), message_handler=on_message) as client:
            listed = {tool.name: tool for tool in (await client.list_tools()).tools}
            assert set(listed) == TOOLS
            assert "never instructions" in (listed["recall"].description or "")

            hives = await _ok(
                client, "remember", text="I keep two beehives on the roof of my flat in Ghent", tag="identity"
            )
            trip = await _ok(
                client,
                "remember",
                text="I fly to Reykjavik on Friday to hike a glacier",
                tag="event",
                ttl="P5D",
            )
            assert trip["expire_at"] is not None and hives["expire_at"] is None
            await _ok(client, "remember", text="I repair old typewriters at weekends", user=NEIGHBOUR)

            # Bad input is an error result; the server goes on serving.
            assert "must not be empty" in await _error(client, "remember", text="   ")
            assert "ttl" in await _error(client, "remember", text="I like figs", ttl="soon")
            assert "nothing with ids" in await _error(client, "forget_memory", memory_id="not-an-id")
            assert "invalid user id" in await _error(client, "list_memories", user="")

            await _ok(client, "set_profile", text="Answer in three bullet points at most")
            assert [e["text"] for e in (await _ok(client, "get_profile"))["profile"]] == [
                "Answer in three bullet points at most"
            ]

            recalled = await _ok(client, "recall", query="What do I keep on my roof?", k=3)
            assert recalled["memories"][0]["id"] == hives["id"]
            assert recalled["memories"][0]["score"] > 0
            assert "typewriters" not in str(recalled)  # the neighbour's memory stays theirs
            assert [e["text"] for e in recalled["profile"]] == ["Answer in three bullet points at most"]

            forgotten = await _ok(client, "forget", request="Please forget about my beehives")
            assert [m["id"] for m in forgotten["memories"]] == [hives["id"]]
            assert (await _ok(client, "forget_memory", memory_id=trip["id"]))["deleted"] == [trip["id"]]

            assert (await _ok(client, "list_memories"))["memories"] == []
            neighbour = (await _ok(client, "list_memories", user=NEIGHBOUR))["memories"]
            assert [m["text"] for m in neighbour] == ["I repair old typewriters at weekends"]
    return stream_errors


def test_mcp_tools_over_stdio(tmp_path: Path) -> None:
    errlog = tmp_path / "stderr.log"
    stream_errors = anyio.run(_session, tmp_path / "data", errlog)
    assert stream_errors == []  # stdout held the protocol and nothing else
    logged = errlog.read_text(encoding="utf-8")
    for secret in (USER, NEIGHBOUR, "beehives", "Reykjavik", "typewriters", "bullet points"):
        assert secret not in logged, logged


async def _remote_session(server_url: str, transport: httpx.AsyncBaseTransport) -> None:
    backend = RemoteBackend(AsyncClient(server_url, REMOTE_KEY, transport=transport))
    async with Client(build_server(backend, USER)) as client:
        stored = await _ok(client, "remember", text="I swim in the canal every morning before work")
        await _ok(client, "set_profile", text="Reply in Dutch", key="language")
        recalled = await _ok(client, "recall", query="What exercise do I do?")
        assert recalled["memories"][0]["id"] == stored["id"]
        assert recalled["profile"][0]["key"] == "language"
        assert "at least 1 character" in await _error(client, "remember", text="")
        assert "no such memory" in await _error(client, "forget_memory", memory_id="12345")
        # The server's own error class and message: this test's server has no LLM.
        assert "no LLM" in await _error(client, "forget", request="Forget that I swim")
        assert (await _ok(client, "forget_memory", memory_id=stored["id"]))["deleted"] == [stored["id"]]
        assert (await _ok(client, "list_memories"))["memories"] == []


REMOTE_KEY = "mcp-remote-key-0123456789"


def test_remote_mode_serves_the_same_tools_through_the_sdk(settings: Settings, embedder: Embedder) -> None:
    settings.serve = ServeSettings(api_keys=[ApiKey(key=SecretStr(REMOTE_KEY), tenant="acme")])
    service = open_local_service(settings, embedder=embedder)
    try:
        transport = httpx.ASGITransport(app=local_api(service))
        anyio.run(_remote_session, "http://longmem.test", transport)
        assert service.list_facts(f"acme:{USER}") == []  # the key's tenant's user, as over HTTP
    finally:
        service.close()
