"""The run record of one expiry sweep: what it was asked, what each shard did, how it ended.

Records are kept in the sweep log and listed by the API, so they hold counts, times, the
tenant swept and error messages only: never fact text, never a user id.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

from memory_core.errors import SweepIncompleteError


class SweepTrigger(StrEnum):
    """Who started a sweep."""

    MANUAL = "manual"
    SCHEDULE = "schedule"
    JOB = "job"


class SweepStatus(StrEnum):
    """How a sweep ended."""

    OK = "ok"
    PARTIAL = "partial"
    REFUSED = "refused"


class ShardSweep(BaseModel):
    """What one shard did in a sweep."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    shard: int = Field(ge=0, description="Shard number, in routing order.")
    deleted: int = Field(ge=0, description="Facts the shard deleted durably (0 on a dry run).")
    due: int | None = Field(default=None, description="Facts due at the cut-off; dry runs only.")
    batches: int = Field(ge=0, description="Successful expire calls (0 on a dry run).")
    attempts: int = Field(ge=1, description="Times the shard was tried: 1 plus the retries made.")
    seconds: float = Field(ge=0.0, description="Time spent on the shard, rests and retries included.")
    error: str | None = Field(
        default=None, description="Last error of a shard that still failed after its retries; None if done."
    )


class SweepRecord(BaseModel):
    """One sweep run, as the sweep log keeps it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(description="Unique id of the run.")
    trigger: SweepTrigger = Field(description="Who started it.")
    tenant: str | None = Field(
        default=None, description="The tenant whose users were swept; None for every tenant."
    )
    now: datetime = Field(description="The cut-off: facts whose expire_at is before it were due.")
    started_at: datetime = Field(description="When the run started (the runner's clock).")
    finished_at: datetime = Field(description="When the run ended (the runner's clock).")
    dry_run: bool = Field(description="Only counted what was due; deleted nothing.")
    status: SweepStatus = Field(description="ok: every shard done; partial: some failed; refused: not run.")
    shards: list[ShardSweep] = Field(default_factory=list, description="Per shard, in shard order.")
    deleted: int = Field(ge=0, description="Facts deleted in all shards.")
    due: int | None = Field(default=None, description="Facts due in all shards that answered; dry runs only.")

    def failed(self) -> dict[int, str]:
        """Shards that still failed after their retries, with their last error."""
        return {s.shard: s.error for s in self.shards if s.error is not None}

    def raise_for_status(self) -> None:
        """Raise if any shard was left unswept, so a partial sweep cannot pass unnoticed.

        Raises:
            SweepIncompleteError: the status is partial.
        """
        if self.status is SweepStatus.PARTIAL:
            raise SweepIncompleteError(self.id, self.failed())
