"""Tenant isolation as a property: random calls of 3 tenants' keys for several users each, odd user
ids and guessed or foreign memory ids included, through the real HTTP app in-process (real FAISS
shards and DuckDB, the scripted engine as the LLM); and, below the API, random interleavings of
add / delete / supersede / expire / erase / reopen on the fact store itself.

Invariants after every call: no answer is a 5xx; no answer holds another (tenant, user)'s text or
memory id; every (tenant, user)'s stored memories and profile are what a model of the calls made
says, so no call of one tenant read, changed or deleted another's.
"""

from __future__ import annotations

import json
import re
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import numpy as np
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    rule,
    run_state_machine_as_test,
)

from deployments.api.app import create_api
from deployments.api.auth import Authenticator
from deployments.api.idempotency import Replays
from deployments.api.metrics import Metrics
from deployments.api.runtime import Runtime
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import NotFoundError
from memory_core.models import Fact, NewFact
from memory_core.service import MemoryService, open_local_service
from memory_core.settings import ApiKey, LimitSettings, ServeSettings, Settings, StorageSettings
from memory_core.store.facts import LocalFactStore
from memory_core.store.resharding import ReshardRunner
from memory_core.write.lanes import WriteLanes
from memory_core.write.writes import UserWrites
from tests.asgi_app import LocalSweeps, local_api
from tests.conftest import START
from tests.scripted_engine import ScriptedEngine

TENANTS = ("acme", "globex", "initech")
KEYS = {tenant: f"{tenant}-admin-key-0123456789" for tenant in TENANTS}
# Every tenant has users of the same names (a name is no identity across tenants), some of them
# with separators, dots, other scripts, another tenant's prefix, or as long as allowed.
USERS = ("alice", "a:b", "..", "日本語ü", "globex:alice", "x.y@z+w_-", "L" * 120)
# Path segments sent as they are: each must be refused with a 4xx, never reach anyone's data.
BAD_SEGMENTS = (
    "a%2Fb",
    "..%2Fglobex%3Aalice",
    "%2E%2E%2F%2E%2E",
    "acme%3Aalice%2F",
    "x%20y",
    "%20alice",
    "alice%20",
    "%00",
    "a%5Cb",
    "%F0%9F%98%80",
    "%ZZ",
    "%C2%A0",
    "a%09b",
    "L" * 200,
    "%25",
    "a%3Bb",
)
# Memory ids nobody was given: out of range, not decimal, or decimal only to str.isdigit.
GUESSED_IDS = ("0", "1", "-1", "01", "9" * 19, "9" * 20, "1e3", "0x10", "１２", "²", " 1", "1.0")
PROFILE_KEYS = ("tone", "lang", "a:b", "日本 語", "Answer-Length")
TTLS = (None, 1000.0, 5000.0, 9000.0)  # never a whole hour: no expiry falls on a sweep's cut-off
VOCAB = ("red", "tea", "river", "piano", "lemon", "winter", "garden", "cycling")
_NUMBER = re.compile(r"\d+")

Owner = tuple[str, str]


def segment(user: str) -> str:
    """``user`` as one path segment (dot segments escaped so no client folds them away)."""
    quoted = quote(user, safe="")
    return "%2E" * len(user) if set(user) == {"."} else quoted


@dataclass
class Model:
    """What every (tenant, user) should hold after the calls made so far."""

    facts: dict[Owner, dict[str, tuple[str, datetime | None]]] = field(default_factory=dict)
    profile: dict[Owner, dict[str, str]] = field(default_factory=dict)
    canaries: dict[str, Owner] = field(default_factory=dict)  # every text ever sent, by its writer
    ids: dict[str, Owner] = field(default_factory=dict)  # every memory id ever given out
    jobs: dict[str, Owner] = field(default_factory=dict)


STATS: Counter[str] = Counter()


def _engine() -> ScriptedEngine:
    engine = ScriptedEngine()
    # A forget request's target is what follows "forget"; the match says yes to what it is asked
    # about, so forgetting deletes some memories and keeps others. Turns are never forget requests
    # (a forget by turn is the write-path suite's): they reach the extractor, which finds nothing.
    engine.defaults["forget_target"] = lambda utterance: json.dumps(
        {"target": utterance.removeprefix("forget ")[:80]}
    )
    engine.defaults["forget_match"] = "yes"
    engine.defaults["forget_intent"] = "no"
    return engine


