"""The llama.cpp engine passes the engine contract (real llama-cpp-python, real SmolLM2 GGUF)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from memory_core.llm.base import LLMEngine
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
