"""Few-shot prompts of the write path, in English and Chinese.

Examples in the message's language are placed last (see ``_shots``). The user's own text is
passed as JSON-quoted data.
"""

from __future__ import annotations

import json

from memory_core.llm.base import ChatMessage
from memory_core.text import has_cjk

JUDGE_SYSTEM = (
    "You decide whether a user's chat message tells something about the user that a personal "
    "assistant should remember for future conversations: facts about them (job, company, city, family, "
    "pets, health, allergies, hobbies, projects, problems they want solved), facts about the people in "
    "their life, their preferences and dislikes, how they want to be answered, their plans, appointments, "
    "searches and schedule, where they are or how they feel right now (ill, travelling, busy). Answer yes "
    "when the message says any such thing, even inside a greeting or next to a question. Answer no "
    "when it only greets, thanks, compliments, reacts, agrees to a suggestion without "
    "adding anything, asks the other person something, or asks for advice or ideas without saying "
    'anything about themselves ("What should I cook tonight?"); for small talk, jokes, funny videos and '
    "stories about strangers, weather chat, general "
    "knowledge questions, text pasted to translate or summarise, requests to forget something, and task "
    "requests that reveal nothing about the user. Answer only yes or no."
)
JUDGE_SHOTS = [
    ("I'm a physiotherapist and I mostly work with runners.", "yes"),
    ("How many moons does Jupiter have?", "no"),
    ("Please don't put emojis in your answers.", "yes"),
    ("Hey Priya! Long time no see! How are things?", "no"),
    ("Hi Leo! Been busy with the new puppy and a house move. Anything new on your side?", "yes"),
    ("Translate 'see you soon' into Italian.", "no"),
    ("Please forget what I told you about my old flat.", "no"),
    ("Sure, sounds good.", "no"),
    ("Wow, congrats! What will the new role involve?", "no"),
    ("Ha, I play football too, but volleyball is what I love. You?", "yes"),
    ("My dad is a retired firefighter in Cork.", "yes"),
    ("I'm hunting for a used road bike this week.", "yes"),
    ("Brr, so cold out there today!", "no"),
    ("Stuck at the ferry terminal, my boat to Santander leaves in an hour.", "yes"),
    ("Yep, one son, he just turned nine.", "yes"),
    ("Which film should I watch tonight?", "no"),
    ("I'm coeliac, so no bread for me. Is polenta a safe side dish?", "yes"),
    ("Saw a clip of a goat climbing a dam wall, haha, animals are nuts. Who even films that?", "no"),
    ("Laid up with a nasty cold, so I'll keep my messages short today.", "yes"),
    ("我月底要去昆明看一个展。", "yes"),
    ("我接下来该读哪本小说呢？", "no"),
    ("这雨下得没完没了，哈哈。", "no"),
    ("帮我给我儿子的班主任发条消息，说他明天请假。", "yes"),
    ("帮我润色一下这句话：我们将于下周发布新版本。", "no"),
    ("我老公在医院上班，我自己开了家花店。", "yes"),
    ("行吧，到时候再说。", "no"),
    ("我不太能吃辣。", "yes"),
    ("这两天感冒了，嗓子疼，说话费劲。", "yes"),
    ("别老给我发那些励志语录了。", "yes"),
]

