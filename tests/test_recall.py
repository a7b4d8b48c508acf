"""Recall on the real embedder and real FAISS: right facts, own user only, superseded hidden."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from memory_core.clock import ManualClock
from memory_core.models import Tag
from memory_core.service import MemoryService, Remember


def _texts(svc: MemoryService, user: str, question: str, k: int = 5) -> list[str]:
    return [hit.fact.text for hit in svc.recall(user, question, k)]


def test_two_users_with_similar_facts_only_see_their_own(service: MemoryService) -> None:
    service.remember("alice", [Remember("I live in Hangzhou and work as a nurse", Tag.IDENTITY)])
    service.remember("bob", [Remember("I live in Hangzhou and work as a teacher", Tag.IDENTITY)])
    service.remember("carol", [Remember("我住在杭州，是一名护士", Tag.IDENTITY)])
    alice = service.recall(
        "alice",
        "Where do I live and what is my job?",
        k=5,
    )
    assert [h.fact.text for h in alice] == ["I live in Hangzhou and work as a nurse"]
    assert all(h.fact.user_id == "alice" for h in alice)
    assert _texts(service, "bob", "What is my job?") == ["I live in Hangzhou and work as a teacher"]
    assert _texts(service, "carol", "我是做什么工作的？") == ["我住在杭州，是一名护士"]
    assert _texts(service, "dave", "Where do I live?") == []


def test_recall_ranks_the_relevant_fact_first_in_both_languages(service: MemoryService) -> None:
    service.remember(
        "u1",
        [
            Remember("我在成都开了一家宠物医院", Tag.IDENTITY),
            Remember("我对花生过敏", Tag.IDENTITY),
            Remember("我女儿今年上小学三年级", Tag.IDENTITY),
            Remember("I'm a data analyst and I mostly work in Kotlin", Tag.IDENTITY),
            Remember("My dog is called Biscuit", Tag.IDENTITY),
        ],
    )
    assert "成都" in _texts(service, "u1", "我的宠物医院在哪个城市？")[0]
    assert "花生" in _texts(service, "u1", "我有什么过敏的东西吗")[0]
    assert "Kotlin" in _texts(service, "u1", "What programming language do I use?")[0]
    assert "Biscuit" in _texts(service, "u1", "What's my dog's name?")[0]


def test_k_and_threshold_bound_the_results(service: MemoryService) -> None:
    service.remember("u2", [Remember(f"My favourite number is {n}") for n in range(10)])
    assert len(service.recall("u2", "What is my favourite number?", k=3)) == 3
    assert service.recaller.recall("u2", "favourite number", service.clock.now(), k=5, threshold=1.5) == []


def test_the_best_hit_alone_may_sit_just_under_the_threshold(service: MemoryService) -> None:
    service.remember("u5", [Remember("User writes Rust"), Remember("User keeps two rabbits")])
    now = service.clock.now()
    best, second = service.recaller.recall("u5", "Which language do I code in?", now, threshold=-1.0)
    assert best.fact.text == "User writes Rust" and best.score > second.score + 0.02
    slack = service.settings.recall.best_hit_slack
    just_over = best.score + slack / 2  # the best hit is under it, but within the slack
    assert [
        h.fact.text
        for h in service.recaller.recall("u5", "Which language do I code in?", now, threshold=just_over)
    ] == ["User writes Rust"]
    assert (
        service.recaller.recall("u5", "Which language do I code in?", now, threshold=best.score + slack * 2)
        == []
    )


def test_superseded_fact_is_kept_but_not_recalled(service: MemoryService) -> None:
    (old,) = service.remember("u3", [Remember("I live in Hangzhou", Tag.IDENTITY)])
    (new,) = service.remember("u3", [Remember("I moved to Shenzhen", Tag.IDENTITY)])
    service.facts.supersede("u3", old.id, new.id)
    assert _texts(service, "u3", "Which city do I live in?") == ["I moved to Shenzhen"]
    history = service.list_facts("u3", include_superseded=True)
    assert {f.text for f in history} == {"I live in Hangzhou", "I moved to Shenzhen"}
    assert service.get_fact("u3", old.id).superseded_by == new.id


def test_a_recalled_fact_brings_what_it_replaced_when_asked(
    service: MemoryService, clock: ManualClock
) -> None:
    chain = []
    for town in ["Lyon", "Porto", "Tartu"]:
        (fact,) = service.remember("u4", [Remember(f"User lives in {town}", Tag.IDENTITY)])
        if chain:
            service.facts.supersede("u4", chain[-1].id, fact.id)
        chain.append(fact)
        clock.advance(timedelta(days=40))
    service.remember("u4", [Remember("User plays the oboe", Tag.PREFERENCE)])
    plain = service.recall("u4", "Where did I live before?", 1)
    assert [h.fact.text for h in plain] == ["User lives in Tartu"] and plain[0].replaced == []
    (hit,) = service.recall("u4", "Where did I live before?", 1, history=True)
    assert [f.text for f in hit.replaced] == ["User lives in Porto", "User lives in Lyon"]
    prompt = service.build_prompt("u4", "s1", "Where did I live before?", 1)
    lyon, porto, tartu = (f.created_at.date().isoformat() for f in chain)
    assert (
        f'"You live in Tartu"; before that ({porto} to {tartu}): "You live in Porto"; '
        f'before that ({lyon} to {porto}): "You live in Lyon"'
    ) in prompt


def test_expired_fact_is_not_recalled_even_before_the_sweep(service: MemoryService) -> None:
    service.remember(
        "u4", [Remember("I'm at the airport, flying to Berlin", Tag.EVENT, ttl=timedelta(hours=3))]
    )
    assert _texts(service, "u4", "Where am I flying?") != []
    service.clock.advance(timedelta(hours=4))  # type: ignore[attr-defined]
    assert _texts(service, "u4", "Where am I flying?") == []


def test_facts_survive_a_restart(open_service: Callable[[], MemoryService]) -> None:
    svc = open_service()
    stored = svc.remember("u5", [Remember("我每天早上跑步五公里"), Remember("I prefer tea over coffee")])
    svc.set_preference("u5", "回答要简短")
    svc.close()
    again = open_service()
    assert {f.id for f in again.list_facts("u5")} == {f.id for f in stored}
    assert "跑步" in _texts(again, "u5", "我有什么运动习惯？")[0]
    assert [e.text for e in again.profile("u5")] == ["回答要简短"]


class _Counted:
    """A shard whose calls are written down."""

    def __init__(self, shard: object, calls: list[str]) -> None:
        self._shard = shard
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        self._calls.append(name)
        return getattr(self._shard, name)


def test_a_recall_reads_the_facts_and_the_profile_in_one_call_to_the_users_shard(
    service: MemoryService,
) -> None:
    service.remember("alice", [Remember("I live in Hangzhou and work as a nurse", Tag.IDENTITY)])
    service.set_preference("alice", "Answer in two sentences at most")
    calls: list[str] = []
    shards = service.facts.shards  # type: ignore[attr-defined]
    shards[:] = [_Counted(shard, calls) for shard in shards]
    hits, profile = service.recall_with_profile("alice", "Where do I live?")
    assert calls == ["recall"]
    assert [h.fact.text for h in hits] == ["I live in Hangzhou and work as a nurse"]
    assert (
        [e.text for e in profile]
        == ["Answer in two sentences at most"]
        == [e.text for e in service.profile("alice")]
    )
