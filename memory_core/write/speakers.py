"""Whose words an extracted fact is: the user's own, or the other party's.

The default small model writes down what the other party said of themselves as the user's
(their "I lost my job" becomes "User lost their job") and takes a name the user greets for the
user's own ("Hey Sofia!" gives "User is Sofia"). These checks catch both after extraction,
with the embedder and a few patterns, without another LLM call.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import numpy as np

from memory_core.models import Role, Turn
from memory_core.text import has_cjk
from memory_core.write.prefilter import sentences

# A name right after a greeting, thanks or interjection ("Hey Sofia!", "Thanks, Ingrid!",
# "Wow Dmitri,") calls the listener. A capitalised word alone ("Bob." answering "your name?") does not.
_NAME_CALL = re.compile(r"\b([A-Z][a-z]+)(?=\s*[!,.?])")
_BEFORE_CALL = re.compile(
    r"\b(?:hey|hi|hello|thanks|thank you|bye|wow|woah|whoa|oh|aw+|cool|nice|great|yeah|sorry|congrats"
    r"|congratulations|woo+hoo+|yay|awesome|amazing|welcome|good luck)"
    r"\s*,?\s*$",
    re.IGNORECASE,
)
_CALLED = re.compile(r"^User(?:'s name)? is (?:called |named )?(\w+)")
# Said in the reply's first sentence, these make the other party's words the user's too.
_AGREES = re.compile(
    r"\b(?:me,? too|same here|same|so do I|me neither|likewise|too|as well)\b|我也|同感|一样", re.IGNORECASE
)


_RELATION = re.compile(
    r"^User's ((?:(?:ex|step|older|younger|best|late)[- ]?)?"
    r"(?:wife|husband|partner|boyfriend|girlfriend|fianc[eé]e?|son|daughter|child|kids?|mother|mom|mum|father|dad|parents?|sister|brother|siblings?|cousin|aunt"
    r"|uncle|niece|nephew|grand(?:mother|father|ma|pa|son|daughter|parents?)|in-laws?|friend|colleague"
    r"|coworker|co-worker|boss|manager|neighbou?r|roommate|flatmate|dog|cat|pet)(?: [A-Z][\w-]+)?)\b"
    # 的 may be left out before a person ("用户老婆的生日"), not before a pet: "用户猫毛过敏" is the user's.
    r"|^用户(?:的?(丈夫|妻子|老公|老婆|爱人|对象|男朋友|女朋友|未婚[夫妻]|儿子|女儿|孩子|父亲|母亲|爸爸|妈妈|父母|哥哥"
    r"|姐姐|弟弟|妹妹|表[哥姐弟妹]|堂[哥姐弟妹]|爷爷|奶奶|外公|外婆|姥姥|姥爷|公公|婆婆|岳父|岳母|叔叔|阿姨|舅舅|姑姑"
    r"|朋友|闺蜜|同事|老板|领导|上司|邻居|室友|同学)|的(狗|猫|宠物))"
)


def other_person(text: str, about: str) -> str:
    """Who a fact is about when it is someone else, or "" for the user.

    The extractor's ``about`` is trusted only when the fact is written about that person: it opens
    with "User's"/"用户的" or names them right after "用户" ("用户丈夫..."). The small model also
    put places and things there ("用户在长沙工作" about "长沙"), which would hide the user's own
    fact from questions about them.
    """
    about = about.strip()
    if not about or not _mentions(text, about):
        # The model also leaves it empty for "User's sister Ana lives in Denver", and put the
        # listener's name there for the user's own things ("User's pottery studio …" about the
        # friend the message was written to), which then lost every question about the user.
        match = _RELATION.match(text)
        return next((group for group in match.groups() if group), "") if match else ""
    if text.startswith(("User's ", "用户的")) or (text.startswith("用户") and text[2:].startswith(about)):
        return about
    return ""


def _mentions(text: str, about: str) -> bool:
    """Whether ``text`` names ``about`` or a word of it ("cousin Dara" in "User's cousin runs …")."""
    if has_cjk(about):
        return about in text
    words = set(re.findall(r"\w+", text.lower()))
    return any(word in words for word in re.findall(r"\w+", about.lower()))


def only_names_someone(text: str, about: str) -> bool:
    """Whether a fact names someone in the user's life and says nothing about them ("User's
    friend Tomas"; "用户的朋友小梅" about "朋友小梅"): a greeting made the small model write these,
    even with the speaker's own name, and they crowded real memories out of recall. In Chinese
    the rest must be the name ``about`` ends with: "用户的儿子读研" says something."""
    text = text.strip()
    match = _RELATION.match(text)
    if match is None:
        return False
    rest = text[match.end() :].strip(" .。!！")
    if match.group(1):
        return not rest
    return not rest or about.strip().endswith(rest)


def statements(context: str) -> list[str]:
    """The sentences of ``context`` that state something (questions only frame the reply): in
    "The Harbour Hawks! Can't wait." the team is the other party's news, first person or not."""
    return [s for s in sentences(context) if not s.endswith(("?", "？"))]


