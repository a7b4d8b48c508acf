"""Write-path correctness on hand-labelled sets, with the default local model.

Five sets under ``benchmarks/data/`` (written for this benchmark; no sentence of them is in
any prompt):

- ``forget_intent.jsonl``: does a message ask to erase something remembered? Precision and
  recall per language; accuracy per phenomenon (real requests, "I forgot to tell you",
  "don't forget", quotations, text to translate, ...).
- ``forget_targets.jsonl``: a user's stored memories and one forget request; which memories
  the request deletes against the labelled ones. Goal: 0 wrongly deleted per request.
- ``extraction_turns.jsonl``: one turn (with the assistant's previous message) through the
  whole write path on a fresh user; what is stored against the expected facts and the
  forbidden ones (another person's fact stored as the user's, the assistant's suggestion as
  the user's interest). Precision, recall, forbidden facts and temporary/lasting accuracy per
  phenomenon and language.
- ``extraction_details.jsonl`` (set ``details``): the same, for turns that tell a thing with
  its cause, purpose or who and where ("after the shop closed I started …"); both parts must be
  kept, in one memory or two; half plain sentences, half chatty turns.
- ``resolve_pairs.jsonl``: a stored memory and a new one of the same kind; does the LLM call
  them the same (the new one is dropped), an update (the old one is hidden) or different?
  Accuracy per relation and language, and the harmful answers: a memory hidden by an unrelated
  one, a new detail dropped as "the same".

    python -m benchmarks.write_eval [--sets intent,targets,extraction,details,resolve] [--limit N]
        [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memory_core.clock import ManualClock
from memory_core.llm.factory import make_engine
from memory_core.models import Role, Turn
from memory_core.service import MemoryService, Remember, open_local_service
from memory_core.settings import Settings, StorageSettings, load_settings
from memory_core.write.analyze import TurnAnalyzer
from memory_core.write.pipeline import RELATIONS
from memory_core.write.prompts import resolve_messages

DATA = Path(__file__).parent / "data"
SETS = ("intent", "targets", "extraction", "details", "resolve")


def _rows(name: str, limit: int) -> list[dict[str, Any]]:
    rows = [
        json.loads(line) for line in (DATA / name).read_text(encoding="utf-8").splitlines() if line.strip()
    ]
    return rows[:: max(1, len(rows) // limit)][:limit] if limit else rows


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 3) if den else None


def _grouped(
    rows: list[dict[str, Any]], figures: Callable[[list[dict[str, Any]]], dict[str, Any]]
) -> dict[str, Any]:
    return {
        "all": figures(rows),
        "by_lang": {lang: figures([r for r in rows if r["lang"] == lang]) for lang in ("en", "zh")},
        "by_phenomenon": {
            p: figures([r for r in rows if r["phenomenon"] == p])
            for p in sorted({r["phenomenon"] for r in rows})
        },
    }


def run_intent(svc: MemoryService, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Forget intent: precision/recall per language, accuracy per phenomenon."""
    assert svc.llm is not None
    analyzer = TurnAnalyzer(svc.llm)
    for row in rows:
        row["predicted"] = analyzer.asks_to_forget(row["text"])
        mark = "ok " if row["predicted"] == row["request"] else "BAD"
        print(f"intent {mark} {row['id']} said={row['predicted']} {row['text'][:70]!r}", flush=True)

    def figures(subset: list[dict[str, Any]]) -> dict[str, Any]:
        tp = sum(r["predicted"] and r["request"] for r in subset)
        fp = sum(r["predicted"] and not r["request"] for r in subset)
        fn = sum(not r["predicted"] and r["request"] for r in subset)
        return {
            "n": len(subset),
            "precision": _ratio(tp, tp + fp),
            "recall": _ratio(tp, tp + fn),
            "accuracy": _ratio(sum(r["predicted"] == r["request"] for r in subset), len(subset)),
        }

    return _grouped(rows, figures)


