"""Forgetting primitives on real files: expiry, delete by id, erase user without a trace."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest

from memory_core.errors import NotFoundError
from memory_core.models import Role, Tag, Turn
from memory_core.service import MemoryService, Remember
from memory_core.settings import Settings


def test_sweep_removes_exactly_the_expired_facts(service: MemoryService) -> None:
    now = service.clock.now()
    plan = {  # text -> lifetime (None: lasting)
        "meeting on Thursday at 3pm": timedelta(days=2),
        "at the airport right now": timedelta(hours=2),
        "trip to Osaka next week": timedelta(days=9),
        "I'm allergic to penicillin": None,
        "my sister lives in Chengdu": None,
    }
    for user in ("a", "b", "c"):
        service.remember(user, [Remember(f"{user}: {t}", Tag.EVENT, ttl=ttl) for t, ttl in plan.items()])
    cutoff = now + timedelta(days=3)
    expected_gone = {f"{u}: {t}" for u in "abc" for t, ttl in plan.items() if ttl and now + ttl < cutoff}
    assert service.count_due(cutoff) == len(expected_gone) == 6
    assert service.sweep(cutoff).deleted == 6
    remaining = {f.text for u in "abc" for f in service.list_facts(u)}
    all_texts = {f"{u}: {t}" for u in "abc" for t in plan}
    assert remaining == all_texts - expected_gone
    assert service.sweep(cutoff).deleted == 0


def test_fact_expiring_exactly_now_is_kept_until_after(service: MemoryService) -> None:
    now = service.clock.now()
    (fact,) = service.remember("u", [Remember("boarding soon", ttl=timedelta(hours=1))])
    assert service.sweep(now + timedelta(hours=1)).deleted == 0
    assert service.sweep(now + timedelta(hours=1, microseconds=1)).deleted == 1
    with pytest.raises(NotFoundError):
        service.get_fact("u", fact.id)


def test_sweep_in_bounded_batches(settings: Settings, open_service: Callable[[], MemoryService]) -> None:
    settings.sweep.batch_size = 10
    service = open_service()
    service.remember("u", [Remember(f"temp {i}", ttl=timedelta(minutes=i + 1)) for i in range(25)])
    record = service.sweep(service.clock.now() + timedelta(days=1))
    (swept,) = [s for s in record.shards if s.deleted]  # one user: one shard
    assert record.deleted == swept.deleted == 25 and swept.batches == 3  # 10 + 10 + 5


def test_expiry_survives_restart(open_service: Callable[[], MemoryService]) -> None:
    svc = open_service()
    svc.remember("u", [Remember("temporary", ttl=timedelta(hours=1)), Remember("lasting")])
    later = svc.clock.now() + timedelta(hours=2)
    svc.close()
    again = open_service()
    assert again.sweep(later).deleted == 1
    again.close()
    third = open_service()
    assert [f.text for f in third.list_facts("u")] == ["lasting"]


def test_delete_by_id_only_for_the_owner(service: MemoryService) -> None:
    (mine,) = service.remember("owner", [Remember("my bank is ACME")])
    with pytest.raises(NotFoundError):
        service.forget_ids("intruder", [mine.id])
    with pytest.raises(NotFoundError):
        service.get_fact("intruder", mine.id)
    with pytest.raises(NotFoundError):
        service.forget_ids("owner", [mine.id, 12345])  # one unknown id: nothing is deleted
    assert service.get_fact("owner", mine.id).text == "my bank is ACME"
    assert service.forget_ids("owner", [mine.id]) == [mine.id]
    assert service.list_facts("owner") == []


def _files_containing(root: Path, needle: bytes) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def test_erase_user_leaves_no_trace_on_disk(
    open_service: Callable[[], MemoryService], data_dir: Path
) -> None:
    canary = "CANARY-7f3a9c-金丝雀"
    svc = open_service()
    svc.remember("victim", [Remember(f"{canary} fact {i}", ttl=timedelta(days=i + 1)) for i in range(30)])
    svc.remember("bystander", [Remember("bystander keeps this"), Remember("和这一条")])
    svc.set_preference("victim", f"{canary} wants short answers")
    svc.add_turn("victim", "s1", Turn(role=Role.USER, content=f"{canary} hello"))
    for shard in svc.facts.shards:  # type: ignore[attr-defined]
        shard.snapshot()  # the canary is now in snapshots as well as logs
    svc.remember("victim", [Remember(f"{canary} after snapshot")])
    assert _files_containing(data_dir, canary.encode())  # planted for real

    receipt = svc.erase("victim")
    assert (receipt.facts, receipt.profile_entries, receipt.working_turns) == (31, 1, 1)
    assert svc.list_facts("victim") == [] and svc.profile("victim") == []
    assert svc.working.window("victim", "s1") == []
    assert _files_containing(data_dir, canary.encode()) == []
    assert _files_containing(data_dir, b"victim") == []
    svc.close()

    again = open_service()
    assert again.list_facts("victim") == [] and again.profile("victim") == []
    assert {f.text for f in again.list_facts("bystander")} == {"bystander keeps this", "和这一条"}
    assert again.recall("victim", f"{canary} fact") == []
