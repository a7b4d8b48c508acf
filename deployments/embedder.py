"""The embedder as a Serve deployment that batches concurrent requests, and its client."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import numpy as np
from ray import serve
from ray.serve.handle import DeploymentHandle

from memory_core.embedding import Embedder, make_embedder
from memory_core.settings import EmbedderSettings


@serve.deployment(name="embedder")
class EmbedderDeployment:
    """Holds the packaged embedder; concurrent single queries are embedded as one batch."""

    def __init__(self, settings: EmbedderSettings, batch_size: int, batch_wait_ms: float) -> None:
        self._embedder = make_embedder(settings)
        self.embed_query.set_max_batch_size(batch_size)
        self.embed_query.set_batch_wait_timeout_s(batch_wait_ms / 1000)

    def info(self) -> dict[str, Any]:
        """Dimension, name and calibrated thresholds (the client exposes them as the Embedder protocol)."""
        e = self._embedder
        return {
            "dim": e.dim,
            "name": e.name,
            "default_threshold": e.default_threshold,
            "related_threshold": e.related_threshold,
            "duplicate_threshold": e.duplicate_threshold,
            "echo_margin": e.echo_margin,
            "cross_language_gap": e.cross_language_gap,
            "forget_margin": e.forget_margin,
            "forget_standout": e.forget_standout,
        }

    @serve.batch(max_batch_size=16, batch_wait_timeout_s=0.002)
    async def embed_query(self, texts: list[str]) -> list[np.ndarray]:
        """One question per caller; Serve gathers concurrent callers into ``texts``."""
        # The model call holds the CPU for milliseconds: off the event loop, so batching goes on.
        matrix = await asyncio.to_thread(self._embedder.embed_queries, texts)
        return list(matrix)

    async def embed_passages(self, texts: list[str]) -> np.ndarray:
        """A caller's batch of texts to store."""
        return await asyncio.to_thread(self._embedder.embed_passages, texts)

    def check_health(self) -> None:
        """Serve's health probe: the model still embeds."""
        vector = self._embedder.embed_query("health")
        if not np.isfinite(vector).all():
            raise RuntimeError("embedder returned non-finite values")


class RemoteEmbedder:
    """The embedder deployment seen as a :class:`~memory_core.embedding.Embedder`."""

    def __init__(
        self, handle: DeploymentHandle, info: dict[str, Any], queries: Embedder | None = None
    ) -> None:
        """Wrap ``handle``; ``info`` is what its ``info()`` returned (fetched by the async caller).

        Args:
            handle: the embedder deployment.
            info: its dimension, name and thresholds.
            queries: an embedder in this process for questions (``serve.query_embedding =
                "ingress"``); None sends questions to the deployment too.
        """
        self._handle = handle
        self._queries = queries
        self.dim: int = info["dim"]
        self.name: str = info["name"]
        self.default_threshold: float = info["default_threshold"]
        self.related_threshold: float = info["related_threshold"]
        self.duplicate_threshold: float = info["duplicate_threshold"]
        self.echo_margin: float = info["echo_margin"]
        self.cross_language_gap: float = info["cross_language_gap"]
        self.forget_margin: float = info["forget_margin"]
        self.forget_standout: float = info["forget_standout"]

    def embed_passages(self, texts: Sequence[str]) -> np.ndarray:
        """Embed texts to be stored."""
        return self._handle.embed_passages.remote(list(texts)).result()  # type: ignore[no-any-return]

    def embed_query(self, text: str) -> np.ndarray:
        """Embed one question (here, or batched with other callers' on the deployment)."""
        if self._queries is not None:
            return self._queries.embed_query(text)
        return self._handle.embed_query.remote(text).result()  # type: ignore[no-any-return]

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Embed several questions."""
        if self._queries is not None:
            return self._queries.embed_queries(texts)
        responses = [self._handle.embed_query.remote(t) for t in texts]
        return (
            np.vstack([r.result() for r in responses]) if responses else np.zeros((0, self.dim), np.float32)
        )
