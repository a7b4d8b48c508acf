"""Whose words a fact is: the patterns of memory_core.write.speakers (the embedder part is
tested through the write path in test_write_path_logic.py)."""

from __future__ import annotations

import numpy as np
import pytest

from memory_core.text import Tokenizer
from memory_core.write.speakers import (
    addressed_names,
    agrees,
    borrowed_words,
    echoed,
    is_courtesy,
    names_listener_as_user,
    other_person,
    own_name_as_user,
    statements,
)


@pytest.mark.parametrize(
    ("fact", "courtesy"),
    [
        ("User thanks Ines for the hiking tips", True),
        ("User thanked their landlord for fixing the boiler", True),
        ("User congratulates Halvard on the new boat", True),
        ("User wishes Ines luck with the exam", True),
        ("User appreciates the help with the spreadsheet", True),
        ("User is grateful for all the kind words", True),
        ("User is talking to Ines about their garden", True),
        ("User encourages Ines to keep training", True),
        ("User is proud of Ines", True),
        ("User is inspired by Ines's patience with the garden", True),
        ("User is really excited about Halvard's progress and the new boat", True),
        ("User is looking forward to chatting with Ines again", True),
        ("User and Halvard are catching up about work", True),
        ("User has faith in Ines", True),
        ("用户感谢对方的建议", True),
        ("用户向邻居们问好", True),
        ("用户在和你聊天", True),
        ("User shares a photo of two goats on a roof", True),
        ("User posted some new pictures of the garden shed", True),
        ("用户分享了一张海边风筝的照片", True),
        ("用户晒了几张新家的图片", True),
        ("User is talking to Marco about selling the van", False),  # Marco is not the listener
        ("User is talking to a lawyer about the lease", False),
        ("User encourages their son to learn chess", False),
        ("User supports their sister's pottery studio", False),
        ("User appreciates quiet mornings", False),
        ("User is grateful for their health", False),
        ("User thinks Ines is very patient", False),
        ("User is inspired by Marco's paintings", False),  # Marco is not the listener
        ("User is excited about Lisbon", False),
        ("User is looking forward to seeing Marco at the wedding", False),
        ("User and Marco are talking about opening a bakery", False),
        ("用户支持本地农场", False),
        ("用户和同事一起去爬山", False),
        ("User takes photos of birds for a local magazine", False),
        ("用户喜欢拍风景照片", False),
    ],
)
def test_courtesies_are_no_memories(fact: str, courtesy: bool) -> None:
    assert is_courtesy(fact, {"Ines", "Halvard"}) is courtesy


@pytest.mark.parametrize(
    ("message", "names"),
    [
        ("Hey Sofia! Good to see you.", {"Sofia"}),
        ("Wow, Lucia! The stitching looks really neat.", {"Lucia"}),
        ("Thanks, Ingrid! Knitting is such a calm hobby.", {"Ingrid"}),
        ("Wow Dmitri, that really helped!", {"Dmitri"}),
        ("Woohoo, Tomas! Which seat are you after?", {"Tomas"}),
        ("Bob.", set()),  # answering "what's your name?"
        ("Hello! Bob, 32, from Munich.", set()),
        ("I went to Berlin, Rome, and Paris!", set()),
        ("Sorry about your shop Pavel, but that plan sounds great!", set()),
    ],
)
def test_names_called_after_a_greeting_are_the_listeners(message: str, names: set[str]) -> None:
    assert addressed_names(message) == names


@pytest.mark.parametrize(
    ("text", "about", "expected"),
    [
        (
            "User's friend Tomas is running for the school board",
            "friend Tomas",
            ("User is running for the school board", ""),
        ),
        ("User's friend Tomas's goal is a marathon", "Tomas", ("User's goal is a marathon", "")),
        ("User's friend Ines is running for the school board", "friend Ines", None),
        ("User is running for the school board", "", None),
        ("用户的朋友小梅在读研", "朋友小梅", None),
    ],
)
def test_the_name_the_user_was_called_by_is_the_user(
    text: str, about: str, expected: tuple[str, str] | None
) -> None:
    assert own_name_as_user(text, about, {"Tomas"}) == (expected or (text, about))


