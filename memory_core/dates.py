"""Relative times resolved against the moment they were said.

"Two days ago", said on 2023-05-10, means 2023-05-08 — and means nothing a week later, when a
stored "User's grandfather passed away two days ago" is read back. The write path rewrites such
a phrase into the calendar date or period it meant ("on 8 May 2023", "2023年4月") and keeps the
period as the fact's event time; recall reads a period out of a question the same way
("what did I do last week", "去年").

Only phrases that name a period are resolved; a vague "recently" stays as said. A month named
without a year ("in June", "六月") is the last June for what happened ("went", "了") and the next
one otherwise ("will", "starts in June", "六月考"); a month that comes back every year ("birthday
in June") stays as said. A bare weekday ("on Friday", "周五") is the last such day for what
happened and the next one for a plan ("will", "is flying out", "要") or something arranged
("booked a table for Friday", "约了", "朋友约我"); told in the present
("works on Saturday") or as a habit ("every", "usually", "每") it names no one day and stays as
said: guessing its date would store something the user never meant.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta


@dataclass(frozen=True)
class Period:
    """A span of calendar days, both ends included."""

    start: date
    end: date

    def overlaps(self, other: Period) -> bool:
        """Whether the two periods share a day."""
        return self.start <= other.end and other.start <= self.end


@dataclass(frozen=True)
class Resolved:
    """A time phrase found in a text, and what it meant when it was said."""

    phrase: str  # as written
    span: tuple[int, int]  # where in the text
    period: Period
    written: str  # the phrase rewritten as an absolute date or period, in the text's language


_EN_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "a couple of": 2,
    "couple of": 2,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
}
_ZH_DIGITS = {"一": 1, "两": 2, "二": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7, "八": 8, "九": 9}
_WEEKDAYS_EN = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_WEEKDAYS_ZH = "一二三四五六日"


def _zh_number(text: str) -> int:
    """A small Chinese or Arabic number ("3", "两", "十二", "二十")."""
    if text.isdigit():
        return int(text)
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_ZH_DIGITS[tens] if tens else 1) * 10 + (_ZH_DIGITS[ones] if ones else 0)
    return _ZH_DIGITS[text]


def _en_number(text: str) -> int:
    return int(text) if text.isdigit() else _EN_NUMBERS[" ".join(text.lower().split())]


def _monday(day: date) -> date:
    return day - timedelta(days=day.weekday())


def _week(day: date) -> Period:
    start = _monday(day)
    return Period(start, start + timedelta(days=6))


def _month(year: int, month: int) -> Period:
    return Period(date(year, month, 1), date(year, month, calendar.monthrange(year, month)[1]))


def _months_from(day: date, months: int) -> Period:
    index = day.year * 12 + day.month - 1 + months
    return _month(index // 12, index % 12 + 1)


def _year(year: int) -> Period:
    return Period(date(year, 1, 1), date(year, 12, 31))


def _weekend(day: date, weeks: int) -> Period:
    saturday = _monday(day) + timedelta(days=5 + 7 * weeks)
    return Period(saturday, saturday + timedelta(days=1))


def _day(day: date) -> Period:
    return Period(day, day)


def _weekday(day: date, weekday: int, weeks: int) -> Period:
    """The ``weekday`` of the week ``weeks`` away from ``day``'s week (0: this week)."""
    return _day(_monday(day) + timedelta(days=weekday + 7 * weeks))


def _span(day: date, unit: str, count: int) -> Period:
    """The day, week, month or year ``count`` units away from ``day`` (negative: before)."""
    if unit == "day":
        return _day(day + timedelta(days=count))
    if unit == "week":
        return _week(day + timedelta(weeks=count))
    if unit == "month":
        return _months_from(day, count)
    return _year(day.year + count)


def _month_named(day: date, month: int, past: bool) -> Period:
    """The ``month`` the speaker meant on ``day``: the last one if ``past``, else the next one
    (this month is both)."""
    back = (day.month - month) % 12  # months since the last such month
    return _months_from(day, -back if past else (12 - back) % 12)