class TenantIsolation(RuleBasedStateMachine):
    """Three tenants' keys calling for their users, each call checked against the model."""

    fact_ids = Bundle("fact_ids")
    job_ids = Bundle("job_ids")

    def __init__(self, embedder: Embedder) -> None:
        super().__init__()
        STATS["examples"] += 1
        self._dir = tempfile.TemporaryDirectory(prefix="isolation-")
        self.clock = ManualClock(START)
        config = Settings(
            storage=StorageSettings(data_dir=Path(self._dir.name) / "data", shards=2, snapshot_every=7),
            serve=ServeSettings(
                api_keys=[ApiKey(key=key, tenant=tenant, admin=True) for tenant, key in KEYS.items()]
            ),
        )
        self.service: MemoryService = open_local_service(config, self.clock, embedder, _engine())
        self.lanes = WriteLanes(config.write)
        runtime = Runtime(
            settings=config,
            service=self.service,
            writes=UserWrites(self.service, self.lanes),
            replays=Replays(self.service.facts, self.clock, timedelta(hours=24)),
            auth=Authenticator(config.serve),
            metrics=Metrics(lambda: {}),
            sweeps=LocalSweeps(self.service),
            reshards=ReshardRunner(self.service.facts.resharder),  # type: ignore[attr-defined]
            health=lambda: {"ok": True},
        )
        self.client = TestClient(create_api(runtime))
        self.model = Model()
        self.serial = 0

    def teardown(self) -> None:
        self.lanes.close()
        self.client.close()
        self.service.close()
        self._dir.cleanup()

    # --- helpers -------------------------------------------------------------------------------

    def _canary(self, owner: Owner, words: int = 2) -> str:
        """A text only ``owner`` ever sends (a few shared words, so recall and forget have work)."""
        self.serial += 1
        token = f"cnry{self.serial:05d}x"
        text = " ".join([*(VOCAB[(self.serial * 7 + i) % len(VOCAB)] for i in range(words)), token])
        self.model.canaries[token] = owner
        return text

    def _call(self, tenant: str, method: str, path: str, me: Owner | None, **kwargs: Any) -> Any:
        """One call with ``tenant``'s key; checks the answer is no 5xx and holds nothing of
        anyone but ``me`` (nothing of anyone when None). Returns the response."""
        STATS["calls"] += 1
        response = self.client.request(
            method, path, headers={"Authorization": f"Bearer {KEYS[tenant]}"}, **kwargs
        )
        STATS[f"{response.status_code // 100}xx"] += 1
        body = response.text
        assert response.status_code < 500, f"{method} {path} answered {response.status_code}: {body}"
        # What the caller sent (a foreign text as a query, a foreign id in the path) may come back
        # to them: it is theirs to know. Nothing else of anyone else's may.
        sent = path + json.dumps(kwargs.get("json"), ensure_ascii=False)
        leaked = [t for t, o in self.model.canaries.items() if o != me and t in body and t not in sent]
        assert not leaked, f"{method} {path} as {me} shows others' texts {leaked}: {body}"
        foreign = {
            n
            for n in _NUMBER.findall(body)
            if self.model.ids.get(n, me) != me and n not in _NUMBER.findall(sent)
        }
        assert not foreign, f"{method} {path} as {me} shows others' memory ids {foreign}: {body}"
        return response

    def _path(self, owner: Owner, rest: str = "") -> str:
        return f"/v1/users/{segment(owner[1])}{rest}"

    def _facts(self, owner: Owner) -> dict[str, tuple[str, datetime | None]]:
        return self.model.facts.setdefault(owner, {})

    def _check_own_memories(self, owner: Owner, memories: list[dict[str, Any]]) -> None:
        mine = self._facts(owner)
        for memory in memories:
            assert memory["id"] in mine, (owner, memory)
            assert memory["text"] == mine[memory["id"]][0], (owner, memory)

    # --- rules ---------------------------------------------------------------------------------

    @rule(
        target=fact_ids,
        tenant=st.sampled_from(TENANTS),
        user=st.sampled_from(USERS),
        ttls=st.lists(st.sampled_from(TTLS), min_size=1, max_size=3),
    )
    def remember(self, tenant: str, user: str, ttls: list[float | None]) -> Any:
        owner = (tenant, user)
        texts = [self._canary(owner) for _ in ttls]
        body = {
            "memories": [
                {"text": text, **({"ttl_seconds": ttl} if ttl else {})}
                for text, ttl in zip(texts, ttls, strict=True)
            ]
        }
        answer = self._call(tenant, "POST", self._path(owner, "/memories"), owner, json=body)
        assert answer.status_code == 201, answer.text
        stored = answer.json()["memories"]
        assert [m["text"] for m in stored] == texts
        now = self.clock.now()
        for memory, ttl in zip(stored, ttls, strict=True):
            assert memory["id"] not in self.model.ids, "an id given out twice"
            self.model.ids[memory["id"]] = owner
            expiry = now + timedelta(seconds=ttl) if ttl else None
            self._facts(owner)[memory["id"]] = (memory["text"], expiry)
        return multiple(*(m["id"] for m in stored))

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS))
    def list_memories(self, tenant: str, user: str) -> None:
        owner = (tenant, user)
        answer = self._call(tenant, "GET", self._path(owner, "/memories"), owner)
        assert answer.status_code == 200, answer.text
        listed = {m["id"]: m["text"] for m in answer.json()["memories"]}
        assert listed == {i: text for i, (text, _) in self._facts(owner).items()}

    @rule(tenant=st.sampled_from(TENANTS), limit=st.sampled_from((1, 2, 1000)))
    def list_users(self, tenant: str, limit: int) -> None:
        listed: list[str] = []
        after = ""
        while True:  # every page, each after the last id of the one before
            answer = self._call(tenant, "GET", "/v1/users", None, params={"limit": limit, "after": after})
            assert answer.status_code == 200, answer.text
            page = answer.json()
            listed += [u["user_id"] for u in page["users"]]
            if page["next_after"] is None:
                break
            after = page["next_after"]
        assert listed == sorted(set(listed)), listed
        holding = {user for (t, user), facts in self.model.facts.items() if t == tenant and facts}
        holding |= {user for (t, user), entries in self.model.profile.items() if t == tenant and entries}
        # Facts swept, forgotten or superseded may still be stored: never fewer, never another's.
        assert holding <= set(listed) <= set(USERS), (tenant, listed, holding)

    @rule(
        tenant=st.sampled_from(TENANTS),
        user=st.sampled_from(USERS),
        fact_id=st.one_of(fact_ids, st.sampled_from(GUESSED_IDS)),
    )
    def get_memory(self, tenant: str, user: str, fact_id: str) -> None:
        owner = (tenant, user)
        answer = self._call(tenant, "GET", self._path(owner, f"/memories/{quote(fact_id, safe='')}"), owner)
        if fact_id in self._facts(owner):
            assert answer.status_code == 200, answer.text
            assert answer.json()["text"] == self._facts(owner)[fact_id][0]
        else:
            assert answer.status_code == 404, answer.text

    @rule(
        tenant=st.sampled_from(TENANTS),
        user=st.sampled_from(USERS),
        fact_id=st.one_of(fact_ids, st.sampled_from(GUESSED_IDS)),
    )
    def delete_memory(self, tenant: str, user: str, fact_id: str) -> None:
        owner = (tenant, user)
        answer = self._call(
            tenant, "DELETE", self._path(owner, f"/memories/{quote(fact_id, safe='')}"), owner
        )
        if fact_id in self._facts(owner):
            assert answer.status_code == 200, answer.text
            assert answer.json()["deleted"] == [fact_id]
            del self._facts(owner)[fact_id]
        else:
            assert answer.status_code == 404, answer.text

    def _some_canary(self, data: st.DataObject) -> str:
        """A text someone wrote (anyone's: a foreign one must find nothing)."""
        tokens = sorted(self.model.canaries)
        return data.draw(st.sampled_from(tokens)) if tokens else "cnry99999x"

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS), data=st.data())
    def recall(self, tenant: str, user: str, data: st.DataObject) -> None:
        owner = (tenant, user)
        query = f"{data.draw(st.sampled_from(VOCAB))} {self._some_canary(data)}"
        answer = self._call(
            tenant, "POST", self._path(owner, "/recall"), owner, json={"query": query, "k": 10}
        )
        assert answer.status_code == 200, answer.text
        self._check_own_memories(owner, answer.json()["memories"])
        profile = {e["key"]: e["text"] for e in answer.json()["profile"]}
        assert profile == self.model.profile.get(owner, {})

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS), data=st.data())
    def prompt(self, tenant: str, user: str, data: st.DataObject) -> None:
        owner = (tenant, user)
        session = data.draw(st.sampled_from(("default", "s:1", "alice")))
        body = {"query": self._some_canary(data), "session_id": session}
        answer = self._call(tenant, "POST", self._path(owner, "/prompt"), owner, json=body)
        assert answer.status_code == 200, answer.text

    @rule(
        target=job_ids,
        tenant=st.sampled_from(TENANTS),
        user=st.sampled_from(USERS),
        session=st.sampled_from(("default", "s:1", "alice")),
        wait=st.booleans(),
    )
    def ingest(self, tenant: str, user: str, session: str, wait: bool) -> Any:
        owner = (tenant, user)
        body = {
            "session_id": session,
            "turns": [{"role": "user", "content": f"I like {self._canary(owner, 1)}"}],
            "wait": wait,
        }
        answer = self._call(tenant, "POST", self._path(owner, "/turns"), owner, json=body)
        if wait:
            assert answer.status_code == 200, answer.text
            for result in answer.json()["results"]:
                # The scripted extractor finds nothing: the turn lands in the working window only.
                assert result["memories"] == [] and result["forgotten"] == [], result
            return multiple()
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["job_id"]
        self.model.jobs[job_id] = owner
        return job_id

    @rule(tenant=st.sampled_from(TENANTS), job_id=st.one_of(job_ids, st.just("0" * 24)))
    def get_job(self, tenant: str, job_id: str) -> None:
        owner = self.model.jobs.get(job_id)
        answer = self._call(tenant, "GET", f"/v1/jobs/{job_id}", owner)
        if owner is not None and owner[0] == tenant:
            assert answer.status_code == 200, answer.text
        else:
            assert answer.status_code == 404, answer.text

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS), data=st.data())
    def forget(self, tenant: str, user: str, data: st.DataObject) -> None:
        owner = (tenant, user)
        utterance = f"forget {self._some_canary(data)}"
        answer = self._call(
            tenant, "POST", self._path(owner, "/forget"), owner, json={"utterance": utterance}
        )
        assert answer.status_code == 200, answer.text
        result = answer.json()
        self._check_own_memories(owner, result["memories"])
        assert result["earlier_versions"] == 0, result  # nothing here supersedes
        for memory in result["memories"]:
            del self._facts(owner)[memory["id"]]
        for key in result["profile_keys"]:
            del self.model.profile[owner][key]

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS))
    def erase(self, tenant: str, user: str) -> None:
        owner = (tenant, user)
        answer = self._call(tenant, "DELETE", self._path(owner), owner)
        assert answer.status_code == 200, answer.text
        receipt = answer.json()
        assert receipt["user_id"] == user
        assert receipt["memories"] == len(self._facts(owner))
        assert receipt["profile_entries"] == len(self.model.profile.get(owner, {}))
        self.model.facts[owner] = {}
        self.model.profile[owner] = {}
        self.model.jobs = {j: o for j, o in self.model.jobs.items() if o != owner}

    @rule(
        tenant=st.sampled_from(TENANTS),
        user=st.sampled_from(USERS),
        key=st.one_of(st.none(), st.sampled_from(PROFILE_KEYS)),
    )
    def set_preference(self, tenant: str, user: str, key: str | None) -> None:
        owner = (tenant, user)
        text = f"answer with {self._canary(owner, 1)}"
        entries = self.model.profile.setdefault(owner, {})
        if key is None:
            answer = self._call(tenant, "POST", self._path(owner, "/profile"), owner, json={"text": text})
            wanted = 201
        else:
            path = self._path(owner, f"/profile/{quote(key, safe='')}")
            answer = self._call(tenant, "PUT", path, owner, json={"text": text})
            wanted = 200
        full = len(entries) >= self.service.settings.limits.max_profile_entries
        if full and (key is None or key not in entries):
            assert answer.status_code == 409, answer.text
            return
        assert answer.status_code == wanted, answer.text
        stored = answer.json()
        assert key is None or stored["key"] == key
        entries[stored["key"]] = stored["text"]

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS))
    def get_profile(self, tenant: str, user: str) -> None:
        owner = (tenant, user)
        answer = self._call(tenant, "GET", self._path(owner, "/profile"), owner)
        assert answer.status_code == 200, answer.text
        assert {e["key"]: e["text"] for e in answer.json()["profile"]} == self.model.profile.get(owner, {})

    @rule(tenant=st.sampled_from(TENANTS), user=st.sampled_from(USERS), data=st.data())
    def delete_preference(self, tenant: str, user: str, data: st.DataObject) -> None:
        owner = (tenant, user)
        # Any key anyone holds, or a fixed one: only the caller's own entry may go.
        held = sorted({k for entries in self.model.profile.values() for k in entries} | set(PROFILE_KEYS))
        key = data.draw(st.sampled_from(held))
        answer = self._call(tenant, "DELETE", self._path(owner, f"/profile/{quote(key, safe='')}"), owner)
        entries = self.model.profile.setdefault(owner, {})
        if key in entries:
            assert answer.status_code == 200, answer.text
            del entries[key]
        else:
            assert answer.status_code == 404, answer.text

    @rule()
    def an_hour_passes(self) -> None:
        self.clock.advance(timedelta(hours=1))

    @rule(tenant=st.sampled_from(TENANTS))
    def sweep(self, tenant: str) -> None:
        answer = self._call(tenant, "POST", "/v1/admin/sweep", None, json={})
        assert answer.status_code == 200, answer.text
        now = self.clock.now()
        due = 0
        for owner, facts in self.model.facts.items():
            if owner[0] != tenant:
                continue
            gone = [i for i, (_, expiry) in facts.items() if expiry is not None and expiry < now]
            due += len(gone)
            for fact_id in gone:
                del facts[fact_id]
        assert answer.json()["deleted"] == due, (answer.json(), due)

    @rule(
        tenant=st.sampled_from(TENANTS),
        raw=st.sampled_from(BAD_SEGMENTS),
        call=st.sampled_from(
            (
                ("GET", "/memories"),
                ("POST", "/memories"),
                ("POST", "/recall"),
                ("POST", "/forget"),
                ("GET", "/profile"),
                ("PUT", "/profile/tone"),
                ("DELETE", ""),
                ("DELETE", "/memories/1"),
            )
        ),
        data=st.data(),
    )
    def odd_user(self, tenant: str, raw: str, call: tuple[str, str], data: st.DataObject) -> None:
        """A user id that is no valid id: refused with a 4xx; nobody's data moves (invariant)."""
        method, rest = call
        nobody = (tenant, f"?{raw}")
        text = self._canary(nobody)
        bodies = {
            "/memories": {"memories": [{"text": text}]},
            "/recall": {"query": self._some_canary(data)},
            "/forget": {"utterance": f"forget {self._some_canary(data)}"},
            "/profile/tone": {"text": text},
        }
        kwargs = {"json": bodies[rest]} if method in ("POST", "PUT") else {}
        answer = self._call(tenant, method, f"/v1/users/{raw}{rest}", None, **kwargs)
        assert 400 <= answer.status_code < 500, f"{method} {raw}{rest}: {answer.status_code} {answer.text}"

    # --- invariants ----------------------------------------------------------------------------

    @invariant()
    def everyone_holds_what_the_model_says(self) -> None:
        """Read under the API: each (tenant, user)'s memories and profile are the model's."""
        STATS["steps"] += 1
        for tenant in TENANTS:
            for user in USERS:
                owner = (tenant, user)
                stored = f"{tenant}:{user}"
                facts = self.service.list_facts(stored)
                assert all(f.user_id == stored for f in facts)
                assert {str(f.id): f.text for f in facts} == {
                    i: text for i, (text, _) in self.model.facts.get(owner, {}).items()
                }, owner
                profile = {e.key: e.text for e in self.service.profile(stored)}
                assert profile == self.model.profile.get(owner, {}), owner


