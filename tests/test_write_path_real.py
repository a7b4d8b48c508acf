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
from memory_core.service import MemoryService, Remember, open_local_service
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
            ("user", "我在成都开了一家宠物医院，之前用过两个预约系统都不好用"),
            ("assistant", "明白，您希望新的预约系统解决哪些问题？"),
            ("user", "今天太阳好大哈哈"),
        ),
    )
    written, chitchat = outcomes
    assert written.facts and all(has_cjk(f.text) for f in written.facts)
    assert all(f.expire_at is None for f in written.facts)  # a business and a city are lasting
    assert chitchat.facts == [] and chitchat.llm_calls <= 1
    assert any("成都" in h.fact.text for h in svc.recall("zh-user", "我的宠物医院在哪个城市？"))
    assert not any("太阳" in h.fact.text for h in svc.recall("zh-user", "太阳"))


def test_english_temporary_and_lasting_facts(svc: MemoryService) -> None:
    svc.ingest(
        "en-user",
        "s1",
        _turns(
            ("user", "I'm at the train station right now, my train to Lyon leaves in 20 minutes."),
            ("assistant", "Have a good trip!"),
            ("user", "Oh, and I'm a data analyst, I mostly work in Kotlin."),
        ),
    )
    facts = svc.list_facts("en-user")
    assert facts and not any(has_cjk(f.text) for f in facts)
    lasting = [f for f in facts if f.expire_at is None]
    temporary = [f for f in facts if f.expire_at is not None]
    assert any("Kotlin" in f.text for f in lasting)
    assert any("station" in f.text.lower() or "Lyon" in f.text for f in temporary)
    svc.sweep(svc.clock.now() + timedelta(days=45))
    left = " ".join(f.text for f in svc.list_facts("en-user"))
    assert "Kotlin" in left and "Lyon" not in left and "station" not in left.lower()


def test_preferences_go_to_the_profile_and_forget_by_words(svc: MemoryService) -> None:
    svc.ingest("p-user", "s1", _turns(("user", "Keep replies brief please, rambling answers drive me mad.")))
    assert any(
        word in " ".join(e.text for e in svc.profile("p-user")).lower()
        for word in ("short", "brief", "concise")
    )
    svc.ingest("p-user", "s1", _turns(("user", "下周四我要去青岛开会，住在市南区")))
    assert any("青岛" in h.fact.text for h in svc.recall("p-user", "我下周去哪里开会？"))
    result = svc.forget("p-user", "忘掉我上次说的开会安排")
    assert result.facts and result.reply.startswith("好的")
    recalled = " ".join(h.fact.text for h in svc.recall("p-user", "我下周去哪里开会？"))
    assert "青岛" not in recalled and "市南" not in recalled


def test_only_the_speakers_own_words_become_their_memories(svc: MemoryService) -> None:
    # Two people chatting (as in LoCoMo): the other one's news comes as the assistant's turn.
    outcomes = svc.ingest(
        "chat-user",
        "s1",
        _turns(
            ("user", "Hi Tobias! Nice to see you. How are things? Any news?"),
            (
                "assistant",
                "Hi Nadia! An insurance firm laid me off yesterday, so I'm going to try opening my own "
                "bakery.",
            ),
            ("user", "Oh no, sorry Tobias! My courier company laid me off this month as well."),
        ),
    )
    greeting, news = outcomes
    assert greeting.facts == [] and svc.profile("chat-user") == []
    texts = " ".join(f.text for f in news.facts)
    assert "courier" in texts
    assert "insurance" not in texts and "bakery" not in texts and "Tobias" not in texts


def _texts(svc: MemoryService, user: str) -> str:
    """Everything kept about ``user``: a liking may land in the profile rather than the facts."""
    return " ".join(item.text for item in [*svc.list_facts(user), *svc.profile(user)])


