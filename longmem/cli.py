"""``longmem`` commands: store, recall, forget and inspect memories on this machine.

Every command takes ``--data-dir`` and ``--config``; everything else comes from the
settings (env vars ``LONGMEM_...``, see README). ``--user alice`` means the user the HTTP
API calls alice, of ``--tenant`` (``local`` by default): stored as ``local:alice``. Errors
from longmem print one line on stderr and exit with status 2; nothing is half-written.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from longmem.bench_cli import add_bench, add_eval_locomo
from longmem.http_target import HttpTarget
from longmem.mcp_cli import add_mcp
from longmem.serve_cli import add_commands
from memory_core.backups import restore_backup
from memory_core.clock import ManualClock, SystemClock
from memory_core.errors import ConfigError, LongmemError, StorageError
from memory_core.evaluation.local import LocalTarget
from memory_core.evaluation.scenarios import load_scenarios, run_scenarios
from memory_core.llm.factory import make_engine
from memory_core.models import Fact, RecallHit, Tag
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import Settings, load_settings
from memory_core.store.facts import LocalFactStore, read_manifest
from memory_core.store.resharding import interrupted_goal
from memory_core.tenancy import LOCAL_TENANT, check_tenant, scoped_user_id

_DURATION = re.compile(r"(\d+)\s*([mhdw])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


_POLL_S = 1.0  # between looks at a server's reshard


def parse_duration(text: str) -> timedelta:
    """Parse ``90m``, ``2h``, ``3d``, ``1w`` (or combinations like ``1d12h``)."""
    parts = _DURATION.findall(text.strip().lower())
    if not parts or "".join(f"{n}{u}" for n, u in parts) != re.sub(r"\s", "", text.lower()):
        raise argparse.ArgumentTypeError(f"not a duration: {text!r} (use e.g. 90m, 2h, 3d, 1w)")
    return sum((timedelta(**{_UNITS[u]: int(n)}) for n, u in parts), timedelta())


def parse_time(text: str) -> datetime:
    """Parse an ISO 8601 time; a time without offset is taken as UTC."""
    try:
        return datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not an ISO 8601 time: {text!r}") from exc


def _fact_json(fact: Fact) -> dict[str, Any]:
    return json.loads(fact.model_dump_json())


def _hit_json(hit: RecallHit) -> dict[str, Any]:
    return {**_fact_json(hit.fact), "score": round(hit.score, 4)}


def _print(obj: object) -> None:
    print(json.dumps(obj, ensure_ascii=False))


def cmd_remember(svc: MemoryService, args: argparse.Namespace) -> None:
    item = Remember(text=args.text, tag=Tag(args.tag), ttl=args.ttl, expire_at=args.expire_at)
    for fact in svc.remember(args.user, [item], at=args.at):
        _print(_fact_json(fact))


def cmd_recall(svc: MemoryService, args: argparse.Namespace) -> None:
    for hit in svc.recall(args.user, args.question, args.k):
        _print(_hit_json(hit))


def cmd_facts(svc: MemoryService, args: argparse.Namespace) -> None:
    for fact in svc.list_facts(args.user, include_superseded=args.all):
        _print(_fact_json(fact))


def cmd_forget(svc: MemoryService, args: argparse.Namespace) -> None:
    _print({"deleted": svc.forget_ids(args.user, args.ids)})


def cmd_prefer(svc: MemoryService, args: argparse.Namespace) -> None:
    _print(json.loads(svc.set_preference(args.user, args.text, source="cli", key=args.key).model_dump_json()))


def cmd_profile(svc: MemoryService, args: argparse.Namespace) -> None:
    for entry in svc.profile(args.user):
        _print(json.loads(entry.model_dump_json()))


def cmd_unprefer(svc: MemoryService, args: argparse.Namespace) -> None:
    svc.delete_preference(args.user, args.key)
    _print({"deleted": args.key})


def cmd_prompt(svc: MemoryService, args: argparse.Namespace) -> None:
    print(svc.build_prompt(args.user, args.session, args.question, args.k))


def cmd_sweep(svc: MemoryService, args: argparse.Namespace) -> None:
    record = svc.sweep(args.now, dry_run=args.dry_run)
    _print(json.loads(record.model_dump_json()))
    # A partial sweep prints its record and then fails like any other error (status 2).
    record.raise_for_status()


def cmd_backup(settings: Settings, args: argparse.Namespace) -> None:
    """Back up the data dir here, or a running server's stores (``--url``, operator key)."""
    if args.url:
        from longmem.client import Client  # only this form talks HTTP

        if args.to:
            raise ConfigError("--to is for a backup made here; a server backs up to its storage.backup_uri")
        with Client(args.url, api_key=args.api_key) as client:
            record = client.backup()
    else:
        uri = args.to or settings.storage.backup_uri
        if uri is None:
            raise ConfigError("say where: --to PATH_OR_URI, or storage.backup_uri in the settings")
        svc = open_local_service(settings)
        try:
            record = svc.backup(uri)
        finally:
            svc.close()
    _print(record.model_dump(mode="json"))


