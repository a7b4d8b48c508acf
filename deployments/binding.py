"""Where the HTTP API listens: one rule, checked by the ingress whatever started the app.

``longmem serve`` starts Serve's HTTP proxy with :func:`http_options`. ``serve run`` and
``serve deploy`` start it from their own options; the ingress replica then compares what
the proxy really listens on with the settings and refuses to start on any difference, so
neither a wrong port nor a public interface for a keyless (local-only) app can pass.
"""

from __future__ import annotations

from typing import Any

import ray
from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

from memory_core.errors import ConfigError
from memory_core.settings import Settings


def http_options(settings: Settings) -> dict[str, Any]:
    """Serve's HTTP options for these settings: ``serve.port`` on ``serve.host`` (loopback when
    local_only)."""
    return {"host": settings.serve.bind_host(), "port": settings.serve.port}


async def check_binding(settings: Settings) -> None:
    """Check that the cluster's Serve HTTP proxy listens where the settings say.

    Raises:
        ConfigError: it listens on another host or port (e.g. started by ``serve run`` with its
            defaults, or by an earlier app on this cluster).
    """
    # Serve exposes its proxy options only through its controller (a private name, pinned Ray).
    controller = ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    config = await controller.get_http_config.remote()
    wanted = http_options(settings)
    if (config.host, config.port) != (wanted["host"], wanted["port"]):
        raise ConfigError(
            f"Serve's HTTP proxy listens on {config.host}:{config.port}, but the settings say "
            f"{wanted['host']}:{wanted['port']} (loopback when serve.local_only): start longmem with "
            "`longmem serve`, or start Serve with those http_options (a Serve config file, or "
            "`serve start --http-host ... --http-port ...`) before `serve run`"
        )
