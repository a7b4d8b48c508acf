"""Few-shot prompts of the write path, in English and Chinese.

Examples in the message's language are placed last (see ``_shots``). The user's own text is
passed as JSON-quoted data.
"""

from __future__ import annotations

import json
from datetime import datetime

from memory_core.llm.base import ChatMessage
from memory_core.text import has_cjk

JUDGE_SYSTEM = (
    "You decide whether a user's chat message tells something about the user that a personal "
    "assistant should remember for future conversations: facts about them (job, company, city, family, "
    "pets, health, allergies, hobbies, projects, problems they want solved), their preferences and "
    "dislikes, how they want to be answered, their plans and schedule. Answer yes when the message says "
    "any such thing, even inside a greeting or next to a question. Answer no when it only greets, thanks, "
    "compliments, reacts or asks the other person something, for small talk, jokes, weather chat, general "
    "knowledge questions, and task requests that reveal nothing about the user. Answer only yes or no."
)
JUDGE_SHOTS = [
    ("I'm a nurse and I work night shifts.", "yes"),
    ("What's the capital of France?", "no"),
    ("Please don't use emojis when you answer me.", "yes"),
    ("Hey Sam! Good to see you! How have you been?", "no"),
    ("Hi Anna! I've been swamped with my twins and my new job. What's new with you?", "yes"),
    ("Translate 'good morning' into Spanish.", "no"),
    ("Stop suggesting paid add-ons to me.", "yes"),
    ("Wow, that's great! What kind of job are you looking for?", "no"),
    ("Nice, Tom! I like all sports, but tennis is my favorite. What about you?", "yes"),
    ("Me too! Hiking is how I relax after work.", "yes"),
    ("Haha, that's a good one. It's so sunny today!", "no"),
    ("Yes, two kids, both in primary school.", "yes"),
    ("I'm at the station right now, my train leaves in ten minutes.", "yes"),
    ("我下周三要去北京开会。", "yes"),
    ("今天天气不错，哈哈。", "no"),
    ("帮我给我女儿的老师写一封请假信，她叫小雨。", "yes"),
    ("帮我把这段话总结一下：人工智能正在改变世界。", "no"),
    ("主要是售后，客户投诉一直处理不过来。", "yes"),
]

EXTRACT_SYSTEM = (
    "You extract memories about the user from one chat message, for a personal assistant's long-term "
    'memory. Output JSON {"facts": [...]}; an empty list when the message holds nothing about the user.\n'
    "Rules:\n"
    "- Only what the user's message says about the user or asks of the assistant. The assistant's "
    'previous message is given only to understand a short reply ("yes", "mostly after-sales"): '
    "what the assistant says about itself or others is never a fact about the user.\n"
    "- Each fact is one short sentence about the user, written in the SAME language as the message "
    "(English message: 'User ...'; Chinese message: '用户...'). Keep names, places and numbers exactly.\n"
    "- tag: identity (who they are: job, company, city, family, health, allergies), preference (likes, "
    "dislikes, hobbies, tastes, style), requirement (what they need or want solved), event (plans, trips, "
    "meetings, appointments, where they are now), other.\n"
    "- layer: profile for how the user wants the assistant to reply or behave (length, tone, language, "
    "things never to do or offer): always keep these; fact for everything else, likes and hobbies "
    "included.\n"
    "- temporary: true only for a current situation or a scheduled event (right now, today, this week, "
    "next Tuesday, a trip). Past experiences, jobs, homes, family, health and opinions are lasting: false."
)


def _fact(text: str, tag: str, layer: str = "fact", temporary: bool = False) -> dict[str, object]:
    return {"text": text, "tag": tag, "layer": layer, "temporary": temporary}


def _extract_example(message: str, facts: list[dict[str, object]], context: str = "") -> tuple[str, str]:
    return _extract_input(message, context, None), json.dumps({"facts": facts}, ensure_ascii=False)


