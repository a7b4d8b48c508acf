"""Resharding a data dir: whole slots move between shards, crash-safe at every step.

A reshard to ``goal`` shards first records the goal in ``reshard.json`` beside the manifest,
grows the routing table (new shards own nothing yet), then moves slots from shard to shard,
``SLOTS_PER_MOVE`` at a time:

1. the journal names the move and the routing version it starts from, and the source refuses
   the slots' writes;
2. the target imports everything of the slots' users (facts with history and vectors, pending
   turns, windows, kept answers), durably;
3. the routing table's next version gives the slots to the target (one atomic file write: the
   switch);
4. the source drops the slots' users, files included (as an erase does), and takes writes again.

Opening the data dir after a crash anywhere settles the move in flight by the routing version:
not switched, the target drops what it took (rolled back); switched, the source drops what it
gave (rolled forward). Nothing acknowledged is lost and nothing is held twice. A shrink ends by
shrinking the table, then deleting the shards that own no slot any more. The goal stays in the
journal until it is reached: ``longmem shards resume`` finishes an interrupted reshard.

The store serves meanwhile: a move fences its slots on the source first (their writes are
refused with SlotMovingError and retried by the store), and a shard asked about a user it does
not own (its table is newer than the caller's) says so (StaleRoutingError): the caller routes
again. A user's writes wait for one small move, not for the reshard.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from memory_core.errors import ConfigError, LongmemError, ReshardBusyError, StorageError, ValidationError
from memory_core.routing import RoutingTable, SlotMove, read_routing, write_routing
from memory_core.store.fsutil import fsync_dir, write_atomically

if TYPE_CHECKING:
    from memory_core.store.facts import ShardedFactStore, ShardHandle

_JOURNAL = "reshard.json"
SLOTS_PER_MOVE = 64  # a move's slots: their writes wait for one move of this size


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


class ShardHost(Protocol):
    """Where a store's shards live: this process's disk, or actors on the nodes of a cluster."""

    def open_shard(self, shard_no: int, routing: RoutingTable) -> ShardHandle:
        """Open (creating) shard ``shard_no``, serving by ``routing``."""
        ...

    def retire_from(self, shard_no: int) -> None:
        """Close and delete shards ``shard_no`` and after, which own no slot (a shrink): their
        directories, or their actors and directories. Shards not there are skipped."""
        ...


class Resharder:
    """Moves the slots of one store's shards, while it serves: a move refuses the writes of its
    slots (the store retries them) from before the copy until the source has let them go."""

    def __init__(
        self, data_dir: Path, store: ShardedFactStore, host: ShardHost, slots_per_move: int = SLOTS_PER_MOVE
    ) -> None:
        """Work on ``store`` (its shard list and table are changed in place) whose routing table
        and journal are in ``data_dir``; a move takes at most ``slots_per_move`` slots, which
        bounds how long their writes wait."""
        self.data_dir = data_dir
        self.store = store
        self._host = host
        self._slots_per_move = slots_per_move

    def recover(self) -> None:
        """Settle the move a crash cut short (its source takes writes again), give every shard
        the current table, and delete the shards a finished shrink left.

        Raises:
            StorageError: a drop was not written (recovering again retries it).
        """
        journal = _read(self.data_dir)
        # The file is the switch: a coordinator that died after writing it left shard 0 (whose
        # table the served store starts from) on the one before, and maybe shards unopened.
        on_disk = read_routing(self.data_dir, self.store.routing.shards)
        routing = on_disk if on_disk.version > self.store.routing.version else self.store.routing
        self._announce(routing)  # a shard that restarted on an older table gets it too
        move = journal["move"] if journal is not None else None
        if journal is not None and move is not None:
            switched = routing.version > move["version"]
            holder = self.store.shards[move["source"] if switched else move["target"]]
            holder.drop_slots(move["slots"], len(routing.owners))
            _write(self.data_dir, journal["goal"], None, routing.version)
        # Settled: not switched, the source owns the slots again; switched, it has adopted the
        # table above and refuses their users. Fenced until then, so that no backup copies the
        # users from both shards.
        for shard in self.store.shards:
            shard.unfence()
        if journal is None:
            return
        self._host.retire_from(routing.shards)  # a shrink's switch was written, its deletes not
        if journal["goal"] == routing.shards and not routing.plan(routing.shards):
            self._finish()

    def check(self, goal: int) -> None:
        """Raise ConfigError unless a reshard to ``goal`` shards may start: a shard count this
        data dir can have, and no other reshard interrupted."""
        interrupted = interrupted_goal(self.data_dir)
        if interrupted is not None and interrupted != goal:
            raise ConfigError(
                f"a reshard to {interrupted} shards was interrupted: finish it first (longmem shards resume)"
            )
        self.store.routing.check(goal)

    def begin(self, goal: int) -> None:
        """Check that a reshard to ``goal`` may start (see :meth:`check`) and record its goal
        durably, so that a crash from here leaves it to resume; an interrupted one's journal (the
        move it was in) is kept as it is.

        Raises:
            ConfigError: as :meth:`check`.
            StorageError: the goal was not written.
        """
        self.check(goal)
        if _read(self.data_dir) is None:
            _write(self.data_dir, goal, None, self.store.routing.version)

    def reshard(self, goal: int) -> ReshardReport:
        """Spread the slots evenly over ``goal`` shards.

        Raises:
            ConfigError: ``goal`` is not a shard count this data dir can have, or another
                reshard was interrupted (finish it first).
            StorageError: a step was not written; the data dir is consistent (the move in flight
                is rolled back) and resharding to the same goal goes on.
        """
        self.begin(goal)
        self.recover()  # a move a failed step left (a drop to retry, a switch half announced)
        started = time.monotonic()
        before = self.store.routing.shards
        moves = self._steps(self.store.routing.plan(goal))  # checks goal before anything is written
        _write(self.data_dir, goal, None, self.store.routing.version)
        if goal > self.store.routing.shards:
            self._switch(self.store.routing.resized(goal))
        done = [self._move(goal, move) for move in moves]
        if goal < self.store.routing.shards:
            self._switch(self.store.routing.resized(goal))
            self._host.retire_from(goal)
        self._finish()
        return ReshardReport(
            before, goal, self.store.routing.version, tuple(done), time.monotonic() - started
        )

    def _steps(self, moves: list[SlotMove]) -> list[SlotMove]:
        size = self._slots_per_move
        return [
            SlotMove(move.source, move.target, move.slots[i : i + size])
            for move in moves
            for i in range(0, len(move.slots), size)
        ]

    def _move(self, goal: int, move: SlotMove) -> MoveReport:
        slot_count = len(self.store.routing.owners)
        source, target = self.store.shards[move.source], self.store.shards[move.target]
        _write(self.data_dir, goal, move, self.store.routing.version)
        source.fence(move.slots)
        try:
            copy = source.export_slots(move.slots, slot_count)
            target.import_slots(copy)
        except StorageError:
            target.drop_slots(move.slots, slot_count)  # not switched: the source still owns them
            source.unfence()
            _write(self.data_dir, goal, None, self.store.routing.version)
            raise
        # A failure from here leaves the source fenced and the journal naming the move: the
        # next recover() (a resume, a restart) settles it by the routing file.
        self._switch(self.store.routing.moved(move))
        source.drop_slots(move.slots, slot_count)
        source.unfence()
        _write(self.data_dir, goal, None, self.store.routing.version)
        return MoveReport(move.source, move.target, len(move.slots), copy.users, copy.facts)

    def _switch(self, table: RoutingTable) -> None:
        """Make ``table`` the routing: the file first (that is the switch), then the shards."""
        write_routing(self.data_dir, table)
        self._announce(table)

    def _announce(self, table: RoutingTable) -> None:
        """Serve by ``table``: open the shards it adds, give it to every shard, close those it
        drops (a shrink: they own nothing now)."""
        opened = [self._host.open_shard(i, table) for i in range(len(self.store.shards), table.shards)]
        self.store.shards.extend(opened)
        for shard in self.store.shards:
            shard.adopt(table)
        self.store.routing = table
        for shard in self.store.shards[table.shards :]:
            shard.close()
        del self.store.shards[table.shards :]

    def _finish(self) -> None:
        try:
            (self.data_dir / _JOURNAL).unlink()
            fsync_dir(self.data_dir)
        except OSError as exc:
            raise StorageError(f"cannot finish the reshard of {self.data_dir}: {exc}") from exc


class ReshardRunner:
    """Runs one reshard at a time on a thread of its own while the store serves, and says how it
    goes (the admin API's ``/v1/admin/shards``)."""

    def __init__(self, resharder: Resharder) -> None:
        self._resharder = resharder
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._status: dict[str, Any] = {"state": "idle"}

    def start(self, add: int = 0, remove: int = 0) -> dict[str, Any]:
        """Begin adding ``add`` or removing ``remove`` shards (neither: finish an interrupted
        reshard); the status as it starts.

        Raises:
            ValidationError: not a shard count the store can have, or nothing to do.
            ReshardBusyError: a reshard is running.
            StorageError: the goal was not written (nothing started).
        """
        routing = self._resharder.store.routing
        interrupted = interrupted_goal(self._resharder.data_dir)
        goal = routing.shards + add - remove if add or remove else interrupted
        if goal is None:
            raise ValidationError("say how many shards to add or remove (no reshard was interrupted)")
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                raise ReshardBusyError(self._status["goal"])
            try:
                self._resharder.begin(goal)  # acknowledged once on disk: a restart resumes it
            except ConfigError as exc:  # the caller's count: bad input here
                raise ValidationError(str(exc)) from exc
            self._status = {"state": "running", "goal": goal, "from": routing.shards, "started_at": _now()}
            self._thread = threading.Thread(
                target=self._run, args=(goal,), name="longmem-reshard", daemon=True
            )
            self._thread.start()
            return dict(self._status)

    def _run(self, goal: int) -> None:
        try:
            report = self._resharder.reshard(goal)
        except LongmemError as exc:
            self._finish({"state": "failed", "error": f"{type(exc).__name__}: {exc}"})
        else:
            self._finish({"state": "done", "report": report.as_json()})

    def _finish(self, outcome: dict[str, Any]) -> None:
        with self._lock:
            self._status = {**self._status, **outcome, "finished_at": _now()}

    def status(self) -> dict[str, Any]:
        """``state`` (idle, running, done, failed), the goal, the report or the error, and the goal
        of a reshard that was interrupted and not resumed."""
        with self._lock:
            return {**self._status, "interrupted_goal": interrupted_goal(self._resharder.data_dir)}

    def wait(self) -> None:
        """Block until the running reshard ends (tests, shutdown)."""
        thread = self._thread
        if thread is not None:
            thread.join()


def _now() -> str:
    return datetime.now(UTC).isoformat()
