"""Auth cannot be silently off, whatever starts the app; /healthz cannot be made to burn an
embedding and a call to every part per hit; /livez touches nothing."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from deployments.api.auth import Authenticator
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import ConfigError
from memory_core.service import open_local_service
from memory_core.settings import ApiKey, ServeSettings, Settings, load_settings
from tests.asgi_app import local_api

KEY = {"key": "acme-admin-key-0123456789", "tenant": "acme", "admin": True}


def test_local_only_beside_keys_or_a_public_host_is_refused_at_load() -> None:
    with pytest.raises(ConfigError, match="local_only.*api_keys"):
        load_settings(serve={"local_only": True, "api_keys": [KEY]})
    with pytest.raises(ConfigError, match="local_only.*host"):
        load_settings(serve={"local_only": True, "host": "0.0.0.0"})
    # Settings changed after loading cannot open the door either.
    changed = ServeSettings(local_only=True)
    changed.api_keys = [ApiKey.model_validate(KEY)]
    with pytest.raises(ConfigError, match="local_only"):
        Authenticator(changed)
    assert load_settings(serve={"local_only": True, "host": "127.0.0.1"}).serve.bind_host() == "127.0.0.1"


def test_serve_run_builder_refuses_what_longmem_serve_refuses(tmp_path: Path) -> None:
    from deployments.app import app_builder

    both = tmp_path / "both.json"
    both.write_text(json.dumps({"serve": {"local_only": True, "api_keys": [KEY]}}))
    with pytest.raises(ConfigError, match="local_only"):
        app_builder({"config": str(both)})
    neither = tmp_path / "neither.json"
    neither.write_text(json.dumps({"serve": {"port": 8123}}))
    with pytest.raises(ConfigError, match="no API keys configured"):
        app_builder({"config": str(neither)})


def test_cli_serve_refuses_local_only_beside_keys(tmp_path: Path) -> None:
    env = {"LONGMEM_SERVE__API_KEYS": json.dumps([KEY]), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "longmem", "--data-dir", str(tmp_path), "serve", "--local-only"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2 and "local_only" in out.stderr and "api_keys" in out.stderr


def test_healthz_probes_at_most_once_per_ttl_and_livez_never(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> None:
    settings.serve = ServeSettings(local_only=True, health_cache_s=0.5)
    probes: list[float] = []

    def probe() -> dict[str, Any]:
        probes.append(time.monotonic())
        return {"ok": True, "shards": []}

    service = open_local_service(settings, clock, embedder)
    try:
        with TestClient(local_api(service, health=probe)) as client:
            answers = [client.get("/healthz") for _ in range(25)]
            assert all(a.status_code == 200 and a.json()["ok"] for a in answers)
            assert len(probes) == 1
            for _ in range(25):
                assert client.get("/livez").json() == {"ok": True}
            assert len(probes) == 1
            time.sleep(0.6)
            assert client.get("/healthz").json()["age_s"] < 0.5 and len(probes) == 2
    finally:
        service.close()
