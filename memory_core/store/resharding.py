"""Resharding a data dir: whole slots move between shards, crash-safe at every step.

A reshard to ``goal`` shards first records the goal in ``reshard.json`` beside the manifest,
grows the routing table (new shards own nothing yet), then moves slots one (source, target)
pair at a time:

1. the journal names the move and the routing version it starts from;
2. the target imports everything of the slots' users (facts with history and vectors, pending
   turns, windows, kept answers), durably;
3. the routing table's next version gives the slots to the target (one atomic file write: the
   switch);
4. the source drops the slots' users, files included (as an erase does).

Opening the data dir after a crash anywhere settles the move in flight by the routing version:
not switched, the target drops what it took (rolled back); switched, the source drops what it
gave (rolled forward). Nothing acknowledged is lost and nothing is held twice. A shrink ends by
shrinking the table, then deleting the shards that own no slot any more. The goal stays in the
journal until it is reached: ``longmem shards resume`` finishes an interrupted reshard.

Writes must not reach the store while it reshards: the CLI opens the data dir alone.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from memory_core.errors import ConfigError, StorageError
from memory_core.routing import RoutingTable, SlotMove, write_routing
from memory_core.store.fsutil import fsync_dir, write_atomically
from memory_core.store.shard import FactShard

_JOURNAL = "reshard.json"


@dataclass(frozen=True)
class MoveReport:
    """One move of a reshard."""

    source: int
    target: int
    slots: int
    users: int
    facts: int


@dataclass(frozen=True)
class ReshardReport:
    """What a reshard did."""

    shards_before: int
    shards_after: int
    routing_version: int
    moves: tuple[MoveReport, ...]
    seconds: float

    def as_json(self) -> dict[str, Any]:
        """The report as ``longmem shards add`` prints it."""
        return {**asdict(self), "moves": [asdict(move) for move in self.moves]}


def interrupted_goal(data_dir: Path) -> int | None:
    """The shard count an unfinished reshard of ``data_dir`` was going to, if one was."""
    journal = _read(data_dir)
    return int(journal["goal"]) if journal is not None else None


def _read(data_dir: Path) -> dict[str, Any] | None:
    path = data_dir / _JOURNAL
    return json.loads(path.read_text()) if path.exists() else None  # type: ignore[no-any-return]


def _write(data_dir: Path, goal: int, move: SlotMove | None, version: int) -> None:
    body = {"goal": goal, "move": {**asdict(move), "version": version} if move is not None else None}
    write_atomically(data_dir / _JOURNAL, lambda h: h.write(json.dumps(body).encode()))


class Resharder:
    """Moves the slots of one data dir's shards, all open in this process."""

    def __init__(
        self,
        data_dir: Path,
        shards: list[FactShard],
        routing: RoutingTable,
        open_shard: Callable[[int], FactShard],
        shard_dir: Callable[[int], Path],
    ) -> None:
        """Work on ``shards`` (the store's own list: changed in place) routed by ``routing``;
        ``open_shard`` opens (creating) shard ``i``, ``shard_dir`` says where it lives."""
        self.data_dir = data_dir
        self.shards = shards
        self.routing = routing
        self._open_shard = open_shard
        self._shard_dir = shard_dir

    def recover(self) -> None:
        """Settle the move a crash cut short, and delete the shards a finished shrink left.

        Raises:
            StorageError: a drop was not written (opening again retries it).
        """
        journal = _read(self.data_dir)
        if journal is None:
            return
        move = journal["move"]
        if move is not None:
            switched = self.routing.version > move["version"]
            holder = self.shards[move["source"] if switched else move["target"]]
            holder.drop_slots(move["slots"], len(self.routing.owners))
            _write(self.data_dir, journal["goal"], None, self.routing.version)
        shard_no = self.routing.shards
        while self._shard_dir(shard_no).exists():  # a shrink's switch was written, its deletes not
            shutil.rmtree(self._shard_dir(shard_no))
            shard_no += 1
        if journal["goal"] == self.routing.shards and not self.routing.plan(self.routing.shards):
            self._finish()

    def reshard(self, goal: int) -> ReshardReport:
        """Spread the slots evenly over ``goal`` shards.

        Raises:
            ConfigError: ``goal`` is not a shard count this data dir can have, or another
                reshard was interrupted (finish it first).
            StorageError: a step was not written; the data dir is consistent (the move in flight
                is rolled back) and ``longmem shards resume`` goes on.
        """
        interrupted = interrupted_goal(self.data_dir)
        if interrupted is not None and interrupted != goal:
            raise ConfigError(
                f"a reshard to {interrupted} shards was interrupted: finish it first (longmem shards resume)"
            )
        started = time.monotonic()
        before = self.routing.shards
        moves = self.routing.plan(goal)  # checks goal before anything is written
        _write(self.data_dir, goal, None, self.routing.version)
        if goal > self.routing.shards:
            self._switch(self.routing.resized(goal))
            self.shards.extend(self._open_shard(i) for i in range(len(self.shards), goal))
        done = [self._move(goal, move) for move in moves]
        if goal < self.routing.shards:
            self._switch(self.routing.resized(goal))
            for shard in self.shards[goal:]:
                shard.destroy()
            del self.shards[goal:]
            fsync_dir(self._shard_dir(0).parent)
        self._finish()
        return ReshardReport(before, goal, self.routing.version, tuple(done), time.monotonic() - started)

    def _move(self, goal: int, move: SlotMove) -> MoveReport:
        slot_count = len(self.routing.owners)
        source, target = self.shards[move.source], self.shards[move.target]
        _write(self.data_dir, goal, move, self.routing.version)
        copy = source.export_slots(move.slots, slot_count)
        try:
            target.import_slots(copy)
        except StorageError:
            target.drop_slots(move.slots, slot_count)
            _write(self.data_dir, goal, None, self.routing.version)
            raise
        self._switch(self.routing.moved(move))
        source.drop_slots(move.slots, slot_count)
        _write(self.data_dir, goal, None, self.routing.version)
        return MoveReport(move.source, move.target, len(move.slots), copy.users, copy.facts)

    def _switch(self, table: RoutingTable) -> None:
        write_routing(self.data_dir, table)
        self.routing = table

    def _finish(self) -> None:
        try:
            (self.data_dir / _JOURNAL).unlink()
            fsync_dir(self.data_dir)
        except OSError as exc:
            raise StorageError(f"cannot finish the reshard of {self.data_dir}: {exc}") from exc
