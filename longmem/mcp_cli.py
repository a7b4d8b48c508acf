"""``longmem mcp``: the command that serves the memory tools of :mod:`longmem.mcp_server`."""

from __future__ import annotations

import argparse
import contextlib
import ipaddress
import sys
from typing import Any

from longmem.client import AsyncClient
from longmem.mcp_backends import LocalBackend, MemoryBackend, RemoteBackend
from memory_core.errors import ConfigError
from memory_core.settings import Settings
from memory_core.tenancy import LOCAL_TENANT, scoped_user_id
from memory_core.validation import check_user_id


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def cmd_mcp(settings: Settings, args: argparse.Namespace) -> None:
    """Serve the memory tools until the host disconnects (stdio) or Ctrl-C (HTTP).

    Raises:
        ConfigError: a non-loopback ``--host``, or a data dir or LLM that cannot work.
        InvalidUserIdError: a bad ``--user``.
    """
    from longmem.mcp_server import build_server  # the MCP SDK is imported only by this command

    http = args.transport == "streamable-http"
    if http and not _is_loopback(args.http_host):
        raise ConfigError(
            f"--host {args.http_host}: the MCP HTTP transport has no auth, so it binds loopback only "
            "(put a proxy with auth in front of it to reach it from elsewhere)"
        )
    max_chars = settings.limits.max_user_id_chars
    backend: MemoryBackend
    if args.url:
        check_user_id(args.user, max_chars)
        backend = RemoteBackend(AsyncClient(args.url, args.api_key))
    else:
        scoped_user_id(LOCAL_TENANT, args.user, max_chars)
        # Nothing but the protocol may reach stdout, whatever a library prints while loading.
        with contextlib.redirect_stdout(sys.stderr):
            backend = LocalBackend.open(settings, lambda line: print(f"longmem mcp: {line}", file=sys.stderr))
    server = build_server(backend, args.user)
    try:
        if http:
            url = f"http://{args.http_host}:{args.http_port}/mcp"
            print(f"longmem mcp: streamable HTTP on {url}; Ctrl-C stops it", file=sys.stderr)
            server.run("streamable-http", host=args.http_host, port=args.http_port)
        else:
            server.run("stdio")
    except KeyboardInterrupt:
        # uvicorn has shut down (the server's lifespan closed the stores) and re-raises the
        # interrupt only to tell its caller: no traceback for it.
        print("longmem mcp: stopped", file=sys.stderr)


def add_mcp(sub: Any) -> None:
    """Register ``mcp`` on the CLI's subparsers."""
    cmd = sub.add_parser(
        "mcp",
        help="serve memory tools to an MCP host (stdio; or streamable HTTP on loopback)",
        description="Memory tools for MCP hosts: remember, recall, forget, forget_memory, list_memories, "
        "get_profile, set_profile. In-process on the data dir by default; --url uses a running server.",
    )
    cmd.add_argument("--user", default="default", help="the user the tools act for (default: 'default')")
    cmd.add_argument(
        "--transport", choices=["stdio", "streamable-http"], default="stdio", help="default: stdio"
    )
    # Not --host/--port's usual dests: main() would take those for the HTTP API's serve settings.
    cmd.add_argument(
        "--host",
        dest="http_host",
        metavar="HOST",
        default="127.0.0.1",
        help="streamable HTTP: loopback address to bind",
    )
    cmd.add_argument(
        "--port", dest="http_port", metavar="PORT", type=int, default=8765, help="streamable HTTP: port"
    )
    cmd.add_argument("--url", help="use this longmem server instead of the data dir in-process")
    cmd.add_argument("--api-key", help="the server's API key (with --url)")
    cmd.set_defaults(func=cmd_mcp, standalone=True)