def test_forget_only_when_asked_and_only_what_was_named(svc: MemoryService) -> None:
    svc.ingest("f-en", "s1", _turns(("user", "I drive trams in Graz, and I'm allergic to walnuts.")))
    assert "walnut" in _texts(svc, "f-en").lower() and "tram" in _texts(svc, "f-en").lower()
    reminders = svc.ingest(
        "f-en",
        "s2",
        _turns(
            ("user", "Don't forget I'm allergic to walnuts when you suggest a cake."),
            ("assistant", "Of course."),
            ("user", "Ugh, I left my scarf on the tram again, I forgot it at the last stop."),
        ),
    )
    assert all(o.forgotten is None for o in reminders)
    kept = _texts(svc, "f-en").lower()
    assert "walnut" in kept and "tram" in kept
    (request,) = svc.ingest("f-en", "s3", _turns(("user", "Please forget that I'm allergic to walnuts.")))
    assert request.forgotten is not None and request.forgotten.facts
    left = _texts(svc, "f-en").lower()
    assert "walnut" not in left and "tram" in left and request.facts == []


def test_forgot_to_tell_adds_news_and_a_named_forget_keeps_the_rest(svc: MemoryService) -> None:
    svc.ingest("f-zh", "s1", _turns(("user", "我在南昌做牙科器械销售，平时喜欢游泳。")))
    assert "南昌" in _texts(svc, "f-zh") and "游泳" in _texts(svc, "f-zh")
    (news,) = svc.ingest("f-zh", "s2", _turns(("user", "忘了跟你说，我女儿下个月要去西安读研究生。")))
    assert news.forgotten is None and any("西安" in f.text for f in news.facts)
    assert "南昌" in _texts(svc, "f-zh") and "游泳" in _texts(svc, "f-zh")
    (request,) = svc.ingest("f-zh", "s3", _turns(("user", "把我喜欢游泳这件事忘掉吧。")))
    assert request.forgotten is not None and request.forgotten.reply.startswith("好的")
    left = _texts(svc, "f-zh")
    assert "游泳" not in left and "南昌" in left and "西安" in left


def test_a_new_number_told_with_a_forget_request_replaces_the_old_and_the_job_stays(
    svc: MemoryService,
) -> None:
    svc.ingest("f-mix", "s1", _turns(("user", "我的手机号是 135 6620 4471。"), ("user", "我在绍兴做木匠。")))
    assert "4471" in _texts(svc, "f-mix") and "木匠" in _texts(svc, "f-mix")
    (request,) = svc.ingest(
        "f-mix", "s2", _turns(("user", "把我以前的手机号 135 6620 4471 删掉，新号码是 199 3081 2257。"))
    )
    assert request.forgotten is not None and request.forgotten.facts
    left = _texts(svc, "f-mix")
    assert "4471" not in left and "2257" in left and "木匠" in left


def test_other_peoples_facts_stay_theirs_and_a_suggestion_is_not_an_interest(svc: MemoryService) -> None:
    svc.ingest(
        "w-en",
        "s1",
        _turns(
            ("user", "My aunt Rosa is a pharmacist in Porto."),
            ("assistant", "Nice! What about you?"),
            ("user", "I'm a ferry mechanic in Halifax myself."),
            ("assistant", "You might enjoy a birdwatching club on Saturdays."),
            ("user", "Sure, maybe I'll look into it."),
        ),
    )
    facts = svc.list_facts("w-en")
    own = " ".join(f.text for f in facts if not f.about)
    assert "Halifax" in own and "Porto" not in own and "pharmacist" not in own
    assert not any("bird" in f.text.lower() for f in facts)
    job = [h.fact.text for h in svc.recall("w-en", "What is my job?")]
    assert "Halifax" in job[0] and not any("Porto" in t for t in job)
    assert not any("Porto" in h.fact.text for h in svc.recall("w-en", "Where do I live?"))
    assert "Porto" in svc.recall("w-en", "What does my aunt do?")[0].fact.text


def test_temporary_by_meaning_and_lasting_facts_stay(svc: MemoryService) -> None:
    svc.ingest(
        "t-en",
        "s1",
        _turns(
            ("user", "This week I'm looking for a second-hand cargo bike."),
            ("assistant", "Good luck with the search!"),
            ("user", "We're staying at a B&B in Whitby until Friday."),
            ("assistant", "Enjoy the coast."),
            ("user", "I've been vegetarian for ten years."),
        ),
    )
    facts = svc.list_facts("t-en")
    assert any("bike" in f.text and f.expire_at for f in facts)
    assert any("Whitby" in f.text and f.expire_at for f in facts)
    assert any("vegetarian" in f.text and f.expire_at is None for f in facts)
    svc.sweep(svc.clock.now() + timedelta(days=40))
    left = _texts(svc, "t-en")
    assert "vegetarian" in left and "bike" not in left and "Whitby" not in left