def test_no_tenant_or_user_sees_or_changes_another_ones_memories(embedder: Embedder) -> None:
    STATS.clear()
    began = time.monotonic()
    run_state_machine_as_test(
        lambda: TenantIsolation(embedder),
        settings=settings(
            max_examples=40,
            stateful_step_count=50,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
        ),
    )
    print(
        f"\ntenant isolation: {STATS['examples']} examples, {STATS['steps'] - STATS['examples']} steps, "
        f"{STATS['calls']} HTTP calls ({STATS['2xx']} 2xx, {STATS['4xx']} 4xx), "
        f"{time.monotonic() - began:.1f} s"
    )
    assert STATS["5xx"] == 0


# --- the fact store alone ----------------------------------------------------------------------

DIM = 8
STORE_USERS = ("acme:alice", "acme:a:b", "globex:alice", "globex:acme:alice", "initech:..", "acme:")

_user = st.sampled_from(STORE_USERS)
_op = st.one_of(
    st.tuples(st.just("add"), _user, st.integers(1, 3), st.booleans()),
    st.tuples(st.just("delete"), _user, st.integers(0, 1_000)),
    st.tuples(st.just("supersede"), _user, st.integers(0, 1_000), st.integers(0, 1_000)),
    st.tuples(st.just("erase"), _user),
    st.tuples(st.just("expire"), st.sampled_from(("acme", "globex", "initech", None))),
    st.tuples(st.just("reopen")),
)