# A bare month in a past form ("went", "了", "since") is the last one; otherwise it is a plan or
# a schedule ("will", "starts in June", "六月考"): the next one. Read in the whole (short) text
# the month is in: a stored fact or a question.
_SINCE = re.compile(r"\b(?:since|ago)\b|以来", re.IGNORECASE)
_FUTURE = re.compile(
    r"\b(?:will|'ll|shall|going to|gonna|plans?|planning|hopes? to|wants? to|would like to|intends? to"
    r"|upcoming|soon)\b|要|打算|准备|计划|将|会|想",
    re.IGNORECASE,
)
_PAST = re.compile(
    r"\b(?:was|were|went|did|had|got|made|took|saw|met|ran|came|began|bought|left|won|lost|spent|gave"
    r"|wrote|flew|drove|\w{3,}ed)\b|了|过",
    re.IGNORECASE,
)
# A month that comes back every year ("User's birthday is in June", "每年三月") is no one date.
_YEARLY = re.compile(
    r"\b(?:birthday|anniversary|every|each|annual|annually|yearly|usually|always)\b|生日|每年|周年|纪念日|通常|总是",
    re.IGNORECASE,
)


# "is excited", "feels tired": a state, not a past form.
_STATE_ED = re.compile(
    r"\b(?:is|are|am|'s|'re|'m|feels?|seems?|looks?|gets?|getting|be|being)\s+"
    r"(?:so |very |really )?\w{3,}ed\b",
    re.IGNORECASE,
)
# A plan told in the present progressive: "User is flying to Oslo on Friday".
_PROGRESSIVE = re.compile(
    r"\b(?:is|are|am|'s|'re|'m)\s+(?:(?:i|you|we|they|he|she) )?(?:\w+ly )?\w{2,}ing\b", re.IGNORECASE
)
# A weekday that comes back every week ("every Friday", "usually on Sunday", "每周五").
_WEEKLY = re.compile(
    r"\b(?:every|each|usually|always|often|normally|typically|weekly|sometimes)\b|每|通常|总是|经常|一般",
    re.IGNORECASE,
)


def _in_past(text: str) -> bool:
    if _SINCE.search(text):
        return True
    return not _FUTURE.search(text) and bool(_PAST.search(_STATE_ED.sub("", text)))


# Something arranged, told in the past, happens on a day to come: "got a dentist appointment on
# Tuesday", "booked a table for Friday", "周日约了同事打球", "表哥约他周五吃饭".
_ARRANGED = re.compile(
    r"\b(?:booked|scheduled|arranged|signed up|got (?:an? |my |the )?(?:\w+ )?(?:interview|appointment"
    r"|meeting|exam|test|date|booking|reservation|flight|call|match|game|session|class)s?)\b"
    r"|约[了我他她你]|订了|报了|安排了|预约",
    re.IGNORECASE,
)


def _last_weekday(day: date, weekday: int) -> Period:
    """The latest such day before ``day`` ("last Friday" said on a Saturday is yesterday)."""
    return _day(day - timedelta(days=(day.weekday() - weekday) % 7 or 7))


def _weekday_named(day: date, weekday: int, text: str) -> tuple[Period, str] | None:
    """The bare ``weekday`` the speaker meant on ``day`` in ``text``: the last one before ``day``
    for what happened, the next one after it for a plan; None told in the present or as a habit."""
    if _WEEKLY.search(text):
        return None
    arranged = _ARRANGED.search(text) is not None
    if not arranged and _in_past(text):
        return _last_weekday(day, weekday), "day"
    if arranged or _FUTURE.search(text) or _PROGRESSIVE.search(text):
        return _day(day + timedelta(days=(weekday - day.weekday()) % 7 or 7)), "day"
    return None


# ----------------------------------------------------------------------------- writing


def _en_day(day: date) -> str:
    return f"{day.day} {calendar.month_name[day.month]} {day.year}"


