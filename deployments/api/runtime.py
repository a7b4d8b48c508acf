"""What the HTTP API works on: the memory service over the deployments, and the app's own parts."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from deployments.api.auth import Authenticator, Principal
from deployments.api.idempotency import Replays
from deployments.api.metrics import Metrics
from memory_core.service import MemoryService
from memory_core.settings import Settings
from memory_core.sweep import SweepRecord
from memory_core.tenancy import scoped_user_id
from memory_core.write.writes import Writes


class SweepControl(Protocol):
    """Runs and lists expiry sweeps (the sweeper actor under Serve, a local runner in-process)."""

    def run(self, now: datetime, dry_run: bool, tenant: str | None) -> SweepRecord:
        """One sweep at cut-off ``now`` of ``tenant``'s users (of everyone when None); raises
        SweepBusyError while another runs."""
        ...

    def list(self, limit: int, tenant: str | None) -> list[SweepRecord]:
        """The newest run records (of ``tenant``'s sweeps, or all when None)."""
        ...


class ReshardControl(Protocol):
    """Starts reshards and says how they go (the sweeper actor under Serve, a local runner
    in-process)."""

    def start(self, add: int = 0, remove: int = 0) -> dict[str, Any]:
        """Begin adding ``add`` or removing ``remove`` shards (neither: resume an interrupted
        reshard); ValidationError for a count the store cannot have, ReshardBusyError while one
        runs."""
        ...

    def status(self) -> dict[str, Any]:
        """State, goal, report or error of the last reshard."""
        ...


def no_backup_schedule() -> dict[str, Any] | None:
    """The backup status of an app without a backup schedule."""
    return None


@dataclass
class Runtime:
    """What one ingress replica works with (it keeps no state of its own)."""

    settings: Settings
    service: MemoryService
    writes: Writes  # every write of a user, in that user's lane, and the records of queued ones
    replays: Replays  # answers to repeated write calls (Idempotency-Key)
    auth: Authenticator
    metrics: Metrics
    sweeps: SweepControl
    reshards: ReshardControl
    health: Callable[[], dict[str, Any]]
    backups: Callable[[], dict[str, Any] | None] = no_backup_schedule  # how the scheduled backups went

    def user(self, principal: Principal, user_id: str) -> str:
        """The stored id of the caller's user."""
        return scoped_user_id(principal.tenant, user_id, self.settings.limits.max_user_id_chars)