EXTRACT_SYSTEM = (
    "You extract memories from one chat message, for a personal assistant's long-term memory of the "
    'user. Output JSON {"facts": [...]}; an empty list when the message holds nothing worth keeping.\n'
    "Rules:\n"
    "- Only what the user states in their own words about themselves or people in their life, and how "
    "they want the assistant to reply. The assistant's previous message is given only to "
    'understand a short reply ("yes, two", "mostly the stock"): what the assistant suggests, offers or '
    "says about itself or others is never the user's; answering a suggestion with ok, sure, maybe or "
    "thanks stores nothing. Text the user pastes, quotes or asks to translate, rewrite or summarise is "
    "not about the user. A request to forget something is not a memory (keep only new facts told with it).\n"
    "- about: empty when the fact is about the user. When it is about another person (family, friend, "
    'colleague, partner, pet, the assistant), put who it is ("cousin Dara", "丈夫") and write the fact '
    "about that person: \"User's cousin Dara runs a surf school\". Never give another person's job, "
    "city, age or plans to the user.\n"
    "- text: one short, plain sentence in the SAME language as the message (English message: 'User ...'; "
    "Chinese message: '用户...'), with plain verbs (lives in, works as, has, likes; 住在, 是, 有, 喜欢). "
    "Keep names, places, numbers and the user's own key words exactly; write a wish as what the user "
    'wants or never wants ("User wants short answers", not "User hates long text").\n'
    "- tag: identity (who they are: job, company, home, family, health, allergies), preference (likes, "
    "dislikes, hobbies, tastes, style), requirement (what they need, look for or want solved), event "
    "(plans, trips, stays, meetings, appointments, where they are now), other.\n"
    "- layer: profile only for how the user wants the assistant to reply or behave (length, tone, "
    "language, format, things never to do or offer): always keep these; fact for everything else, likes "
    "and hobbies included.\n"
    "- temporary: true for whatever stops being true within weeks: being somewhere now, a trip or stay, a "
    "booking, an appointment, a plan, something the user is currently looking for, shopping for or busy "
    "with (this week, these days, 这几天, 最近在找). false for lasting facts: jobs, homes, family, health, "
    "habits, past experiences, opinions.\n"
    '- Greetings, thanks, photo captions, weather talk, jokes, vague remarks ("User has plans") and '
    'questions asking for advice ("What should I wear?") are not memories.'
)


def _fact(
    text: str, tag: str, layer: str = "fact", temporary: bool = False, about: str = ""
) -> dict[str, object]:
    return {"about": about, "text": text, "tag": tag, "layer": layer, "temporary": temporary}


def _extract_example(message: str, facts: list[dict[str, object]], context: str = "") -> tuple[str, str]:
    return _extract_input(message, context), json.dumps({"facts": facts}, ensure_ascii=False)


def _extract_input(message: str, context: str) -> str:
    # No date line: with one, the small default model answered reply-style wishes ("No bullet
    # lists in your answers, please.") with an empty list.
    lines = [f"Language: {'Chinese' if has_cjk(message) else 'English'}"]
    if context:
        lines.append(f"Assistant's previous message: {json.dumps(context, ensure_ascii=False)}")
    lines.append(f"User message: {json.dumps(message, ensure_ascii=False)}")
    return "\n".join(lines)


