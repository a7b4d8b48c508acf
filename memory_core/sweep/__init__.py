"""The expiry sweep: runner, run records and their log, and the schedule.

Ray-free: ``jobs/expiry_sweep.py`` and the Serve app pass shard proxies to the same runner.
"""

from memory_core.sweep.log import SweepLog
from memory_core.sweep.record import ShardSweep, SweepRecord, SweepStatus, SweepTrigger
from memory_core.sweep.runner import SweepRunner
from memory_core.sweep.schedule import SweepScheduler, next_run_after

__all__ = [
    "ShardSweep",
    "SweepLog",
    "SweepRecord",
    "SweepRunner",
    "SweepScheduler",
    "SweepStatus",
    "SweepTrigger",
    "next_run_after",
]
