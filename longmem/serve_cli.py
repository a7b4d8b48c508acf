"""``longmem serve`` (the Ray Serve app on this machine) and ``longmem chat`` (a terminal client)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from types import FrameType
from typing import Any

from longmem.client import Client
from memory_core.settings import Settings


def cmd_serve(settings: Settings, args: argparse.Namespace) -> None:
    """Start Ray, Serve and the app; print how to call it; on Ctrl-C or SIGTERM stop cleanly."""
    from deployments.app import start, stop  # Ray is imported only by the commands that need it

    print(
        "starting longmem (Ray, embedder, LLM, shards); the first start joins the model once ...", flush=True
    )
    running = start(settings)
    print(f"longmem is serving on {running.url}  (ready in {running.seconds_to_ready:.1f} s)")
    print(f"  API docs:  {running.url}/docs")
    print(f"  inspector: {running.url}/ui")
    auth = "" if settings.serve.local_only else ' -H "Authorization: Bearer $LONGMEM_KEY"'
    print("  try:")
    print(
        f"    curl -s {running.url}/v1/users/alice/memories{auth} -H 'content-type: application/json' "
        """-d '{"memories": [{"text": "I live in Lisbon", "tag": "identity"}]}'"""
    )
    print(
        f"    curl -s {running.url}/v1/users/alice/recall{auth} -H 'content-type: application/json' "
        """-d '{"query": "where do I live?"}'"""
    )
    print("  chat:      longmem chat --user alice" + ("" if settings.serve.local_only else " --api-key KEY"))
    print("Ctrl-C stops the server; memories are on disk in", settings.storage.data_dir.resolve(), flush=True)
    stopping = threading.Event()

    def on_signal(signum: int, _: FrameType | None) -> None:
        if stopping.is_set():
            print("already stopping: waiting for queued writes and store files to close", flush=True)
        stopping.set()

    # The handler stays in place while stopping: a second Ctrl-C must not cut the close short.
    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        while not stopping.wait(1.0):
            pass
        print("stopping: finishing queued memory writes, closing the shards ...", flush=True)
        for problem in stop(settings):
            print(f"  warning: {problem}", file=sys.stderr)
        print("stopped.", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_chat(settings: Settings, args: argparse.Namespace) -> None:
    """A terminal chat with memory: each turn shows which memories the reply was built from."""
    url = args.url or f"http://127.0.0.1:{settings.serve.port}"
    with Client(url, args.api_key) as client:
        print(
            f"chatting as {args.user} on {url} (session {args.session}); empty line or Ctrl-D ends",
            flush=True,
        )
        for line in sys.stdin:
            message = line.strip()
            if not message:
                break
            out = client.chat(args.user, message, session_id=args.session)
            for hit in out.memories:
                print(f"  [memory {hit.score:.2f}] {hit.text}")
            for entry in out.profile:
                print(f"  [profile] {entry.text}")
            print(f"assistant> {out.reply}", flush=True)
    print(json.dumps({"session": args.session, "user": args.user}, ensure_ascii=False))


def add_commands(sub: Any) -> None:
    """Register ``serve`` and ``chat`` on the CLI's subparsers."""
    cmd = sub.add_parser("serve", help="run the HTTP API on Ray Serve on this machine")
    cmd.add_argument("--local-only", action="store_true", help="no API keys: bind 127.0.0.1 only")
    cmd.add_argument("--port", type=int, help="HTTP port (default: settings, 8000)")
    cmd.add_argument("--host", help="interface to bind (default: settings; loopback when --local-only)")
    cmd.set_defaults(func=cmd_serve, standalone=True)

    cmd = sub.add_parser("chat", help="chat with memory in the terminal, against a running server")
    cmd.add_argument("--user", required=True, help="user id")
    cmd.add_argument("--url", help="server URL (default: http://127.0.0.1:<serve.port>)")
    cmd.add_argument("--api-key", help="API key (not needed for a --local-only server)")
    cmd.add_argument("--session", default="terminal", help="session id (working window)")
    cmd.set_defaults(func=cmd_chat, standalone=True)
