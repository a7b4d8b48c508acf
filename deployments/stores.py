"""Fact-shard actors, and the clients the ingress and jobs use to reach them.

Each actor owns its files: one shard directory, with the facts, turns and profile entries (a
DuckDB file, which allows one read-write process) of the shard's users. They are named,
detached and restarted by Ray when they die: the constructor reopens the files, so a restarted
actor serves every acknowledged write.
Routing is by the data dir's routing table (``memory_core.routing``), never by Serve's replica
choice: shard ``i`` is always the actor named ``longmem-shard-000i``, and shard 0 holds the
table the others adopt.
"""

from __future__ import annotations

import contextlib
import re
import time
from collections.abc import Collection, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray.actor import ActorHandle
from ray.exceptions import GetTimeoutError, RayActorError

from memory_core.errors import ConfigError, LongmemError, StorageError
from memory_core.models import Fact, NewFact, ProfileEntry, Turn
from memory_core.routing import RoutingTable, write_routing
from memory_core.settings import LimitSettings, Settings
from memory_core.store.facts import ShardedFactStore, ShardHandle, open_manifest, shard_dir
from memory_core.store.inbox import PendingTurns, StoredAnswer
from memory_core.store.shard import FactShard, SlotCopy, UserErasure

# Calls the clients may repeat after an actor restart: reads change nothing, and an erase
# repeated is the same erase (it completes one that died half-way).
_REPEATABLE = frozenset(
    {
        "search",
        "recall",
        "replaced",
        "get",
        "list_user",
        "users",
        "vectors_of",
        "count_due",
        "stats",
        "health",
        "routing",
        "validate",
        "erase_user",
        "pending_turns",
        "answer",
        "window",
        "profile",
        "profile_users",
        # Marking a batch done, keeping an answer, storing entries as they were, or adding a turn
        # to a fact's sources: twice is once.
        "turns_done",
        "add_sources",
        "keep_answer",
        "take_profile",
        # A reshard's steps: an export reads, the others leave the same state when repeated.
        "export_slots",
        "drop_slots",
        "adopt",
        "fence",
        "unfence",
    }
)
_SHARD_CALLS = _REPEATABLE | {
    "add",
    "delete",
    "supersede",
    "expire",
    "snapshot",
    "close",
    "accept_turns",
    "extend_window",
    "backup",
    "import_slots",
    "destroy",
    "set_profile",
    "delete_profile",
}
# Calls that copy or rewrite whole files run on a thread of their own (the actor's "copy"
# concurrency group): the owned store's lock holds writes only while they need holding, and every
# other call goes on during a backup's upload or a reshard's new snapshot.
_COPIES = frozenset({"backup", "drop_slots"})
_COPY_GROUP = "copy"
_RETRY_PAUSE_S = 0.25


def shard_actor_name(shard_no: int) -> str:
    """The Ray name of shard ``shard_no``'s actor."""
    return f"longmem-shard-{shard_no:04d}"


_SHARD_ACTOR = re.compile(r"longmem-shard-(\d{4,})")


# The one profile actor of apps from before profiles lived in the shards (stopped on upgrade).
_OLD_PROFILE_ACTOR = "longmem-profile"


class OwnerActor:
    """Runs allowed calls on the object it owns; longmem errors travel back as values."""

    _allowed: frozenset[str]
    _own: frozenset[str] = frozenset({"health"})  # answered by the actor itself
    _target: Any

    def invoke(self, method: str, *args: Any) -> tuple[bool, Any]:
        """Call ``method`` on the owned store.

        Returns:
            (True, result) or (False, the LongmemError it raised), so the caller re-raises the
            domain error itself rather than Ray's wrapper.
        """
        if method not in self._allowed:
            raise AttributeError(f"{method} is not callable on {type(self).__name__}")
        target = self if method in self._own else self._target
        try:
            return True, getattr(target, method)(*args)
        except LongmemError as exc:
            return False, exc


