"""Relative times written as the dates they meant: the resolver, the write path that stores them,
recall by period, and facts stored before event times existed."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime

import numpy as np
import pyarrow as pa
import pytest

from memory_core.clock import ManualClock
from memory_core.dates import Period, find_times, period_of, resolve_times
from memory_core.embedding import Embedder
from memory_core.models import Fact, Layer, Role, Tag, Turn
from memory_core.prompt import event_span, render_memories
from memory_core.recall import Recaller
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import RecallSettings, Settings
from memory_core.store.arrow_codec import batch_to_facts, facts_to_batch
from memory_core.text import Tokenizer
from tests.scripted_engine import ScriptedEngine, facts_json

# A Wednesday.
SAID = datetime(2025, 9, 17, 15, 30, tzinfo=UTC)


@pytest.mark.parametrize(
    ("text", "written", "start", "end"),
    [
        (
            "User's grandmother had surgery two days ago",
            "User's grandmother had surgery on 15 September 2025",
            date(2025, 9, 15),
            date(2025, 9, 15),
        ),
        (
            "User ran a half marathon yesterday",
            "User ran a half marathon on 16 September 2025",
            date(2025, 9, 16),
            date(2025, 9, 16),
        ),
        (
            "User flies to Oslo the day after tomorrow",
            "User flies to Oslo on 19 September 2025",
            date(2025, 9, 19),
            date(2025, 9, 19),
        ),
        (
            "User started a pottery course last week",
            "User started a pottery course in the week of 8 September 2025",
            date(2025, 9, 8),
            date(2025, 9, 14),
        ),
        (
            "User moves flat next month",
            "User moves flat in October 2025",
            date(2025, 10, 1),
            date(2025, 10, 31),
        ),
        (
            "User visited Lisbon last year",
            "User visited Lisbon in 2024",
            date(2024, 1, 1),
            date(2024, 12, 31),
        ),
        (
            "User adopted a cat a couple of weeks ago",
            "User adopted a cat in the week of 1 September 2025",
            date(2025, 9, 1),
            date(2025, 9, 7),
        ),
        (
            "User has a dentist appointment next Tuesday",
            "User has a dentist appointment on 23 September 2025",
            date(2025, 9, 23),
            date(2025, 9, 23),
        ),
        (
            "User saw a play last Friday",
            "User saw a play on 12 September 2025",
            date(2025, 9, 12),
            date(2025, 9, 12),
        ),
        (
            "User went camping last weekend",
            "User went camping on the weekend of 13 September 2025",
            date(2025, 9, 13),
            date(2025, 9, 14),
        ),
        (
            "User starts the new job in 3 weeks",
            "User starts the new job in the week of 6 October 2025",
            date(2025, 10, 6),
            date(2025, 10, 12),
        ),
        ("用户的外公两天前住院了", "用户的外公2025年9月15日住院了", date(2025, 9, 15), date(2025, 9, 15)),
        ("用户上个月去了桂林", "用户2025年8月去了桂林", date(2025, 8, 1), date(2025, 8, 31)),
        ("用户下周三要面试", "用户2025年9月24日要面试", date(2025, 9, 24), date(2025, 9, 24)),
        ("用户去年考了驾照", "用户2024年考了驾照", date(2024, 1, 1), date(2024, 12, 31)),
        ("用户三个月前换了工作", "用户2025年6月换了工作", date(2025, 6, 1), date(2025, 6, 30)),
        ("用户这周末要搬家", "用户2025年9月20日那个周末要搬家", date(2025, 9, 20), date(2025, 9, 21)),
        ("用户前天感冒了", "用户2025年9月15日感冒了", date(2025, 9, 15), date(2025, 9, 15)),
        # A month by name: the last one for what happened, the next one for a plan or schedule.
        (
            "User ran a half marathon in March",
            "User ran a half marathon in March 2025",
            date(2025, 3, 1),
            date(2025, 3, 31),
        ),
        (
            "User's son starts nursery in February",
            "User's son starts nursery in February 2026",
            date(2026, 2, 1),
            date(2026, 2, 28),
        ),
        (
            "User has volunteered at the shelter since May",
            "User has volunteered at the shelter since May 2025",
            date(2025, 5, 1),
            date(2025, 5, 31),
        ),
        (
            "User moved to Leeds last September",
            "User moved to Leeds in September 2024",
            date(2024, 9, 1),
            date(2024, 9, 30),
        ),
        (
            "User will repaint the kitchen in early October",
            "User will repaint the kitchen in early October 2025",
            date(2025, 10, 1),
            date(2025, 10, 31),
        ),
        ("User married in June, 2019", "User married in June 2019", date(2019, 6, 1), date(2019, 6, 30)),
        ("用户十一月要去哈尔滨", "用户2025年11月要去哈尔滨", date(2025, 11, 1), date(2025, 11, 30)),
        ("用户去年七月搬到了成都", "用户2024年7月搬到了成都", date(2024, 7, 1), date(2024, 7, 31)),
        ("用户五月二十号去了杭州", "用户2025年5月20日去了杭州", date(2025, 5, 20), date(2025, 5, 20)),
        # A bare weekday: the last one for what happened, the next one for a plan.
        (
            "User went sailing on Saturday",
            "User went sailing on 13 September 2025",
            date(2025, 9, 13),
            date(2025, 9, 13),
        ),
        (
            "User will call the bank on Friday",
            "User will call the bank on 19 September 2025",
            date(2025, 9, 19),
            date(2025, 9, 19),
        ),
        (
            "User is driving to Tours on Monday",
            "User is driving to Tours on 22 September 2025",
            date(2025, 9, 22),
            date(2025, 9, 22),
        ),
        (
            "User met his tutor on Wednesday",
            "User met his tutor on 10 September 2025",
            date(2025, 9, 10),
            date(2025, 9, 10),
        ),
        (
            "User is thrilled about the gig in May",
            "User is thrilled about the gig in May 2026",
            date(2026, 5, 1),
            date(2026, 5, 31),
        ),
        ("用户周四要去面试", "用户2025年9月18日要去面试", date(2025, 9, 18), date(2025, 9, 18)),
        # Arranged in the past, for a day to come.
        (
            "Got a dentist appointment on Tuesday",
            "Got a dentist appointment on 23 September 2025",
            date(2025, 9, 23),
            date(2025, 9, 23),
        ),
        (
            "User booked a table for Friday",
            "User booked a table for 19 September 2025",
            date(2025, 9, 19),
            date(2025, 9, 19),
        ),
        (
            "用户周日约了同事打羽毛球",
            "用户2025年9月21日约了同事打羽毛球",
            date(2025, 9, 21),
            date(2025, 9, 21),
        ),
        # Asked out for a day: "约我/约他" is arranged as much as "约了" (an extracted fact says it so).
        ("朋友约我周六去钓鱼", "朋友约我2025年9月20日去钓鱼", date(2025, 9, 20), date(2025, 9, 20)),
        ("表哥约他周五吃火锅", "表哥约他2025年9月19日吃火锅", date(2025, 9, 19), date(2025, 9, 19)),
        (
            "User got a new bike on Saturday",
            "User got a new bike on 13 September 2025",
            date(2025, 9, 13),
            date(2025, 9, 13),
        ),
        ("用户星期天去了动物园", "用户2025年9月14日去了动物园", date(2025, 9, 14), date(2025, 9, 14)),
    ],
)
def test_a_relative_time_is_written_as_the_date_it_meant(
    text: str, written: str, start: date, end: date
) -> None:
    assert resolve_times(text, SAID) == (written, Period(start, end))


@pytest.mark.parametrize(
    "text",
    [
        "User is a sound engineer",
        "User has played the cello for ten years",  # a duration, not a time
        "User sees a physio on Fridays",  # a habit: a bare weekday names no date
        "User teaches yoga on Tuesday",  # told in the present: a schedule, no one day
        "User usually bakes bread on Sunday",
        "User is nervous about the review on Thursday",  # a state now, neither plan nor past
        "User works a Monday-Friday job",
        "User keeps Good Friday with his family",
        "用户每周五去游泳",
        "用户两周一次去复查",
        "用户周一到周五上班",
        "User recently took up climbing",  # vague: left as said
        "用户每周一去游泳",
        "用户周末喜欢去钓鱼",
        "User's birthday is in June",  # comes back every year
        "User's aunt June lives in Cork",  # a name
        "User's exam is on June 5",  # a day without its year: left as said
        "User goes skiing every January",
        "用户每年六月去海边",
        "用户六个月没回家",  # a duration
    ],
)
def test_text_without_a_time_that_names_a_date_is_left_as_said(text: str) -> None:
    assert resolve_times(text, SAID) == (text, None)


def test_two_times_in_one_text_are_both_written_and_the_period_spans_them() -> None:
    text, period = resolve_times("User booked the hotel yesterday for next weekend", SAID)
    # "for" already says how the time relates: no "on" is added before it.
    assert text == "User booked the hotel on 16 September 2025 for the weekend of 27 September 2025"
    assert period == Period(date(2025, 9, 16), date(2025, 9, 28))
    assert [r.phrase for r in find_times("昨天订了下个月的票", SAID)] == ["昨天", "下个月"]


def test_last_weekday_said_on_that_weekday_is_a_week_back() -> None:
    assert period_of("last Wednesday", SAID) == Period(date(2025, 9, 10), date(2025, 9, 10))
    assert period_of("What did I do last week?", SAID) == Period(date(2025, 9, 8), date(2025, 9, 14))
    assert period_of("我去年做了什么？", SAID) == Period(date(2024, 1, 1), date(2024, 12, 31))
    assert period_of("What is my job?", SAID) is None
    assert period_of("What did I do on Monday?", SAID) == Period(date(2025, 9, 15), date(2025, 9, 15))
    assert period_of("What am I doing on Monday?", SAID) == Period(date(2025, 9, 22), date(2025, 9, 22))


# ----------------------------------------------------------------------------- the write path


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


def test_stored_facts_carry_the_date_they_meant_and_a_plan_lives_until_its_period_ends(
    svc: MemoryService, engine: ScriptedEngine
) -> None:
    engine.script(
        "extract",
        facts_json(
            ("User's grandfather passed away two days ago", "event", "fact", False),
            ("User is a tram driver", "identity", "fact", False),
        ),
    )
    engine.script("extract", facts_json(("用户下个月要去成都出差", "event", "fact", True)))
    engine.script("extract", facts_json(("User has a flight", "event", "fact", True)))
    svc.ingest(
        "u",
        "s",
        [
            Turn(role=Role.USER, content="My grandfather passed away two days ago. I drive trams.", at=SAID),
            Turn(role=Role.USER, content="我下个月要去成都出差。", at=SAID),
            Turn(role=Role.USER, content="My flight is tomorrow.", at=SAID),
        ],
    )
    facts = {f.text: f for f in svc.list_facts("u")}
    grandfather = facts["User's grandfather passed away on 15 September 2025"]
    assert (grandfather.event_start, grandfather.event_end) == (date(2025, 9, 15), date(2025, 9, 15))
    assert grandfather.expire_at is None  # it happened: a lasting fact
    job = facts["User is a tram driver"]
    assert job.event_start is None and job.event_end is None
    trip = facts["用户2025年10月要去成都出差"]
    assert (trip.event_start, trip.event_end) == (date(2025, 10, 1), date(2025, 10, 31))
    # The event tag's lifetime (days) would end the trip before it began.
    assert trip.expire_at == datetime(2025, 11, 1, tzinfo=UTC)
    # The fact lost "tomorrow"; the message named one day, and it is the flight's.
    flight = facts["User has a flight"]
    assert (flight.event_start, flight.event_end) == (date(2025, 9, 18), date(2025, 9, 18))
    lines = render_memories(svc.recall("u", "When did my grandfather die?", threshold=-1.0, at=SAID))
    assert '"Your grandfather passed away on 15 September 2025"' in lines
    assert "time 2025-09-15)" in lines and "time 2025-10, until 2025-11-01" in lines


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [
        (date(2022, 1, 1), date(2022, 12, 31), "2022"),
        (date(2024, 2, 1), date(2024, 2, 29), "2024-02"),
        (date(2025, 3, 3), date(2025, 3, 3), "2025-03-03"),
        (date(2025, 3, 3), date(2025, 3, 9), "2025-03-03 to 2025-03-09"),
        (date(2025, 3, 1), date(2025, 4, 30), "2025-03-01 to 2025-04-30"),
        (date(2025, 1, 1), date(2025, 12, 30), "2025-01-01 to 2025-12-30"),
    ],
)
def test_a_whole_month_or_year_is_shown_as_people_write_it(start: date, end: date, shown: str) -> None:
    # A model answering "when?" copies the span: "2022-01-01 to 2022-12-31" for "last year".
    fact = Fact(
        id=1,
        user_id="u",
        text="User moved house",
        tag=Tag.EVENT,
        layer=Layer.FACT,
        created_at=SAID,
        event_start=start,
        event_end=end,
    )
    assert event_span(fact) == shown


def test_a_question_about_a_period_ranks_the_facts_of_that_period_first(embedder: Embedder) -> None:
    said = datetime(2025, 9, 1, tzinfo=UTC)

    def fact(n: int, text: str, start: date | None) -> tuple[Fact, float]:
        stored = Fact(
            id=n, user_id="u", text=text, tag=Tag.EVENT, created_at=said, event_start=start, event_end=start
        )
        return stored, 0.80  # the same cosine for all: only the period can order them

    candidates = [
        fact(1, "User went to a wedding", date(2025, 8, 2)),
        fact(2, "User went bowling", date(2025, 9, 10)),
        fact(3, "User went to the dentist", None),
    ]
    recaller = Recaller(None, embedder, RecallSettings(period_bonus=0.1), Tokenizer())  # type: ignore[arg-type]
    asked = period_of("What did I do last week?", datetime(2025, 9, 17, tzinfo=UTC))
    ranked = recaller.rank("What did I do last week?", candidates, asked)
    assert [h.fact.id for h in ranked][0] == 2
    assert ranked[0].score == pytest.approx(0.9) and ranked[1].score == pytest.approx(0.8)
    assert [h.score for h in recaller.rank("What did I do?", candidates)] == [0.8, 0.8, 0.8]


def test_facts_stored_before_event_times_existed_still_load() -> None:
    fact = Fact(
        id=7,
        user_id="u",
        text="User likes figs",
        created_at=SAID,
        event_start=date(2025, 9, 1),
        event_end=date(2025, 9, 2),
    )
    batch = facts_to_batch([fact], np.ones((1, 4), dtype=np.float32), 4)
    assert batch_to_facts(batch)[0] == [fact]
    old = pa.RecordBatch.from_arrays(
        [batch.column(name) for name in batch.schema.names if not name.startswith("event_")],
        names=[name for name in batch.schema.names if not name.startswith("event_")],
    )
    (loaded,), _ = batch_to_facts(old)
    assert loaded.text == "User likes figs" and loaded.event_start is None and loaded.event_end is None
