"""Deleted facts leave the index lazily (FAISS removal is per call, not per row): they must never
be returned, exported or handed out again, and their rows must go once they are a quarter."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pytest

from memory_core.models import Fact
from memory_core.store.partitions import Partitions

DIM = 8
NOW = datetime(2026, 3, 1, tzinfo=UTC)


def _fill(parts: Partitions, user: str, n: int) -> tuple[list[Fact], np.ndarray]:
    rng = np.random.default_rng(3)
    vectors = rng.standard_normal((n, DIM)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    facts = [Fact(id=1000 + i, user_id=user, text=f"{user} {i}", created_at=NOW) for i in range(n)]
    parts.insert(facts, vectors)
    return facts, vectors


def test_removed_rows_are_skipped_exported_away_then_compacted() -> None:
    parts = Partitions(DIM)
    facts, vectors = _fill(parts, "u", 12)
    index = parts._parts["u"].index
    gone = [facts[0].id, facts[1].id]
    assert parts.remove(gone) == gone
    assert index.ntotal == 12  # rows still there, fact map already without them
    for row in range(12):
        hits = parts.search("u", vectors[row], 12, NOW)
        assert not {f.id for f, _ in hits} & set(gone)
        assert len(hits) == 10
    exported, matrix = parts.export()
    assert {f.id for f in exported} == {f.id for f in facts[2:]} and matrix.shape == (10, DIM)
    for fact, row in zip(exported, matrix, strict=True):
        assert np.allclose(row, vectors[facts.index(fact)])
    assert parts.counts() == (1, 10)
    parts.remove([facts[2].id])  # 3 dead of 12: a quarter, compacted
    assert index.ntotal == 9 and parts._parts["u"].dead == []


def test_dead_ids_are_not_reused_and_dropping_a_user_clears_them(monkeypatch: pytest.MonkeyPatch) -> None:
    parts = Partitions(DIM)
    facts, _ = _fill(parts, "u", 20)
    parts.remove([facts[0].id])
    draws = iter([facts[0].id, facts[1].id, 77])  # a dead id, a live one, a free one
    monkeypatch.setattr("memory_core.store.partitions.secrets.randbits", lambda _: next(draws))
    assert parts.new_id(set()) == 77
    parts.drop_user("u")
    assert parts._dead == set() and parts.counts() == (0, 0)