class StoreActor(OwnerActor):
    """An owner of files, which it may copy out (backups) on a thread of its own."""

    @ray.method(concurrency_group=_COPY_GROUP)
    def copy(self, method: str, *args: Any) -> tuple[bool, Any]:
        """:meth:`invoke` for a call that copies whole files, on the copy group's thread."""
        if method not in _COPIES:
            raise AttributeError(f"{method} does not copy files")
        return self.invoke(method, *args)


class ShardActor(StoreActor):
    """One fact shard in its own process."""

    _allowed = _SHARD_CALLS
    _own = frozenset({"health", "routing", "adopt"})

    def __init__(
        self,
        data_dir: str,
        shard_no: int,
        shards: int,
        dim: int,
        embedder: str,
        limits: LimitSettings,
        snapshot_every: int,
        window_turns: int,
        placement: list[str],
        routing: RoutingTable | None = None,
    ) -> None:
        """Open shard ``shard_no`` in ``data_dir`` (this node's data root). A shard a reshard
        adds is given the table that adds it: written into the root first (unless the root holds
        a newer one), so the shard opens by it, here and after a restart."""
        root = Path(data_dir)
        _check_files_there(root, shard_no, ray.get_runtime_context().was_current_actor_reconstructed)
        if routing is not None:
            root.mkdir(parents=True, exist_ok=True)
            write_routing(root, routing)
        routing = open_manifest(root, shards, dim, embedder, placement)
        _check_no_stray_shards(root, shard_no, routing.shards, placement)
        self._root = root
        self._target = FactShard(
            shard_dir(root, shard_no), dim, limits, snapshot_every, window_turns, routing, shard_no
        )
        self._shard_no = shard_no

    def routing(self) -> RoutingTable | None:
        """The routing table the shard serves by (shard 0's is the app's)."""
        return self._target.routing

    def adopt(self, routing: RoutingTable) -> None:
        """Serve by ``routing`` from now on, and open by it after a restart: the table is written
        into this node's data root too, unless it holds a newer one (shard 0's root holds the
        switch itself, and a root shared by several shards is written by each)."""
        write_routing(self._root, routing)
        self._target.adopt(routing)

    def health(self) -> dict[str, Any]:
        """The shard's health (files, log writable, counts) and the Ray node it runs on."""
        node = ray.get_runtime_context().get_node_id()
        return {"shard": self._shard_no, "node": node, **self._target.health()}


def shard_resource(placement: Sequence[str], shard_no: int) -> str | None:
    """The Ray resource of the nodes that hold shard ``shard_no`` (None: any node)."""
    return placement[shard_no % len(placement)] if placement else None


def shard_data_dir(settings: Settings, shard_no: int) -> Path:
    """The data dir that holds shard ``shard_no`` on its node."""
    resource = shard_resource(settings.serve.shard_resources, shard_no)
    found = settings.storage.node_data_dirs.get(resource or "", settings.storage.data_dir)
    return found.resolve()


def _check_files_there(root: Path, shard_no: int, restarted: bool) -> None:
    """Refuse to reopen a shard whose directory is not on this node: a restarted actor that Ray
    placed where its files are not (a shared file system not mounted there, a local disk that
    was not restored) would open an empty shard and take writes into it."""
    if restarted and not shard_dir(root, shard_no).is_dir():
        raise ConfigError(
            f"shard {shard_no} restarted on a node whose {root} does not hold it: mount the data dir's "
            "share there, or restore the shard (README: Backups)"
        )


def _check_no_stray_shards(root: Path, shard_no: int, shards: int, placement: list[str]) -> None:
    """Refuse to open where the files of a shard placed on other nodes lie: the placement changed
    (``serve.shard_resources`` reordered or grown), and shards would open empty elsewhere."""
    here = shard_resource(placement, shard_no)
    strays = [
        n for n in range(shards) if shard_resource(placement, n) != here and shard_dir(root, n).exists()
    ]
    if strays:
        raise ConfigError(
            f"{root} on this node ({here}) holds shard {strays[0]}, which serve.shard_resources places on "
            f"{shard_resource(placement, strays[0])}: restore the placement the data dir was made with"
        )


