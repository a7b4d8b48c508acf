"""The sweeper actor: the one place a data dir's expiry sweeps run, so there is one at a time
cluster-wide, whoever triggers it (its own schedule, the admin API, or ``jobs.expiry_sweep``);
the one place the app's scheduled backups run (``storage.backup_every``); and the one place a
reshard runs (it lives on shard 0's node, beside the routing table and the reshard journal)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import ray
from ray.actor import ActorHandle

from deployments.stores import (
    ActorShards,
    actor_options,
    data_placement,
    open_fact_store,
    shard_data_dir,
    stop_old_profile_actor,
)
from memory_core.backups import BackupSchedule, take_backup
from memory_core.errors import ConfigError, LongmemError, StorageError
from memory_core.settings import Settings
from memory_core.store.facts import move_root_profiles, read_manifest
from memory_core.store.resharding import Resharder, ReshardRunner
from memory_core.sweep import SweepLog, SweepRecord, SweepRunner, SweepScheduler, SweepTrigger

SWEEPER_ACTOR_NAME = "longmem-sweeper"


def data_dir_embedder(data_dir: Path) -> tuple[int, str]:
    """(dim, embedder name) a data dir was made with, from its manifest.

    Raises:
        ConfigError: the data dir has no manifest yet (nothing was ever stored there).
    """
    found = read_manifest(data_dir)
    if found is None:
        raise ConfigError(f"{data_dir} holds no longmem data (no manifest)")
    return int(found["dim"]), str(found["embedder"])


class SweeperActor:
    """Owns the sweep runner, its log and its schedule, and the backup schedule."""

    def __init__(self, settings: Settings, dim: int, embedder: str) -> None:
        facts = open_fact_store(settings, dim, embedder)
        # A reshard this actor died in is settled before anything else runs on the shards.
        resharder = Resharder(shard_data_dir(settings, 0), facts, ActorShards(settings, dim, embedder))
        resharder.recover()
        # Before the ingress and the writers serve anything (they wait for this actor to start).
        stop_old_profile_actor(settings)
        move_root_profiles(shard_data_dir(settings, 0), facts, settings.limits)
        self._reshards = ReshardRunner(resharder)
        log = SweepLog.for_data_dir(shard_data_dir(settings, 0), settings.sweep.log_keep)
        # Shard clients turn a dead or slow actor into StorageError, which the runner retries.
        self._runner = SweepRunner(facts.shards, settings.sweep, log)
        self._scheduler = SweepScheduler(self._runner, settings.sweep)
        self._scheduled: datetime | None = None
        self._backups: BackupSchedule | None = None
        uri = settings.storage.backup_uri
        if uri is not None and settings.storage.backup_every > timedelta(0):
            self._backups = BackupSchedule(
                lambda at: take_backup(facts, dim, embedder, uri, at), settings.storage.backup_every
            )
        self._started = False

    def start_schedule(self) -> str | None:
        """Start the sweep and backup schedules once (later calls are no-ops); returns the next
        sweep time."""
        if not self._started:
            self._started = True
            self._scheduled = self._scheduler.start()
            if self._backups is not None:
                self._backups.start()
        return self._scheduled.isoformat() if self._scheduled else None

    def backup_status(self) -> dict[str, Any] | None:
        """How the scheduled backups went (:meth:`BackupSchedule.status`); None without a schedule."""
        return self._backups.status() if self._backups is not None else None

    def reshard(self, add: int, remove: int) -> tuple[bool, Any]:
        """Start a reshard (:meth:`ReshardRunner.start`); (True, status) or (False, the error)."""
        try:
            return True, self._reshards.start(add, remove)
        except LongmemError as exc:
            return False, exc

    def reshard_status(self) -> dict[str, Any]:
        """How the last reshard went (:meth:`ReshardRunner.status`)."""
        return self._reshards.status()

    def run(self, now: datetime, dry_run: bool, trigger: str, tenant: str | None) -> tuple[bool, Any]:
        """One sweep (of ``tenant``'s users, or of everyone); (True, record) or (False, the
        LongmemError, e.g. SweepBusyError)."""
        try:
            return True, self._runner.run(now, dry_run, SweepTrigger(trigger), tenant)
        except LongmemError as exc:
            return False, exc

    def list(self, limit: int, tenant: str | None) -> list[SweepRecord]:
        """The newest run records (of ``tenant``'s sweeps, or all)."""
        return self._runner.log.list(limit, tenant)

    def stop(self) -> None:
        """Stop the schedules (a sweep or backup in progress finishes first)."""
        self._scheduler.stop()
        if self._backups is not None:
            self._backups.stop()


def _manifest_on_data_node(data_dir: str) -> dict[str, Any] | None:
    """The data dir's manifest as the node holding it sees it (None: no longmem data there)."""
    return read_manifest(Path(data_dir))


def find_sweeper(settings: Settings) -> ActorHandle:
    """The running app's sweeper; with no app running, one made over the data dir's shard actors.

    Nothing is read from this process's disk, so a job submitted from any node works: the
    manifest (shard count, embedder) is read by a task placed where the shard actors run
    (``serve.shard_resources``).

    Raises:
        ConfigError: no app runs and the data dir holds no longmem data.
        StorageError: no node that holds shards answered within the call timeout.
    """
    try:
        return ray.get_actor(SWEEPER_ACTOR_NAME, namespace=settings.serve.namespace)
    except ValueError:
        pass  # no app running in this namespace
    data_dir = shard_data_dir(settings, 0)
    probe = ray.remote(_manifest_on_data_node).options(**data_placement(settings))
    pending = probe.remote(str(data_dir))
    try:
        found = ray.get(pending, timeout=settings.serve.call_timeout_s)
    except ray.exceptions.GetTimeoutError:
        ray.cancel(pending)
        raise StorageError(
            f"no node that holds shard 0 (Ray resource {data_placement(settings).get('resources', 'any')}) "
            f"answered within {settings.serve.call_timeout_s} s: is the data node up?"
        ) from None
    if found is None:
        raise ConfigError(f"{data_dir} holds no longmem data (no manifest) on the nodes that hold shards")
    storage = settings.storage.model_copy(update={"shards": int(found["shards"])})
    made = settings.model_copy(update={"storage": storage})
    return open_sweeper(made, int(found["dim"]), str(found["embedder"]))


def open_sweeper(settings: Settings, dim: int, embedder: str) -> ActorHandle:
    """Get (creating on first use) the sweeper actor.

    It runs calls concurrently (a second trigger must be answered "busy" while a sweep runs).
    """
    options = {**actor_options(settings, SWEEPER_ACTOR_NAME), "max_concurrency": 8}
    return ray.remote(SweeperActor).options(**options).remote(settings, dim, embedder)


class SweeperClient:
    """The sweeper actor as the API's sweep control."""

    def __init__(self, actor: ActorHandle) -> None:
        self._actor = actor

    def run(
        self,
        now: datetime,
        dry_run: bool,
        tenant: str | None = None,
        trigger: SweepTrigger = SweepTrigger.MANUAL,
    ) -> SweepRecord:
        """Run one sweep now (of ``tenant``'s users, or of everyone); raises SweepBusyError while
        another runs."""
        ok, value = ray.get(self._actor.run.remote(now, dry_run, trigger.value, tenant))
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def list(self, limit: int, tenant: str | None = None) -> list[SweepRecord]:
        """The newest run records (of ``tenant``'s sweeps, or all)."""
        return ray.get(self._actor.list.remote(limit, tenant))  # type: ignore[no-any-return]

    def backup_status(self) -> dict[str, Any] | None:
        """How the app's scheduled backups went; None when it has no schedule."""
        return ray.get(self._actor.backup_status.remote())  # type: ignore[no-any-return]


class ReshardClient:
    """The sweeper actor as the API's reshard control."""

    def __init__(self, actor: ActorHandle) -> None:
        self._actor = actor

    def start(self, add: int = 0, remove: int = 0) -> dict[str, Any]:
        """Begin a reshard (see :meth:`ReshardRunner.start`)."""
        ok, value = ray.get(self._actor.reshard.remote(add, remove))
        if not ok:
            raise value
        return value  # type: ignore[no-any-return]

    def status(self) -> dict[str, Any]:
        """How the last reshard went."""
        return ray.get(self._actor.reshard_status.remote())  # type: ignore[no-any-return]