def _en_written(period: Period, unit: str) -> str:
    start, end = period.start, period.end
    if start == end:
        return f"on {_en_day(start)}"
    if unit == "weekend":
        return f"on the weekend of {_en_day(start)}"
    if unit == "week":
        return f"in the week of {_en_day(start)}"
    if unit == "month":
        return f"in {calendar.month_name[start.month]} {start.year}"
    return f"in {start.year}"


def _zh_day(day: date) -> str:
    return f"{day.year}年{day.month}月{day.day}日"


def _zh_written(period: Period, unit: str) -> str:
    start = period.start
    if start == period.end:
        return _zh_day(start)
    if unit == "weekend":
        return f"{_zh_day(start)}那个周末"
    if unit == "week":
        return f"{_zh_day(start)}那一周"
    if unit == "month":
        return f"{start.year}年{start.month}月"
    return f"{start.year}年"


# ----------------------------------------------------------------------------- phrases

# A rule's meaning is None where the match names no one period after all.
_Rule = tuple[re.Pattern[str], Callable[[re.Match[str], date], tuple[Period, str] | None]]

_EN_COUNT = r"(\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|(?:a )?couple of)"
_EN_UNIT = r"(day|week|month|year)s?"
_EN_WEEKDAY = r"(monday|tuesday|wednesday|thursday|friday|saturday|sunday)"
_EN_WHICH = {"last": -1, "this": 0, "next": 1}


def _en_ago(m: re.Match[str], day: date) -> tuple[Period, str]:
    unit = m[2].lower()
    return _span(day, unit, -_en_number(m[1])), unit


def _en_in(m: re.Match[str], day: date) -> tuple[Period, str]:
    unit = m[2].lower()
    return _span(day, unit, _en_number(m[1])), unit


def _en_which_unit(m: re.Match[str], day: date) -> tuple[Period, str]:
    unit = m[2].lower()
    if unit == "weekend":
        return _weekend(day, _EN_WHICH[m[1].lower()]), unit
    return _span(day, unit, _EN_WHICH[m[1].lower()]), unit


def _en_which_weekday(m: re.Match[str], day: date) -> tuple[Period, str]:
    weekday = _WEEKDAYS_EN.index(m[2].lower())
    which = m[1].lower()
    if which == "last":
        return _last_weekday(day, weekday), "day"
    weeks = 1 if which == "next" else 0
    return _weekday(day, weekday, weeks), "day"


def _en_bare_weekday(m: re.Match[str], day: date) -> tuple[Period, str] | None:
    if re.search(r"\b(?:good|black|cyber) $", m.string[: m.start()], re.IGNORECASE):  # "Good Friday"
        return None
    return _weekday_named(day, _WEEKDAYS_EN.index(m[1].lower()), m.string)


_EN_NAMED_DAYS = {
    "the day before yesterday": -2,
    "the day after tomorrow": 2,
    "yesterday": -1,
    "last night": -1,
    "today": 0,
    "tonight": 0,
    "this morning": 0,
    "this afternoon": 0,
    "this evening": 0,
    "tomorrow": 1,
}


def _en_month(m: re.Match[str], day: date) -> tuple[Period, str] | None:
    month = list(calendar.month_name).index(m[2])
    if m[3]:
        return _month(int(m[3]), month), "month"
    if _YEARLY.search(m.string):
        return None
    which = (m[1] or "").lower()
    if which == "this":
        return _month(day.year, month), "month"
    if which:
        # "last June" said in June is a year back; "next June" a year ahead.
        step = _EN_WHICH[which]
        named = _month_named(day, month, past=step < 0)
        return (_months_from(named.start, 12 * step) if month == day.month else named), "month"
    return _month_named(day, month, _in_past(m.string)), "month"


