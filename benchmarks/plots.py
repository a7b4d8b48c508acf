"""PNG plots of the benchmark reports (matplotlib, no display needed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend is chosen before pyplot loads)

_COLORS = {
    "longmem": "#1f77b4",
    "longmem_http": "#17becf",
    "raw_turns": "#ff7f0e",
    "window": "#7f7f7f",
    "mem0": "#d62728",
}


def _color(name: str) -> str:
    return _COLORS.get(name, "#2ca02c")


def plot_locomo(report: dict[str, Any], path: Path) -> list[Path]:
    """Bars of evidence recall@k per system: the headline and each category."""
    systems = report["systems"]
    categories = sorted({c for entry in systems.values() for c in entry["by_category"]})
    groups = ["headline (no 5)", *[f"cat {c}" for c in categories]]
    width = 0.8 / max(len(systems), 1)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for n, (name, entry) in enumerate(systems.items()):
        values = [entry["evidence_recall"], *[entry["by_category"].get(c) for c in categories]]
        xs = [g + (n - (len(systems) - 1) / 2) * width for g in range(len(groups))]
        ax.bar(xs, [v or 0.0 for v in values], width, label=name, color=_color(name))
    ax.set_xticks(range(len(groups)), groups)
    ax.set_ylim(0, 1)
    ax.set_ylabel(f"evidence recall@{report['k']}")
    total = sum(c["questions"] for c in report["conversations"])
    ax.set_title(f"LoCoMo: {len(report['conversations'])} conversations, {total} questions")
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    out = path.with_suffix(".png")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return [out]


def plot_bench(report: dict[str, Any], path: Path) -> list[Path]:
    """Search latency (p50 and p99; the store alone dotted) and own-fact hit rate against size."""
    sizes = report["sizes"]
    fig, (lat, hits) = plt.subplots(1, 2, figsize=(11, 4.5))
    for name in report["systems"]:
        points = [(s["facts"], s["systems"][name]) for s in sizes if name in s["systems"]]
        if not points:
            continue
        xs = [facts for facts, _ in points]
        lat.plot(xs, [e["search"]["p50"] for _, e in points], "o--", color=_color(name), alpha=0.6)
        lat.plot(xs, [e["search"]["p99"] for _, e in points], "o-", color=_color(name), label=f"{name} p99")
        store = [(facts, e["store_search"]["p99"]) for facts, e in points if "store_search" in e]
        if store:
            label = f"{name} store p99"
            lat.plot([f for f, _ in store], [v for _, v in store], "x:", color=_color(name), label=label)
        hits.plot(xs, [e["hit_rate"] for _, e in points], "o-", color=_color(name), label=name)
    lat.set_xscale("log")
    lat.set_yscale("log")
    lat.set_xlabel("facts in the store (100 per user)")
    lat.set_ylabel("ms: p99 solid, p50 dashed, store p99 dotted")
    lat.legend()
    lat.grid(alpha=0.3, which="both")
    hits.set_xscale("log")
    hits.set_ylim(0, 1.05)
    hits.set_xlabel("facts in the store (100 per user)")
    hits.set_ylabel(f"questions answered from the user's own facts (top {report['k']})")
    hits.legend()
    hits.grid(alpha=0.3)
    out = path.with_suffix(".png")
    fig.tight_layout()
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return [out]
