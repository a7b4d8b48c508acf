"""Shared fixtures: a real embedder (loaded once) and services on fresh data dirs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder, make_embedder
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import EmbedderSettings, Settings, StorageSettings
from tests.serve_app import ADMIN_KEY, OTHER_KEY, ServeApp, client, free_port, serve_settings

START = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The default packaged embedder, loaded once per test run."""
    return make_embedder(EmbedderSettings())


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    return tmp_path / "data"


@pytest.fixture
def settings(data_dir: Path) -> Settings:
    return Settings(storage=StorageSettings(data_dir=data_dir, shards=2))


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


@pytest.fixture
def open_service(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> Iterator[Callable[[], MemoryService]]:
    """Opens services on the test's data dir (several times, to test restarts); closes them all."""
    opened: list[MemoryService] = []

    def factory() -> MemoryService:
        svc = open_local_service(settings, clock, embedder)
        opened.append(svc)
        return svc

    yield factory
    for svc in opened:
        try:
            svc.close()
        except Exception:  # already closed by the test
            pass


@pytest.fixture
def service(open_service: Callable[[], MemoryService]) -> MemoryService:
    return open_service()


@pytest.fixture(scope="session")
def serve_app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServeApp]:
    """The real app on local Ray (started on first use, stopped at the end of the session)."""
    from deployments.app import start, stop

    settings = serve_settings(tmp_path_factory.mktemp("serve") / "data", free_port())
    running = start(settings)
    app = ServeApp(
        settings=settings,
        url=running.url,
        acme=client(running.url, ADMIN_KEY),
        globex=client(running.url, OTHER_KEY),
        anonymous=client(running.url, None),
    )
    try:
        yield app
    finally:
        for c in (app.acme, app.globex, app.anonymous):
            c.close()
        stop(settings)
