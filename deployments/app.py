"""The longmem Serve application: build it from settings, run it on this machine, stop it cleanly.

On a cluster: ``serve run deployments.app:app_builder config=/path/settings.toml`` (see README);
whatever starts it, the settings are checked before anything is deployed and the ingress checks
where Serve listens (``deployments/binding.py``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray import serve
from ray.serve import Application

from deployments.api.auth import Authenticator
from deployments.binding import http_options
from deployments.embedder import EmbedderDeployment
from deployments.ingress import Ingress
from deployments.llm import LLMDeployment
from deployments.stores import stop_stores
from deployments.sweeper import SWEEPER_ACTOR_NAME
from deployments.writers import stop_writers
from memory_core.errors import ConfigError
from memory_core.llm.factory import gpu_visible
from memory_core.settings import LLMEngineName, Settings, load_settings

APP_NAME = "longmem"


def build_app(settings: Settings) -> Application:
    """Ingress over embedder and LLM deployments (shard, writer and sweeper actors are
    created by the ingress on first start and found by name afterwards).

    Raises:
        ConfigError: no API key and not local-only (auth would be off), before anything is deployed.
    """
    Authenticator(settings.serve)
    serve_cfg = settings.serve
    # Two cores cannot give every replica a whole CPU (DESIGN.md): every replica asks for none.
    cpu0 = {"num_cpus": 0}
    embedder = EmbedderDeployment.options(
        num_replicas=serve_cfg.embedder_replicas,
        max_ongoing_requests=serve_cfg.max_ongoing_requests,
        ray_actor_options=cpu0,
    ).bind(settings.embedder, serve_cfg.embed_batch_size, serve_cfg.embed_batch_wait_ms)
    llm = LLMDeployment.options(
        num_replicas=1,
        max_ongoing_requests=serve_cfg.max_ongoing_requests,
        ray_actor_options={**cpu0, "num_gpus": llm_gpus(settings)},
    ).bind(settings.llm)
    scaling = serve_cfg.ingress_autoscaling
    replicas: dict[str, Any] = (
        {"num_replicas": serve_cfg.ingress_replicas}
        if scaling is None
        else {"autoscaling_config": scaling.model_dump()}
    )
    return Ingress.options(
        **replicas,
        max_ongoing_requests=serve_cfg.max_ongoing_requests,
        ray_actor_options=cpu0,
    ).bind(settings, embedder, llm)


def llm_gpus(settings: Settings) -> float:
    """GPUs for the LLM deployment: as configured, else one when vLLM will run on a visible GPU
    (Ray hides GPUs from actors that reserve none, and vLLM would then find no device)."""
    if settings.serve.llm_gpus:
        return settings.serve.llm_gpus
    vllm = settings.llm.engine in (LLMEngineName.VLLM, LLMEngineName.AUTO)  # auto means vLLM on a GPU
    return 1.0 if vllm and gpu_visible() else 0.0


def app_builder(args: dict[str, str]) -> Application:
    """Entry for ``serve run`` / ``serve deploy``: ``config=FILE`` names the settings file."""
    return build_app(load_settings(Path(args["config"]) if "config" in args else None))


@dataclass(frozen=True)
class RunningApp:
    """A started app."""

    url: str
    seconds_to_ready: float


def start(settings: Settings) -> RunningApp:
    """Start Ray (or join ``serve.ray_address``), Serve, and the app; returns when it answers.

    Raises:
        ConfigError: no API key and not local-only (checked before anything starts), or Serve
            already runs on this cluster listening elsewhere than the settings say.
    """
    Authenticator(settings.serve)  # fail closed before spending seconds on Ray
    began = time.perf_counter()
    if not ray.is_initialized():
        ray.init(
            address=settings.serve.ray_address,
            namespace=settings.serve.namespace,
            include_dashboard=False,
            log_to_driver=False,
        )
    options = http_options(settings)
    serve.start(http_options=options)
    try:
        serve.run(build_app(settings), name=APP_NAME, route_prefix="/")
    except RuntimeError as exc:  # Serve reports a deployment that failed to start this way
        stop(settings)
        raise ConfigError(
            f"longmem did not start: {exc} (replica logs: /tmp/ray/session_latest/logs/serve)"
        ) from None
    shown = "127.0.0.1" if options["host"] in ("0.0.0.0", "::") else options["host"]
    return RunningApp(
        url=f"http://{shown}:{settings.serve.port}", seconds_to_ready=time.perf_counter() - began
    )


def stop(settings: Settings, shutdown_ray: bool = True) -> list[str]:
    """Drain queued memory writes, stop the app, close every store's files, stop the sweeper.

    Returns:
        Problems met while closing stores.
    """
    problems = stop_writers(settings)
    try:
        sweeper = ray.get_actor(SWEEPER_ACTOR_NAME, namespace=settings.serve.namespace)
        ray.get(sweeper.stop.remote())
        ray.kill(sweeper, no_restart=True)
    except ValueError:
        pass  # never started
    serve.delete(APP_NAME)
    problems += stop_stores(settings)
    if shutdown_ray:
        serve.shutdown()
        ray.shutdown()
    return problems
