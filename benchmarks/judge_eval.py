"""Quality and latency of the write judge and the extractor with the default local model.

Over ``benchmarks/data/judge_turns.jsonl`` (hand-labelled zh/en user turns: facts,
preferences, temporary plans, chit-chat, task requests, general questions) prints:
precision and recall of "worth remembering", per language and kind; the share of
not-worth turns the pre-filter skipped without an LLM call; judge and extraction latency
p50/p90 on this machine; and a sample of extracted facts.

    python -m benchmarks.judge_eval [--limit N] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from memory_core.llm.factory import make_engine
from memory_core.llm.structured import StructuredLLM
from memory_core.settings import load_settings
from memory_core.write.analyze import TurnAnalyzer

DATA = Path(__file__).parent / "data" / "judge_turns.jsonl"


def _pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=0, help="only the first N turns (0: all)")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args()
    rows = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]
    if args.limit:
        rows = rows[:: max(1, len(rows) // args.limit)][: args.limit]
    settings = load_settings()
    start = time.perf_counter()
    llm = StructuredLLM(make_engine(settings.llm))
    load_seconds = time.perf_counter() - start
    analyzer = TurnAnalyzer(llm)
    judge_ms: list[float] = []
    extract_ms: list[float] = []
    results = []
    for row in rows:
        calls = llm.stats.calls
        t0 = time.perf_counter()
        verdict = analyzer.judge(row["text"])
        if llm.stats.calls > calls:
            judge_ms.append((time.perf_counter() - t0) * 1000)
        facts: list[str] = []
        if verdict.worth:
            t1 = time.perf_counter()
            facts = [f.text for f in analyzer.extract(row["text"], "")]
            extract_ms.append((time.perf_counter() - t1) * 1000)
        results.append(
            {**row, "predicted": verdict.worth, "prefiltered": verdict.skipped is not None, "facts": facts}
        )
        print(
            f"{row['id']} predicted={verdict.worth} labelled={row['worth']} {row['text'][:50]!r} {facts}",
            flush=True,
        )

    def prf(subset: list[dict]) -> dict[str, float | int]:
        tp = sum(r["predicted"] and r["worth"] for r in subset)
        fp = sum(r["predicted"] and not r["worth"] for r in subset)
        fn = sum(not r["predicted"] and r["worth"] for r in subset)
        return {
            "n": len(subset),
            "precision": round(tp / (tp + fp), 3) if tp + fp else float("nan"),
            "recall": round(tp / (tp + fn), 3) if tp + fn else float("nan"),
        }

    not_worth = [r for r in results if not r["worth"]]
    figures = {
        "turns": len(results),
        "all": prf(results),
        "by_lang": {lang: prf([r for r in results if r["lang"] == lang]) for lang in ("zh", "en")},
        "recall_by_kind": {
            kind: round(np.mean([r["predicted"] for r in results if r["kind"] == kind]), 3)
            for kind in sorted({r["kind"] for r in results})
        },
        "not_worth_skipped_without_llm": round(sum(r["prefiltered"] for r in not_worth) / len(not_worth), 3),
        "worth_skipped_by_prefilter": sum(r["prefiltered"] for r in results if r["worth"]),
        "judge_ms": {"n": len(judge_ms), "p50": round(_pct(judge_ms, 50)), "p90": round(_pct(judge_ms, 90))},
        "extract_ms": {
            "n": len(extract_ms),
            "p50": round(_pct(extract_ms, 50)),
            "p90": round(_pct(extract_ms, 90)),
        },
        "model_load_seconds": round(load_seconds, 1),
        "llm": {
            "calls": llm.stats.calls,
            "prompt_tokens": llm.stats.prompt_tokens,
            "completion_tokens": llm.stats.completion_tokens,
            "invalid_outputs": llm.stats.invalid_outputs,
        },
        "engine": llm.engine.name,
    }
    print(json.dumps(figures, ensure_ascii=False, indent=2))
    if args.json:
        args.json.write_text(
            json.dumps({"figures": figures, "results": results}, ensure_ascii=False, indent=2)
        )
    llm.engine.close()


if __name__ == "__main__":
    main()