def cmd_shards(settings: Settings, args: argparse.Namespace) -> None:
    """Print the shard layout of the data dir here, or of a running server (``--url``)."""
    if args.url:
        from longmem.client import Client  # only this form talks HTTP

        with Client(args.url, api_key=args.api_key) as client:
            _print(client.shards())
        return
    svc = open_local_service(settings)
    try:
        reshard = {"interrupted_goal": interrupted_goal(settings.storage.data_dir)}
        _print({**svc.shards(), "reshard": reshard})
    finally:
        svc.close()


def cmd_reshard(settings: Settings, args: argparse.Namespace) -> None:
    """Add or remove shards of a running server (``--url``: it serves meanwhile) or of the data
    dir here (no server may have it open), or finish an interrupted reshard; prints what moved."""
    add = args.count if args.shards_command == "add" else 0
    remove = args.count if args.shards_command == "remove" else 0
    if args.url:
        _print(_reshard_server(args.url, args.api_key, add, remove))
        return
    data_dir = settings.storage.data_dir
    found = read_manifest(data_dir)
    if found is None:
        raise ConfigError(f"{data_dir} holds no longmem data (no manifest)")
    # The shard count the data dir was made with: its routing table has the current one.
    storage = settings.storage.model_copy(update={"shards": int(found["shards"])})
    store = LocalFactStore(
        storage, settings.limits, int(found["dim"]), str(found["embedder"]), settings.working.turns
    )
    try:
        current = store.routing.shards
        if args.shards_command == "resume":
            goal = interrupted_goal(data_dir)
            if goal is None:
                raise ConfigError(f"no reshard of {data_dir} was interrupted")
        else:
            goal = current + add - remove
        report = store.reshard(goal)
    finally:
        store.close()
    _print(report.as_json())


def _reshard_server(url: str, api_key: str | None, add: int, remove: int) -> dict[str, Any]:
    """Start a server's reshard and follow it to its end; its last status (the report when done).

    Raises:
        StorageError: the reshard failed (the server's store is consistent; resume it).
    """
    from longmem.client import Client  # only this form talks HTTP

    with Client(url, api_key=api_key) as client:
        status = client.reshard(add, remove)
        while status["state"] == "running":
            time.sleep(_POLL_S)
            status = client.shards()["reshard"]
    if status["state"] != "done":
        raise StorageError(f"the reshard to {status['goal']} shards failed: {status.get('error')}")
    return status


def _positive(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"not a positive whole number: {text!r}")
    return int(text)


def _shard_list(text: str) -> list[int]:
    try:
        numbers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r} (e.g. 1,3)") from None
    if not numbers or min(numbers) < 0:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r} (e.g. 1,3)")
    return numbers


def cmd_restore(settings: Settings, args: argparse.Namespace) -> None:
    """Rebuild the (new or empty) data dir from a backup, or only some of its shards."""
    record = restore_backup(args.source, settings.storage.data_dir, settings.limits, args.shards)
    _print(record.model_dump(mode="json"))


def cmd_erase(svc: MemoryService, args: argparse.Namespace) -> None:
    receipt = svc.erase(args.user)
    _print(receipt.__dict__)