def _extract_input(message: str, context: str, at: datetime | None) -> str:
    lines = []
    if at is not None:
        lines.append(f"Date: {at.date().isoformat()}")
    lines.append(f"Language: {'Chinese' if has_cjk(message) else 'English'}")
    if context:
        lines.append(f"Assistant's previous message: {json.dumps(context, ensure_ascii=False)}")
    lines.append(f"User message: {json.dumps(message, ensure_ascii=False)}")
    return "\n".join(lines)


EXTRACT_SHOTS = [
    _extract_example(
        "I'm at the airport now. By the way, I'm a nurse in Boston.",
        [
            _fact("User is at the airport", "event", temporary=True),
            _fact("User is a nurse in Boston", "identity"),
        ],
    ),
    _extract_example(
        "Keep it short please, and never send me marketing stuff.",
        [
            _fact("User wants short answers", "preference", layer="profile"),
            _fact("User never wants marketing content", "preference", layer="profile"),
        ],
    ),
    _extract_example("Thanks, that helps a lot!", []),
    _extract_example(
        "Hi Anna! Good to see you. I've been swamped with my twins and my new job. What's new with you?",
        [
            _fact("User has twins", "identity"),
            _fact("User has a new job", "identity"),
        ],
    ),
    _extract_example(
        "Sorry to hear that! I'm a teacher, and I bake bread on weekends.",
        [
            _fact("User is a teacher", "identity"),
            _fact("User bakes bread on weekends", "preference"),
        ],
        context="I lost my job at the bank last week, so I'm opening a bakery. What do you do?",
    ),
    _extract_example(
        "Me too! Jazz is my favorite, I play the saxophone in a small band.",
        [
            _fact("User's favorite music is jazz", "preference"),
            _fact("User plays the saxophone in a small band", "identity"),
        ],
        context="I love jazz, especially Miles Davis. What music do you like?",
    ),
    _extract_example(
        "Yes, two cats.",
        [_fact("User has two cats", "identity")],
        context="Do you have any pets at home?",
    ),
    _extract_example(
        "I'm a data scientist and I mostly use Python.",
        [
            _fact("User is a data scientist", "identity"),
            _fact("User mostly uses Python", "identity"),
        ],
    ),
    _extract_example(
        "Don't use emojis with me, I find them annoying.",
        [_fact("User does not want emojis in answers", "preference", layer="profile")],
    ),
    _extract_example(
        "From now on, answer me in bullet points.",
        [_fact("User wants answers in bullet points", "preference", layer="profile")],
    ),
    _extract_example(
        "I can't stand it when you start with a compliment.",
        [_fact("User does not want replies to start with a compliment", "preference", layer="profile")],
    ),
    _extract_example(
        "Stop recommending paid upgrades to me.",
        [_fact("User does not want paid upgrades recommended", "preference", layer="profile")],
    ),
    _extract_example(
        "下周三我要去北京开会，另外我对花生过敏。",
        [
            _fact("用户下周三要去北京开会", "event", temporary=True),
            _fact("用户对花生过敏", "identity"),
        ],
    ),
    _extract_example(
        "主要是售后，之前合作的两家都不行",
        [
            _fact("用户最想解决售后问题", "requirement"),
            _fact("用户之前合作过两家服务商，都不满意", "other"),
        ],
        context="您最希望改进哪方面？",
    ),
    _extract_example(
        "我在杭州住了五年，上个月搬到深圳了。以后回答请用中文。",
        [
            _fact("用户上个月从杭州搬到了深圳", "identity"),
            _fact("用户希望用中文回答", "preference", layer="profile"),
        ],
    ),
]

