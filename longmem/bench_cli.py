"""``longmem eval locomo`` (evidence recall on LoCoMo, beside baselines and mem0) and ``longmem bench``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memory_core.embedding import make_embedder
from memory_core.errors import ConfigError
from memory_core.evaluation.locomo import (
    LongmemSystem,
    RawTurnsSystem,
    System,
    WindowSystem,
    load_locomo,
    report_table,
    run_locomo,
)
from memory_core.llm.factory import make_engine
from memory_core.settings import Settings

SYSTEMS = ("longmem", "raw_turns", "window", "mem0")
# The quick run: the opening turns of conv-30, whose first turns are asked about more than any
# other conversation's (3 scored questions in its first 6 turns; conv-26 has 2). On 2 cores
# mem0 spends ~3 minutes on its first 8k-token prompt and ~34 s a turn after it, longmem ~13 s.
QUICK: dict[str, Any] = {"only": ["conv-30"], "turns": 6}
QUICK_HELP = "the first 6 turns of conv-30 and the questions they answer (under 10 minutes)"


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _systems(text: str | None) -> list[str]:
    if text is None:
        from benchmarks.mem0_peer import mem0_available

        names = [n for n in SYSTEMS if n != "mem0" or mem0_available()]
        if "mem0" not in names:
            _stderr("mem0 is not built (make mem0-env): running without it")
        return names
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = sorted(set(names) - set(SYSTEMS))
    if unknown or not names:
        raise ConfigError(f"unknown systems {unknown}: choose from {', '.join(SYSTEMS)}")
    return names


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def write_report(report: dict[str, Any], path: Path, plot: Any) -> None:
    """Write ``report`` as JSON at ``path`` and its plots beside it (``plot(report, path)``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, ensure_ascii=False, indent=2), encoding="utf-8")
    for written in plot(report, path):
        print(f"plot written to {written}")
    print(f"report written to {path}")


def cmd_eval_locomo(settings: Settings, args: argparse.Namespace) -> None:
    """Ingest LoCoMo conversations into each system and score evidence recall@k."""
    limits = {
        **(QUICK if args.quick else {}),
        **{
            key: value
            for key in ("conversations", "only", "sessions", "turns", "questions")
            if (value := getattr(args, key)) is not None
        },
    }
    conversations = [
        c.limited(limits.get("sessions"), limits.get("questions"), limits.get("turns"))
        for c in load_locomo(args.dir, limits.get("conversations"), limits.get("only"))
    ]
    names = _systems(args.systems)
    embedder = make_embedder(settings.embedder)
    engine = make_engine(settings.llm) if "longmem" in names or args.qa else None
    systems: list[System] = []
    try:
        for name in names:
            if name == "longmem" and engine is not None:
                systems.append(LongmemSystem(settings, engine, embedder, args.work_dir))
            elif name == "raw_turns":
                systems.append(RawTurnsSystem(embedder))
            elif name == "window":
                systems.append(WindowSystem(args.window_turns or settings.working.turns))
            elif name == "mem0":
                from benchmarks.mem0_locomo import Mem0System

                systems.append(Mem0System(settings, args.work_dir))
        report = run_locomo(conversations, systems, args.k, _stderr, qa=engine if args.qa else None)
    finally:
        for system in systems:
            close = getattr(system, "close", None)
            if close is not None:
                close()
        if engine is not None:
            engine.close()
    report["dataset"] = str(args.dir)
    report["limits"] = limits
    report["embedder"] = embedder.name
    print(report_table(report))
    if args.report:
        from benchmarks.plots import plot_locomo

        write_report(report, args.report, plot_locomo)