EXTRACT_SHOTS = [
    _extract_example(
        "Just landed in Valencia for a three-day conference. "
        "I'm a structural engineer from Bilbao, by the way.",
        [
            _fact("User is in Valencia for a three-day conference", "event", temporary=True),
            _fact("User is a structural engineer", "identity"),
            _fact("User is from Bilbao", "identity"),
        ],
    ),
    _extract_example(
        "Explain things in plain words, no jargon, and skip the small talk.",
        [
            _fact("User wants plain words without jargon", "preference", layer="profile"),
            _fact("User does not want small talk in replies", "preference", layer="profile"),
        ],
    ),
    _extract_example("Cheers, that sorted it!", []),
    _extract_example(
        "My cousin Dara runs a surf school in Cornwall. Me, I repair boats for a living.",
        [
            _fact("User's cousin Dara runs a surf school in Cornwall", "identity", about="cousin Dara"),
            _fact("User repairs boats for a living", "identity"),
        ],
    ),
    _extract_example(
        "Sure, maybe.",
        [],
        context="You could try a watercolour class on weekends, it's very relaxing.",
    ),
    _extract_example(
        "Yeah! I've actually been taking Spanish lessons twice a week since March.",
        [_fact("User takes Spanish lessons twice a week", "preference")],
        context="How about learning some Spanish before your trip?",
    ),
    _extract_example(
        "I'm hunting for a used road bike this week, budget around 400 euros.",
        [_fact("User is looking for a used road bike for about 400 euros", "requirement", temporary=True)],
    ),
    _extract_example(
        "We're staying at a guesthouse by the harbour until Sunday.",
        [_fact("User is staying at a guesthouse by the harbour until Sunday", "event", temporary=True)],
    ),
    _extract_example(
        "Oh no, sorry to hear! I work in a pharmacy, so I see that a lot.",
        [_fact("User works in a pharmacy", "identity")],
        context="I sprained my ankle at football and my boss at the garage was furious.",
    ),
    _extract_example(
        "Same here! Sci-fi novels are my thing, I get through one a week.",
        [_fact("User loves sci-fi novels and reads one a week", "preference")],
        context="I adore science fiction books.",
    ),
    _extract_example(
        "Yep, one son, he just turned nine.",
        [_fact("User has a nine-year-old son", "identity")],
        context="Do you have kids?",
    ),
    _extract_example(
        "Forget my old work email, the new one is kim.r@fernhill.io.",
        [_fact("User's work email is kim.r@fernhill.io", "identity")],
    ),
    _extract_example("What should I make for lunch today?", []),
    _extract_example(
        "Summarise this note for me: 'I have been with the firm for ten years and I retire in May.'",
        [],
    ),
    _extract_example(
        "Please stop adding disclaimers to every answer.",
        [_fact("User does not want disclaimers in answers", "preference", layer="profile")],
    ),
    _extract_example(
        "From now on, answer me in bullet points.",
        [_fact("User wants answers in bullet points", "preference", layer="profile")],
    ),
    _extract_example(
        "Shorter replies please, two or three lines is plenty for me.",
        [_fact("User wants short replies of two or three lines", "preference", layer="profile")],
    ),
    _extract_example(
        "And don't ever recommend diet pills to me.",
        [_fact("User never wants diet pills recommended", "preference", layer="profile")],
    ),
    # After the assistant's "okay" the small model took a wish for a reply to a suggestion and
    # kept nothing.
    _extract_example(
        "Oh, and don't you dare pitch me a loyalty card, not ever.",
        [_fact("User never wants to be offered loyalty cards", "preference", layer="profile")],
        context="Okay, I'll remember that.",
    ),
    _extract_example(
        "Talk to me like a friend would, not like a textbook.",
        [_fact("User wants a casual, friendly tone", "preference", layer="profile")],
    ),
    _extract_example(
        "月底我要去昆明看一个展，对了，我对芒果过敏。",
        [
            _fact("用户月底要去昆明看展", "event", temporary=True),
            _fact("用户对芒果过敏", "identity"),
        ],
    ),
    _extract_example(
        "我老公在银行上班，我自己是中学语文老师。",
        [
            _fact("用户的丈夫在银行上班", "identity", about="丈夫"),
            _fact("用户是中学语文老师", "identity"),
        ],
    ),
    _extract_example("行吧，再说。", [], context="要不要周末去爬爬山？"),
    _extract_example("我这周末去哪儿玩比较好？", []),
    _extract_example(
        "回答别太啰嗦，直接说重点。", [_fact("用户希望回答简洁、直奔重点", "preference", layer="profile")]
    ),
    _extract_example(
        "这几天在找短租的房子，最好离地铁近一点。",
        [_fact("用户这几天在找离地铁近的短租房", "requirement", temporary=True)],
    ),
    _extract_example(
        "以前那个车牌你删了吧，换车了，新车牌是浙B 7F2K9。",
        [_fact("用户的车牌号是浙B 7F2K9", "identity")],
    ),
    _extract_example(
        "主要是库存，货老是压在仓库里",
        [_fact("用户最头疼的是库存积压", "requirement")],
        context="您现在最头疼的是哪一块？",
    ),
    _extract_example(
        "我在苏州待了八年，今年春天搬去厦门了。以后回复简短一点。",
        [
            _fact("用户今年春天从苏州搬到了厦门，住在厦门", "identity"),
            _fact("用户希望回复简短", "preference", layer="profile"),
        ],
    ),
]

