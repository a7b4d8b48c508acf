"""What every LLM engine must do, checked the same way for llama.cpp, vLLM and OpenAI-compatible HTTP.

Tiny models are used here (SmolLM2-135M): the checks are about the engine's guarantees
(schema-valid JSON, exact choices, token counts, Unicode), not about answer quality.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import BaseModel, Field

from memory_core.llm.base import ChatMessage, LLMEngine
from memory_core.llm.structured import StructuredLLM


class Pet(BaseModel):
    name: str = Field(max_length=20)
    kind: Literal["cat", "dog", "fish"]
    indoor: bool


class Pets(BaseModel):
    pets: list[Pet] = Field(max_length=3)


def _ask(text: str) -> list[ChatMessage]:
    return [
        ChatMessage(role="system", content="Answer in JSON."),
        ChatMessage(role="user", content=text),
    ]


def check_json_follows_schema(engine: LLMEngine) -> None:
    completion = engine.complete_json(
        _ask("I have a cat called Momo who stays inside, and a dog called Rex."),
        Pets.model_json_schema(),
        max_tokens=160,
    )
    parsed = Pets.model_validate_json(completion.text)  # raises if the engine broke the schema
    assert len(parsed.pets) <= 3
    assert completion.prompt_tokens > 0 and completion.completion_tokens > 0


def check_choice_is_exact(engine: LLMEngine) -> None:
    for choices in (["yes", "no"], ["alpha", "beta", "gamma"], ["是", "否"]):
        completion = engine.complete_choice(_ask(f"Pick one of {', '.join(choices)}."), choices)
        assert completion.text.strip() in choices, completion.text


def check_unicode_round_trip(engine: LLMEngine) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 10}},
        "required": ["city"],
    }
    completion = engine.complete_json(_ask("我住在长沙。用JSON回答我住在哪个城市。"), schema, max_tokens=40)
    value = json.loads(completion.text)["city"]
    assert isinstance(value, str) and len(value) <= 10


def check_structured_llm_counts_calls(engine: LLMEngine) -> None:
    llm = StructuredLLM(engine)
    llm.ask(_ask("One fish called Bubbles, indoor."), Pets, max_tokens=120)
    llm.choose(_ask("yes or no?"), ["yes", "no"])
    assert llm.stats.calls == 2 and llm.stats.prompt_tokens > 0 and llm.stats.seconds > 0


def check_text_reply(engine: LLMEngine) -> None:
    completion = engine.complete_text(_ask("Say hello to Momo the cat in one short sentence."), max_tokens=24)
    assert completion.text.strip(), completion
    assert 0 < completion.completion_tokens <= 24 and completion.prompt_tokens > 0


ALL_CHECKS = [
    check_text_reply,
    check_json_follows_schema,
    check_choice_is_exact,
    check_unicode_round_trip,
    check_structured_llm_counts_calls,
]
