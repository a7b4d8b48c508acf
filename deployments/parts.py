"""The memory service over the deployments and store actors, as the ingress and each writer open it."""

from __future__ import annotations

from typing import Any

from ray.serve.handle import DeploymentHandle

from deployments.embedder import RemoteEmbedder
from deployments.llm import RemoteEngine
from deployments.stores import open_fact_store
from memory_core.embedding import Embedder
from memory_core.llm.structured import StructuredLLM
from memory_core.service import MemoryService
from memory_core.settings import Settings


def remote_service(
    settings: Settings,
    embedder: DeploymentHandle,
    embedder_info: dict[str, Any],
    llm: DeploymentHandle,
    llm_name: str,
    queries: Embedder | None = None,
) -> MemoryService:
    """A service whose facts and profiles are the shard actors', whose
    embedder and LLM the deployments (``*_info`` / ``llm_name``: what their ``info()`` and
    ``name()`` answered, fetched by the caller, sync or async); ``queries`` embeds recall
    questions in this process.

    Raises:
        ConfigError: a named store actor serves another data dir.
    """
    remote_embedder = RemoteEmbedder(embedder, embedder_info, queries)
    return MemoryService(
        settings,
        remote_embedder,
        open_fact_store(settings, remote_embedder.dim, remote_embedder.name),
        llm=StructuredLLM(RemoteEngine(llm, llm_name)),
    )
