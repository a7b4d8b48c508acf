"""Choose the embedder and the lexical weight by measurement on a bilingual retrieval set.

Runs every packaged embedder over ``benchmarks/data/retrieval_zh_en.jsonl`` (16 users,
zh / en / mixed, hand-written facts and questions), ranks each user's facts for each
question exactly as :class:`memory_core.recall.Recaller` does, and prints per language:
hit@1, recall@5 (share of relevant facts in the top 5), MRR, single-query latency, and the
cosine of relevant vs. irrelevant facts (to place the recall threshold).

    python -m benchmarks.embedders [--weights 0,0.1,0.2,0.3,0.5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from memory_core.embedding import make_embedder
from memory_core.models import Fact
from memory_core.recall import Recaller
from memory_core.settings import EmbedderName, EmbedderSettings, RecallSettings
from memory_core.text import Tokenizer

DATA = Path(__file__).parent / "data" / "retrieval_zh_en.jsonl"


def _facts(user: dict) -> list[Fact]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Fact(id=i, user_id=user["user"], text=f["text"], created_at=now) for i, f in enumerate(user["facts"])
    ]


def evaluate(name: EmbedderName, weights: list[float]) -> None:
    """Print the figures of one embedder for each lexical weight."""
    users = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    embedder = make_embedder(EmbedderSettings(name=name))
    tokenizer = Tokenizer()
    tokenizer.terms("预热 warm up")
    latencies: list[float] = []
    prepared = []
    rel_cos: list[float] = []
    irr_cos: list[float] = []
    for user in users:
        facts = _facts(user)
        vectors = embedder.embed_passages([f.text for f in facts])
        for query in user["queries"]:
            start = time.perf_counter()
            qvec = embedder.embed_query(query["q"])
            latencies.append((time.perf_counter() - start) * 1000)
            relevant = {int(r[1:]) - 1 for r in query["relevant"]}
            cos = vectors @ qvec
            rel_cos += [float(cos[i]) for i in relevant]
            irr_cos += [float(c) for i, c in enumerate(cos) if i not in relevant]
            candidates = sorted(zip(facts, cos.tolist(), strict=True), key=lambda p: -p[1])
            prepared.append((user["lang"], query["q"], relevant, candidates))
    print(
        f"\n== {name.value}: dim {embedder.dim}, query latency p50 {statistics.median(latencies):.1f} ms, "
        f"p90 {np.percentile(latencies, 90):.1f} ms"
    )
    print(
        f"   cosine relevant p10/p50 {np.percentile(rel_cos, 10):.3f}/{np.median(rel_cos):.3f}; "
        f"irrelevant p50/p90/p99 {np.median(irr_cos):.3f}/{np.percentile(irr_cos, 90):.3f}/"
        f"{np.percentile(irr_cos, 99):.3f}"
    )
    for weight in weights:
        recaller = Recaller(None, embedder, RecallSettings(lexical_weight=weight), tokenizer)  # type: ignore[arg-type]
        per_lang: dict[str, list[tuple[float, float, float]]] = {}
        for lang, question, relevant, candidates in prepared:
            ranked = [hit.fact.id for hit in recaller.rank(question, candidates[:20])]
            first = next((pos for pos, fid in enumerate(ranked) if fid in relevant), None)
            hit1 = float(first == 0)
            rec5 = len(relevant & set(ranked[:5])) / len(relevant)
            mrr = 1.0 / (first + 1) if first is not None else 0.0
            per_lang.setdefault(lang, []).append((hit1, rec5, mrr))
            per_lang.setdefault("all", []).append((hit1, rec5, mrr))
        cells = "  ".join(
            f"{lang}: hit@1 {np.mean([r[0] for r in rows]):.3f} R@5 {np.mean([r[1] for r in rows]):.3f} "
            f"MRR {np.mean([r[2] for r in rows]):.3f}"
            for lang, rows in sorted(per_lang.items())
        )
        print(f"   lexical_weight {weight:.2f} | {cells}")


def main() -> None:
    """Entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default="0,0.1,0.2,0.3,0.5")
    args = parser.parse_args()
    weights = [float(w) for w in args.weights.split(",")]
    for name in EmbedderName:
        evaluate(name, weights)


if __name__ == "__main__":
    main()
