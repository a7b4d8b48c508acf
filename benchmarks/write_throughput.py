"""Write throughput: turns/s through the write path with 1, 4, 16 and 64 users writing at once,
each user's turns in order in its lane, against the serial queue (one write at a time, what
the ingress ran before write lanes) measured in the same run.

The LLM is an OpenAI-compatible server on loopback that answers after a fixed latency (a
batching server's behaviour: calls in flight do not slow each other), so the figure is the
queue's, not the model's; ``--llama`` adds the same run on the packaged model through
llama.cpp on this machine, whose engine takes one call at a time. Embedder, FAISS shards and
files are real.

    python -m benchmarks.write_throughput [--turns 64] [--latency-ms 100] [--llama]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from memory_core.embedding import Embedder, make_embedder
from memory_core.llm.base import LLMEngine
from memory_core.llm.openai_engine import OpenAIEngine
from memory_core.models import Role, Turn
from memory_core.service import open_local_service
from memory_core.settings import EmbedderSettings, Settings, StorageSettings, WriteSettings
from memory_core.write import prompts
from memory_core.write.lanes import WriteLanes
from memory_core.write.writes import UserWrites

USERS = (1, 4, 16, 64)
HOBBIES = ("pottery", "bouldering", "birdwatching", "chess", "sourdough", "kayaking", "origami", "salsa")


def _answer(system: str, message: str) -> str:
    """What the write path's prompts get from the fixed server: every turn worth a fact, about a
    person of its own (so no two turns' facts are ever taken for the same one, however alike)."""
    if system == prompts.JUDGE_SYSTEM:
        return json.dumps({"answer": "yes"})
    if system == prompts.RESOLVE_SYSTEM:
        return json.dumps({"answer": "different"})
    if system == prompts.EXTRACT_SYSTEM:
        words = message.rsplit("User message:", 1)[-1].strip().strip('"')
        who = f"pen pal P{hashlib.blake2b(words.encode(), digest_size=4).hexdigest()}"
        fact = {"about": who, "text": f"User's {who} heard: {words}", "tag": "identity", "layer": "fact"}
        return json.dumps({"facts": [{**fact, "temporary": False}]})
    return json.dumps({"answer": "no"})


def fixed_latency_server(
    latency_s: float, port: int = 0, fails_on: str | None = None
) -> tuple[str, Callable[[], None]]:
    """An OpenAI-compatible chat completions endpoint on loopback (``port``, or a free one)
    answering after ``latency_s`` (500 to a prompt whose last message holds ``fails_on``, as a
    server fails a request it cannot serve); returns its ``/v1`` URL and a function that stops it."""

    async def completions(request: Request) -> JSONResponse:
        import asyncio

        body = await request.json()
        await asyncio.sleep(latency_s)
        messages = body["messages"]
        if fails_on is not None and fails_on in messages[-1]["content"]:
            return JSONResponse({"error": {"message": "the worker crashed on this request"}}, status_code=500)
        content = _answer(messages[0]["content"], messages[-1]["content"])
        usage = {"prompt_tokens": 300, "completion_tokens": 20}
        return JSONResponse(
            {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": usage}
        )

    app = Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]

    def stop() -> None:
        server.should_exit = True
        thread.join()

    return f"http://127.0.0.1:{port}/v1", stop


def run(engine: LLMEngine, embedder: Embedder, users: int, turns: int, concurrency: int) -> float:
    """Write ``turns`` turns spread over ``users`` users, each user's in order; turns/s."""
    with tempfile.TemporaryDirectory(prefix="write-bench-") as tmp:
        settings = Settings(
            storage=StorageSettings(data_dir=Path(tmp) / "data", shards=4),
            write=WriteSettings(concurrency=concurrency),
        )
        service = open_local_service(settings, embedder=embedder, engine=engine)
        lanes = WriteLanes(settings.write)
        writes = UserWrites(service, lanes)
        started = time.perf_counter()
        futures = [
            writes.queue_turns(
                f"bench:u{n % users}",
                "s",
                [Turn(role=Role.USER, content=f"I took up {HOBBIES[n % len(HOBBIES)]} in year {2000 + n}")],
            ).future
            for n in range(turns)
        ]
        outcomes = [o for f in futures for o in f.result()]
        seconds = time.perf_counter() - started
        lanes.close()
        service.close()
    failed = [o.error for o in outcomes if o.error]
    if failed:
        raise SystemExit(f"{len(failed)} turns failed, e.g. {failed[0]}")
    return turns / seconds


def table(
    engine: LLMEngine, embedder: Embedder, turns: int, user_counts: tuple[int, ...]
) -> list[dict[str, Any]]:
    """Turns/s with each number of users, lanes (one worker per user) against the serial queue."""
    run(engine, embedder, 1, 2, concurrency=1)  # warm-up: the first calls load weights and caches
    rows = []
    for users in user_counts:
        serial = run(engine, embedder, users, turns, concurrency=1)
        lanes = run(engine, embedder, users, turns, concurrency=users)
        rows.append(
            {
                "users": users,
                "serial_turns_s": round(serial, 2),
                "lanes_turns_s": round(lanes, 2),
                "ratio": round(lanes / serial, 2),
            }
        )
        print(
            f"  {users:>3} users: serial {serial:7.2f} turns/s   lanes {lanes:7.2f} turns/s"
            f"   ratio {lanes / serial:5.2f}",
            flush=True,
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=64, help="turns per run (spread over the users)")
    parser.add_argument("--latency-ms", type=float, default=100.0, help="the fixed server's latency per call")
    parser.add_argument("--llama", action="store_true", help="also run on the packaged model with llama.cpp")
    parser.add_argument("--llama-turns", type=int, default=8, help="turns per run on llama.cpp")
    parser.add_argument("--out", type=Path, help="write the figures as JSON here")
    args = parser.parse_args()
    embedder = make_embedder(EmbedderSettings())
    url, stop = fixed_latency_server(args.latency_ms / 1000)
    engine = OpenAIEngine(url, "fixed-latency")
    print(
        f"fixed-latency OpenAI-compatible server ({args.latency_ms:g} ms per call), "
        f"{args.turns} turns per run:"
    )
    report: dict[str, Any] = {"latency_ms": args.latency_ms, "turns": args.turns}
    report["fixed_latency"] = table(engine, embedder, args.turns, USERS)
    engine.close()
    stop()
    if args.llama:
        from memory_core.llm.factory import make_engine

        llama = make_engine(Settings().llm)
        print(f"packaged model on llama.cpp ({llama.name}), {args.llama_turns} turns per run:")
        report["llama_cpp"] = table(llama, embedder, args.llama_turns, (1, 4))
        llama.close()
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