def test_only_the_user_made_into_the_listener_is_dropped() -> None:
    called = {"Halvard"}
    assert names_listener_as_user("User is Halvard", called)
    assert names_listener_as_user(" User's name is Halvard", called)
    assert names_listener_as_user("User is Halvard's friend", called)
    assert not names_listener_as_user("User is a nurse", called)
    assert not names_listener_as_user("User wants to try Halvard's smoked trout", called)
    assert not names_listener_as_user("User is Bob", called)


@pytest.mark.parametrize(
    ("message", "agreeing"),
    [
        ("Yeah, me too! Contemporary dance speaks to me.", True),
        ("I love it too!", True),
        ("Same here! Dance is my go-to for stress relief.", True),
        ("我也是！我每周都去跳舞。", True),
        ("Sorry to hear that! I also lost my job, and me too, I'm looking.", False),
        ("I moved to Lyon last year.", False),
    ],
)
def test_agreeing_is_read_in_the_first_sentence(message: str, agreeing: bool) -> None:
    assert agrees(message) is agreeing


def test_statements_leave_out_questions() -> None:
    context = "I see. Are you still living in Paris? My sister loves it there. You should visit!"
    assert statements(context) == ["I see.", "My sister loves it there.", "You should visit!"]
    assert statements("The Harbour Hawks! Can't wait to play for them.") == [
        "The Harbour Hawks!",
        "Can't wait to play for them.",
    ]
    assert statements("Do you have any pets at home?") == []
    assert statements("好的，我们可以先从线上预约做起。您的店在哪个区？") == [
        "好的，我们可以先从线上预约做起。"
    ]


def test_an_echo_is_nearer_to_what_was_heard_by_more_than_the_margin() -> None:
    said = np.array([[1.0, 0.0, 0.0]], dtype=np.float32)
    heard = np.array([[0.0, 1.0, 0.0]], dtype=np.float32)
    facts = np.array([[0.6, 0.8, 0.0], [0.8, 0.6, 0.0], [0.7, 0.71, 0.0]], dtype=np.float32)
    none = np.zeros(3, dtype=bool)
    assert echoed(facts, said, heard, 0.05, none).tolist() == [True, False, False]
    assert echoed(facts, said, np.zeros((0, 3), dtype=np.float32), 0.05, none).tolist() == [False] * 3
    # A fact with a word only the other party said is theirs unless clearly nearer the user's words.
    assert echoed(facts, said, heard, 0.05, np.ones(3, dtype=bool)).tolist() == [True, False, True]


def test_a_borrowed_word_is_one_the_other_party_said_and_the_user_did_not() -> None:
    terms = Tokenizer().terms
    heard = ["Lost my job as a lighthouse keeper last week."]
    message = "Oh no! I lost my job at the ferry company too."
    assert borrowed_words("User lost their job as a lighthouse keeper", message, heard, terms)
    assert not borrowed_words("User lost their job at the ferry company", message, heard, terms)


@pytest.mark.parametrize(
    ("text", "about", "who"),
    [
        ("User's cousin Mira teaches yoga", "cousin Mira", "cousin Mira"),
        ("User's stepbrother Olu lives in Lagos", "", "stepbrother Olu"),
        ("用户的妈妈在郑州退休了", "", "妈妈"),
        ("用户老公在银行上班", "老公", "老公"),
        ("用户老婆的生日是五月", "", "老婆"),  # a wife's birthday is hers, with or without 的
        ("用户的猫叫年糕", "", "猫"),
        ("用户猫毛过敏", "", ""),  # the user's allergy, not the cat's
        ("用户在长沙工作", "长沙", ""),  # a place is not a person
        ("User works at Harbour Books", "Harbour Books", ""),
        ("User's favourite band is Blur", "", ""),
        ("User's phone number is 0161 555 0100", "", ""),
        # The listener's name put in ``about`` of the user's own things.
        ("User's pottery studio is looking for a bigger room", "Ines", ""),
        ("User's mentor is a retired architect", "Ines", ""),
        ("User's friend Ines opened a bakery", "Ines", "Ines"),
        ("User's cousin runs a surf school", "cousin Dara", "cousin Dara"),
        ("用户的花店在装修", "小林", ""),
    ],
)
def test_a_fact_is_someone_elses_only_when_it_is_written_about_them(text: str, about: str, who: str) -> None:
    assert other_person(text, about) == who
