"""The real Ray Serve app for integration tests: local Ray, real model, real files, two tenants.

One app per test session (Ray's start and the model load take tens of seconds); tests that
restart it leave it running on the same data dir and port.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx

from memory_core.settings import (
    ApiKey,
    ServeSettings,
    Settings,
    StorageSettings,
    SweepSettings,
)

ADMIN_KEY = "acme-admin-key-0123456789"
OTHER_KEY = "globex-key-0123456789abcdef"
OPERATOR_KEY = "ops-operator-key-0123456789"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def serve_settings(data_dir: Path, port: int) -> Settings:
    """Two shards (backed up beside the data dir, by the app itself every 30 s), two ingress
    replicas (any may take any call),
    two tenants (acme may run admin calls) and an operator, no sweep schedule, small sweep
    batches (so a sweep lasts long enough to kill a shard in the middle of it)."""
    return Settings(
        storage=StorageSettings(
            data_dir=data_dir,
            shards=2,
            backup_uri=str(data_dir.parent / "backups"),
            backup_every=timedelta(seconds=30),
        ),
        serve=ServeSettings(
            host="127.0.0.1",
            port=port,
            ingress_replicas=2,
            api_keys=[
                ApiKey(key=ADMIN_KEY, tenant="acme", admin=True),
                ApiKey(key=OTHER_KEY, tenant="globex"),
                ApiKey(key=OPERATOR_KEY, tenant="ops", operator=True),
            ],
        ),
        sweep=SweepSettings(schedule_every=timedelta(0), batch_size=200, pause_seconds=0.02),
    )


@dataclass
class ServeApp:
    """A running app and clients for its two tenants."""

    settings: Settings
    url: str
    acme: httpx.Client
    globex: httpx.Client
    anonymous: httpx.Client

    def restart(self) -> float:
        """Stop the app (stores closed, Ray kept) and start it again on the same data dir."""
        from deployments.app import start, stop

        stop(self.settings, shutdown_ray=False)
        return start(self.settings).seconds_to_ready


def client(url: str, key: str | None) -> httpx.Client:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    return httpx.Client(base_url=url, headers=headers, timeout=600)
