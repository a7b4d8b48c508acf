"""An app from before profiles lived in the shards, upgraded: its one profile file (held open by
its profile actor, still running) moves into the shards when the new app's sweeper starts, on
real Ray actors."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import ray

from deployments.stores import open_fact_store, stop_stores
from deployments.sweeper import open_sweeper
from memory_core.models import ProfileEntry
from memory_core.settings import LimitSettings, ServeSettings, Settings, StorageSettings
from memory_core.store.facts import LocalFactStore
from memory_core.store.profile import DuckDBProfileStore
from tests.serve_app import ServeApp

DIM = 8
EMBEDDER = "test-embedder"
AT = datetime(2026, 5, 1, tzinfo=UTC)


class _OldProfileActor:
    """The old app's profile actor as Ray kept it: the owner of the data dir's profile file."""

    def __init__(self, path: str) -> None:
        self._store = DuckDBProfileStore(Path(path), LimitSettings())

    def invoke(self, method: str) -> tuple[bool, object]:
        assert method == "close"
        self._store.close()
        return True, None


def test_an_old_apps_profile_file_moves_into_the_shards_as_the_sweeper_starts(
    serve_app: ServeApp, tmp_path: Path
) -> None:
    # Ray is up (the app's fixture); this data dir and namespace are the test's own.
    data_dir = tmp_path / "data"
    settings = Settings(
        storage=StorageSettings(data_dir=data_dir, shards=2), serve=ServeSettings(namespace="longmem-upgrade")
    )
    LocalFactStore(settings.storage, settings.limits, DIM, EMBEDDER).close()
    entries = [
        ProfileEntry(user_id=f"acme:u{n}", key=f"k{k}", text=f"wish {k} of u{n}", source="api", updated_at=AT)
        for n in range(12)
        for k in range(2)
    ]
    old_file = DuckDBProfileStore(data_dir / "profile.duckdb", LimitSettings())
    old_file.take(entries)
    old_file.close()
    old_actor = (
        ray.remote(_OldProfileActor)
        .options(name="longmem-profile", namespace="longmem-upgrade", lifetime="detached", num_cpus=0)
        .remote(str(data_dir / "profile.duckdb"))
    )
    ray.get(old_actor.__ray_ready__.remote())
    sweeper = open_sweeper(settings, DIM, EMBEDDER)
    try:
        ray.get(sweeper.start_schedule.remote())  # after its constructor: the move is done
        assert not (data_dir / "profile.duckdb").exists()
        facts = open_fact_store(settings, DIM, EMBEDDER)
        moved = [e for user in sorted({e.user_id for e in entries}) for e in facts.profile(user)]
        by_id = sorted(entries, key=lambda e: (e.user_id, e.key))
        assert sorted(moved, key=lambda e: (e.user_id, e.key)) == by_id
        assert all(count == 2 for _, count in facts.profile_users("acme", "", 100))
        assert {no for no, shard in enumerate(facts.shards) if shard.stats()["profile_entries"]} == {0, 1}
    finally:
        ray.get(sweeper.stop.remote())
        ray.kill(sweeper, no_restart=True)
        assert stop_stores(settings) == []