def run_targets(svc: MemoryService, rows: list[dict[str, Any]], at: datetime) -> dict[str, Any]:
    """Forget precision: memories deleted that the request did not name, and named ones missed."""
    for row in rows:
        user = f"ft-{row['id']}"
        stored = svc.remember(user, [Remember(text=m) for m in row["memories"]], at=at)
        index = {fact.id: n for n, fact in enumerate(stored)}
        result = svc.forget(user, row["utterance"], at + timedelta(minutes=5))
        deleted = {index[f.id] for f in result.facts}
        expected = set(row["delete"])
        row["deleted"] = sorted(deleted)
        row["wrong"] = len(deleted - expected)
        row["missed"] = len(expected - deleted)
        mark = "ok " if not row["wrong"] and not row["missed"] else "BAD"
        print(f"target {mark} {row['id']} deleted={sorted(deleted)} want={sorted(expected)}", flush=True)

    def figures(subset: list[dict[str, Any]]) -> dict[str, Any]:
        named = sum(len(r["delete"]) for r in subset)
        return {
            "requests": len(subset),
            "wrongly_deleted": sum(r["wrong"] for r in subset),
            "wrongly_deleted_per_request": _ratio(sum(r["wrong"] for r in subset), len(subset)),
            "requests_with_a_wrong_deletion": sum(r["wrong"] > 0 for r in subset),
            "named_deleted_share": _ratio(named - sum(r["missed"] for r in subset), named),
            "exact": _ratio(sum(not r["wrong"] and not r["missed"] for r in subset), len(subset)),
        }

    return {
        "all": figures(rows),
        "by_lang": {lang: figures([r for r in rows if r["lang"] == lang]) for lang in ("en", "zh")},
    }