def cmd_demo(svc: MemoryService, args: argparse.Namespace) -> None:
    """Store a few facts in two languages, recall them, show a prompt and an expiry."""
    now = svc.clock.now()
    user = "demo-user"
    facts = [
        Remember("我在泉州开了一家茶叶店，开了六年", Tag.IDENTITY),
        Remember("我最想解决的是网店的退货率太高", Tag.REQUIREMENT),
        Remember("I'm a bridge inspector and I mostly work nights", Tag.IDENTITY),
        Remember(
            "I'm at the station, my train to Lyon leaves in 20 minutes", Tag.EVENT, ttl=timedelta(hours=6)
        ),
    ]
    for fact in svc.remember(user, facts):
        print(
            f"remembered #{fact.id}: {fact.text}"
            + (f"  (until {fact.expire_at:%Y-%m-%d %H:%M})" if fact.expire_at else "")
        )
    svc.set_preference(user, "Answer in numbered steps; no emojis.", source="demo")
    for question in ["我的店在哪个城市？", "When do I usually work?", "Where is my train going?"]:
        hits = svc.recall(user, question, k=3)
        print(f"\nrecall: {question}")
        for hit in hits:
            print(f"  {hit.score:.3f}  {hit.fact.text}")
    print("\n--- prompt for 'Any tips for my trip?' ---")
    print(svc.build_prompt(user, "demo-session", "Any tips for my trip?", k=3))
    later = now + timedelta(days=1)
    print(f"\nsweep at {later:%Y-%m-%d %H:%M}: deleted {svc.sweep(later).deleted} expired fact(s)")
    print(
        "recall 'Where is my train going?' after the sweep:",
        [h.fact.text for h in svc.recall(user, "Where is my train going?", k=3)],
    )
    receipt = svc.erase(user)
    print(f"erased {user}: {receipt.facts} facts, {receipt.profile_entries} profile entries")


