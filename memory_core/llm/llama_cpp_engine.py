"""llama.cpp (llama-cpp-python) engine: the CPU default, GGUF weights, grammar-guided decoding."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
import zipfile
from collections.abc import Collection, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from memory_core.errors import LLMUnavailableError
from memory_core.llm.base import ChatMessage, Completion

log = logging.getLogger("longmem.llm")

# What a warmed beginning is followed by when it is evaluated: a fixed message, no user's text.
_WARM_MESSAGE = "-"
# A kept state that no engine has read or written for this long is removed when an engine
# starts: the beginnings of older prompts, models and llama.cpp versions (~20-80 MB each), which
# no engine will read again, piled up with every upgrade.
STATE_UNUSED_S = 30 * 86400


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


def _read_state(path: Path) -> Any:
    from llama_cpp import LlamaState

    with np.load(path, allow_pickle=False) as saved:
        data = saved["llama_state"]
        return LlamaState(
            saved["input_ids"],
            saved["scores"],
            int(saved["n_tokens"]),
            data.tobytes(),
            data.size,
            int(saved["seed"]),
        )


def _write_state(path: Path, state: Any) -> None:
    """Write ``state`` whole or not at all (another process may write the same file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    part = path.with_name(f"{path.stem}.{os.getpid()}.{threading.get_ident()}.part.npz")
    try:
        np.savez(
            part,
            input_ids=state.input_ids,
            scores=state.scores[:1],
            n_tokens=state.n_tokens,
            llama_state=np.frombuffer(state.llama_state, dtype=np.uint8),
            seed=state.seed,
        )
        os.replace(part, path)
    except OSError:
        part.unlink(missing_ok=True)
        raise


def drop_unused_states(
    state_dir: Path, now: float, keep: Collection[Path] = (), unused_s: float = STATE_UNUSED_S
) -> int:
    """Remove the states kept under ``state_dir`` (and half-written ones) that no engine has
    read or written for ``unused_s`` seconds before ``now``, but those in ``keep`` (what this
    engine is about to read), and the folders this emptied. A state that cannot be removed
    stays: this is housekeeping, never a reason not to start.

    Returns:
        How many files were removed.
    """
    removed, emptied = 0, set()
    for path in state_dir.glob("*/*.npz"):
        if path in keep:
            continue
        try:
            if path.stat().st_mtime < now - unused_s:
                path.unlink()
                removed += 1
                emptied.add(path.parent)
        except OSError as exc:  # gone already (another engine), or a read-only disk
            log.debug("a kept prompt state was not removed (%s)", type(exc).__name__)
    for folder in emptied:
        try:
            folder.rmdir()  # only when empty
        except OSError:
            continue
    return removed


def _digest(messages: Sequence[ChatMessage]) -> str:
    text = json.dumps([m.model_dump() for m in messages], ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=12).hexdigest()


class LlamaCppEngine:
    """One GGUF model in this process. Calls are serialized (llama.cpp contexts are not thread-safe)."""

    def __init__(
        self,
        model_path: Path,
        n_ctx: int = 4096,
        threads: int = 2,
        cache_bytes: int = 1 << 30,
        warm: Sequence[Sequence[ChatMessage]] = (),
        state_dir: Path | None = None,
    ) -> None:
        """Load ``model_path``.

        Args:
            warm: beginnings of prompts that many calls share (a system prompt and its examples;
                never anything a user said). On the first call that starts with one, its state
                is read from ``state_dir`` or evaluated (and kept there), and put in the prompt
                cache.
            state_dir: where those states are kept for the next engine of the same model, so
                that a beginning is evaluated once per machine, not once per process: on 2 cores
                ~40 s for each thousand tokens.

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
        folder = state_dir / self._model_key(model_path, n_ctx) if state_dir else None
        # Beginnings no call has started with yet, by digest, with the path their state is kept at.
        self._unwarmed: dict[str, tuple[list[ChatMessage], Path | None]] = {}
        for beginning in warm:
            key = _digest(beginning)
            self._unwarmed[key] = (list(beginning), folder / f"{key}.npz" if folder else None)
        if state_dir is not None and state_dir.is_dir():
            drop_unused_states(
                state_dir, time.time(), keep={path for _, path in self._unwarmed.values() if path}
            )

    @staticmethod
    def _model_key(model_path: Path, n_ctx: int) -> str:
        """A folder name that changes with the model file, the context size and llama.cpp's version."""
        import llama_cpp

        stat = model_path.stat()
        what = f"{model_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{n_ctx}|{llama_cpp.__version__}"
        return f"{model_path.stem}-{hashlib.blake2b(what.encode(), digest_size=8).hexdigest()}"

    def _read(self, path: Path | None) -> bool:
        """Put the state kept at ``path`` in the prompt cache; False (and the file removed) when
        there is none or it cannot be read or restored. Under the lock."""
        if path is None or not path.exists():
            return False
        try:
            state = _read_state(path)
            self._llm.load_state(state)  # refused here rather than in a later call
        except (OSError, ValueError, KeyError, EOFError, RuntimeError, zipfile.BadZipFile) as exc:
            log.warning("a kept prompt state was unusable (%s); it is evaluated again", type(exc).__name__)
            path.unlink(missing_ok=True)
            # A state refused by llama.cpp leaves the file's tokens as the engine's and its
            # context empty: the next call would match its prompt against tokens never evaluated.
            self._llm.reset()
            return False
        self._cache[state.input_ids[: state.n_tokens].tolist()] = state
        try:
            os.utime(path)  # in use: not removed as unused
        except OSError:  # a cache on a read-only disk: it is read all the same
            pass
        return True

    def _warm(self, beginning: list[ChatMessage], path: Path | None) -> None:
        """Evaluate ``beginning`` followed by a fixed message (so the cache holds its state, and
        no user's text goes to ``path``), and keep the state at ``path``. Under the lock."""
        self._llm.create_chat_completion(
            messages=[m.model_dump() for m in [*beginning, ChatMessage(role="user", content=_WARM_MESSAGE)]],  # type: ignore[misc]
            temperature=0.0,
            max_tokens=1,
        )
        if path is not None:
            try:
                _write_state(path, self._llm.save_state())
            except OSError as exc:  # a cache: the engine works without it
                log.warning("a prompt state was not kept (%s)", type(exc).__name__)

    def _chat(self, messages: Sequence[ChatMessage], max_tokens: int, **kwargs: Any) -> Completion:
        with self._lock:
            if self._unwarmed:
                unwarmed = self._unwarmed.pop(_digest(messages[:-1]), None)
                if unwarmed is not None and not self._read(unwarmed[1]):
                    self._warm(*unwarmed)
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