def run_resolve(svc: MemoryService, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The same/update/different question on labelled pairs: accuracy and harmful answers."""
    assert svc.llm is not None
    for row in rows:
        row["predicted"] = svc.llm.choose(resolve_messages(row["old"], row["new"]), RELATIONS)
        mark = "ok " if row["predicted"] == row["relation"] else "BAD"
        print(f"resolve {mark} {row['id']} said={row['predicted']} want={row['relation']}", flush=True)

    def figures(subset: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "n": len(subset),
            "accuracy": _ratio(sum(r["predicted"] == r["relation"] for r in subset), len(subset)),
            # Data lost: an old memory hidden by one that does not replace it, or a new one dropped.
            "wrongly_hidden": sum(r["predicted"] == "update" != r["relation"] for r in subset),
            "wrongly_dropped": sum(r["predicted"] == "same" != r["relation"] for r in subset),
        }

    return _grouped(rows, figures)


def _matches(text: str, needles: Iterable[str]) -> bool:
    folded = text.casefold()
    return any(n.casefold() in folded for n in needles)


def run_extraction(svc: MemoryService, clock: ManualClock, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each labelled turn through the whole write path; stored items against expected and forbidden."""
    for row in rows:
        user = f"ex-{row['id']}"
        at = datetime.fromisoformat(row["date"]).replace(hour=10, tzinfo=UTC)
        clock.set(at)
        turns = []
        if row.get("context"):
            turns.append(Turn(role=Role.ASSISTANT, content=row["context"], at=at))
        turns.append(Turn(role=Role.USER, content=row["message"], at=at, turn_id="t1"))
        svc.ingest(user, "s1", turns, at)
        stored = [
            {"text": f.text, "temporary": f.expire_at is not None, "layer": "fact", "about": f.about}
            for f in svc.list_facts(user)
        ] + [{"text": e.text, "temporary": False, "layer": "profile", "about": ""} for e in svc.profile(user)]
        forbid = [re.compile(p, re.IGNORECASE) for p in row.get("forbid", [])]
        for item in stored:
            item["forbidden"] = any(p.search(item["text"]) for p in forbid)
            item["expected"] = not item["forbidden"] and any(
                _matches(item["text"], e["any"]) for e in row["expect"]
            )
        found = []
        for want in row["expect"]:
            hit = next((i for i in stored if not i["forbidden"] and _matches(i["text"], want["any"])), None)
            found.append(
                {
                    "found": hit is not None,
                    "temporary_ok": None
                    if hit is None or want.get("temporary") is None
                    else hit["temporary"] == want["temporary"],
                    "layer_ok": None if hit is None or "layer" not in want else hit["layer"] == want["layer"],
                }
            )
        row["stored"], row["found"] = stored, found
        bad = [i["text"] for i in stored if not i["expected"]]
        labelled = list(zip(row["expect"], found, strict=True))
        missed = [w["any"][0] for w, f in labelled if not f["found"]]
        lifetime = [w["any"][0] for w, f in labelled if f["temporary_ok"] is False]
        mark = "ok " if not bad and not missed and not lifetime else "BAD"
        print(
            f"extract {mark} {row['id']} {row['message'][:50]!r} unexpected={bad} missed={missed} "
            f"wrong_lifetime={lifetime}",
            flush=True,
        )

    def figures(subset: list[dict[str, Any]]) -> dict[str, Any]:
        stored = [i for r in subset for i in r["stored"]]
        found = [f for r in subset for f in r["found"]]
        temporary = [f["temporary_ok"] for f in found if f["temporary_ok"] is not None]
        layer = [f["layer_ok"] for f in found if f["layer_ok"] is not None]
        return {
            "turns": len(subset),
            "stored": len(stored),
            "precision": _ratio(sum(i["expected"] for i in stored), len(stored)),
            "recall": _ratio(sum(f["found"] for f in found), len(found)),
            "forbidden_stored": sum(i["forbidden"] for i in stored),
            "turns_with_nothing_expected_but_stored": sum(
                bool(r["stored"]) and not r["expect"] for r in subset
            ),
            "temporary_accuracy": _ratio(sum(temporary), len(temporary)),
            "layer_accuracy": _ratio(sum(layer), len(layer)),
        }

    return _grouped(rows, figures)


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--limit", type=int, default=0, help="at most N rows of each set, spread (0: all)")
    parser.add_argument("--json", type=Path, help="also write figures and per-row results here")
    args = parser.parse_args()
    chosen = [s.strip() for s in args.sets.split(",") if s.strip()]
    unknown = sorted(set(chosen) - set(SETS))
    if unknown:
        parser.error(f"unknown sets {unknown}; choose from {list(SETS)}")
    at = datetime(2026, 5, 10, 9, 0, tzinfo=UTC)
    clock = ManualClock(at)
    base = load_settings()
    engine = make_engine(base.llm)
    figures: dict[str, Any] = {"engine": engine.name}
    results: dict[str, Any] = {}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        settings = Settings(**{**base.model_dump(), "storage": StorageSettings(data_dir=Path(tmp), shards=2)})
        svc = open_local_service(settings, clock, engine=engine)
        try:
            if "intent" in chosen:
                results["intent"] = _rows("forget_intent.jsonl", args.limit)
                figures["intent"] = run_intent(svc, results["intent"])
            if "targets" in chosen:
                results["targets"] = _rows("forget_targets.jsonl", args.limit)
                figures["targets"] = run_targets(svc, results["targets"], at)
            if "extraction" in chosen:
                results["extraction"] = _rows("extraction_turns.jsonl", args.limit)
                figures["extraction"] = run_extraction(svc, clock, results["extraction"])
            if "details" in chosen:
                results["details"] = _rows("extraction_details.jsonl", args.limit)
                figures["details"] = run_extraction(svc, clock, results["details"])
            if "resolve" in chosen:
                results["resolve"] = _rows("resolve_pairs.jsonl", args.limit)
                figures["resolve"] = run_resolve(svc, results["resolve"])
            assert svc.llm is not None
            figures["llm_calls"] = svc.llm.stats.calls
        finally:
            svc.close()
            engine.close()
    figures["wall_seconds"] = round(time.perf_counter() - start, 1)
    print(json.dumps(figures, ensure_ascii=False, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"figures": figures, "results": results}, ensure_ascii=False, indent=2)
        )


if __name__ == "__main__":
    main()