# A month by name, with a year, "last/this/next", or after a word that makes it a time ("in
# June", "early May"): "May I", "June's house" and "June 5" (a day: left as said) are not.
_EN_MONTH_NAME = "|".join(calendar.month_name[1:])
_EN_MONTH_AFTER = "|".join(
    rf"(?<=\b(?i:{words})[ -])"
    for words in (
        "in",
        "by",
        "since",
        "until",
        "till",
        "during",
        "from",
        "before",
        "after",
        "early",
        "late",
        "mid",
        "end of",
        "start of",
        "beginning of",
    )
)
_EN_MONTH = re.compile(
    rf"\b(?:((?i:last|this|next)) |{_EN_MONTH_AFTER}|(?=(?:{_EN_MONTH_NAME}),? \d{{4}}\b))"
    rf"({_EN_MONTH_NAME})(?:,? (\d{{4}}))?\b(?!'s|,? ?\d)"
)

_EN_RULES: list[_Rule] = [
    (
        re.compile(r"\b(" + "|".join(map(re.escape, _EN_NAMED_DAYS)) + r")\b", re.IGNORECASE),
        lambda m, day: (_day(day + timedelta(days=_EN_NAMED_DAYS[m[1].lower()])), "day"),
    ),
    (re.compile(rf"\b{_EN_COUNT} {_EN_UNIT} ago\b", re.IGNORECASE), _en_ago),
    (re.compile(rf"\bin {_EN_COUNT} {_EN_UNIT}(?:'? time)?\b", re.IGNORECASE), _en_in),
    (re.compile(rf"\b(last|this|next) {_EN_WEEKDAY}\b", re.IGNORECASE), _en_which_weekday),
    (re.compile(rf"\b(?<!-){_EN_WEEKDAY}(?!s\b|-)\b", re.IGNORECASE), _en_bare_weekday),
    (re.compile(r"\b(last|this|next) (week|month|year|weekend)\b", re.IGNORECASE), _en_which_unit),
    (_EN_MONTH, _en_month),
]

_ZH_COUNT = r"(\d{1,3}|[一二两三四五六七八九十]{1,3})"
_ZH_UNITS = {"天": "day", "周": "week", "星期": "week", "礼拜": "week", "月": "month", "年": "year"}
_ZH_NAMED_DAYS = {
    "大前天": -3,
    "前天": -2,
    "昨天": -1,
    "昨晚": -1,
    "昨日": -1,
    "今天": 0,
    "今晚": 0,
    "今早": 0,
    "今日": 0,
    "明天": 1,
    "明晚": 1,
    "明早": 1,
    "后天": 2,
    "大后天": 3,
}
_ZH_WHICH = {"上": -1, "这": 0, "本": 0, "下": 1}
_ZH_YEARS = {"前年": -2, "去年": -1, "今年": 0, "明年": 1, "后年": 2}


def _zh_ago(m: re.Match[str], day: date) -> tuple[Period, str]:
    unit = _ZH_UNITS[m[2]]
    sign = -1 if m[3] in ("前", "以前", "之前") else 1
    return _span(day, unit, sign * _zh_number(m[1])), unit


def _zh_which_week(m: re.Match[str], day: date) -> tuple[Period, str]:
    weeks = _ZH_WHICH[m[1]]
    if m[3] == "末":
        return _weekend(day, weeks), "weekend"
    if m[3]:
        return _weekday(day, _WEEKDAYS_ZH.index(m[3].replace("天", "日")), weeks), "day"
    return _week(day + timedelta(weeks=weeks)), "week"


def _zh_bare_weekday(m: re.Match[str], day: date) -> tuple[Period, str] | None:
    return _weekday_named(day, _WEEKDAYS_ZH.index(m[1].replace("天", "日")), m.string)


def _zh_month(m: re.Match[str], day: date) -> tuple[Period, str] | None:
    month = _zh_number(m[3])
    if m[1]:
        year = int(m[1])
    elif m[2]:
        year = day.year + _ZH_YEARS[m[2]]
    elif _YEARLY.search(m.string):
        return None
    else:
        year = _month_named(day, month, _in_past(m.string)).start.year
    if m[4]:
        try:
            return _day(date(year, month, _zh_number(m[4]))), "day"
        except ValueError:  # "二月三十日"
            pass
    return _month(year, month), "month"


