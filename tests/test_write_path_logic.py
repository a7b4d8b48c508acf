"""Logic of the write path around the LLM, with a scripted engine (real FAISS, DuckDB, embedder).

The same behaviours run against the real packaged model in test_write_path_real.py.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import ConfigError, LLMOutputError
from memory_core.llm.structured import StructuredLLM
from memory_core.models import Role, Turn
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import Settings
from memory_core.write import prompts
from memory_core.write.analyze import beside_forgetting
from memory_core.write.lanes import WriteLanes
from memory_core.write.prefilter import substance
from memory_core.write.writes import UserWrites
from tests.scripted_engine import ScriptedEngine, facts_json


@pytest.fixture
def engine() -> ScriptedEngine:
    return ScriptedEngine()


@pytest.fixture
def svc(
    settings: Settings, clock: ManualClock, embedder: Embedder, engine: ScriptedEngine
) -> Iterator[MemoryService]:
    service = open_local_service(settings, clock, embedder, engine=engine)
    yield service
    service.close()


def _user(text: str) -> Turn:
    return Turn(role=Role.USER, content=text)


def test_small_talk_is_skipped_without_any_llm_call(svc: MemoryService, engine: ScriptedEngine) -> None:
    outcomes = svc.ingest(
        "u",
        "s",
        [
            _user("哈哈哈"),
            _user("ok thanks!"),
            _user("What's the capital of France?"),
            # Only questions to the other party: nothing about the speaker.
            _user("Nice! Which club are you joining? Any matches soon?"),
            _user("哇，太棒了！你打算什么时候出发？"),
        ],
    )
    assert [o.skipped for o in outcomes] == [
        "small_talk",
        "small_talk",
        "impersonal_question",
        "only_questions",
        "only_questions",
    ]
    assert engine.calls == [] and all(o.llm_calls == 0 for o in outcomes)
    assert len(svc.working.window("u", "s")) == 5  # the working window still has them


@pytest.mark.parametrize(
    ("message", "judged"),
    [
        (
            "Hey Priya! Nice one! I finished my first half marathon on Sunday.",
            "I finished my first half marathon on Sunday.",
        ),
        ("Oh wow, congrats! My choir sang at the cathedral.", "My choir sang at the cathedral."),
        ("哇，太棒了！我下个月去成都。", "我下个月去成都。"),
        ("Got the job! Starting Monday.", "Got the job! Starting Monday."),  # news, not a reaction
        ("Me too! Haha", "Me too! Haha"),
        ("That's cool!", "That's cool!"),  # the last sentence always stays
    ],
)
def test_the_judge_reads_past_the_greetings_and_reactions_a_message_opens_with(
    message: str, judged: str
) -> None:
    assert substance(message) == judged


def test_judge_no_means_nothing_is_extracted(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script("judge", "no")
    (outcome,) = svc.ingest("u", "s", [_user("It's been raining all day, ugh.")])
    assert outcome.skipped == "judge" and engine.calls == ["judge"] and outcome.llm_calls == 1


def test_facts_and_profile_are_routed_and_temporary_facts_expire(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script(
        "extract",
        facts_json(
            ("User is a backend engineer who writes Go", "identity", "fact", False),
            ("User is at the airport", "event", "fact", True),
            ("User wants short answers", "preference", "profile", False),
        ),
    )
    turn = Turn(role=Role.USER, content="I'm at the airport. I write Go. Keep it short.", turn_id="s:0")
    (outcome,) = svc.ingest("u", "s", [turn])
    assert [f.text for f in outcome.facts] == [
        "User is a backend engineer who writes Go",
        "User is at the airport",
    ]
    assert outcome.facts[0].expire_at is None
    assert outcome.facts[1].expire_at == svc.clock.now() + svc.settings.temporary_ttl.event
    assert all(f.source_turn_ids == ("s:0",) for f in outcome.facts)
    assert [e.text for e in svc.profile("u")] == ["User wants short answers"]
    assert svc.sweep(svc.clock.now() + timedelta(days=8)).deleted == 1
    assert [f.text for f in svc.list_facts("u")] == ["User is a backend engineer who writes Go"]


def test_invalid_output_is_retried_once_then_the_turn_is_not_written(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script("extract", "not json", '{"facts": [{"text": "x"}]}')
    (outcome,) = svc.ingest("u", "s", [_user("I live in Lyon")])
    assert outcome.skipped == "error" and "Extraction" in (outcome.error or "")
    assert engine.calls == ["judge", "extract", "extract"]
    assert svc.list_facts("u") == [] and svc.profile("u") == []
    assert svc.llm is not None and svc.llm.stats.invalid_outputs == 2
    # A retry that succeeds writes normally.
    engine.script("extract", "{", facts_json(("User lives in Lyon", "identity", "fact", False)))
    (outcome,) = svc.ingest("u", "s", [_user("I live in Lyon")])
    assert [f.text for f in outcome.facts] == ["User lives in Lyon"]


def test_facts_in_the_wrong_language_are_invalid(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script("extract", facts_json(("用户住在里昂", "identity", "fact", False)))
    engine.script("extract", facts_json(("User lives in Lyon", "identity", "fact", False)))
    (outcome,) = svc.ingest("u", "s", [_user("I live in Lyon")])
    assert [f.text for f in outcome.facts] == ["User lives in Lyon"]


def test_a_repeat_joins_the_stored_facts_sources_and_updates_supersede(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script("extract", facts_json(("用户住在杭州", "identity", "fact", False)))
    (first,) = svc.ingest("u", "s", [Turn(role=Role.USER, content="我住在杭州", turn_id="s:1")])
    engine.script("extract", facts_json(("用户住在杭州", "identity", "fact", False)))
    (again,) = svc.ingest("u", "s", [Turn(role=Role.USER, content="我住在杭州啊", turn_id="s:7")])
    # One memory, and the turn that said it again is one of its sources.
    assert again.duplicates == 1 and again.facts == [] and again.repeated == [first.facts[0].id]
    assert [f.source_turn_ids for f in svc.list_facts("u")] == [("s:1", "s:7")]
    # Said a third time by the same turn (a write resumed after a crash): not doubled.
    engine.script("extract", facts_json(("用户住在杭州", "identity", "fact", False)))
    svc.ingest("u", "s", [Turn(role=Role.USER, content="我住在杭州啊", turn_id="s:7")])
    assert [f.source_turn_ids for f in svc.list_facts("u")] == [("s:1", "s:7")]
    engine.script("extract", facts_json(("用户搬到了深圳", "identity", "fact", False)))
    engine.script("resolve", "update")
    (moved,) = svc.ingest("u", "s", [_user("我上个月搬到深圳了")])
    assert moved.superseded == [first.facts[0].id]
    assert [h.fact.text for h in svc.recall("u", "我住在哪个城市？")] == ["用户搬到了深圳"]
    history = svc.list_facts("u", include_superseded=True)
    assert {f.text for f in history} == {"用户住在杭州", "用户搬到了深圳"}


def test_forget_by_words_deletes_what_the_llm_matches(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script(
        "extract",
        facts_json(
            ("用户下周四要去青岛开会", "event", "fact", True),
            ("用户开会期间住在市南区", "event", "fact", True),
            ("用户对花生过敏", "identity", "fact", False),
        ),
    )
    svc.ingest("u", "s", [_user("下周四我要去青岛开会，住在市南区。对了我对花生过敏")])
    engine.script("forget_target", '{"target": "开会安排"}')
    engine.defaults["forget_match"] = lambda prompt: "yes" if "开会" in prompt.split("Memory:")[1] else "no"
    (outcome,) = svc.ingest("u", "s", [_user("忘掉我上次说的开会安排")])
    assert outcome.forgotten is not None
    assert sorted(f.text for f in outcome.forgotten.facts) == [
        "用户2026年3月5日要去青岛开会",  # "下周四" said on Sunday 1 March
        "用户开会期间住在市南区",
    ]
    assert outcome.forgotten.reply.startswith("好的，已经忘掉")
    assert [f.text for f in svc.list_facts("u")] == ["用户对花生过敏"]


def test_a_forget_request_keeps_only_what_it_tells_besides_the_request(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script(
        "extract",
        facts_json(
            ("用户的手机号是 135 6620 4471", "identity", "fact", False),
            ("用户在绍兴做木匠", "identity", "fact", False),
        ),
    )
    svc.ingest("u", "s", [_user("我的手机号是 135 6620 4471，我在绍兴做木匠。")])
    engine.script("forget_target", '{"target": "以前的手机号"}')
    engine.defaults["forget_match"] = lambda prompt: "yes" if "手机号" in prompt.split("Memory:")[1] else "no"
    # What the small model wrote for such a turn: the old number again, and the request as a fact.
    engine.script(
        "extract",
        facts_json(
            ("用户以前的手机号 135 6620 4471 已删除，新号码是 199 3081 2257", "identity", "fact", False),
            ("用户不再记以前的手机号", "identity", "fact", False),
        ),
    )
    (outcome,) = svc.ingest(
        "u", "s", [_user("把我以前的手机号 135 6620 4471 删掉，新号码是 199 3081 2257。")]
    )
    assert outcome.forgotten is not None and [f.text for f in outcome.forgotten.facts] == [
        "用户的手机号是 135 6620 4471"
    ]
    assert "judge" not in engine.calls[-2:]
    assert sorted(f.text for f in svc.list_facts("u")) == ["新号码是 199 3081 2257", "用户在绍兴做木匠"]


def test_a_bare_forget_request_costs_no_judge_and_no_extraction(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script("extract", facts_json(("User is allergic to cats", "identity", "fact", False)))
    svc.ingest("u", "s", [_user("I'm allergic to cats.")])
    engine.calls.clear()
    engine.script("forget_target", '{"target": "allergic to cats"}')
    engine.defaults["forget_match"] = "yes"
    (outcome,) = svc.ingest("u", "s", [_user("Please forget that I'm allergic to cats, thanks.")])
    assert outcome.skipped == "forget" and outcome.facts == []
    assert "judge" not in engine.calls and "extract" not in engine.calls
    assert svc.list_facts("u") == []


@pytest.mark.parametrize(
    ("message", "told"),
    [
        (
            "Delete my old email (ana.r@oldbox.org) and use ana.reyes@newbox.org from now on.",
            "and use ana.reyes@newbox.org from now on",
        ),
        ("把旧车牌删掉换成苏E7K2M9。", "换成苏E7K2M9"),
        ("Forget my brother and sister's addresses.", ""),  # one thing asked, nothing told
        ("忘掉我的体重 - 我现在跑半马了", "我现在跑半马了"),
    ],
)
def test_what_a_forget_request_tells_besides_is_found_in_one_clause_too(message: str, told: str) -> None:
    # "… and save <new email> instead" had no part of its own: the new email was lost.
    assert beside_forgetting(message)[1].strip() == told


def test_service_without_llm_refuses_to_ingest(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> None:
    service = open_local_service(settings, clock, embedder)
    with pytest.raises(ConfigError):
        service.ingest("u", "s", [_user("hi")])
    with pytest.raises(ConfigError):
        service.forget("u", "forget everything")
    service.close()


def test_structured_llm_raises_after_one_retry(engine: ScriptedEngine) -> None:
    engine.script("judge", "maybe", "perhaps")
    llm = StructuredLLM(engine)
    from memory_core.write.prompts import judge_messages

    with pytest.raises(LLMOutputError):
        llm.choose(judge_messages("hello"), ["yes", "no"])
    assert llm.stats.calls == 2 and llm.stats.invalid_outputs == 2


def test_event_said_with_a_near_time_cue_is_temporary(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script("extract", facts_json(("User's flight to Berlin boards soon", "event", "fact", False)))
    engine.script("extract", facts_json(("User's sister lives in Berlin", "identity", "fact", False)))
    (boarding,) = svc.ingest(
        "u", "s", [_user("My flight to Berlin boards in 40 minutes, I'm at the gate right now")]
    )
    (sister,) = svc.ingest("u", "s", [_user("My sister lives in Berlin, I visit her right now and then")])
    assert boarding.facts[0].expire_at == svc.clock.now() + svc.settings.temporary_ttl.event
    assert sister.facts[0].expire_at is None  # only events are made temporary by the cue


@pytest.mark.parametrize(
    ("message", "errand", "lasting"),
    [
        (
            "I'm choosing a sofa for our new flat this week. I can't climb stairs since my knee surgery.",
            "User is choosing a sofa for the new flat",
            "User can't climb stairs since knee surgery",
        ),
        ("这周在给孩子挑自行车。我对花生过敏，一点都不能吃。", "用户在给孩子挑自行车", "用户对花生过敏"),
    ],
)
def test_an_errand_placed_this_week_in_its_own_sentence_is_temporary(
    svc: MemoryService, engine: ScriptedEngine, message: str, errand: str, lasting: str
) -> None:
    # The small model kept an errand of this week as a lasting requirement, its "这周" dropped.
    engine.script(
        "extract",
        facts_json((errand, "requirement", "fact", False), (lasting, "requirement", "fact", False)),
    )
    (outcome,) = svc.ingest("u", "s", [_user(message)])
    expiry = {f.text: f.expire_at for f in outcome.facts}
    assert expiry == {errand: svc.clock.now() + svc.settings.temporary_ttl.requirement, lasting: None}


@pytest.mark.parametrize(
    ("message", "fact", "tag"),
    [
        # "now" marks a change of state, not a short stay.
        ("I use a wheelchair now, so ground floor places only.", "User uses a wheelchair", "requirement"),
        ("我每周六早上去游泳。", "用户每周六早上去游泳", "other"),  # a weekday of a habit
    ],
)
def test_a_need_or_habit_said_with_now_or_a_weekday_stays_lasting(
    svc: MemoryService, engine: ScriptedEngine, message: str, fact: str, tag: str
) -> None:
    engine.script("extract", facts_json((fact, tag, "fact", False)))
    (outcome,) = svc.ingest("u", "s", [_user(message)])
    assert outcome.facts[0].expire_at is None


@pytest.mark.parametrize(
    ("message", "fact", "tag", "temporary"),
    [
        # What a long chat tells of an ongoing thing, marked temporary by the small model and
        # then swept before anyone asked about it.
        (
            "I'm reading a book on pottery glazes to get ideas for my shop.",
            "User is reading a book on pottery glazes",
            "requirement",
            False,
        ),
        ("我在学做咖啡拉花，想以后开个小店。", "用户在学做咖啡拉花", "other", False),
        # Placed in time by its own sentence: still temporary.
        (
            "We're staying at a B&B in Whitby until Friday.",
            "User is staying at a B&B in Whitby",
            "other",
            True,
        ),
        ("这几天住在表姐家。", "用户住在表姐家", "identity", True),
        # Said as the present or as a stay of hours or days, without a date.
        (
            "Currently looking for a kite for my nephew, he's into anything that flies.",
            "User is looking for a kite for their nephew",
            "requirement",
            True,
        ),
        (
            "I'm stuck at my cousin's place for a couple of nights while the boiler gets fixed.",
            "User is staying at their cousin's place",
            "other",
            True,
        ),
        ("我在车管所排队，估计还要半个小时。", "用户在车管所排队", "other", True),
        ("目前借住在朋友的工作室。", "用户借住在朋友的工作室", "identity", True),
    ],
)
def test_only_what_its_own_sentence_places_in_time_is_temporary(
    svc: MemoryService, engine: ScriptedEngine, message: str, fact: str, tag: str, temporary: bool
) -> None:
    engine.script("extract", facts_json((fact, tag, "fact", True)))
    (outcome,) = svc.ingest("u", "s", [_user(message)])
    assert (outcome.facts[0].expire_at is not None) is temporary


def test_a_fact_whose_own_sentence_names_a_past_day_is_dated_history(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    # "Lost my job yesterday, so …" became a temporary requirement without its "yesterday": swept
    # two weeks later, it answered no "when did …" question.
    engine.script(
        "extract",
        facts_json(
            (
                "User lost their job at the print shop and is opening a bike repair stall",
                "requirement",
                "fact",
                True,
            ),
            ("User is thinking about a van", "requirement", "fact", True),
        ),
    )
    (outcome,) = svc.ingest(
        "u",
        "s",
        [
            _user(
                "Got laid off at the print shop yesterday, so I'm opening a bike repair stall. "
                "Maybe I need a van."
            )
        ],
    )
    laid_off, van = outcome.facts
    said = svc.clock.now().date()
    assert (laid_off.event_start, laid_off.expire_at) == (said - timedelta(days=1), None)
    assert van.event_start is None and van.expire_at is None  # its own sentence names no time


def test_a_photo_caption_is_no_memory(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script(
        "extract",
        facts_json(
            ("User shares a photo of a red kite over a beach", "other", "fact", False),
            ("User flies kites at the weekend", "preference", "fact", False),
        ),
    )
    (outcome,) = svc.ingest(
        "u", "s", [_user("I fly kites at the weekend! [shares a photo of a red kite over a beach]")]
    )
    assert [f.text for f in outcome.facts] == ["User flies kites at the weekend"]


def test_a_dated_past_event_is_history_and_never_expires(svc: MemoryService, engine: ScriptedEngine) -> None:
    # The small model calls past events "temporary"; their dates say they are history.
    engine.script(
        "extract", facts_json(("User ran a half marathon in Porto two days ago", "event", "fact", True))
    )
    engine.script("extract", facts_json(("User is in Porto this week", "event", "fact", True)))
    (past,) = svc.ingest("u", "s", [_user("I ran a half marathon in Porto two days ago!")])
    (now,) = svc.ingest("u", "s", [_user("I'm in Porto this week for work")])
    assert past.facts[0].text == "User ran a half marathon in Porto on 27 February 2026"  # said 1 March
    assert past.facts[0].expire_at is None
    assert now.facts[0].expire_at is not None  # a current stay still ends
    svc.sweep(svc.clock.now() + timedelta(days=400))
    assert [f.text for f in svc.list_facts("u")] == [past.facts[0].text]


def _reply(context: str, message: str) -> list[Turn]:
    return [Turn(role=Role.ASSISTANT, content=context), _user(message)]


def test_facts_echoing_what_the_other_party_said_of_themselves_are_dropped(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    # The scripted extractor makes the small model's mistake seen on two-person chats: the
    # partner's own news comes back as the user's. The real embedder tells them apart from the
    # user's words.
    engine.script(
        "extract",
        facts_json(
            ("User was laid off by an insurance firm yesterday", "identity", "fact", False),
            ("User was let go by a courier company this month", "identity", "fact", False),
        ),
    )
    engine.script(
        "extract",
        facts_json(
            ("User sketched a harbour at dusk last year", "identity", "fact", False),
            ("User likes how neat the shading is", "preference", "fact", False),
        ),
    )
    (jobs,) = svc.ingest(
        "u",
        "s",
        _reply(
            "Hi Nadia! Nice to see you. An insurance firm laid me off yesterday, so I'm going to try "
            "opening a bakery of my own.",
            "Sorry to hear that, Tobias, but a bakery sounds lovely! Sadly, a courier company let me go "
            "this month too. What would you bake first?",
        ),
    )
    (painting,) = svc.ingest(
        "u",
        "s",
        _reply(
            "Yes, I sketched that harbour at dusk last year! It means a lot to me.",
            "Wow, Ilse! The shading is so neat. Drawing seems like a lovely way to unwind after work.",
        ),
    )
    # What the other party stated without saying "I" is theirs too.
    engine.script(
        "extract",
        facts_json(
            ("User plays for the Harbour Hawks", "identity", "fact", False),
            ("User coaches a youth football side", "identity", "fact", False),
        ),
    )
    (team,) = svc.ingest(
        "u",
        "s",
        _reply("The Harbour Hawks! Can't wait to play for them.", "Nice. I coach a youth side myself."),
    )
    assert [f.text for f in jobs.facts + painting.facts + team.facts] == [
        "User was let go by a courier company in March 2026",
        "User likes how neat the shading is",
        "User coaches a youth football side",
    ]
    assert jobs.echoes == painting.echoes == team.echoes == 1


def test_facts_drawn_from_what_the_user_answers_are_kept(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script("extract", facts_json(("User no longer lives in Paris", "identity", "fact", False)))
    engine.script("extract", facts_json(("User has two cats", "identity", "fact", False)))
    # The assistant's "I see." speaks of itself, but the fact is nearest to the user's answer.
    (moved,) = svc.ingest(
        "u", "s", _reply("I see. Are you still living in Paris?", "No, I moved last spring.")
    )
    (cats,) = svc.ingest("u", "s", _reply("Do you have any pets at home?", "Yes, two cats."))
    assert [f.text for f in moved.facts + cats.facts] == [
        "User no longer lives in Paris",
        "User has two cats",
    ]
    assert moved.echoes == cats.echoes == 0


def test_the_name_a_user_greets_is_not_taken_for_theirs(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script(
        "extract",
        facts_json(
            ("User is Sofia", "identity", "fact", False),
            ("User just came back from a camping weekend by a lake", "event", "fact", False),
        ),
    )
    engine.script("extract", facts_json(("User's name is Bob", "identity", "fact", False)))
    (greeting,) = svc.ingest(
        "u", "s", [_user("Hey Sofia! Just came back from a camping weekend by a lake, loved it!")]
    )
    (introduction,) = svc.ingest("u", "s", [_user("Thanks, Anna. I'm Bob, by the way.")])
    assert [f.text for f in greeting.facts] == ["User just came back from a camping weekend by a lake"]
    assert [f.text for f in introduction.facts] == ["User's name is Bob"]


def test_thanks_and_talk_towards_the_listener_are_no_memories(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script(
        "extract",
        facts_json(
            ("User thanks Ines for the hiking tips", "other", "fact", False),
            ("User is talking to Ines about the trail", "event", "fact", False),
            ("User twisted their ankle on a scree slope", "event", "fact", False),
        ),
    )
    (outcome,) = svc.ingest(
        "u", "s", [_user("Thanks, Ines! Your tips were gold, though I twisted my ankle on the scree.")]
    )
    assert [f.text for f in outcome.facts] == ["User twisted their ankle on a scree slope"]


def test_feelings_for_the_listener_named_earlier_in_the_session_are_no_memories(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    """Two people chatting name each other once, at the start; later the small model wrote "User is
    inspired by Ines's patience" from a reply that named nobody. The session's window tells who
    the listener is, on the direct path and on the queued one; in another session Ines may be
    anyone and the fact stays."""
    inspired = ("User is inspired by Ines's patience", "preference", "fact", False)
    kiln = ("User's new kiln arrived", "event", "fact", False)
    later = "Honestly your patience inspires me. My new kiln arrived, by the way."
    engine.script("extract", facts_json(("User is glazing bowls", "event", "fact", False)))
    svc.ingest("u", "s1", [_user("Hey Ines! I'm glazing bowls all afternoon.")])
    engine.script("extract", facts_json(inspired, kiln))
    (direct,) = svc.ingest("u", "s1", [_user(later)])
    lanes = WriteLanes(svc.settings.write)
    try:
        engine.script("extract", facts_json(inspired, kiln))
        UserWrites(svc, lanes).queue_turns("u", "s1", [_user(later)]).future.result(timeout=60)
    finally:
        lanes.close()
    stored = [f.text for f in svc.list_facts("u")]
    engine.script("extract", facts_json(inspired, kiln))
    (elsewhere,) = svc.ingest("u", "s2", [_user(later)])
    assert [f.text for f in direct.facts] == ["User's new kiln arrived"]
    assert "User is inspired by Ines's patience" not in stored
    assert "User is inspired by Ines's patience" in [f.text for f in elsewhere.facts]


def test_a_reply_that_agrees_keeps_what_it_agrees_with(svc: MemoryService, engine: ScriptedEngine) -> None:
    engine.script(
        "extract",
        facts_json(("User's favourite kind of climbing is bouldering", "preference", "fact", False)),
    )
    (outcome,) = svc.ingest(
        "u",
        "s",
        _reply(
            "Nice one, Tobias! I enjoy every kind of climbing, but bouldering is my favourite. It's like "
            "solving puzzles!",
            "Same here! Bouldering is such a fun puzzle and so satisfying - it really clicks for me.",
        ),
    )
    assert [f.text for f in outcome.facts] == ["User's favourite kind of climbing is bouldering"]
    assert outcome.echoes == 0


def test_a_bare_relation_with_nothing_said_about_them_is_no_memory(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    """The small model turned "Hey Tomas! ..." into "User's friend Tomas", even for the speaker's own
    name; such a fact says nothing and crowded real ones out of recall."""
    engine.script(
        "extract",
        facts_json(
            ("User's friend Tomas", "identity", "fact", False, "friend Tomas"),
            ("User's colleague Ines.", "identity", "fact", False),
            ("User's friend Tomas runs a bakery in Braga", "identity", "fact", False, "friend Tomas"),
            ("User restores old motorbikes", "preference", "fact", False),
        ),
    )
    turn = Turn(
        role=Role.USER,
        content="Hey Tomas! How are you? I spent the weekend on my old motorbikes.",
        turn_id="s:0",
    )
    (outcome,) = svc.ingest("u", "s", [turn])
    assert sorted(f.text for f in outcome.facts) == [
        "User restores old motorbikes",
        "User's friend Tomas runs a bakery in Braga",
    ]
    engine.script(
        "extract",
        facts_json(
            ("用户的朋友小梅", "identity", "fact", False, "朋友小梅"),
            ("用户的儿子读研", "identity", "fact", False, "儿子"),
            ("用户的女儿上小学", "identity", "fact", False),
        ),
    )
    chinese = Turn(role=Role.USER, content="小梅你好！我儿子读研了，女儿也上小学了。", turn_id="s:1")
    (outcome,) = svc.ingest("u", "s", [chinese])
    assert sorted(f.text for f in outcome.facts) == ["用户的儿子读研", "用户的女儿上小学"]


def test_the_name_the_assistant_calls_the_user_by_is_the_user(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script(
        "extract",
        facts_json(
            (
                "User's friend Tomas is running for the school board",
                "requirement",
                "fact",
                False,
                "friend Tomas",
            )
        ),
    )
    (outcome,) = svc.ingest(
        "u",
        "s",
        _reply("Woohoo, Tomas! Which seat are you after?", "The school board, it matters a lot to me."),
    )
    assert [(f.text, f.about) for f in outcome.facts] == [("User is running for the school board", "")]
    # The listener, named in a message that never says "you", is not who the news is about; in
    # one that does, they may well be.
    engine.script(
        "extract",
        facts_json(("User's friend Ana won a chess cup", "event", "fact", False, "friend Ana")),
        facts_json(("User's friend Ana got a new job", "identity", "fact", False, "friend Ana")),
    )
    (won,) = svc.ingest("u", "s", [_user("Hey Ana! Guess what, I won my first chess cup on Sunday!")])
    (job,) = svc.ingest("u", "s", [_user("Hey Ana! Congrats on your new job!")])
    assert [(f.text, f.about) for f in won.facts + job.facts] == [
        ("User won a chess cup", ""),
        ("User's friend Ana got a new job", "friend Ana"),
    ]


def test_a_profile_item_that_is_no_wish_about_replies_is_a_fact(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script(
        "extract",
        facts_json(
            ("User is passionate about community gardens", "preference", "profile", False),
            ("User wants short answers", "preference", "profile", False),
        ),
    )
    engine.script("extract", facts_json(("用户希望回答用中文", "preference", "profile", False)))
    (outcome,) = svc.ingest("u", "s", [_user("I love community gardens. Keep answers short.")])
    svc.ingest("u", "s", [_user("以后都用中文回答我。")])
    assert [f.text for f in outcome.facts] == ["User is passionate about community gardens"]
    assert sorted(e.text for e in svc.profile("u")) == ["User wants short answers", "用户希望回答用中文"]


def test_every_write_path_prompt_begins_with_a_beginning_the_engine_keeps() -> None:
    """The llama.cpp engine keeps the evaluated state of ``fixed_beginnings`` on disk; a prompt
    that began otherwise (a shot moved into the last message, a language's order missed) would
    silently pay the whole system prompt again in every process."""
    kept = prompts.fixed_beginnings()
    made = [
        make(said)
        for said in ("I moved to Leeds last spring", "我上个月搬到了大连", "Forget my old phone number")
        for make in (
            prompts.judge_messages,
            lambda m: prompts.extract_messages(m, "What's new?"),
            lambda m: prompts.resolve_messages("User lives in York", m),
            prompts.forget_intent_messages,
            prompts.forget_target_messages,
            lambda m: prompts.forget_match_messages(m, "User's phone number is 0161 555 0100"),
        )
    ]
    assert all(messages[:-1] in kept for messages in made)
    assert not any(said in str(kept) for said in ("Leeds", "大连", "York", "0161"))
