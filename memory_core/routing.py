"""Stable routing of users to fact shards: users hash into slots, a versioned table maps slots
to shards.

The slot count is fixed when a data dir is made; resharding moves whole slots between shards
and gives the table a new version (``memory_core.store.resharding``). A data dir made before
slots existed routes ``blake2b % shards``; its table (:meth:`RoutingTable.legacy`) has a
multiple of that shard count as its slot count, with slot ``s`` on shard ``s % shards``,
which routes every user exactly as before: no data moves when it is first read.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from memory_core.errors import ConfigError, StorageError
from memory_core.store.fsutil import write_atomically

SLOTS = 1024  # slots of a new data dir: the most shards it can ever be spread over
_FILE = "routing.json"
_LOCK = "routing.lock"  # held while the table is compared and written


def _hash(user_id: str) -> int:
    # BLAKE2b over the UTF-8 id: the same in every process and on every machine (Python's
    # ``hash()`` is salted per process).
    return int.from_bytes(hashlib.blake2b(user_id.encode("utf-8"), digest_size=8).digest(), "big")


def shard_of(user_id: str, shards: int) -> int:
    """The shard that owns ``user_id`` in a data dir of ``shards`` shards never resharded."""
    return _hash(user_id) % shards


def slot_of(user_id: str, slots: int) -> int:
    """The slot ``user_id`` hashes into, of ``slots``."""
    return _hash(user_id) % slots


@dataclass(frozen=True)
class SlotMove:
    """Slots that go from one shard to another in one step of a reshard."""

    source: int
    target: int
    slots: tuple[int, ...]


@dataclass(frozen=True)
class RoutingTable:
    """Which shard owns each slot; ``version`` grows by one with every change."""

    version: int
    shards: int
    owners: tuple[int, ...]  # owners[slot] = shard

    @classmethod
    def legacy(cls, shards: int) -> RoutingTable:
        """The table that routes as ``shard_of(user, shards)``: version 0."""
        slots = shards * -(-SLOTS // shards)
        return cls(0, shards, tuple(slot % shards for slot in range(slots)))

    def slot_of(self, user_id: str) -> int:
        """The slot ``user_id`` hashes into."""
        return slot_of(user_id, len(self.owners))

    def shard_of(self, user_id: str) -> int:
        """The shard that owns ``user_id``."""
        return self.owners[self.slot_of(user_id)]

    def slots_of(self, shard: int) -> list[int]:
        """The slots shard ``shard`` owns."""
        return [slot for slot, owner in enumerate(self.owners) if owner == shard]

    def moved(self, move: SlotMove) -> RoutingTable:
        """The next version, with ``move`` done."""
        owners = list(self.owners)
        for slot in move.slots:
            if owners[slot] != move.source:
                raise ValueError(f"slot {slot} is on shard {owners[slot]}, not {move.source}")
            owners[slot] = move.target
        return RoutingTable(self.version + 1, self.shards, tuple(owners))

    def check(self, shards: int) -> None:
        """Raise ConfigError unless the data dir can have ``shards`` shards (1 to its slots)."""
        if not 1 <= shards <= len(self.owners):
            raise ConfigError(
                f"{shards} shards: a data dir of {len(self.owners)} slots has 1 to {len(self.owners)}"
            )

    def resized(self, shards: int) -> RoutingTable:
        """The next version with ``shards`` shards; a shard dropped must own no slot."""
        self.check(shards)
        if any(owner >= shards for owner in self.owners):
            raise ValueError(f"shards from {shards} on still own slots")
        return RoutingTable(self.version + 1, shards, self.owners)

    def plan(self, shards: int) -> list[SlotMove]:
        """The moves that spread the slots evenly over ``shards`` shards (growing or shrinking),
        moving as few slots as can be: each shard keeps what it may and the rest go, one move per
        (source, target) pair."""
        self.check(shards)
        base, extra = divmod(len(self.owners), shards)
        quota = [base + (shard < extra) for shard in range(shards)]
        held: dict[int, list[int]] = {}
        for slot, owner in enumerate(self.owners):
            held.setdefault(owner, []).append(slot)
        spare: list[tuple[int, int]] = []  # (source, slot) that must move
        for owner in sorted(held):
            keep = quota[owner] if owner < shards else 0
            spare.extend((owner, slot) for slot in held[owner][keep:])
        pairs: dict[tuple[int, int], list[int]] = {}
        for target in range(shards):
            for _ in range(quota[target] - len(held.get(target, ())[: quota[target]])):
                source, slot = spare.pop(0)
                pairs.setdefault((source, target), []).append(slot)
        return [SlotMove(source, target, tuple(slots)) for (source, target), slots in pairs.items()]

    def to_json(self) -> str:
        """The table as ``routing.json`` holds it."""
        return json.dumps({"version": self.version, "shards": self.shards, "owners": list(self.owners)})

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> RoutingTable:
        """The table :meth:`to_json` wrote (parsed)."""
        return cls(int(raw["version"]), int(raw["shards"]), tuple(int(owner) for owner in raw["owners"]))


def read_routing(data_dir: Path, shards: int) -> RoutingTable:
    """The data dir's routing table; one never resharded (no file) routes as :meth:`RoutingTable.legacy`
    of its manifest's ``shards``."""
    path = data_dir / _FILE
    if not path.exists():
        return RoutingTable.legacy(shards)
    return RoutingTable.from_json(json.loads(path.read_text()))


def write_routing(data_dir: Path, table: RoutingTable) -> None:
    """Make ``table`` the data dir's routing, atomically and durably (the switch of a move),
    unless the file holds a newer one already: the table never goes back, whoever writes it (the
    reshard's switch, and the shards of a root that adopt it, may write at once).

    Raises:
        StorageError: not written; the old table stands.
    """
    try:
        with open(data_dir / _LOCK, "ab") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when closed
            if read_routing(data_dir, table.shards).version >= table.version:
                return
            write_atomically(data_dir / _FILE, lambda h: h.write(table.to_json().encode()))
    except OSError as exc:
        raise StorageError(f"cannot write the routing table in {data_dir}: {exc}") from exc