def agrees(message: str) -> bool:
    """Whether ``message`` opens by saying the other party's words hold for the user too ("Me too!")."""
    first = sentences(message)
    return bool(first) and _AGREES.search(first[0]) is not None


def addressed_names(message: str) -> set[str]:
    """Names ``message`` calls its listener by, right after a greeting or interjection."""
    return {m.group(1) for m in _NAME_CALL.finditer(message) if _BEFORE_CALL.search(message[: m.start()])}


def own_name_as_user(text: str, about: str, own_names: set[str]) -> tuple[str, str]:
    """``text`` and ``about`` with the user put back where the fact made them someone else.

    ``own_names`` are the names the other party called the user by ("Yay, Tomas! Go for it."): the
    small model read them as a third person and wrote the user's own news as "User's friend
    Tomas wants to run for mayor"; that is "User wants to run for mayor".
    """
    match = _RELATION.match(text)
    if match is None or not match.group(1) or match.group(1).rsplit(" ", 1)[-1] not in own_names:
        return text, about
    return "User" + text[match.end() :], ""


def names_listener_as_user(fact: str, addressed: set[str]) -> bool:
    """Whether ``fact`` makes the user someone the message called ("User is Sofia", and also
    "User is Sofia's friend": the greeting is no news about the user)."""
    called = _CALLED.match(fact.strip())
    return called is not None and called.group(1) in addressed


# Manners of the moment, whoever they are for ("User thanks Ines for the tips", "User
# congratulates her brother", "用户向大家问好"): the small model wrote them down although the
# prompt says thanks and greetings are no memories, and over a long chat they crowded recall.
_COURTESY = re.compile(
    r"^User (?:also |again |warmly |just )?(?:thanks|thanked|is thankful to|congratulates|congratulated"
    r"|greets|greeted|says (?:hi|hello|hey|goodbye|bye|thanks|thank you)|apologi[sz]es to"
    r"|wishes \w+ (?:luck|well|the best))\b"
    r"|^User (?:is grateful|is thankful|appreciates|values) (?:for |to )?(?:the |all the |their |your )?"
    r"(?:help|support|kind words|encouragement|advice|ideas|tips|feedback|kindness)\b"
    r"|^用户(?:也|很|非常)?(?:感谢|谢谢|祝贺|恭喜|问候|问好)"
    r"|^用户(?:向|跟|和|对).{1,12}?(?:问好|打招呼|道谢|致谢|表示感谢|表示祝贺|说谢谢)"
)
# A photo shown in the chat ("User shares a photo of a kite on a beach", "用户分享了一张照片"):
# the act of showing is no memory, and chat apps write captions of every picture into the text.
_CAPTION = re.compile(
    r"^User (?:also |just )?(?:shares|shared|is sharing|sends|sent|posts|posted|shows|showed|is showing) "
    r"(?:a |an |the |some |two |three |several |their |his |her )?(?:\w+ )?"
    r"(?:photo|picture|pic|image|snapshot|selfie|photograph)(?:s|y)?\b"
    r"|^用户(?:也|还)?(?:分享|发送|发|晒|展示)了?.{0,16}?(?:照片|图片|相片|自拍)"
)
# What the user does or feels towards the one they talk to ("User is talking to Ines", "User
# encourages Ines to keep going", "User is inspired by Ines's courage", "User is looking forward to
# chatting with Ines"): no news about the user. Towards someone else it may be ("User supports
# their sister's bakery"). A long chat between two people left 10 such lines among its 225
# memories, and questions naming both people ranked them first.
_TOWARDS = re.compile(
    r"^User (?:is |was )?(?:talking|chatting|speaking) (?:to|with) (?P<to>the assistant|you|[A-Z]\w*)"
    r"|^User (?:encourages|encouraged|supports|compliments|praises|cheers|cheers on|is grateful to"
    r"|is grateful for|is happy for|is glad for|is proud of|appreciates|has faith in|believes in"
    r"|is here for|is there for) (?P<at>you|[A-Z]\w*)"
    r"|^User (?:is |was |feels |felt )?(?:really |very |so |also )?(?:impressed|inspired|excited|happy|glad"
    r"|proud|amazed|moved|touched|thrilled) (?:by|about|for|of|with) (?P<by>you|[A-Z]\w*)"
    r"|^User (?:is |was )?(?:looking forward to|looks forward to|can't wait to) (?:talking|chatting"
    r"|speaking|catching up|hearing from|seeing)(?: to| with)? (?P<with>you|[A-Z]\w*)"
    r"|^User and (?P<and>[A-Z]\w*) (?:are|were) (?:talking|chatting|speaking|catching up)\b"
    r"|^用户(?:正)?在?(?:和|跟|与)(?:你|助手)(?:聊天|说话|交谈)"
    r"|^用户(?:鼓励|支持|称赞|夸奖|夸)(?:你|助手)"
)


