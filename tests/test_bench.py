"""``longmem bench``: the command on a small store, the ratios, and mem0's search peer for real.

mem0 runs in its own environment (``.venv-mem0``, built by ``make test`` through ``make mem0-env``);
these tests fail, not skip, when it is missing.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from benchmarks.bench_compare import (
    make_corpus,
    questions,
    ratios,
    run_longmem,
    run_mem0,
)
from benchmarks.serve_load import read_probes
from longmem.cli import main
from memory_core.embedding import Embedder
from memory_core.settings import Settings, StorageSettings

CUTOFF = datetime(2026, 6, 1, tzinfo=UTC)


def test_ratios_are_longmem_over_mem0_per_part_and_quantile() -> None:
    entry = {
        "longmem": {"search": {"p50": 10.0, "p99": 20.0}, "store_search": {"p50": 0.1, "p99": 0.2}},
        "mem0": {"search": {"p50": 40.0, "p99": 80.0}, "store_search": {"p50": 5.0, "p99": 10.0}},
    }
    assert ratios(entry) == {
        "longmem/mem0 search p50": 0.25,
        "longmem/mem0 search p99": 0.25,
        "longmem/mem0 store_search p50": 0.02,
        "longmem/mem0 store_search p99": 0.02,
    }
    assert ratios({"longmem": entry["longmem"]}) == {}


def test_bench_command_reports_longmem_in_process(tmp_path: Path) -> None:
    report = tmp_path / "bench" / "bench.json"
    code = main(["bench", "--sizes", "2000", "--systems", "longmem", "--report", str(report)])
    assert code == 0
    data = json.loads(report.read_text())
    assert data["systems"] == ["longmem"] and data["questions"] == 90
    (size,) = data["sizes"]
    assert size["facts"] == 2000 and size["users"] == 20 and size["ratios"] == {}
    longmem = size["systems"]["longmem"]
    # The user's partition holds only their own facts: the data set's questions are answered.
    assert longmem["hit_rate"] >= 0.9 and longmem["store_search"]["hit_rate"] >= 0.9
    assert longmem["store_search"]["p99"] < longmem["search"]["p99"]  # the embedder is left out
    assert longmem["sweep"]["deleted"] == longmem["sweep"]["planted"] > 100
    assert report.with_suffix(".png").stat().st_size > 1000


def test_bench_command_refuses_bad_input(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--systems", "longmem,nope"]) == 2
    assert "unknown systems ['nope']" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--sizes", "10,abc"])
    assert exc.value.code == 2


def test_mem0_peer_searches_the_same_corpus_for_real(tmp_path: Path, embedder: Embedder) -> None:
    probes = read_probes()
    corpus = make_corpus(3000, probes, embedder, seed=3)
    asked = questions(probes)
    vectors = embedder.embed_queries([q for _, q, _ in asked])
    mem0 = run_mem0(corpus, probes, 5, timeout_s=600, query_vectors=vectors)
    settings = Settings(storage=StorageSettings(data_dir=tmp_path / "unused", shards=2))
    longmem = run_longmem(settings, corpus, probes, embedder, 5, CUTOFF, vectors)
    for system in (mem0, longmem):
        assert system["search"]["p50"] > 0 and system["store_search"]["p50"] > 0
        assert 0.8 <= system["hit_rate"] <= 1.0
    # mem0 filters the user's facts out of global nearest neighbours: never more than k, and
    # the store-only search sees what Memory.search sees.
    assert mem0["results_per_question"] <= 5
    assert mem0["store_search"]["hit_rate"] == pytest.approx(mem0["hit_rate"], abs=0.05)
    assert mem0["insert_s"] > 0
