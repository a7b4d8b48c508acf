"""A process that accepts turns of many users and writes them, for tests/test_write_resume.py
to kill -9 in the middle; run again with ``resume``, it writes what was accepted and not
written. The LLM is a fixed-latency scripted engine (the test is of the queue, not the model);
embedder, shards and files are real.

    python -m tests.queue_writer DATA_DIR LOG accept USERS TURNS
    python -m tests.queue_writer DATA_DIR LOG resume
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from memory_core.models import Role, Turn
from memory_core.service import open_local_service
from memory_core.settings import Settings, StorageSettings, WriteSettings
from memory_core.write.lanes import WriteLanes
from memory_core.write.writes import UserWrites
from tests.scripted_engine import ScriptedEngine, facts_json

RELATIVES = (
    "sister",
    "brother",
    "mother",
    "father",
    "aunt",
    "uncle",
    "cousin",
    "niece",
    "nephew",
    "grandmother",
)
JOBS = (
    "a baker",
    "a pilot",
    "a nurse",
    "a welder",
    "a teacher",
    "a lawyer",
    "a farmer",
    "a chemist",
    "a tailor",
)
_SAID = re.compile(r"note (\d+)-(\d+)")


def said(user: int, n: int) -> str:
    """What user ``user`` says in their turn ``n``."""
    return f"note {user}-{n}: my {RELATIVES[n % len(RELATIVES)]} works as {JOBS[(user + n) % len(JOBS)]}"


def fact(user: int, n: int) -> str:
    """The memory that turn leaves."""
    return f"User's {RELATIVES[n % len(RELATIVES)]} R{user}x{n} works as {JOBS[(user + n) % len(JOBS)]}"


def main() -> None:
    data_dir, log_path, mode, *rest = sys.argv[1:]
    log = open(log_path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)

    def extract(message: str) -> str:
        found = _SAID.search(message)
        assert found is not None, message
        user, n = int(found.group(1)), int(found.group(2))
        log.write(f"{user} {n}\n")  # the order turns reach the extractor in
        about = f"{RELATIVES[n % len(RELATIVES)]} R{user}x{n}"
        return facts_json((fact(user, n), "identity", "fact", False, about))

    engine = ScriptedEngine()
    engine.latency_s = 0.01
    engine.defaults["extract"] = extract
    engine.defaults["forget_intent"] = "no"
    settings = Settings(
        storage=StorageSettings(data_dir=Path(data_dir), shards=4), write=WriteSettings(concurrency=8)
    )
    service = open_local_service(settings, engine=engine)
    lanes = WriteLanes(settings.write)
    writes = UserWrites(service, lanes)
    if mode == "accept":
        users, turns = int(rest[0]), int(rest[1])
        futures = [
            writes.queue_turns(f"acme:u{u}", "s", [Turn(role=Role.USER, content=said(u, n))]).future
            for n in range(turns)
            for u in range(users)
        ]
        print("accepted", len(futures), flush=True)
        for done, future in enumerate(futures, 1):
            future.result()
            if done % 50 == 0:
                print("written", done, flush=True)
    else:
        print("resumed", writes.resume(), flush=True)
    lanes.close(wait=True)
    service.close()
    print("finished", flush=True)


if __name__ == "__main__":
    main()