RESOLVE_SYSTEM = (
    "Two memories about the same user: A was stored earlier, B is new. Answer same if B says the same "
    "thing as A and adds nothing; update if B replaces A so that A is no longer true (moved home, "
    "changed job, new plan instead of the old one); different if both can be true, if they are about "
    "different people, or if B adds a detail A does not have. Answer only same, update or different."
)
RESOLVE_SHOTS = [
    (("User lives in Bilbao", "User moved to Valencia"), "update"),
    (("User is a physiotherapist", "User works as a physiotherapist"), "same"),
    (("User has a parrot called Kiwi", "User has a hamster called Bean"), "different"),
    (("User works at a law firm", "User wants to learn to sail"), "different"),
    (("User has a favourite board game", "User loves playing chess most of all"), "different"),
    (("User's sister is a vet in Galway", "User is a vet in Galway"), "different"),
    (("User works as a dental hygienist", "User's new email is jo.parks@mailbox.org"), "different"),
    (("User works as a dental hygienist", "User left dentistry and now runs a bakery"), "update"),
    (("User's email is jo.p@netmail.com", "User's new email is jo.parks@mailbox.org"), "update"),
    (("用户月底要去昆明看展", "用户看展改去大理了"), "update"),
    (("用户对芒果过敏", "用户芒果过敏"), "same"),
    (("用户在宁波做会计", "用户住在宁波鄞州区"), "different"),
    (("用户在宁波做会计", "用户新的微信号是 nb_kuaiji"), "different"),
    (("用户在宁波做会计", "用户不做会计了，现在开网约车"), "update"),
    (("用户在苏州开了一家面馆", "用户想多接一些团餐订单"), "different"),
    (("用户喜欢户外运动", "用户每周六早上骑车"), "different"),
    (("用户在苏州开了一家面馆", "用户把面馆搬到了无锡"), "update"),
]

FORGET_INTENT_SYSTEM = (
    "Decide whether the user asks the assistant to erase something it remembers about them (forget it, "
    "delete it, stop keeping it). Answer no when 'forget' is about the user's own memory or things "
    '("I forgot my keys", "I forgot to tell you", "忘了说"), when the user asks the assistant to '
    'remember ("don\'t forget", "别忘了"), for negations ("never forget this"), quoted or reported '
    'speech, titles, text given to translate, rewrite or summarise, and "forget it" that only drops the '
    "current topic. Answer only yes or no."
)
FORGET_INTENT_SHOTS = [
    ("I forgot my lunchbox at the office again.", "no"),
    ("Forget my old gym membership.", "yes"),
    ("Don't forget that I can't eat gluten when you plan the menu.", "no"),
    ("Please delete everything you know about my ex.", "yes"),
    ("Translate into French: 'forget the past and move on'.", "no"),
    ("Stop remembering where I used to work. My new office is in the Dock building, by the way.", "yes"),
    ("Forget it, the printer works now.", "no"),
    ("Can you forget my brother's address?", "yes"),
    ("I'll never forget our first hike up that volcano.", "no"),
    ("Please forget that I'm training for a marathon.", "yes"),
    ("忘了告诉你，我下个月要换工作了。", "no"),
    ("把我之前说的健身计划忘了吧。", "yes"),
    ("哎呀算了，忘了这茬吧，咱们聊点别的。", "no"),
    ("不用再记我的车牌号了。", "yes"),
    ("别忘了我不吃香菜。", "no"),
    ("我老板说：“这件事你就别记着了。”", "no"),
    ("我又把充电器忘在公司了，真烦。", "no"),
    ("帮我把我前公司的信息删掉。", "yes"),
    ("忘掉我跟你说过的体检结果。", "yes"),
]