def is_courtesy(fact: str, addressed: set[str]) -> bool:
    """Whether ``fact`` only records a courtesy: thanks, congratulations, greetings or a photo
    shown, for anyone, or talk, encouragement, praise or feelings for the listener (``addressed``:
    the names the user calls them by)."""
    fact = fact.strip()
    if _COURTESY.match(fact) or _CAPTION.match(fact):
        return True
    towards = _TOWARDS.match(fact)
    if towards is None:
        return False
    to = next((name for name in towards.groups() if name), None)
    return to is None or to in addressed or to in ("you", "the assistant")


def listener_names(turns: Iterable[Turn]) -> set[str]:
    """The names the user called the other party by in ``turns`` (a session's), after a greeting
    or interjection: whom "User is inspired by Ines's courage" is said to, later in the session."""
    return {name for turn in turns if turn.role is Role.USER for name in addressed_names(turn.content)}


# A fact holding a word only the other party said ("chemist" from their "The lab let me go, I was
# a chemist there") is theirs unless it sits clearly nearer the user's own words: in a benchmark
# conversation one such fact scored 0.010 nearer the user's own line than the other party's.
BORROWED_SLACK = 0.03


def echoed(
    facts: np.ndarray, said: np.ndarray, heard: np.ndarray, margin: float, borrowed: np.ndarray
) -> np.ndarray:
    """Which facts are an echo of the other party rather than the user's own words.

    Args:
        facts: (n, d) unit vectors of the extracted facts.
        said: (s, d) unit vectors of the user's sentences.
        heard: (h, d) unit vectors of what the other party stated.
        margin: how much nearer to one heard sentence than to every said one a fact must be.
        borrowed: (n,) booleans, True for a fact with a word the other party said and the user
            did not; such a fact is an echo unless it is ``BORROWED_SLACK`` nearer the user's words.

    Returns:
        (n,) booleans, True for an echo.
    """
    if len(facts) == 0 or len(said) == 0 or len(heard) == 0:
        return np.zeros(len(facts), dtype=bool)
    lead = (facts @ heard.T).max(axis=1) - (facts @ said.T).max(axis=1)
    return (lead > margin) | (borrowed & (lead > -BORROWED_SLACK))


def borrowed_words(fact: str, message: str, heard: list[str], terms: Callable[[str], list[str]]) -> bool:
    """Whether ``fact`` holds a word that is in ``heard`` but not in the user's ``message``."""
    own = set(terms(message))
    return any(set(terms(fact)) & (set(terms(h)) - own) for h in heard)
