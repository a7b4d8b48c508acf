"""``longmem bench``: search latency and own-fact recall at growing store sizes, longmem vs mem0.

For each size N (facts), the store holds N synthetic facts over N/100 users plus the real
facts of the 16 users of ``benchmarks/data/retrieval_zh_en.jsonl`` ("probe users", zh / en /
mixed), embedded with the configured embedder. A synthetic fact is a real fact of that set
said by someone else: its vector is a probe fact's vector plus noise (cosine about 0.8), its
text the fact's with a note number. Many users saying similar things is what makes a global
index with a user filter fail: the nearest facts to a question belong to other users.

The questions are the data set's, each asked by its probe user; a question is answered when
one of its relevant facts is among the top k returned. Each system is timed twice per question:
``search`` is what an agent waits for (the question embedded, then searched), ``store_search``
is the store alone with the question's vector given (embedded once, before timing), so the
shared embedder's ~25 ms does not hide what the stores themselves cost. Systems, same data,
same embedder:

- ``longmem``: :class:`MemoryService` in this process (recall = embed + exact search in the
  user's partition + lexical fusion + profile read), after a bulk load into its shards;
  probe facts stored through ``remember`` (ingest rate, embedding included); then the expiry
  sweep of the 10 % planted expired facts (wall time, deleted vs planted);
- ``longmem_http``: the Ray Serve app (``longmem serve``), bulk load into the shard actors,
  probe facts through ``POST /memories``, recall through ``POST /recall``, one client;
- ``mem0``: mem0ai with its FAISS store in its own environment (``make mem0-env``), vectors
  inserted into its store, questions through ``Memory.search(query, filters={"user_id": ...})``,
  store search through its FAISS store's ``search`` as ``Memory.search`` calls it.

In ``store_search`` both stores are asked for :func:`store_fetch` candidates and the best k kept.

Latencies are per question, one at a time, after warm-up; ratios are computed within the run.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import numpy as np
from tqdm import tqdm

from benchmarks.bench_store import latency_ms, noisy
from benchmarks.serve_load import Probe, bulk_user, read_probes, stored
from memory_core.embedding import Embedder, make_embedder
from memory_core.models import Layer, NewFact, Tag
from memory_core.routing import shard_of
from memory_core.service import Remember, open_local_service
from memory_core.settings import ServeSettings, Settings, StorageSettings, SweepSettings

SYSTEMS = ("longmem", "longmem_http", "mem0")
FACTS_PER_USER = 100
LOAD_BATCH = 10_000
WARMUP = 20
_TAGS = list(Tag)


@dataclass
class Corpus:
    """The synthetic facts of one size and the probe users' real facts, with their vectors."""

    size: int
    users: int
    owners: np.ndarray  # (size,) bulk user numbers
    sources: np.ndarray  # (size,) index of the probe fact each synthetic fact copies
    vectors: np.ndarray  # (size, dim) unit rows
    expired: np.ndarray  # (size,) bool: expires before the cut-off
    probe_texts: list[str]
    probe_owner: list[str]
    probe_vectors: np.ndarray

    def text(self, i: int) -> str:
        """Text of synthetic fact ``i``."""
        return f"{self.probe_texts[int(self.sources[i])]} (note {i})"


