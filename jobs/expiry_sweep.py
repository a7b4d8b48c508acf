"""The expiry sweep as a Ray job: ``ray job submit -- python -m jobs.expiry_sweep --now ISO``.

It joins the running cluster and asks the sweeper actor (the one that also runs the app's
schedule) to sweep, so there is only ever one sweep at a time. With no app running, it
creates the sweeper over the data dir's shard actors itself. It reads nothing from the disk of
the node it runs on, so it may be submitted from any node. Prints the run record as JSON;
exits 2 when the sweep was refused or is partial.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import ray

from deployments.sweeper import SweeperClient, find_sweeper
from memory_core.errors import ConfigError, LongmemError
from memory_core.models import as_utc
from memory_core.settings import load_settings
from memory_core.sweep import SweepTrigger


def main(argv: Sequence[str] | None = None) -> int:
    """Run one sweep on the cluster; returns the exit status."""
    parser = argparse.ArgumentParser(prog="jobs.expiry_sweep", description=__doc__.splitlines()[0])
    parser.add_argument("--now", type=datetime.fromisoformat, help="cut-off (ISO 8601; default: now)")
    parser.add_argument("--dry-run", action="store_true", help="only count what would be deleted")
    parser.add_argument("--config", type=Path, help="settings file (default: $LONGMEM_CONFIG)")
    parser.add_argument("--address", default="auto", help="Ray cluster to join (default: auto)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings(args.config)
        try:
            ray.init(address=args.address, namespace=settings.serve.namespace, log_to_driver=False)
        except ConnectionError as exc:
            raise ConfigError(
                f"no Ray cluster at {args.address!r} ({exc}); run `longmem sweep` locally"
            ) from None
        sweeper = SweeperClient(find_sweeper(settings))
        now = as_utc(args.now) if args.now else datetime.now(UTC)
        record = sweeper.run(now, args.dry_run, trigger=SweepTrigger.JOB)
        print(record.model_dump_json())
        record.raise_for_status()
    except LongmemError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