FORGET_TARGET_SYSTEM = (
    "The user asks the assistant to forget something it remembers about them. Write what should be "
    'forgotten as a short search phrase in the user\'s language. Output JSON {"target": "..."}.'
)
FORGET_TARGET_SHOTS = [
    ("Forget my old gym membership.", "old gym membership"),
    ("Please delete everything you know about my ex.", "ex-partner"),
    ("把我之前说的健身计划忘了吧。", "健身计划"),
    ("别再记着我前公司的事了", "前公司"),
]

FORGET_MATCH_SYSTEM = (
    "The user asked the assistant to forget one thing. Decide whether a stored memory is about exactly "
    "that thing (the thing itself or a detail of it). A memory that only shares a topic, a person or a "
    "time with it is not: answer no. Answer only yes or no."
)
FORGET_MATCH_SHOTS = [
    (("old gym membership", "User has a membership at Flex Gym on Carver Street"), "yes"),
    (("old gym membership", "User's work email is kim.r@fernhill.io"), "no"),
    (("ex-partner", "User's ex-husband Tom lives in Perth"), "yes"),
    (("ex-partner", "User has two daughters"), "no"),
    (("trip to Kunming", "User is staying near Green Lake during the Kunming trip"), "yes"),
    (("trip to Kunming", "User lives in Suzhou"), "no"),
    (("健身计划", "用户计划每周去健身房三次"), "yes"),
    (("健身计划", "用户在健身房附近上班"), "no"),
    (("前公司", "用户之前在一家物流公司做财务"), "yes"),
    (("前公司", "用户对芒果过敏"), "no"),
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


def extract_messages(message: str, context: str) -> list[ChatMessage]:
    """Prompt extracting facts from ``message`` said at ``at``."""
    return _shots(EXTRACT_SYSTEM, EXTRACT_SHOTS, _extract_input(message, context))


def resolve_messages(old: str, new: str) -> list[ChatMessage]:
    """Prompt classifying how a new memory relates to a stored one."""
    shots = [(f"A: {_quote(a)}\nB: {_quote(b)}", answer) for (a, b), answer in RESOLVE_SHOTS]
    return _shots(RESOLVE_SYSTEM, shots, f"A: {_quote(old)}\nB: {_quote(new)}")


def forget_intent_messages(message: str) -> list[ChatMessage]:
    """Prompt asking whether ``message`` asks to erase something remembered."""
    return _shots(FORGET_INTENT_SYSTEM, FORGET_INTENT_SHOTS, message)


def forget_target_messages(utterance: str) -> list[ChatMessage]:
    """Prompt turning a forget request into a search phrase."""
    shots = [(u, json.dumps({"target": t}, ensure_ascii=False)) for u, t in FORGET_TARGET_SHOTS]
    return _shots(FORGET_TARGET_SYSTEM, shots, utterance)


def forget_match_messages(target: str, memory: str) -> list[ChatMessage]:
    """Prompt asking whether one stored memory falls under a forget request."""
    shots = [(f"Forget: {_quote(t)}\nMemory: {_quote(m)}", answer) for (t, m), answer in FORGET_MATCH_SHOTS]
    return _shots(FORGET_MATCH_SYSTEM, shots, f"Forget: {_quote(target)}\nMemory: {_quote(memory)}")


def fixed_beginnings() -> list[list[ChatMessage]]:
    """Every write-path prompt up to the message it is about (system prompt and examples, in
    either language's order): the same for every call of its kind, so an engine can evaluate
    them once (see ``LlamaCppEngine``'s ``warm``)."""
    prompts = [
        maker(final)
        for final in ("-", "中")
        for maker in (
            judge_messages,
            lambda m: extract_messages(m, ""),
            lambda m: resolve_messages(m, m),
            forget_intent_messages,
            forget_target_messages,
            lambda m: forget_match_messages(m, m),
        )
    ]
    return [messages[:-1] for messages in prompts]