def cmd_eval_scenarios(settings: Settings, args: argparse.Namespace) -> None:
    """Run a scenario file in-process (throwaway data dir, manual clock) or against ``--url``."""
    scenarios = load_scenarios(args.file)
    progress = lambda line: print(line, file=sys.stderr)  # noqa: E731
    if args.url:
        target = HttpTarget(args.url, args.api_key)
        try:
            report = run_scenarios(target, scenarios, progress)
        finally:
            target.close()
    else:
        clock = ManualClock(SystemClock().now())
        engine = make_engine(settings.llm)
        try:
            svc = open_local_service(settings, clock, engine=engine)
            try:
                report = run_scenarios(LocalTarget(svc, clock), scenarios, progress)
            finally:
                svc.close()
        finally:
            engine.close()
    print(report.table())
    if args.report:
        args.report.write_text(json.dumps(report.as_dict(), ensure_ascii=False, indent=2), encoding="utf-8")
        print(f"report written to {args.report}")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="longmem", description="Long-term memory for AI agents.")
    parser.add_argument("--data-dir", type=Path, help="data directory (default: settings, ./longmem-data)")
    parser.add_argument("--config", type=Path, help="JSON or TOML settings file")
    sub = parser.add_subparsers(dest="command", required=True)

    def add(
        name: str, func: Callable[[MemoryService, argparse.Namespace], None], help_: str
    ) -> argparse.ArgumentParser:
        cmd = sub.add_parser(name, help=help_, description=help_)
        cmd.set_defaults(func=func)
        return cmd

    def user(cmd: argparse.ArgumentParser) -> None:
        cmd.add_argument("--user", required=True, help="user id, as the HTTP API names it")
        cmd.add_argument(
            "--tenant",
            default=LOCAL_TENANT,
            help=f"the user's tenant: an API key's tenant, or {LOCAL_TENANT!r} (default), as --local-only",
        )

    cmd = add("remember", cmd_remember, "store a fact for a user")
    user(cmd)
    cmd.add_argument("text")
    cmd.add_argument("--tag", default=Tag.OTHER.value, choices=[t.value for t in Tag])
    cmd.add_argument("--ttl", type=parse_duration, help="temporary fact: lifetime like 2h or 3d")
    cmd.add_argument("--expire-at", type=parse_time, help="temporary fact: ISO 8601 expiry time")
    cmd.add_argument("--at", type=parse_time, help="when it was said (default: now)")

    cmd = add("recall", cmd_recall, "recall a user's memories that matter for a question")
    user(cmd)
    cmd.add_argument("question")
    cmd.add_argument("-k", type=int, help="how many memories at most (default: settings)")

    cmd = add("facts", cmd_facts, "list a user's stored facts")
    user(cmd)
    cmd.add_argument("--all", action="store_true", help="include superseded facts")

    cmd = add("forget", cmd_forget, "delete some of a user's facts by id")
    user(cmd)
    cmd.add_argument("ids", type=int, nargs="+")

    cmd = add("prefer", cmd_prefer, "add a lasting preference to a user's profile")
    user(cmd)
    cmd.add_argument("text")
    cmd.add_argument("--key", help="stable key (default: derived from the text)")

    user(add("profile", cmd_profile, "show a user's profile"))

    cmd = add("unprefer", cmd_unprefer, "delete a profile entry by key")
    user(cmd)
    cmd.add_argument("key")

    cmd = add("prompt", cmd_prompt, "print the prompt an agent would get for a question")
    user(cmd)
    cmd.add_argument("question")
    cmd.add_argument("--session", default="cli")
    cmd.add_argument("-k", type=int)

    cmd = add("sweep", cmd_sweep, "delete expired facts")
    cmd.add_argument("--now", type=parse_time, help="sweep as of this time (default: now)")
    cmd.add_argument("--dry-run", action="store_true", help="only count what would be deleted")

    user(add("erase", cmd_erase, "remove every trace of a user"))

    cmd = sub.add_parser("backup", help="back up every shard: facts, profiles, turns (README: Backups)")
    cmd.add_argument(
        "--to", help="a path or pyarrow URI (default: storage.backup_uri); a new backup goes under it"
    )
    cmd.add_argument("--url", help="back up this running server instead (to its storage.backup_uri)")
    cmd.add_argument("--api-key", help="the server's operator key")
    cmd.set_defaults(func=cmd_backup, standalone=True)

    shards = sub.add_parser("shards", help="the fact shards").add_subparsers(
        dest="shards_command", required=True
    )
    cmd = shards.add_parser(
        "status", help="print how users are routed and each shard's node, files and counts (JSON)"
    )
    cmd.add_argument("--url", help="of this running server instead of the data dir here")
    cmd.add_argument("--api-key", help="the server's operator key")
    cmd.set_defaults(func=cmd_shards, standalone=True)
    for name, help_ in (
        ("add", "add N shards and move slots onto them (the data dir here, or a server with --url)"),
        ("remove", "move the slots of the last N shards onto the others and delete them"),
    ):
        cmd = shards.add_parser(name, help=help_, description=help_)
        cmd.add_argument("count", type=_positive, metavar="N", help="how many shards")
    cmd = shards.add_parser("resume", help="finish a reshard that was interrupted")
    cmd.set_defaults(count=0)
    for name in ("add", "remove", "resume"):
        cmd = shards.choices[name]
        cmd.add_argument("--url", help="reshard this running server (it serves meanwhile) instead")
        cmd.add_argument("--api-key", help="the server's operator key")
        cmd.set_defaults(func=cmd_reshard, standalone=True)

    cmd = sub.add_parser("restore", help="rebuild a new or empty --data-dir from a backup")
    cmd.add_argument(
        "--from",
        dest="source",
        required=True,
        help="a backup, or a location holding several (the newest complete)",
    )
    cmd.add_argument(
        "--shards",
        type=_shard_list,
        help="only these shards (e.g. 1,3: those of a dead node, with their users' profiles), "
        "beside the shards the data dir already holds",
    )
    cmd.set_defaults(func=cmd_restore, standalone=True)

    cmd = add("demo", cmd_demo, "show longmem working end to end on a throwaway data dir")
    cmd.set_defaults(throwaway=True)

    evaluate = sub.add_parser("eval", help="evaluate memory behaviour").add_subparsers(
        dest="suite", required=True
    )
    cmd = evaluate.add_parser(
        "scenarios",
        help="run a scenario file (JSON Lines, see ../shared/eval/FORMAT.md) on a throwaway data dir",
    )
    cmd.add_argument("file", type=Path)
    cmd.add_argument("--report", type=Path, help="write the JSON report here")
    cmd.add_argument("--url", help="run against this longmem server instead of in-process")
    cmd.add_argument("--api-key", help="the server's API key (admin: clock steps run the sweep)")
    cmd.set_defaults(func=cmd_eval_scenarios, throwaway=True, standalone=True)
    add_eval_locomo(evaluate)
    add_bench(sub)
    add_commands(sub)
    add_mcp(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; returns the process exit status."""
    args = _build_parser().parse_args(argv)
    try:
        overrides: dict[str, Any] = {}
        with tempfile.TemporaryDirectory(prefix="longmem-demo-") as scratch:
            data_dir = args.data_dir or (Path(scratch) if getattr(args, "throwaway", False) else None)
            if data_dir is not None:
                overrides["storage"] = {"data_dir": data_dir}
            flags = {"local_only": getattr(args, "local_only", False) or None}
            flags |= {"port": getattr(args, "port", None), "host": getattr(args, "host", None)}
            serve = {key: value for key, value in flags.items() if value is not None}
            if serve:
                overrides["serve"] = serve
            settings = load_settings(args.config, **overrides)
            if getattr(args, "standalone", False):
                args.func(settings, args)
                return 0
            if hasattr(args, "tenant"):
                # The id the server stores: a user stored over HTTP is the one the CLI reaches.
                tenant = check_tenant(args.tenant)
                args.user = scoped_user_id(tenant, args.user, settings.limits.max_user_id_chars)
            svc = open_local_service(settings)
            try:
                args.func(svc, args)
            finally:
                svc.close()
    except LongmemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