def test_recalled_across_languages_a_repeat_is_one_memory_and_a_new_home_answers_where_i_live(
    svc: MemoryService,
) -> None:
    bees = "I keep bees on my allotment, about six hives."
    svc.ingest("x-user", "s1", _turns(("user", bees)))
    assert any("bee" in h.fact.text.lower() for h in svc.recall("x-user", "我养了什么？"))
    before = svc.list_facts("x-user")
    (again,) = svc.ingest("x-user", "s2", [Turn(role=Role.USER, content=bees, turn_id="s2:0")])
    # Said again a session later: no second memory; the later turn is a source of the first.
    assert again.facts == [] and again.repeated, again
    after = {f.id: f.source_turn_ids for f in svc.list_facts("x-user")}
    assert after.keys() == {f.id for f in before}
    for fact in before:
        repeated = fact.id in again.repeated
        assert after[fact.id] == ((*fact.source_turn_ids, "s2:0") if repeated else fact.source_turn_ids)
    svc.ingest("x-user", "s2", _turns(("user", "My new flat is on 22 Crane Street, Hobart.")))
    assert any("Crane Street" in h.fact.text for h in svc.recall("x-user", "Where do I live?"))


def test_a_reply_speaks_to_the_user_and_keeps_to_their_allergy(svc: MemoryService) -> None:
    svc.remember("r-user", [Remember(text="用户对虾过敏"), Remember(text="用户住在福州")])
    reply = svc.chat("r-user", "s1", "今晚做什么菜好？给我推荐一道。").reply
    assert "用户" not in reply and ("你" in reply or "您" in reply)


def test_news_after_a_greeting_and_the_users_own_name_stay_the_users(svc: MemoryService) -> None:
    outcomes = svc.ingest(
        "greeted",
        "s1",
        _turns(
            ("assistant", "Morning Priya! How was your weekend?"),
            ("user", "Hey Tomas! Oh wow, nice! I finished my first half marathon on Sunday."),
            ("assistant", "Woohoo, Priya! That's huge. Which causes will you take up on the council?"),
            ("user", "I care most about public libraries and safer bike lanes in our district."),
        ),
    )
    marathon, causes = outcomes
    assert any("marathon" in f.text for f in marathon.facts), marathon
    texts = [(f.text, f.about) for f in causes.facts]
    assert any("librar" in text and not about for text, about in texts), causes
    assert not any("Priya" in text for text, _ in texts)
    assert svc.profile("greeted") == []


def test_thanks_to_the_listener_is_no_memory_and_the_news_beside_it_is(svc: MemoryService) -> None:
    # The packaged model wrote "用户感谢小林的建议" for this reply, beside the news.
    (reply,) = svc.ingest(
        "thanks-zh",
        "s1",
        _turns(
            ("assistant", "祝你面试顺利！"),
            ("user", "谢谢你，小林！你的建议太有用了。我下周一开始在新公司上班。"),
        ),
    )
    texts = [f.text for f in reply.facts]
    assert any("新公司" in text for text in texts), texts
    assert not any("感谢" in text or "谢谢" in text for text in texts), texts


def test_a_wish_said_after_the_assistants_okay_goes_to_the_profile(svc: MemoryService) -> None:
    # The packaged model kept nothing of the second wish: it read the assistant's "okay" as a
    # suggestion the user answered.
    svc.ingest(
        "wish-after-ok",
        "s1",
        _turns(
            ("user", "I run a small bike repair shop."),
            ("assistant", "Sure, I'll keep that in mind."),
            ("user", "Also, never push paid upgrades on me."),
        ),
    )
    profile = " ".join(e.text for e in svc.profile("wish-after-ok")).lower()
    assert "upgrade" in profile, profile
