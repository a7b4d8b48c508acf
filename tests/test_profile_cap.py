"""The profile holds at most ``limits.max_profile_entries`` entries per user, on real DuckDB: an entry
set on purpose beyond the cap is refused (409 over HTTP) and nothing changes; a wish learned from
conversation takes the place of the oldest learned entry, never of one set on purpose, and is
counted in the turn's outcome when there is none; restating an entry is no growth; a restart keeps
the cap."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import ProfileFullError
from memory_core.models import Role, Turn
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import ApiKey, LimitSettings, ServeSettings, Settings
from memory_core.store.profile import DuckDBProfileStore, learned_source
from tests.asgi_app import local_api
from tests.scripted_engine import ScriptedEngine, facts_json

T0 = datetime(2026, 4, 1, tzinfo=UTC)
CAP = LimitSettings(max_profile_entries=3)
KEY = "acme-user-key-0123456789"


def _at(minutes: int) -> datetime:
    return T0 + timedelta(minutes=minutes)


def _texts(store: DuckDBProfileStore, user: str = "u") -> list[str]:
    return [e.text for e in store.get(user)]


def test_an_entry_set_on_purpose_past_the_cap_is_refused_and_nothing_changes(tmp_path: Path) -> None:
    path = tmp_path / "profile.duckdb"
    store = DuckDBProfileStore(path, CAP)
    for n, text in enumerate(["Short answers", "No emojis", "Answer in English"]):
        store.upsert("u", text, "api", _at(n))
    with pytest.raises(ProfileFullError, match="3 entries.*max_profile_entries.*delete an entry"):
        store.upsert("u", "Use bullet points", "api", _at(9))
    # Restating an entry, or replacing one under its key, is no growth.
    store.upsert("u", "  short ANSWERS ", "cli", _at(10))
    store.upsert("other", "Long essays", "api", _at(11))  # another user's cap is their own
    assert _texts(store) == ["No emojis", "Answer in English", "short ANSWERS"]
    store.close()
    reopened = DuckDBProfileStore(path, CAP)
    with pytest.raises(ProfileFullError):
        reopened.upsert("u", "Use bullet points", "api", _at(12))
    with pytest.raises(ProfileFullError):  # every entry was set on purpose: a learned one has no room
        reopened.upsert("u", "User wants jokes", learned_source("t-1"), _at(13))
    assert _texts(reopened) == ["No emojis", "Answer in English", "short ANSWERS"]
    reopened.close()


def test_a_learned_wish_at_the_cap_displaces_the_oldest_learned_entry_only(tmp_path: Path) -> None:
    path = tmp_path / "profile.duckdb"
    store = DuckDBProfileStore(path, CAP)
    store.upsert("u", "Never mention my ex", "api", _at(0))
    store.upsert("u", "User wants short answers", learned_source("t-1"), _at(1))
    store.upsert("u", "User wants no emojis", learned_source("t-2"), _at(2))
    store.upsert("u", "User wants answers in French", learned_source("t-3"), _at(3))
    assert _texts(store) == ["Never mention my ex", "User wants no emojis", "User wants answers in French"]
    # Conversation restating the entry set on purpose keeps it set on purpose.
    restated = store.upsert("u", "never mention my ex", learned_source("t-4"), _at(4))
    assert restated.source == "api"
    store.close()
    reopened = DuckDBProfileStore(path, CAP)
    reopened.upsert("u", "User wants a casual tone", learned_source("t-5"), _at(5))
    reopened.upsert("u", "User wants code in Go", learned_source("t-6"), _at(6))
    assert _texts(reopened) == ["never mention my ex", "User wants a casual tone", "User wants code in Go"]
    reopened.close()


@pytest.fixture
def svc(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> Iterator[tuple[MemoryService, ScriptedEngine]]:
    settings.limits = CAP
    settings.serve = ServeSettings(api_keys=[ApiKey(key=KEY, tenant="acme")])
    engine = ScriptedEngine()
    service = open_local_service(settings, clock, embedder, engine=engine)
    yield service, engine
    service.close()


def test_the_api_answers_409_at_the_cap_and_the_profile_is_unchanged(
    svc: tuple[MemoryService, ScriptedEngine],
) -> None:
    service, _ = svc
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(local_api(service)) as client:
        for text in ("Short answers", "No emojis", "Answer in English"):
            assert (
                client.post("/v1/users/alice/profile", json={"text": text}, headers=auth).status_code == 201
            )
        refused = client.post("/v1/users/alice/profile", json={"text": "Use bullet points"}, headers=auth)
        assert refused.status_code == 409, refused.text
        assert refused.json()["error"] == "ProfileFullError"
        assert "3 entries" in refused.json()["detail"] and "delete an entry" in refused.json()["detail"]
        refused = client.put("/v1/users/alice/profile/format", json={"text": "Bullet points"}, headers=auth)
        assert refused.status_code == 409
        replaced = client.post("/v1/users/alice/profile", json={"text": "no emojis"}, headers=auth)
        assert replaced.status_code == 201  # restating is no growth
        listed = client.get("/v1/users/alice/profile", headers=auth).json()["profile"]
    assert sorted(e["text"] for e in listed) == ["Answer in English", "Short answers", "no emojis"]


def _turn(text: str, turn_id: str) -> Turn:
    return Turn(role=Role.USER, content=text, turn_id=turn_id)


def test_the_write_path_at_the_cap_replaces_learned_wishes_and_counts_what_it_could_not_store(
    svc: tuple[MemoryService, ScriptedEngine], clock: ManualClock
) -> None:
    service, engine = svc
    service.set_preference("u", "Never mention my ex")
    for n, wish in enumerate(["short answers", "no emojis", "a casual tone"]):
        clock.advance(timedelta(minutes=1))
        engine.script("extract", facts_json((f"User wants {wish}", "preference", "profile", False)))
        (outcome,) = service.ingest("u", "s", [_turn(f"From now on I want {wish} in your replies.", f"t{n}")])
        assert outcome.profile_entries == 1 and outcome.profile_full == 0
    assert [e.text for e in service.profile("u")] == [
        "Never mention my ex",
        "User wants no emojis",
        "User wants a casual tone",
    ]
    assert [e.source for e in service.profile("u")][1:] == ["conversation:t1", "conversation:t2"]
    # Once every entry was set on purpose, a learned wish is not stored, and the outcome says so.
    for entry in service.profile("u")[1:]:
        service.delete_preference("u", entry.key)
    for text in ("Answer in English", "Use metric units"):
        clock.advance(timedelta(minutes=1))
        service.set_preference("u", text)
    engine.script(
        "extract", facts_json(("User wants answers in bullet points", "preference", "profile", False))
    )
    (outcome,) = service.ingest(
        "u", "s", [_turn("From now on I want answers in bullet points in your replies.", "t9")]
    )
    assert outcome.profile_entries == 0 and outcome.profile_full == 1
    assert [e.text for e in service.profile("u")] == [
        "Never mention my ex",
        "Answer in English",
        "Use metric units",
    ]
    with pytest.raises(ProfileFullError):
        service.set_preference("u", "Use bullet points")
