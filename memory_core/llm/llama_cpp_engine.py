"""llama.cpp (llama-cpp-python) engine: the CPU default, GGUF weights, grammar-guided decoding."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memory_core.errors import LLMUnavailableError
from memory_core.llm.base import ChatMessage, Completion


def choice_grammar(choices: Sequence[str]) -> str:
    """A GBNF grammar whose only sentences are ``choices``."""
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def prefix_cache(capacity_bytes: int) -> Any:
    """llama-cpp-python's RAM cache of evaluated prompt states, without the logits copies.

    Every state it saves holds a copy of the logits buffer (n_batch x vocabulary floats: 311 MB
    for Qwen's 151,936 tokens) that its size limit does not count, so a "1 GiB" cache grew past
    16 GiB in a LoCoMo ingest. A restored state is always decoded again before sampling
    (``load_state`` sets ``_requires_eval``), so those logits are never read: one row is kept,
    which ``load_state`` broadcasts, and the limit holds for what is stored.
    """
    from llama_cpp import LlamaRAMCache

    class PrefixCache(LlamaRAMCache):  # type: ignore[misc]
        def __setitem__(self, key: Sequence[int], value: Any) -> None:
            value.scores = value.scores[:1].copy()
            super().__setitem__(key, value)

        @property
        def stored_bytes(self) -> int:
            """Bytes held by the cached states, logits and token ids included."""
            return sum(
                s.llama_state_size + s.scores.nbytes + s.input_ids.nbytes for s in self.cache_state.values()
            )

    return PrefixCache(capacity_bytes=capacity_bytes)


class LlamaCppEngine:
    """One GGUF model in this process. Calls are serialized (llama.cpp contexts are not thread-safe)."""

    def __init__(
        self, model_path: Path, n_ctx: int = 4096, threads: int = 2, cache_bytes: int = 1 << 30
    ) -> None:
        """Load ``model_path``.

        Raises:
            LLMUnavailableError: llama-cpp-python is missing or the model cannot be loaded.
        """
        try:
            from llama_cpp import Llama, LlamaGrammar
        except ImportError as exc:
            raise LLMUnavailableError("llama-cpp-python is not installed (extra 'llm')") from exc
        try:
            self._llm = Llama(
                model_path=str(model_path), n_ctx=n_ctx, n_threads=threads, seed=0, verbose=False
            )
        except (ValueError, OSError) as exc:
            raise LLMUnavailableError(f"cannot load {model_path}: {exc}") from exc
        # Prompts of the write path share long few-shot prefixes but alternate (judge, extract,
        # resolve); a RAM cache of evaluated states lets each reuse its own prefix.
        self._cache = prefix_cache(cache_bytes)
        self._llm.set_cache(self._cache)
        self._grammar = LlamaGrammar
        self._grammars: dict[str, Any] = {}
        self._lock = threading.Lock()
        self.name = f"llama.cpp:{model_path.name}"

    def _chat(self, messages: Sequence[ChatMessage], max_tokens: int, **kwargs: Any) -> Completion:
        with self._lock:
            out: Any = self._llm.create_chat_completion(
                messages=[m.model_dump() for m in messages],  # type: ignore[misc]
                temperature=0.0,
                max_tokens=max_tokens,
                **kwargs,
            )
        usage = out.get("usage") or {}
        return Completion(
            text=out["choices"][0]["message"]["content"] or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
        )

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        """Generate JSON under ``schema`` (converted to a grammar once per schema)."""
        # Property order is kept: the model writes fields in schema order, and text-first reads best.
        key = json.dumps(schema)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self._grammar.from_json_schema(key, verbose=False)
            self._grammars[key] = grammar
        return self._chat(messages, max_tokens, grammar=grammar)

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        """Generate exactly one of ``choices``."""
        key = choice_grammar(choices)
        grammar = self._grammars.get(key)
        if grammar is None:
            grammar = self._grammars[key] = self._grammar.from_string(key, verbose=False)
        longest = max(len(c) for c in choices)
        return self._chat(messages, max_tokens=longest + 4, grammar=grammar)

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        """Generate a free-text reply."""
        return self._chat(messages, max_tokens)

    @property
    def cached_bytes(self) -> int:
        """Bytes held by the cache of evaluated prompt states (at most ``cache_bytes``)."""
        with self._lock:
            return int(self._cache.stored_bytes)

    def close(self) -> None:
        """Free the model."""
        with self._lock:
            self._llm.close()
