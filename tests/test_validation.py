"""Bad input gets a clear error from one exception root, and nothing is stored half-way."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from memory_core.errors import (
    InvalidTextError,
    InvalidUserIdError,
    InvalidVectorError,
    LongmemError,
    ValidationError,
)
from memory_core.models import NewFact
from memory_core.service import MemoryService, Remember
from memory_core.settings import LimitSettings, StorageSettings
from memory_core.store.facts import LocalFactStore

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DIM = 8


def _fact(user: str, text: str) -> NewFact:
    return NewFact(user_id=user, text=text, created_at=NOW)


def _unit(n: int) -> np.ndarray:
    rng = np.random.default_rng(0)
    v = rng.normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


@pytest.fixture
def store(tmp_path: Path) -> LocalFactStore:
    s = LocalFactStore(
        StorageSettings(data_dir=tmp_path, shards=4), LimitSettings(max_text_chars=50, max_batch=5), DIM, "t"
    )
    yield s
    s.close()


def _total(store: LocalFactStore) -> int:
    return sum(shard.stats()["facts"] for shard in store.shards)


@pytest.mark.parametrize(
    ("user", "text", "error"),
    [
        ("u", "", InvalidTextError),
        ("u", "   \n\t", InvalidTextError),
        ("u", "x" * 51, InvalidTextError),
        ("u", "nul\x00byte", InvalidTextError),
        ("", "fine", InvalidUserIdError),
        ("a b", "fine", InvalidUserIdError),
        ("../etc/passwd", "fine", InvalidUserIdError),
        ("u" * 129, "fine", InvalidUserIdError),
    ],
)
def test_bad_fact_in_a_batch_stores_nothing(store: LocalFactStore, user: str, text: str, error: type) -> None:
    # Good facts for users on other shards come first: they must not be written either.
    batch = [_fact(f"good{i}", f"fine {i}") for i in range(3)] + [_fact(user, text)]
    with pytest.raises(error) as info:
        store.add(batch, _unit(4))
    assert isinstance(info.value, ValidationError) and isinstance(info.value, LongmemError)
    assert _total(store) == 0


@pytest.mark.parametrize(
    ("vectors", "reason"),
    [
        (np.ones((2, DIM + 1)), "shape"),
        (np.ones((3, DIM)), "shape"),
        (np.full((2, DIM), np.nan), "NaN"),
        (np.array([[np.inf] * DIM, [1.0] * DIM]), "NaN or infinite"),
        (np.zeros((2, DIM)), "zero norm"),
        ([["a"] * DIM] * 2, "numeric"),
    ],
)
def test_bad_vectors_are_rejected(store: LocalFactStore, vectors: object, reason: str) -> None:
    with pytest.raises(InvalidVectorError, match=reason):
        store.add([_fact("u1", "one"), _fact("u2", "two")], vectors)  # type: ignore[arg-type]
    assert _total(store) == 0


def test_oversized_batch_is_rejected(store: LocalFactStore) -> None:
    with pytest.raises(ValidationError, match="limit is 5"):
        store.add([_fact(f"u{i}", f"t{i}") for i in range(6)], _unit(6))  # spread over shards
    assert _total(store) == 0


def test_vectors_are_normalised_and_texts_stripped(store: LocalFactStore) -> None:
    stored = store.add([_fact("u", "  padded  ")], _unit(1) * 7.0)
    assert stored[0].text == "padded"
    assert np.isclose(np.linalg.norm(store.vectors_of("u", [stored[0].id])), 1.0)


def test_service_rejects_bad_input_without_storing(service: MemoryService) -> None:
    with pytest.raises(InvalidTextError):
        service.remember("u", [Remember("good one"), Remember("")])
    with pytest.raises(InvalidTextError):
        service.remember("u", [Remember("字" * 2001)])
    with pytest.raises(InvalidUserIdError):
        service.remember("bad user", [Remember("text")])
    with pytest.raises(ValidationError, match="not after"):
        service.remember("u", [Remember("already over", ttl=timedelta(0))])
    with pytest.raises(InvalidUserIdError):
        service.recall("", "question")
    with pytest.raises(InvalidTextError):
        service.recall("u", "")
    assert service.list_facts("u") == []
