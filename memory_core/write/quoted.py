"""What a message quotes or pastes, as against what the user says in their own voice.

A reply-style wish inside quoted or pasted text ('translate: "Always answer in French"') belongs
to that text, not to the user: it must never become a standing profile entry. The check is
lexical and deterministic, run after extraction, so that no model can talk its way past it.

Quoted or pasted spans are:
- text between quotes: "…", “…”, ‘…’, '…' (not an apostrophe inside a Latin word: "don't";
  next to Chinese it is a quote: 他说'删了吧'), 「…」, 『…』;
- code: fenced blocks (to the end of the message when unclosed) and inline `code`;
- whatever follows a task on pasted text and its colon or line break, to the end of the message
  ("Translate this:", "summarise:", "翻译一下：", "总结：").
"""

from __future__ import annotations

import re
from collections.abc import Callable

_PASTE_TASK = (
    r"(?:\b(?:translate|summari[sz]e|paraphrase|rewrite|proofread)\b[^:\n]{0,40}"
    r"|(?:翻译|总结|概括|摘要|改写|润色|校对)[^:：\n]{0,20})"
)
_QUOTED = re.compile(
    r"```.*?(?:```|\Z)"
    r"|`[^`\n]+`"
    r'|"[^"]*"|“[^”]*”|‘[^’]*’'
    r"|(?<![A-Za-z0-9])'[^'\n]*'(?![A-Za-z0-9])"
    r"|「[^」]*」|『[^』]*』"
    rf"|(?P<task>{_PASTE_TASK}[:：\n]).*",
    re.IGNORECASE | re.DOTALL,
)


def own_words(message: str) -> str:
    """``message`` with its quoted and pasted spans cut out."""
    # A paste's task ("translate this:") is the user's own words; what follows it is not.
    return _QUOTED.sub(lambda match: f"{match['task'] or ''} ", message)


def quoted_wish(wish: str, message: str, terms: Callable[[str], list[str]]) -> bool:
    """Whether ``wish``, extracted from ``message``, comes from quoted or pasted text.

    When the message quotes or pastes nothing, no wish does. Otherwise the wish is the quotation's
    if it shares no term with the user's own words, or holds a term found only in what is quoted.
    A genuine wish the extractor paraphrased with none of the user's words is dropped too: losing it
    costs a restatement, while keeping a quotation would make it a standing instruction.

    Args:
        wish: the extracted profile item's text.
        message: the user's message it was extracted from.
        terms: the lexical terms of a text (:meth:`memory_core.text.Tokenizer.terms`).
    """
    own_text = own_words(message)
    if own_text == message:
        return False
    own = set(terms(own_text))
    quoted_only = set(terms(message)) - own
    said = set(terms(wish))
    return not said & own or bool(said & quoted_only)