RESOLVE_SYSTEM = (
    "Two memories about the same user: A was stored earlier, B is new. Answer same if B says the same "
    "thing as A and adds nothing; update if B replaces A so that A is no longer true (moved city, "
    "changed job, new plan instead of the old one); different if both can be true, or if B adds a detail "
    "A does not have. Answer only same, update or different."
)
RESOLVE_SHOTS = [
    (("User lives in Hangzhou", "User moved to Shenzhen"), "update"),
    (("User is a nurse", "User works as a nurse"), "same"),
    (("User has a cat called Momo", "User has a dog called Rex"), "different"),
    (("User works at a bank", "User wants to learn to cook"), "different"),
    (("User has a favorite sport", "User loves tennis most of all"), "different"),
    (("用户下周要去上海出差", "用户下周出差改去北京了"), "update"),
    (("用户对花生过敏", "用户花生过敏"), "same"),
    (("用户在成都开了一家火锅店", "用户想多接一些外卖订单"), "different"),
    (("用户喜欢运动", "用户每周日早上打网球"), "different"),
    (("用户以前换过两个装修队都不满意", "用户想找一个会做短视频的团队"), "different"),
    (("用户在成都开了一家火锅店", "用户把火锅店搬到了重庆"), "update"),
]

FORGET_TARGET_SYSTEM = (
    "The user asks the assistant to forget something it remembers about them. Write what should be "
    'forgotten as a short search phrase in the user\'s language. Output JSON {"target": "..."}.'
)
FORGET_TARGET_SHOTS = [
    ("Forget my home address.", "home address"),
    ("Please forget what I told you about my divorce", "divorce"),
    ("忘掉我上次说的出差安排", "出差安排"),
    ("别再记着我女儿学校的事了", "女儿的学校"),
]

FORGET_MATCH_SYSTEM = (
    "The user asked the assistant to forget something. Decide whether one stored memory belongs to "
    "what the user wants forgotten, including details of the same plan or topic. Answer only yes or no."
)
FORGET_MATCH_SHOTS = [
    (("home address", "User lives at 12 Rose Street, Leeds"), "yes"),
    (("home address", "User is a teacher"), "no"),
    (("出差安排", "用户下周二要去上海出差"), "yes"),
    (("出差安排", "用户出差期间住在静安区"), "yes"),
    (("出差安排", "用户对海鲜过敏"), "no"),
]


def _quote(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def _shots(system: str, shots: list[tuple[str, str]], final: str) -> list[ChatMessage]:
    # Examples in the message's own language go last, nearest to it: with the other language
    # last, the small default model drifted into that language and missed English facts.
    same = has_cjk(final)
    ordered = [s for s in shots if has_cjk(s[0]) != same] + [s for s in shots if has_cjk(s[0]) == same]
    messages = [ChatMessage(role="system", content=system)]
    for question, answer in ordered:
        messages.append(ChatMessage(role="user", content=question))
        messages.append(ChatMessage(role="assistant", content=answer))
    messages.append(ChatMessage(role="user", content=final))
    return messages


def judge_messages(message: str) -> list[ChatMessage]:
    """Prompt asking whether ``message`` is worth remembering."""
    return _shots(JUDGE_SYSTEM, JUDGE_SHOTS, message)


def extract_messages(message: str, context: str, at: datetime) -> list[ChatMessage]:
    """Prompt extracting facts from ``message`` said at ``at``."""
    return _shots(EXTRACT_SYSTEM, EXTRACT_SHOTS, _extract_input(message, context, at))


def resolve_messages(old: str, new: str) -> list[ChatMessage]:
    """Prompt classifying how a new memory relates to a stored one."""
    shots = [(f"A: {_quote(a)}\nB: {_quote(b)}", answer) for (a, b), answer in RESOLVE_SHOTS]
    return _shots(RESOLVE_SYSTEM, shots, f"A: {_quote(old)}\nB: {_quote(new)}")


def forget_target_messages(utterance: str) -> list[ChatMessage]:
    """Prompt turning a forget request into a search phrase."""
    shots = [(u, json.dumps({"target": t}, ensure_ascii=False)) for u, t in FORGET_TARGET_SHOTS]
    return _shots(FORGET_TARGET_SYSTEM, shots, utterance)


def forget_match_messages(target: str, memory: str) -> list[ChatMessage]:
    """Prompt asking whether one stored memory falls under a forget request."""
    shots = [(f"Forget: {_quote(t)}\nMemory: {_quote(m)}", answer) for (t, m), answer in FORGET_MATCH_SHOTS]
    return _shots(FORGET_MATCH_SYSTEM, shots, f"Forget: {_quote(target)}\nMemory: {_quote(memory)}")