def make_corpus(size: int, probes: Sequence[Probe], embedder: Embedder, seed: int) -> Corpus:
    """``size`` synthetic facts over ``size / 100`` users around the probe users' real facts."""
    texts = [text for probe in probes for text in probe.facts]
    owner = [probe.user for probe in probes for _ in probe.facts]
    real = embedder.embed_passages(texts)
    rng = np.random.default_rng(seed)
    users = max(1, size // FACTS_PER_USER)
    sources = rng.integers(0, len(texts), size=size)
    vectors = np.empty((size, real.shape[1]), dtype=np.float32)
    for start in range(0, size, LOAD_BATCH):
        rows = sources[start : start + LOAD_BATCH]
        vectors[start : start + len(rows)] = noisy(real[rows], rng)
    return Corpus(
        size=size,
        users=users,
        owners=rng.integers(0, users, size=size),
        sources=sources,
        vectors=vectors,
        expired=rng.random(size) < 0.1,
        probe_texts=texts,
        probe_owner=owner,
        probe_vectors=real,
    )


def bulk_facts(
    corpus: Corpus, rows: np.ndarray, cutoff: datetime, user: Callable[[str], str]
) -> list[NewFact]:
    """Facts ``rows`` of the corpus as stored facts (``user`` maps a user id to the stored id)."""
    created = cutoff - timedelta(days=30)
    return [
        # Unvalidated: valid by construction, and validating 1M models costs seconds.
        NewFact.model_construct(
            user_id=user(bulk_user(int(corpus.owners[i]))),
            text=corpus.text(i),
            tag=_TAGS[i % len(_TAGS)],
            layer=Layer.FACT,
            created_at=created,
            expire_at=created + timedelta(days=1) if corpus.expired[i] else None,
            source_turn_ids=(),
        )
        for i in rows.tolist()
    ]


def questions(probes: Sequence[Probe]) -> list[tuple[str, str, frozenset[str]]]:
    """(asking user, question, relevant texts) for every question of the data set."""
    return [(probe.user, q, relevant) for probe in probes for q, relevant in probe.queries]


def score(
    asked: Sequence[tuple[str, str, frozenset[str]]], answers: Sequence[Sequence[str]]
) -> dict[str, float]:
    """Hit rate (a relevant fact among the answers) and mean answers per question."""
    hits = sum(
        any(text in relevant for text in got) for (_, _, relevant), got in zip(asked, answers, strict=True)
    )
    return {
        "hit_rate": round(hits / len(asked), 4),
        "results_per_question": round(sum(len(got) for got in answers) / len(asked), 2),
    }


def timed_answers(
    asked: Sequence[tuple[str, str, frozenset[str]]], call: Callable[[int], list[str]], label: str
) -> tuple[list[int], list[list[str]]]:
    """Ask question ``i`` for every i (after ``WARMUP`` untimed ones); nanoseconds and answers."""
    for i in range(min(WARMUP, len(asked))):
        call(i)
    samples, answers = [], []
    for i in tqdm(range(len(asked)), desc=label, unit="q", file=sys.stderr):
        began = time.perf_counter_ns()
        got = call(i)
        samples.append(time.perf_counter_ns() - began)
        answers.append(got)
    return samples, answers


def store_fetch(k: int) -> int:
    """Candidates each store is asked for in ``store_search``: what mem0's ``search`` asks its store."""
    return max(k * 4, 60)


def measured(
    asked: Sequence[tuple[str, str, frozenset[str]]],
    samples: Sequence[int],
    answers: Sequence[Sequence[str]],
) -> dict[str, Any]:
    """Latency figures with the hit rate of the answers."""
    return {**latency_ms(samples), **score(asked, answers)}


def _settings(base: Settings, data_dir: Path, port: int | None = None) -> Settings:
    """The bench's settings on ``data_dir``: no snapshots, no scheduled sweep, Serve on ``port``."""
    return base.model_copy(
        update={
            "storage": StorageSettings(data_dir=data_dir, shards=base.storage.shards, snapshot_every=10**9),
            "serve": ServeSettings(local_only=True, port=port or base.serve.port, namespace="longmem-bench"),
            "sweep": SweepSettings(schedule_every=timedelta(0)),
        }
    )


def run_longmem(
    base: Settings,
    corpus: Corpus,
    probes: Sequence[Probe],
    embedder: Embedder,
    k: int,
    cutoff: datetime,
    query_vectors: np.ndarray,
) -> dict[str, Any]:
    """longmem in this process: bulk load, probe ingest, recall, store search, sweep."""
    data_dir = Path(tempfile.mkdtemp(prefix="longmem-bench-"))
    svc = open_local_service(_settings(base, data_dir), embedder=embedder)
    try:
        began = time.perf_counter()
        for start in tqdm(range(0, corpus.size, LOAD_BATCH), desc="longmem load", file=sys.stderr):
            rows = np.arange(start, min(start + LOAD_BATCH, corpus.size))
            svc.facts.add(bulk_facts(corpus, rows, cutoff, str), corpus.vectors[rows])
        load = time.perf_counter() - began
        began = time.perf_counter()
        at = cutoff - timedelta(days=1)
        for probe in probes:
            for text in probe.facts:
                svc.remember(probe.user, [Remember(text=text)], at=at)
        ingest = time.perf_counter() - began
        asked = questions(probes)
        samples, answers = timed_answers(
            asked,
            lambda i: [h.fact.text for h in svc.recall(asked[i][0], asked[i][1], k, at=at)],
            f"longmem recall {corpus.size:,}",
        )
        store_samples, store_answers = timed_answers(
            asked,
            lambda i: [
                f.text for f, _ in svc.facts.search(asked[i][0], query_vectors[i], store_fetch(k), at)[:k]
            ],
            f"longmem store search {corpus.size:,}",
        )
        began = time.perf_counter()
        record = svc.sweep(cutoff)
        sweep = time.perf_counter() - began
    finally:
        svc.close()
        shutil.rmtree(data_dir, ignore_errors=True)
    facts = len(corpus.probe_texts)
    return {
        "search": latency_ms(samples),
        **score(asked, answers),
        "store_search": measured(asked, store_samples, store_answers),
        "bulk_load_s": round(load, 2),
        "ingest_facts_per_s": round(facts / ingest, 1),
        "sweep": {
            "seconds": round(sweep, 3),
            "deleted": record.deleted,
            "planted": int(corpus.expired.sum()),
            "status": record.status,
        },
    }


def run_longmem_http(
    base: Settings, corpus: Corpus, probes: Sequence[Probe], k: int, cutoff: datetime, port: int
) -> dict[str, Any]:
    """The Serve app: start, bulk load into the shard actors, probe ingest over HTTP, recall."""
    import ray

    from deployments.app import start, stop
    from deployments.stores import open_shards
    from deployments.sweeper import data_dir_embedder

    data_dir = Path(tempfile.mkdtemp(prefix="longmem-bench-http-"))
    settings = _settings(base, data_dir, port)
    try:
        began = time.perf_counter()
        running = start(settings)
        cold = time.perf_counter() - began
        dim, embedder_name = data_dir_embedder(data_dir)
        shards = open_shards(settings, dim, embedder_name)
        route = np.array([shard_of(stored(bulk_user(u)), len(shards)) for u in range(corpus.users)])
        of_fact = route[corpus.owners]

        def load(shard_no: int) -> None:
            rows = np.flatnonzero(of_fact == shard_no)
            for start_at in range(0, len(rows), LOAD_BATCH):
                chunk = rows[start_at : start_at + LOAD_BATCH]
                shards[shard_no].add(bulk_facts(corpus, chunk, cutoff, stored), corpus.vectors[chunk])

        began = time.perf_counter()
        with ThreadPoolExecutor(len(shards)) as pool:
            list(pool.map(load, range(len(shards))))
        bulk = time.perf_counter() - began
        at = (cutoff - timedelta(days=1)).isoformat()
        with httpx.Client(base_url=running.url, timeout=120) as client:
            began = time.perf_counter()
            for probe in probes:
                for text in probe.facts:
                    body = {"memories": [{"text": text}], "at": at}
                    client.post(f"/v1/users/{probe.user}/memories", json=body).raise_for_status()
            ingest = time.perf_counter() - began

            asked = questions(probes)

            def recall(i: int) -> list[str]:
                user, question, _ = asked[i]
                response = client.post(f"/v1/users/{user}/recall", json={"query": question, "k": k, "at": at})
                response.raise_for_status()
                return [m["text"] for m in response.json()["memories"]]

            samples, answers = timed_answers(asked, recall, f"longmem_http recall {corpus.size:,}")
    finally:
        if ray.is_initialized():
            for problem in stop(settings):
                print(f"warning: {problem}", file=sys.stderr)
        shutil.rmtree(data_dir, ignore_errors=True)
    return {
        "search": latency_ms(samples),
        **score(asked, answers),
        "cold_start_s": round(cold, 1),
        "bulk_load_s": round(bulk, 2),
        "ingest_facts_per_s": round(len(corpus.probe_texts) / ingest, 1),
    }


def run_mem0(
    corpus: Corpus, probes: Sequence[Probe], k: int, timeout_s: float, query_vectors: np.ndarray
) -> dict[str, Any]:
    """mem0 with FAISS in its own environment, on the same vectors and texts."""
    from benchmarks.mem0_peer import run_mem0 as call_runner

    work = Path(tempfile.mkdtemp(prefix="longmem-bench-mem0-"))
    try:
        vectors = np.vstack([corpus.vectors, corpus.probe_vectors])
        np.save(work / "vectors.npy", vectors)
        np.save(work / "queries.npy", query_vectors)
        with open(work / "payloads.jsonl", "w", encoding="utf-8") as out:
            for i in range(corpus.size):
                row = {"id": f"s{i}", "user_id": bulk_user(int(corpus.owners[i])), "text": corpus.text(i)}
                out.write(json.dumps(row, ensure_ascii=False) + "\n")
            for n, (text, owner) in enumerate(zip(corpus.probe_texts, corpus.probe_owner, strict=True)):
                out.write(
                    json.dumps({"id": f"p{n}", "user_id": owner, "text": text}, ensure_ascii=False) + "\n"
                )
        asked = questions(probes)
        request = {
            "workdir": str(work / "mem0"),
            "vectors": str(work / "vectors.npy"),
            "payloads": str(work / "payloads.jsonl"),
            "k": k,
            "probes": [{"user_id": user, "query": q} for user, q, _ in asked],
            "query_vectors": str(work / "queries.npy"),
            "store_fetch": store_fetch(k),
            "warmup": WARMUP,
        }
        out_json = call_runner("search", request, timeout_s)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    text_of = {f"p{n}": t for n, t in enumerate(corpus.probe_texts)}

    def answers(key: str) -> list[list[str]]:
        return [[text_of.get(i, "") for i in ids] for ids in out_json[key]]

    def samples(key: str) -> list[int]:
        return [int(ms * 1e6) for ms in out_json[key]]

    return {
        "search": latency_ms(samples("latencies_ms")),
        **score(asked, answers("results")),
        "store_search": measured(asked, samples("store_latencies_ms"), answers("store_results")),
        "insert_s": round(out_json["insert_seconds"], 2),
        "rss_mb": out_json.get("rss_mb"),
    }


def ratios(entry: dict[str, Any]) -> dict[str, float]:
    """p50 and p99 of each longmem system over mem0's at the same size, end to end and store only."""
    out: dict[str, float] = {}
    mem0 = entry.get("mem0")
    if not mem0:
        return out
    for name in ("longmem", "longmem_http"):
        for part in ("search", "store_search"):
            if part in entry.get(name, {}):
                for q in ("p50", "p99"):
                    out[f"{name}/mem0 {part} {q}"] = round(entry[name][part][q] / mem0[part][q], 4)
    return out


def run_bench(
    settings: Settings,
    sizes: Sequence[int],
    systems: Sequence[str],
    k: int,
    port: int,
    seed: int = 7,
    mem0_timeout_s: float = 3600.0,
) -> dict[str, Any]:
    """Every system at every size; the JSON report."""
    began = time.perf_counter()
    cutoff = datetime.now(UTC).replace(microsecond=0)
    probes = read_probes()
    embedder = make_embedder(settings.embedder)
    report: dict[str, Any] = {
        "k": k,
        "embedder": embedder.name,
        "facts_per_user": FACTS_PER_USER,
        "questions": len(questions(probes)),
        "systems": list(systems),
        "sizes": [],
    }
    for size in sizes:
        print(f"== {size:,} facts over {max(1, size // FACTS_PER_USER):,} users ==", file=sys.stderr)
        corpus = make_corpus(size, probes, embedder, seed)
        query_vectors = embedder.embed_queries([q for _, q, _ in questions(probes)])
        entry: dict[str, Any] = {"facts": size, "users": corpus.users, "systems": {}}
        for name in systems:
            if name == "longmem":
                entry["systems"][name] = run_longmem(
                    settings, corpus, probes, embedder, k, cutoff, query_vectors
                )
            elif name == "longmem_http":
                entry["systems"][name] = run_longmem_http(settings, corpus, probes, k, cutoff, port)
            elif name == "mem0":
                entry["systems"][name] = run_mem0(corpus, probes, k, mem0_timeout_s, query_vectors)
            print(f"{name} at {size:,}: {json.dumps(entry['systems'][name])}", file=sys.stderr)
        entry["ratios"] = ratios(entry["systems"])
        report["sizes"].append(entry)
        del corpus
    report["wall_seconds"] = round(time.perf_counter() - began, 1)
    return report


def report_table(report: dict[str, Any]) -> str:
    """One line per size and system: end to end, then the store alone where measured."""
    lines = [
        f"{'facts':>10}  {'system':<13} {'p50 ms':>8} {'p99 ms':>8} {'hit rate':>9} {'answers':>8}"
        f" {'store p50':>10} {'store p99':>10}"
    ]
    for entry in report["sizes"]:
        for name, s in entry["systems"].items():
            store = s.get("store_search")
            tail = f" {store['p50']:>10.3f} {store['p99']:>10.3f}" if store else ""
            lines.append(
                f"{entry['facts']:>10,}  {name:<13} {s['search']['p50']:>8.2f} {s['search']['p99']:>8.2f}"
                f" {s['hit_rate']:>9.3f} {s['results_per_question']:>8.2f}{tail}"
            )
        for label, value in entry["ratios"].items():
            lines.append(f"{entry['facts']:>10,}  {label}: {value}")
    return "\n".join(lines)
