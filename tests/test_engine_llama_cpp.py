"""The llama.cpp engine passes the engine contract (real llama-cpp-python, real SmolLM2 GGUF)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
from llama_cpp import Llama

from memory_core.llm.base import ChatMessage, LLMEngine
from memory_core.llm.llama_cpp_engine import LlamaCppEngine, choice_grammar, drop_unused_states
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


def test_kept_states_unused_for_a_month_are_removed_with_their_empty_folders(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every upgrade of the prompts, the model or llama.cpp left its kept states (~20-80 MB
    each) on disk for good. The states the starting engine is about to read stay, however old
    (read once per process, a state of a server up for a month was as old as its start)."""
    now = time.time()
    ages = {
        "old-model/a.npz": 31,
        "old-model/b.12.34.part.npz": 40,
        "current/old-prompt.npz": 31,
        "current/c.npz": 29,
        "current/d.npz": 45,
    }
    for name, days in ages.items():
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"state")
        os.utime(path, (now - days * 86400, now - days * 86400))
    assert drop_unused_states(tmp_path, now, keep={tmp_path / "current/d.npz"}) == 3
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == [
        "current",
        "current/c.npz",
        "current/d.npz",
    ]

    def read_only(self: Path, missing_ok: bool = False) -> None:
        raise OSError(30, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "unlink", read_only)  # a state that cannot go stays; no error
    assert drop_unused_states(tmp_path, now + 60 * 86400) == 0
    assert len(list(tmp_path.rglob("*.npz"))) == 2


def test_warmed_beginnings_are_evaluated_once_per_machine_and_change_no_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The write path's prompts begin with a long system prompt and examples; each engine
    evaluated them again on its first calls (on 2 cores ~40 s per thousand tokens, paid by every
    process that loads the model). Warmed beginnings are kept on disk and read back."""
    beginning = [
        ChatMessage(role="system", content="You answer questions about animals in one short sentence. " * 20),
        ChatMessage(role="user", content="What do owls eat?"),
        ChatMessage(role="assistant", content="Owls eat mice."),
    ]
    asks = [
        [*beginning, ChatMessage(role="user", content=f"What do {animal} eat?")]
        for animal in ("cats", "goats")
    ]
    cold = LlamaCppEngine(smollm2_path(), n_ctx=2048)
    expected = [cold.complete_text(m, max_tokens=12).text for m in asks]
    cold.close()

    evaluated: list[int] = []
    eval_tokens = Llama.eval
    monkeypatch.setattr(
        Llama, "eval", lambda self, tokens: (evaluated.append(len(tokens)), eval_tokens(self, tokens))[1]
    )
    first = LlamaCppEngine(smollm2_path(), n_ctx=2048, warm=[beginning], state_dir=tmp_path)
    assert [first.complete_text(m, max_tokens=12).text for m in asks] == expected
    first.close()
    warmed_once = sum(evaluated)
    [kept] = list(tmp_path.rglob("*.npz"))
    with np.load(kept) as state:  # the beginning and the fixed warm-up message: no one's question
        tokens = state["input_ids"][: int(state["n_tokens"])].tolist()
    text = Llama.detokenize(first._llm, tokens).decode()
    assert "Owls eat mice" in text and "cats" not in text and "goats" not in text

    evaluated.clear()
    days_ago = time.time() - 40 * 86400  # a server up for 40 days: this engine reads it all the same
    os.utime(kept, (days_ago, days_ago))
    older_model = tmp_path / "an-older-model" / "0123.npz"  # read by no engine since
    older_model.parent.mkdir()
    older_model.write_bytes(b"state")
    os.utime(older_model, (days_ago - 21 * 86400, days_ago - 21 * 86400))
    second = LlamaCppEngine(smollm2_path(), n_ctx=2048, warm=[beginning], state_dir=tmp_path)
    assert not older_model.parent.exists()
    assert [second.complete_text(m, max_tokens=12).text for m in asks] == expected
    read_back = sum(evaluated)  # each call evaluated its own question (and its answer) only
    assert read_back < warmed_once - len(tokens) + 30, (read_back, warmed_once, len(tokens))
    assert kept.stat().st_mtime > days_ago + 86400  # read: in use, not removed as unused
    second.close()

    # Read whole but refused by llama.cpp: the engine had taken the file's tokens for its own,
    # evaluated the warm-up on an empty context, and kept that broken state for every process.
    with np.load(kept) as state:
        fields = {name: state[name] for name in state.files}
    np.savez(kept, **{**fields, "llama_state": fields["llama_state"][:4096]})
    for _ in range(2):  # the refused file, then the one evaluated again in its place
        refused = LlamaCppEngine(smollm2_path(), n_ctx=2048, warm=[beginning], state_dir=tmp_path)
        assert [refused.complete_text(m, max_tokens=12).text for m in asks] == expected
        refused.close()
    assert kept.stat().st_size > fields["llama_state"].size

    kept.write_bytes(kept.read_bytes()[:1000])  # damaged: evaluated again and kept whole
    evaluated.clear()
    third = LlamaCppEngine(smollm2_path(), n_ctx=2048, warm=[beginning], state_dir=tmp_path)
    assert [third.complete_text(m, max_tokens=12).text for m in asks] == expected
    assert sum(evaluated) == warmed_once and kept.stat().st_size > 1000
    third.close()
    other = LlamaCppEngine(smollm2_path(), n_ctx=1024, warm=[beginning], state_dir=tmp_path)
    other.complete_text(asks[0], max_tokens=4)
    other.close()
    assert len(list(tmp_path.rglob("*.npz"))) == 2  # another context size: another folder
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")
    unkept = LlamaCppEngine(smollm2_path(), n_ctx=2048, warm=[beginning], state_dir=blocked)
    assert (
        unkept.complete_text(asks[1], max_tokens=12).text == expected[1]
    )  # nowhere to keep it: answers still
    unkept.close()
