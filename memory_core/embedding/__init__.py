"""Text embedders: a protocol and the packaged offline implementations."""

from memory_core.embedding.base import Embedder, make_embedder

__all__ = ["Embedder", "make_embedder"]