def add_eval_locomo(evaluate: Any) -> None:
    """Register ``longmem eval locomo`` under the ``eval`` subcommands."""
    cmd = evaluate.add_parser(
        "locomo",
        help="evidence recall@k on LoCoMo conversations: longmem vs raw-turn RAG, window, mem0",
        description="Ingest each conversation session by session through each system and score, per "
        "question, the share of its evidence turns covered by the sources of the top-k memories.",
    )
    cmd.add_argument(
        "dir", type=Path, help="folder of LoCoMo conv-*.json files (e.g. ../shared/datasets/locomo)"
    )
    cmd.add_argument("--k", type=_positive, default=5, help="memories recalled per question (default 5)")
    cmd.add_argument("--report", type=Path, help="write the JSON report here (plots beside it)")
    cmd.add_argument("--systems", help=f"comma-separated, from {','.join(SYSTEMS)} (default: all built)")
    cmd.add_argument("--conversations", type=_positive, help="only the first N conversations")
    cmd.add_argument(
        "--conversation",
        dest="only",
        action="append",
        metavar="ID",
        help="only this conversation (e.g. conv-30); repeat for several",
    )
    cmd.add_argument("--sessions", type=_positive, help="only the first N sessions of each conversation")
    cmd.add_argument("--turns", type=_positive, help="only the first N turns of each conversation")
    cmd.add_argument("--questions", type=_positive, help="at most N questions per conversation")
    cmd.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_HELP}; flags given beside it win",
    )
    cmd.add_argument(
        "--qa",
        action="store_true",
        help="also answer each question from each system's context with the LLM and judge the answer "
        "CORRECT/WRONG against the gold one (J, per category, context tokens per answer)",
    )
    cmd.add_argument(
        "--window-turns", type=_positive, help="turns the window baseline keeps (default: working.turns)"
    )
    cmd.add_argument(
        "--work-dir",
        type=Path,
        default=Path("reports/locomo-work"),
        help="where ingested memories are kept; a rerun with the same inputs resumes (default %(default)s)",
    )
    cmd.set_defaults(func=cmd_eval_locomo, standalone=True)


def _sizes(text: str) -> list[int]:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of sizes: {text!r} (e.g. 10000,100000)") from exc
    if not sizes or min(sizes) < 100:
        raise argparse.ArgumentTypeError("sizes must be at least 100 facts")
    return sizes


def cmd_bench(settings: Settings, args: argparse.Namespace) -> None:
    """Search latency and own-fact recall at each size for each system; ingest rate; sweep time."""
    from benchmarks.bench_compare import SYSTEMS as BENCH_SYSTEMS
    from benchmarks.bench_compare import report_table as bench_table
    from benchmarks.bench_compare import run_bench
    from benchmarks.mem0_peer import mem0_available

    names = [n.strip() for n in args.systems.split(",")] if args.systems else list(BENCH_SYSTEMS)
    unknown = sorted(set(names) - set(BENCH_SYSTEMS))
    if unknown:
        raise ConfigError(f"unknown systems {unknown}: choose from {', '.join(BENCH_SYSTEMS)}")
    if "mem0" in names and not mem0_available():
        if args.systems:
            raise ConfigError("mem0 is not built: run `make mem0-env` first")
        _stderr("mem0 is not built (make mem0-env): running without it")
        names.remove("mem0")
    sizes = [10_000] if args.quick else args.sizes
    report = run_bench(settings, sizes, names, args.k, args.port)
    print(bench_table(report))
    from benchmarks.plots import plot_bench

    write_report(report, args.report, plot_bench)


def add_bench(sub: Any) -> None:
    """Register ``longmem bench``."""
    cmd = sub.add_parser(
        "bench",
        help="search latency and own-fact recall at 10k/100k/1M facts: longmem in-process, over HTTP, mem0",
    )
    cmd.add_argument(
        "--sizes", type=_sizes, default=[10_000, 100_000, 1_000_000], help="facts, comma-separated"
    )
    cmd.add_argument("--systems", help="comma-separated, from longmem,longmem_http,mem0 (default: all built)")
    cmd.add_argument("--k", type=_positive, default=5, help="memories per question (default 5)")
    cmd.add_argument("--quick", action="store_true", help="10k facts only")
    cmd.add_argument("--port", type=int, default=8131, help="port of the Serve app (longmem_http)")
    cmd.add_argument(
        "--report", type=Path, default=Path("reports/bench.json"), help="JSON report (plots beside it)"
    )
    cmd.set_defaults(func=cmd_bench, standalone=True)