class ActorClient:
    """Calls an owner actor; reads are retried across a restart, writes are not (not idempotent)."""

    def __init__(
        self, actor: ActorHandle, label: str, timeout_s: float, long_timeout_s: float | None = None
    ) -> None:
        """``timeout_s`` bounds a call; ``long_timeout_s`` (default: the same) one that copies
        whole files (backups)."""
        self._actor = actor
        self._label = label
        self._timeout = timeout_s
        self._long_timeout_s = long_timeout_s or timeout_s

    def _call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        timeout = timeout_s or self._timeout
        deadline = time.monotonic() + timeout
        while True:
            left = max(deadline - time.monotonic(), 0.001)
            try:
                call = self._actor.copy if method in _COPIES else self._actor.invoke
                ok, value = ray.get(call.remote(method, *args), timeout=left)
                break
            except RayActorError as exc:
                if exc.actor_init_failed:
                    # Its constructor raised (files of other settings, say): no restart mends that.
                    cause = str(exc).strip().splitlines()[-1]
                    raise StorageError(f"{self._label} could not start: {cause}") from None
                # A read (or an erase) that met the actor mid-restart is asked again until the
                # deadline; a write is not, since it may have been logged before the actor died.
                if method in _REPEATABLE and time.monotonic() + _RETRY_PAUSE_S < deadline:
                    time.sleep(_RETRY_PAUSE_S)
                    continue
                raise StorageError(
                    f"{self._label} is unavailable ({type(exc).__name__}); {method} not acknowledged"
                ) from None
            except GetTimeoutError:
                raise StorageError(
                    f"{self._label} did not answer {method} within {timeout:g} s; not acknowledged"
                ) from None
        if not ok:
            raise value
        return value


