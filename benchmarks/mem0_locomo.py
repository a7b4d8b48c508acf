"""mem0 as a LoCoMo system: its own environment, its FAISS store, our embedder and our LLM."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from benchmarks.mem0_peer import RUNNER, LlamaServer, run_mem0
from memory_core.errors import ConfigError
from memory_core.evaluation.locomo import ConversationRun, LocomoConversation, Retrieved, paired_turns
from memory_core.llm.packaged import ensure_qwen
from memory_core.settings import LLMEngineName, Settings
from memory_core.store.fsutil import write_atomically


class Mem0System:
    """mem0 ingests each turn with ``add(..., infer=True)`` (its own extraction and update LLM
    calls, through llama.cpp's OpenAI-compatible server on the same Qwen GGUF longmem uses, or
    through the same OpenAI-compatible server as longmem when ``llm.engine=openai``)
    and answers with ``search``. A finished conversation is kept under ``work_dir`` by the
    runner's source and the conversation's content, so a rerun does not ingest it again.
    """

    name = "mem0"

    def __init__(self, settings: Settings, work_dir: Path) -> None:
        self._settings = settings
        self._work_dir = work_dir
        self._server: LlamaServer | None = None

    def _llm(self) -> dict[str, str]:
        """The runner's LLM fields: the server longmem is configured with (``llm.engine=openai``,
        e.g. vLLM on a GPU box, loopback only), else the packaged Qwen behind a local server."""
        llm = self._settings.llm
        if llm.engine is LLMEngineName.OPENAI:
            if not llm.base_url:
                raise ConfigError("llm.engine=openai needs llm.base_url (e.g. http://127.0.0.1:8000/v1)")
            key = llm.api_key.get_secret_value() if llm.api_key else "unused"
            return {"llm_url": llm.base_url, "llm_model": self._model_name(), "llm_api_key": key}
        if self._server is None:
            self._server = LlamaServer(ensure_qwen(llm.models_dir))
            self._server.__enter__()
        return {"llm_url": self._server.url, "llm_model": self._server.model}

    def _model_name(self) -> str:
        llm = self._settings.llm
        if llm.engine is LLMEngineName.OPENAI:
            return str(llm.model_path or llm.model.value)
        return ensure_qwen(llm.models_dir).stem

    def result_path(self, conversation: LocomoConversation, k: int) -> Path:
        """Where the finished run of ``conversation`` is kept: by the runner's source and the model."""
        tag = hashlib.blake2b(RUNNER.read_bytes() + self._model_name().encode(), digest_size=6).hexdigest()
        return self._work_dir / f"mem0-{tag}" / f"{conversation.id}-{conversation.fingerprint}-k{k}.json"

    def run(self, conversation: LocomoConversation, k: int) -> ConversationRun:
        """Ingest and search through the runner (or reuse a finished run of the same input)."""
        path = self.result_path(conversation, k)
        questions = [q.question for q in conversation.questions]
        if path.exists():
            out: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        else:
            request = {
                **self._llm(),
                "workdir": str(path.with_suffix("")),
                "k": k,
                "conversation": {
                    "id": conversation.id,
                    "sessions": [
                        {
                            "at": s.at.isoformat(),
                            "turns": [
                                {
                                    "dia_id": t.dia_id,
                                    "speaker": t.speaker,
                                    "user_id": conversation.user_of(t.speaker),
                                    "text": t.text,
                                    "context": before.text if before else "",
                                }
                                for t, before in paired_turns(s)
                            ],
                        }
                        for s in conversation.sessions
                    ],
                },
                "questions": [
                    {
                        "question": q,
                        "user_ids": [conversation.user_of(s) for s in conversation.asked_about(q)],
                    }
                    for q in questions
                ],
            }
            out = run_mem0("locomo", request, timeout_s=None)
            out["questions"] = questions
            path.parent.mkdir(parents=True, exist_ok=True)
            payload = json.dumps(out, ensure_ascii=False).encode("utf-8")
            write_atomically(path, lambda handle: handle.write(payload))
        by_question = dict(zip(out["questions"], out["results"], strict=True))
        dates = conversation.session_dates()

        def dated(text: str, sources: tuple[str, ...]) -> str:
            # Dated like the other systems' context: the session of its latest source turn.
            said = max((dates[s] for s in sources if s in dates), default=None)
            return f"(said {said}) {text}" if said else text

        results = [
            [
                Retrieved(
                    r["text"],
                    tuple(r.get("dia_ids", ())),
                    float(r.get("score") or 0.0),
                    dated(r["text"], tuple(r.get("dia_ids", ()))),
                )
                for r in by_question[q]
            ]
            for q in questions
        ]
        return ConversationRun(
            conversation.id,
            results,
            memories=int(out["memories"]),
            llm_calls=int(out["llm_calls"]),
            llm_tokens=int(out["llm_tokens"]),
            ingest_seconds=float(out["ingest_seconds"]),
            extra={"turn_errors": int(out.get("errors", 0))},
        )

    def close(self) -> None:
        """Stop the LLM server if one was started."""
        if self._server is not None:
            self._server.__exit__(None, None, None)
            self._server = None
