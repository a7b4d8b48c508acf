"""The write path with the real default model (Qwen2.5-Coder-1.5B Q4_K_M on llama.cpp).

Slow on 2 cores (seconds per LLM call), so the turns here are few and each test checks
several behaviours. The full behaviour suite is the scenario runner (test_scenarios.py).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.llm.base import LLMEngine
from memory_core.llm.factory import make_engine
from memory_core.models import Role, Turn
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import Settings
from memory_core.text import has_cjk


@pytest.fixture(scope="module")
def qwen() -> Iterator[LLMEngine]:
    engine = make_engine(Settings().llm)
    yield engine
    engine.close()


@pytest.fixture
def svc(
    settings: Settings, clock: ManualClock, embedder: Embedder, qwen: LLMEngine
) -> Iterator[MemoryService]:
    service = open_local_service(settings, clock, embedder, engine=qwen)
    yield service
    service.close()


def _turns(*pairs: tuple[str, str]) -> list[Turn]:
    return [Turn(role=Role(role), content=text, turn_id=f"t{i}") for i, (role, text) in enumerate(pairs)]


def test_chinese_conversation_is_remembered_in_chinese(svc: MemoryService) -> None:
    outcomes = svc.ingest(
        "zh-user",
        "s1",
        _turns(
            ("user", "我是做装修公司的，在长沙，之前找过三家服务商都不满意"),
            ("assistant", "了解，您希望这次找的服务商在哪些方面做得更好？"),
            ("user", "今天天气真不错哈哈"),
        ),
    )
    written, chitchat = outcomes
    assert written.facts and all(has_cjk(f.text) for f in written.facts)
    assert all(f.expire_at is None for f in written.facts)  # a company and a city are lasting
    assert chitchat.facts == [] and chitchat.llm_calls <= 1
    assert any("长沙" in h.fact.text for h in svc.recall("zh-user", "我的公司在哪个城市？"))
    assert not any("天气" in h.fact.text for h in svc.recall("zh-user", "天气"))


def test_english_temporary_and_lasting_facts(svc: MemoryService) -> None:
    svc.ingest(
        "en-user",
        "s1",
        _turns(
            ("user", "I'm at the airport right now, my flight to Berlin boards in 40 minutes."),
            ("assistant", "Safe travels!"),
            ("user", "By the way, I'm a backend engineer and I mostly write Go."),
        ),
    )
    facts = svc.list_facts("en-user")
    assert facts and not any(has_cjk(f.text) for f in facts)
    lasting = [f for f in facts if f.expire_at is None]
    temporary = [f for f in facts if f.expire_at is not None]
    assert any("Go" in f.text for f in lasting)
    assert any("airport" in f.text.lower() or "Berlin" in f.text for f in temporary)
    svc.sweep(svc.clock.now() + timedelta(days=45))
    left = " ".join(f.text for f in svc.list_facts("en-user"))
    assert "Go" in left and "Berlin" not in left and "airport" not in left.lower()


def test_preferences_go_to_the_profile_and_forget_by_words(svc: MemoryService) -> None:
    svc.ingest("p-user", "s1", _turns(("user", "Please keep your answers short, I hate long walls of text.")))
    assert any(
        word in " ".join(e.text for e in svc.profile("p-user")).lower()
        for word in ("short", "brief", "concise")
    )
    svc.ingest("p-user", "s1", _turns(("user", "下周二我要去上海出差，住在静安区")))
    assert any("上海" in h.fact.text for h in svc.recall("p-user", "我下周去哪里出差？"))
    result = svc.forget("p-user", "忘掉我上次说的出差安排")
    assert result.facts and result.reply.startswith("好的")
    recalled = " ".join(h.fact.text for h in svc.recall("p-user", "我下周去哪里出差？"))
    assert "上海" not in recalled and "静安" not in recalled


def test_only_the_speakers_own_words_become_their_memories(svc: MemoryService) -> None:
    # Two people chatting (as in LoCoMo): the other one's news comes as the assistant's turn.
    outcomes = svc.ingest(
        "chat-user",
        "s1",
        _turns(
            ("user", "Hey Jon! Good to see you. What's up? Anything new?"),
            (
                "assistant",
                "Hey Gina! Lost my job as a banker yesterday, so I'm gonna take a shot at starting my own "
                "dance studio.",
            ),
            ("user", "Sorry about your job Jon! Unfortunately, I also lost my job at Door Dash this month."),
        ),
    )
    greeting, news = outcomes
    assert greeting.facts == [] and svc.profile("chat-user") == []
    texts = " ".join(f.text for f in news.facts)
    assert "Door Dash" in texts
    assert "banker" not in texts and "dance" not in texts and "Jon" not in texts
