"""The llama.cpp engine passes the engine contract (real llama-cpp-python, real SmolLM2 GGUF)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from memory_core.llm.base import ChatMessage, LLMEngine
from memory_core.llm.llama_cpp_engine import LlamaCppEngine, choice_grammar
from memory_core.llm.packaged import smollm2_path
from tests.engine_contract import ALL_CHECKS


@pytest.fixture(scope="module")
def engine() -> Iterator[LlamaCppEngine]:
    eng = LlamaCppEngine(smollm2_path(), n_ctx=2048)
    yield eng
    eng.close()


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract(engine: LLMEngine, check: Callable[[LLMEngine], None]) -> None:
    check(engine)


def test_choice_grammar_escapes_quotes() -> None:
    assert choice_grammar(['say "hi"', "no"]) == 'root ::= "say \\"hi\\"" | "no"'


def test_prompt_state_cache_stays_within_its_limit_and_restores_exactly() -> None:
    # Each saved state used to carry an uncounted logits copy (n_batch x vocabulary floats,
    # 100 MB for SmolLM2): a 1 GiB cache grew past 16 GiB in a LoCoMo ingest.
    limit = 40 << 20
    eng = LlamaCppEngine(smollm2_path(), n_ctx=2048, cache_bytes=limit)
    try:
        prefix = "You answer questions about animals in one short sentence. " * 20
        asks = [
            [ChatMessage(role="user", content=f"{prefix} Question {n}: what do cats eat?")] for n in range(4)
        ]
        first = [eng.complete_text(m, max_tokens=12).text for m in asks]
        assert 0 < eng.cached_bytes <= limit
        # Answers after restoring a cached prefix state are the answers of a cold evaluation.
        assert [eng.complete_text(m, max_tokens=12).text for m in asks] == first
        assert eng.cached_bytes <= limit
    finally:
        eng.close()