def _vector(seed: int) -> np.ndarray:
    v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


STORE_STATS: Counter[str] = Counter()


def test_no_interleaving_of_store_calls_hands_one_user_another_ones_fact() -> None:
    STORE_STATS.clear()
    began = time.monotonic()
    _interleavings()
    print(
        f"\nfact store: {STORE_STATS['examples']} examples, {STORE_STATS['ops']} operations, "
        f"{time.monotonic() - began:.1f} s"
    )


@settings(max_examples=100, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=st.lists(_op, min_size=1, max_size=30))
def _interleavings(ops: list[tuple[Any, ...]]) -> None:
    """Random add / delete / supersede / erase / expire / reopen over users of 3 tenants whose ids
    share prefixes and separators; after each, every user's view is checked."""
    STORE_STATS["examples"] += 1
    STORE_STATS["ops"] += len(ops)
    with tempfile.TemporaryDirectory(prefix="isolation-store-") as tmp:
        storage = StorageSettings(data_dir=Path(tmp), shards=2, snapshot_every=5)

        def open_store() -> LocalFactStore:
            return LocalFactStore(storage, LimitSettings(), DIM, "test")

        store = open_store()
        owned: dict[int, str] = {}  # live fact id -> owner
        every: list[int] = []  # ids ever given, live or not: drawn from for foreign calls
        expiring: dict[int, datetime] = {}
        replaced_by: dict[int, int] = {}  # old fact id -> the fact that superseded it
        now = START
        try:
            for n, op in enumerate(ops):
                kind = op[0]
                if kind == "add":
                    _, user, count, temporary = op
                    news = [
                        NewFact(
                            user_id=user,
                            text=f"{user} fact {n}.{i}",
                            created_at=now,
                            expire_at=now + timedelta(minutes=30) if temporary else None,
                        )
                        for i in range(count)
                    ]
                    added = store.add(news, np.vstack([_vector(n * 10 + i) for i in range(count)]))
                    for fact in added:
                        owned[fact.id] = user
                        every.append(fact.id)
                        if fact.expire_at is not None:
                            expiring[fact.id] = fact.expire_at
                elif kind == "delete" and every:
                    _, user, pick = op
                    fact_id = every[pick % len(every)]
                    if owned.get(fact_id) == user:
                        # The older versions a fact replaced go with it (and only the user's).
                        gone = _with_history(fact_id, user, owned, replaced_by)
                        assert sorted(store.delete(user, [fact_id])) == sorted(gone)
                        for i in gone:
                            del owned[i]
                    else:
                        with pytest.raises(NotFoundError):
                            store.delete(user, [fact_id])
                elif kind == "supersede" and every:
                    _, user, old_pick, new_pick = op
                    old, new = every[old_pick % len(every)], every[new_pick % len(every)]
                    if owned.get(old) == user and owned.get(new) == user:
                        if old != new:
                            store.supersede(user, old, new)
                            replaced_by[old] = new
                    else:
                        with pytest.raises(NotFoundError):
                            store.supersede(user, old, new)
                elif kind == "erase":
                    store.erase_user(op[1])
                    owned = {i: u for i, u in owned.items() if u != op[1]}
                elif kind == "expire":
                    now += timedelta(hours=1)
                    tenant = op[1]
                    store.expire(now, tenant=tenant)
                    owned = {
                        i: u
                        for i, u in owned.items()
                        if not (
                            i in expiring
                            and expiring[i] < now
                            and (tenant is None or u.startswith(f"{tenant}:"))
                        )
                    }
                elif kind == "reopen":
                    store.close()
                    store = open_store()
                _check_store(store, owned, every, now)
        finally:
            store.close()