# "六月", "去年6月", "2023年5月", "三月八号"; not "六个月" (a duration) nor the "月" of "上个月".
_ZH_MONTH = re.compile(
    r"(?<![\d一二三四五六七八九十两个上下这本每])"
    r"(?:(\d{4})年|(前年|去年|今年|明年|后年))?(十[一二]?|[一二三四五六七八九]|1[0-2]|0?[1-9])月份?"
    r"(?:([一二三]?十[一二三四五六七八九]?|[一二三四五六七八九]|[12]\d|3[01]|0?[1-9])[日号])?"
)

_ZH_RULES: list[_Rule] = [
    (
        re.compile("(" + "|".join(sorted(_ZH_NAMED_DAYS, key=len, reverse=True)) + ")"),
        lambda m, day: (_day(day + timedelta(days=_ZH_NAMED_DAYS[m[1]])), "day"),
    ),
    (
        re.compile(rf"{_ZH_COUNT}个?(天|周|星期|礼拜|月|年)(前|以前|之前|后|以后|之后)"),
        _zh_ago,
    ),
    (
        re.compile(r"([上这本下])(?:个)?(周|星期|礼拜)([一二三四五六日天末]?)"),
        _zh_which_week,
    ),
    (
        # Not "每周五" (a habit) nor the "周" of "两周一次" (a count of weeks).
        re.compile(r"(?<![上这本下每个一二两三四五六七八九十\d])(?:周|星期|礼拜)([一二三四五六日天])"),
        _zh_bare_weekday,
    ),
    (
        re.compile(r"([上这本下])个?月"),
        lambda m, day: (_months_from(day, _ZH_WHICH[m[1]]), "month"),
    ),
    (_ZH_MONTH, _zh_month),
    (
        re.compile("(" + "|".join(_ZH_YEARS) + ")"),
        lambda m, day: (_year(day.year + _ZH_YEARS[m[1]]), "year"),
    ),
]


_PREPOSITION_BEFORE = re.compile(
    r"\b(on|in|for|by|until|till|since|from|at|before|after|during|of|early|late|mid)[\s-]+$", re.IGNORECASE
)
_LEADING_PREPOSITION = re.compile(r"^(on|in) ")


def find_times(text: str, said_at: datetime) -> list[Resolved]:
    """Every relative time phrase of ``text``, resolved against the day it was said; in order,
    never two overlapping."""
    day = said_at.date()
    found: list[Resolved] = []
    taken: list[tuple[int, int]] = []
    for rules, write in ((_EN_RULES, _en_written), (_ZH_RULES, _zh_written)):
        for pattern, meaning in rules:
            for match in pattern.finditer(text):
                start, end = match.span()
                if any(start < b and a < end for a, b in taken):
                    continue
                meant = meaning(match, day)
                if meant is None:
                    continue
                period, unit = meant
                found.append(Resolved(match[0], (start, end), period, write(period, unit)))
                taken.append((start, end))
    return sorted(found, key=lambda r: r.span)


def resolve_times(text: str, said_at: datetime) -> tuple[str, Period | None]:
    """``text`` with its relative time phrases written as the dates they meant when said at
    ``said_at``, and the period they name together (None when there is none)."""
    found = find_times(text, said_at)
    if not found:
        return text, None
    pieces, last = [], 0
    for item in found:
        start, end = item.span
        written = item.written
        # "for next weekend" → "for the weekend of …", not "for on the weekend of …".
        if _PREPOSITION_BEFORE.search(text[:start]):
            written = _LEADING_PREPOSITION.sub("", written)
        if start == 0:
            written = written[:1].upper() + written[1:]
        pieces += [text[last:start], written]
        last = end
    pieces.append(text[last:])
    period = Period(min(r.period.start for r in found), max(r.period.end for r in found))
    return "".join(pieces), period


def period_of(text: str, said_at: datetime) -> Period | None:
    """The period a question or message speaks of ("last week", "去年"), or None."""
    return resolve_times(text, said_at)[1]