class ShardClient(ActorClient):
    """A shard actor seen as a :class:`~memory_core.store.facts.ShardHandle`."""

    def validate(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> object:
        return self._call("validate", list(new_facts), vectors)

    def add(self, new_facts: Sequence[NewFact], vectors: np.ndarray) -> list[Fact]:
        return self._call("add", list(new_facts), vectors)  # type: ignore[no-any-return]

    def search(self, user_id: str, vector: np.ndarray, k: int, now: datetime) -> list[tuple[Fact, float]]:
        return self._call("search", user_id, vector, k, now)  # type: ignore[no-any-return]

    def recall(
        self, user_id: str, vector: np.ndarray, k: int, now: datetime
    ) -> tuple[list[tuple[Fact, float]], list[ProfileEntry]]:
        return self._call("recall", user_id, vector, k, now)  # type: ignore[no-any-return]

    def replaced(self, user_id: str, fact_ids: Sequence[int]) -> dict[int, list[Fact]]:
        return self._call("replaced", user_id, list(fact_ids))  # type: ignore[no-any-return]

    def get(self, user_id: str, fact_id: int) -> Fact:
        return self._call("get", user_id, fact_id)  # type: ignore[no-any-return]

    def list_user(self, user_id: str, include_superseded: bool = False) -> list[Fact]:
        return self._call("list_user", user_id, include_superseded)  # type: ignore[no-any-return]

    def users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        return self._call("users", tenant, after, limit)  # type: ignore[no-any-return]

    def vectors_of(self, user_id: str, fact_ids: Sequence[int]) -> np.ndarray:
        return self._call("vectors_of", user_id, list(fact_ids))  # type: ignore[no-any-return]

    def delete(self, user_id: str, fact_ids: Sequence[int]) -> list[int]:
        return self._call("delete", user_id, list(fact_ids))  # type: ignore[no-any-return]

    def supersede(self, user_id: str, old_id: int, new_id: int) -> None:
        self._call("supersede", user_id, old_id, new_id)

    def add_sources(self, user_id: str, fact_id: int, turn_ids: Sequence[str]) -> Fact:
        return self._call("add_sources", user_id, fact_id, list(turn_ids))  # type: ignore[no-any-return]

    def expire(self, now: datetime, limit: int | None = None, tenant: str | None = None) -> list[int]:
        return self._call("expire", now, limit, tenant)  # type: ignore[no-any-return]

    def count_due(self, now: datetime, tenant: str | None = None) -> int:
        return self._call("count_due", now, tenant)  # type: ignore[no-any-return]

    def erase_user(self, user_id: str) -> UserErasure:
        return self._call("erase_user", user_id)  # type: ignore[no-any-return]

    def extend_window(self, user_id: str, session_id: str, turns: Sequence[Turn]) -> None:
        self._call("extend_window", user_id, session_id, list(turns))

    def window(self, user_id: str, session_id: str) -> list[Turn]:
        return self._call("window", user_id, session_id)  # type: ignore[no-any-return]

    def accept_turns(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> int:
        return self._call("accept_turns", user_id, session_id, list(turns), at)  # type: ignore[no-any-return]

    def turns_done(self, user_id: str, seq: int) -> None:
        self._call("turns_done", user_id, seq)

    def pending_turns(self) -> list[PendingTurns]:
        return self._call("pending_turns")  # type: ignore[no-any-return]

    def keep_answer(self, answer: StoredAnswer, forget_before: datetime) -> None:
        self._call("keep_answer", answer, forget_before)

    def answer(self, user_id: str, key: str, since: datetime) -> StoredAnswer | None:
        return self._call("answer", user_id, key, since)  # type: ignore[no-any-return]

    def profile(self, user_id: str) -> list[ProfileEntry]:
        return self._call("profile", user_id)  # type: ignore[no-any-return]

    def set_profile(
        self, user_id: str, text: str, source: str, at: datetime, key: str | None = None
    ) -> ProfileEntry:
        return self._call("set_profile", user_id, text, source, at, key)  # type: ignore[no-any-return]

    def delete_profile(self, user_id: str, key: str) -> None:
        self._call("delete_profile", user_id, key)

    def take_profile(self, user_id: str, entries: Sequence[ProfileEntry]) -> None:
        self._call("take_profile", user_id, list(entries))

    def profile_users(self, tenant: str, after: str, limit: int) -> list[tuple[str, int]]:
        return self._call("profile_users", tenant, after, limit)  # type: ignore[no-any-return]

    def backup(self, uri: str) -> dict[str, Any]:
        # The copy runs on the shard's node and may take a while: the load timeout bounds it.
        return self._call("backup", uri, timeout_s=self._long_timeout_s)  # type: ignore[no-any-return]

    def snapshot(self, purge: bool = False) -> int:
        return self._call("snapshot", purge)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, int]:
        return self._call("stats")  # type: ignore[no-any-return]

    def routing(self) -> RoutingTable:
        """The routing table the shard serves by."""
        return self._call("routing")  # type: ignore[no-any-return]

    def export_slots(self, slots: Collection[int], slot_count: int) -> SlotCopy:
        return self._call("export_slots", list(slots), slot_count, timeout_s=self._long_timeout_s)  # type: ignore[no-any-return]

    def import_slots(self, copy: SlotCopy) -> None:
        self._call("import_slots", copy, timeout_s=self._long_timeout_s)

    def drop_slots(self, slots: Collection[int], slot_count: int) -> int:
        return self._call("drop_slots", list(slots), slot_count, timeout_s=self._long_timeout_s)  # type: ignore[no-any-return]

    def adopt(self, routing: RoutingTable) -> None:
        self._call("adopt", routing)

    def fence(self, slots: Collection[int]) -> None:
        self._call("fence", list(slots))

    def unfence(self) -> None:
        self._call("unfence")

    def destroy(self) -> None:
        """Close the shard and delete its directory (a shrink retires it)."""
        self._call("destroy", timeout_s=self._long_timeout_s)

    def health(self, timeout_s: float | None = None) -> dict[str, Any]:
        """The actor's invariants (see :meth:`ShardActor.health`); ``timeout_s`` overrides the
        call timeout (a shard just created may still be loading its files)."""
        return self._call("health", timeout_s=timeout_s)  # type: ignore[no-any-return]

    def close(self) -> None:
        self._call("close")


def actor_options(settings: Settings, name: str, data: int | None = 0) -> dict[str, Any]:
    """Ray options of a named store or writer actor; one that owns shard ``data``'s files goes
    where ``serve.shard_resources`` says, None anywhere."""
    return {
        "name": name,
        "namespace": settings.serve.namespace,
        "lifetime": "detached",
        "get_if_exists": True,
        "max_restarts": -1,
        "max_task_retries": 0,
        **(data_placement(settings, data) if data is not None else {"num_cpus": 0}),
    }


def data_placement(settings: Settings, shard_no: int = 0) -> dict[str, Any]:
    """Ray options that put a task or actor on the nodes holding shard ``shard_no``'s files
    (``serve.shard_resources``; anywhere when empty)."""
    # Two cores cannot give every replica and actor a whole CPU (DESIGN.md): they all take 0.
    placement: dict[str, Any] = {"num_cpus": 0}
    resource = shard_resource(settings.serve.shard_resources, shard_no)
    if resource is not None:
        placement["resources"] = {resource: 0.001}
    return placement


def _owner(cls: type[StoreActor]) -> Any:
    """``cls`` as a Ray actor class with its thread for copies (``options()`` cannot add one)."""
    return ray.remote(concurrency_groups={_COPY_GROUP: 1})(cls)


def _timeouts(settings: Settings) -> tuple[float, float]:
    return settings.serve.call_timeout_s, settings.serve.load_timeout_s


def open_fact_store(settings: Settings, dim: int, embedder: str) -> ShardedFactStore:
    """Every shard actor of the data dir, routed by its table, which the store fetches again
    from shard 0 when a shard says a reshard moved a user."""

    first = open_shard(settings, dim, embedder, 0, settings.storage.shards)  # never retired

    def newer(known: RoutingTable) -> tuple[list[ShardHandle], RoutingTable] | None:
        routing = first.routing()
        if routing.version == known.version:
            return None
        return list(_with_the_rest(settings, dim, embedder, first, routing.shards)), routing

    routing = first.routing()
    shards = _with_the_rest(settings, dim, embedder, first, routing.shards)
    return ShardedFactStore(list(shards), settings.limits, routing, newer, settings.serve.call_timeout_s)


def open_shards(settings: Settings, dim: int, embedder: str) -> list[ShardClient]:
    """Get (creating on first use) every shard actor of the data dir, in routing order: as many
    as its routing table says (``storage.shards`` for a new data dir)."""
    first = open_shard(settings, dim, embedder, 0, settings.storage.shards)
    return _with_the_rest(settings, dim, embedder, first, first.routing().shards)


def _with_the_rest(
    settings: Settings, dim: int, embedder: str, first: ShardClient, count: int
) -> list[ShardClient]:
    """Shard 0's client and those of shards 1 to ``count - 1`` (opened on first use)."""
    return [first, *(open_shard(settings, dim, embedder, n, count) for n in range(1, count))]


def open_shard(
    settings: Settings,
    dim: int,
    embedder: str,
    shard_no: int,
    shards: int,
    routing: RoutingTable | None = None,
) -> ShardClient:
    """Get (creating on first use) the actor of shard ``shard_no`` of ``shards``, on the nodes
    ``serve.shard_resources`` gives it (a new one of a reshard: opened by ``routing``).

    Raises:
        ConfigError: the named actor serves another data dir.
    """
    name = shard_actor_name(shard_no)
    actor = (
        _owner(ShardActor)
        .options(**actor_options(settings, name, shard_no))
        .remote(
            str(shard_data_dir(settings, shard_no)),
            shard_no,
            shards,
            dim,
            embedder,
            settings.limits,
            settings.storage.snapshot_every,
            settings.working.turns,
            settings.serve.shard_resources,
            routing,
        )
    )
    shard = ShardClient(actor, f"shard {shard_no}", *_timeouts(settings))
    # A named actor left over from an app on another data dir would serve the wrong files.
    expected = str(shard_dir(shard_data_dir(settings, shard_no), shard_no))
    found = shard.health(settings.serve.load_timeout_s)["directory"]
    if found != expected:
        raise ConfigError(
            f"actor {name} in namespace {settings.serve.namespace!r} owns {found}, "
            f"not {expected}: stop the other app, or use another serve.namespace"
        )
    return shard


class ActorShards:
    """Shard actors as a reshard opens and retires them (:class:`ShardHost`)."""

    def __init__(self, settings: Settings, dim: int, embedder: str) -> None:
        self._settings = settings
        self._dim = dim
        self._embedder = embedder

    def open_shard(self, shard_no: int, routing: RoutingTable) -> ShardHandle:
        """Start shard ``shard_no``'s actor on its nodes (a new, empty shard)."""
        return open_shard(self._settings, self._dim, self._embedder, shard_no, routing.shards, routing)

    def retire_from(self, shard_no: int) -> None:
        """Delete the files of shards ``shard_no`` and after, then end their actors for good."""
        for number, actor in _shard_actors(self._settings):
            if number >= shard_no:
                ShardClient(actor, f"shard {number}", *_timeouts(self._settings)).destroy()
                ray.kill(actor, no_restart=True)


def _shard_actors(settings: Settings) -> list[tuple[int, ActorHandle]]:
    """Every shard actor of the app's namespace that is there, by number (a reshard may have
    left more than the table has, or gaps, if it was cut short)."""
    namespace = settings.serve.namespace
    found = []
    for entry in ray.util.list_named_actors(all_namespaces=True):
        match = _SHARD_ACTOR.fullmatch(entry["name"])
        if entry["namespace"] == namespace and match is not None:
            with contextlib.suppress(ValueError):  # ended since it was listed
                found.append((int(match.group(1)), ray.get_actor(entry["name"], namespace=namespace)))
    return sorted(found, key=lambda item: item[0])


def stop_old_profile_actor(settings: Settings) -> None:
    """Close and end the profile actor an app from before profiles lived in the shards left
    running (it holds the data dir's old profile file, which is then moved into the shards)."""
    try:
        actor = ray.get_actor(_OLD_PROFILE_ACTOR, namespace=settings.serve.namespace)
    except ValueError:
        return  # none
    with contextlib.suppress(RayActorError, GetTimeoutError):  # a dead one holds no file
        ray.get(actor.invoke.remote("close"), timeout=settings.serve.call_timeout_s)
    ray.kill(actor, no_restart=True)


def stop_stores(settings: Settings) -> list[str]:
    """Close every store actor's files cleanly, then end the actors (no restart).

    Returns:
        Problems met (an actor that was already gone is not one).
    """
    # As many shards as there are now (a reshard may have changed the count).
    actors = [(shard_actor_name(number), actor) for number, actor in _shard_actors(settings)]
    problems = []
    for name, actor in actors:
        try:
            ok, value = ray.get(actor.invoke.remote("close"), timeout=settings.serve.call_timeout_s)
            if not ok:
                problems.append(f"{name}: {value}")
        except (RayActorError, GetTimeoutError) as exc:
            problems.append(f"{name}: {type(exc).__name__}")
        ray.kill(actor, no_restart=True)
    return problems
