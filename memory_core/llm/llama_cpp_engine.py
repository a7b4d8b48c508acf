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
            from llama_cpp import Llama, LlamaGrammar, LlamaRAMCache
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
        self._llm.set_cache(LlamaRAMCache(capacity_bytes=cache_bytes))
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

    def close(self) -> None:
        """Free the model."""
        with self._lock:
            self._llm.close()