def _with_history(fact_id: int, user: str, owned: dict[int, str], replaced_by: dict[int, int]) -> list[int]:
    """``fact_id`` and the user's live facts it replaced, directly or down a chain."""
    found = [fact_id]
    for current in found:  # grows while it is walked
        found.extend(
            i for i, u in owned.items() if u == user and replaced_by.get(i) == current and i not in found
        )
    return found


def _check_store(store: LocalFactStore, owned: dict[int, str], every: list[int], now: datetime) -> None:
    """Each user lists, finds and fetches their own live facts, and nobody else's."""
    for user in STORE_USERS:
        mine = {i for i, u in owned.items() if u == user}
        listed: list[Fact] = store.list_user(user, include_superseded=True)
        assert {f.id for f in listed} == mine, user
        assert all(f.user_id == user for f in listed)
        for fact, _ in store.search(user, _vector(0), 50, now):
            assert fact.user_id == user and fact.id in mine, (user, fact)
        for fact_id in every:
            if fact_id in mine:
                assert store.get(user, fact_id).user_id == user
            else:
                with pytest.raises(NotFoundError):
                    store.get(user, fact_id)


def test_a_memory_id_of_digits_only_to_str_isdigit_is_a_404_not_a_500(
    settings: Settings, embedder: Embedder
) -> None:
    """Found by the state machine above: ``"²".isdigit()`` is true and ``int("²")`` raises, so
    GET and DELETE of ``/memories/²`` answered 500."""
    settings.serve = ServeSettings(api_keys=[ApiKey(key=KEYS["acme"], tenant="acme")])
    service = open_local_service(settings, ManualClock(START), embedder)
    try:
        with TestClient(local_api(service), headers={"Authorization": f"Bearer {KEYS['acme']}"}) as client:
            for raw in ("²", "①", "١٢", "１２"):
                for method in ("GET", "DELETE"):
                    answer = client.request(method, f"/v1/users/alice/memories/{quote(raw)}")
                    assert answer.status_code == 404, (raw, method, answer.text)
    finally:
        service.close()


def test_an_erase_of_a_user_id_with_an_encoded_slash_is_not_redirected_to_another_user(
    settings: Settings, embedder: Embedder
) -> None:
    """Found by the state machine above: ``DELETE /v1/users/a%3Ab%2F`` (user "a:b/", not a valid
    id) was redirected without its trailing slash, and the redirect erased user "a:b"."""
    settings.serve = ServeSettings(api_keys=[ApiKey(key=KEYS["acme"], tenant="acme")])
    service = open_local_service(settings, ManualClock(START), embedder)
    try:
        with TestClient(local_api(service), headers={"Authorization": f"Bearer {KEYS['acme']}"}) as client:
            stored = client.post("/v1/users/a%3Ab/memories", json={"memories": [{"text": "User keeps bees"}]})
            assert stored.status_code in (200, 201), stored.text
            answer = client.delete("/v1/users/a%3Ab%2F")
            assert 400 <= answer.status_code < 500, answer.text
            assert [m["text"] for m in client.get("/v1/users/a%3Ab/memories").json()["memories"]] == [
                "User keeps bees"
            ]
    finally:
        service.close()
