"""Write lanes: one user's writes one at a time in arrival order, different users' at once, a
bounded queue, and an erase that cancels what was queued before it; a queued write that waits
for an LLM it cannot reach instead of dropping the turn. Logic tests on writes that wait on
events (no model); the same lanes run every API write in the suites over the real app, and the
race they close and the wait for the LLM are shown below over the HTTP API on real shards."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from ray.exceptions import ActorDiedError
from ray.serve.exceptions import DeploymentID, DeploymentUnavailableError

from benchmarks.write_throughput import fixed_latency_server
from deployments.llm import RemoteEngine
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.errors import LLMOutputError, LLMUnavailableError, WriteQueueFullError
from memory_core.llm.base import Completion
from memory_core.llm.openai_engine import OpenAIEngine
from memory_core.models import Role, Turn
from memory_core.service import Remember, open_local_service
from memory_core.settings import ServeSettings, Settings, WriteSettings
from memory_core.write import pipeline, writes
from memory_core.write.lanes import WriteLanes
from memory_core.write.writes import UserWrites
from tests.asgi_app import local_api
from tests.scripted_engine import ScriptedEngine, facts_json
from tests.serve_app import free_port


@pytest.fixture
def lanes() -> Iterator[Callable[..., WriteLanes]]:
    made: list[WriteLanes] = []

    def make(concurrency: int = 4, max_pending: int = 10_000) -> WriteLanes:
        made.append(WriteLanes(WriteSettings(concurrency=concurrency, max_pending=max_pending)))
        return made[-1]

    yield make
    for each in made:
        each.close(wait=False)


def test_each_users_writes_run_alone_and_in_order(lanes: Callable[..., WriteLanes]) -> None:
    pool = lanes(concurrency=4)
    done: dict[str, list[int]] = {}
    running: set[str] = set()
    overlaps: list[str] = []
    guard = threading.Lock()

    def write(user: str, n: int) -> int:
        with guard:
            if user in running:
                overlaps.append(user)
            running.add(user)
        time.sleep(0.002)
        with guard:
            running.discard(user)
            done.setdefault(user, []).append(n)
        return n

    futures = [
        pool.submit(user, lambda u=user, n=n: write(u, n))
        for n in range(25)
        for user in ("a", "b", "c", "d", "e")
    ]
    assert [f.result(timeout=30) for f in futures] == [n for n in range(25) for _ in range(5)]
    assert overlaps == []
    assert done == {user: list(range(25)) for user in "abcde"}
    assert pool.pending() == 0 and pool.completed() == 125


def test_different_users_are_written_at_once_up_to_the_concurrency(lanes: Callable[..., WriteLanes]) -> None:
    pool = lanes(concurrency=4)
    four = threading.Barrier(4, timeout=10)
    # Four users' writes meet at a barrier: they pass only if all four run at the same time.
    results = [pool.submit(u, four.wait) for u in "wxyz"]
    assert sorted(f.result(timeout=20) for f in results) == [0, 1, 2, 3]

    two = threading.Barrier(2, timeout=0.5)
    same = [pool.submit("w", two.wait), pool.submit("w", two.wait)]  # one user: never together
    with pytest.raises(threading.BrokenBarrierError):
        same[0].result(timeout=20)


def test_a_full_queue_refuses_async_writes_but_not_awaited_ones(lanes: Callable[..., WriteLanes]) -> None:
    pool = lanes(concurrency=1, max_pending=3)
    gate = threading.Event()
    pool.submit("busy", gate.wait)
    while pool.running() == 0:
        time.sleep(0.001)
    queued = [pool.submit(f"u{n}", lambda n=n: n) for n in range(3)]
    with pytest.raises(WriteQueueFullError) as full:
        pool.submit("u9", lambda: 9)
    assert full.value.retry_after_s == 5.0
    awaited = pool.submit("u9", lambda: 9, bounded=False)
    assert pool.oldest_pending_s() > 0
    gate.set()
    assert [f.result(timeout=10) for f in queued] == [0, 1, 2] and awaited.result(timeout=10) == 9


def test_an_erase_cancels_what_was_queued_before_it_and_waits_for_the_running_write(
    lanes: Callable[..., WriteLanes],
) -> None:
    pool = lanes(concurrency=2)
    gate = threading.Event()
    order: list[str] = []
    running = pool.submit("eve", lambda: (gate.wait(10), order.append("running"))[1])
    while pool.running() == 0:
        time.sleep(0.001)
    queued = [pool.submit("eve", lambda n=n: order.append(f"queued {n}")) for n in range(3)]
    other = pool.submit("zed", lambda: order.append("zed"))
    erased: Future[tuple[int, str]] = Future()
    threading.Thread(
        target=lambda: erased.set_result(pool.run_alone("eve", lambda: order.append("erase") or "receipt"))
    ).start()
    while not all(f.cancelled() for f in queued):
        time.sleep(0.001)
    gate.set()
    assert erased.result(timeout=10) == (3, "receipt")
    running.result(timeout=10)
    other.result(timeout=10)
    assert [o for o in order if o != "zed"] == ["running", "erase"]
    for f in queued:
        with pytest.raises(CancelledError):
            f.result()


def test_one_users_backlog_does_not_starve_another(lanes: Callable[..., WriteLanes]) -> None:
    pool = lanes(concurrency=1)
    gate = threading.Event()
    order: list[str] = []
    pool.submit("heavy", gate.wait)
    while pool.running() == 0:
        time.sleep(0.001)
    backlog = [pool.submit("heavy", lambda n=n: order.append(f"heavy {n}")) for n in range(10)]
    light = pool.submit("light", lambda: order.append("light"))
    gate.set()
    light.result(timeout=10)
    for f in backlog:
        f.result(timeout=10)
    assert order.index("light") <= 1, order  # it waited for one heavy write, not for ten


def test_two_concurrent_ingests_of_one_user_store_the_fact_once(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> None:
    # Both requests judge and extract the same fact, then look for it among the stored ones
    # before storing it. Side by side, each looked before the other stored, and the fact was
    # stored twice. The engine and the store's search take a fixed time (a remote shard would):
    # the race is in the queue, not the model.
    engine = ScriptedEngine()
    engine.latency_s = 0.05
    engine.defaults["extract"] = facts_json(
        ("User keeps two ferrets named Pip and Juno", "identity", "fact", False)
    )
    settings.serve = ServeSettings(local_only=True)
    service = open_local_service(settings, clock, embedder, engine)
    search = service.facts.search

    def slow_search(*args: object) -> object:
        found = search(*args)  # type: ignore[arg-type]
        time.sleep(0.3)
        return found

    service.facts.search = slow_search  # type: ignore[method-assign]
    body = {"session_id": "s", "turns": [{"role": "user", "content": "I have two ferrets, Pip and Juno"}]}
    with TestClient(local_api(service)) as client:
        answers: list[int] = []
        threads = [
            threading.Thread(
                target=lambda: answers.append(client.post("/v1/users/fay/turns", json=body).status_code)
            )
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert answers == [200, 200]
        assert [m["text"] for m in client.get("/v1/users/fay/memories").json()["memories"]] == [
            "User keeps two ferrets named Pip and Juno"
        ]
    service.close()


def test_a_turn_written_at_once_gets_an_id_that_its_memories_name(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> None:
    engine = ScriptedEngine()
    engine.defaults["extract"] = facts_json(("User plays the bassoon", "identity", "fact", False))
    settings.serve = ServeSettings(local_only=True)
    service = open_local_service(settings, clock, embedder, engine)
    body = {"session_id": "s", "turns": [{"role": "user", "content": "I play the bassoon"}]}
    with TestClient(local_api(service)) as client:
        [result] = client.post("/v1/users/gil/turns", json=body).json()["results"]
        memories = client.get("/v1/users/gil/memories").json()["memories"]
        metrics = client.get("/metrics").text
    assert result["turn_id"].startswith("t-")
    assert [m["source_turn_ids"] for m in memories] == [[result["turn_id"]]]
    # The write's LLM calls are counted where it ran (the writer; here the in-process one).
    assert f'longmem_llm_calls{{part="local"}} {float(len(engine.calls))}' in metrics, metrics
    assert engine.calls and 'longmem_writes_completed{part="local"} 1.0' in metrics
    service.close()


def test_a_full_queue_answers_429_with_retry_after_and_loses_nothing_it_accepted(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> None:
    engine = ScriptedEngine()
    engine.latency_s = 0.3
    engine.defaults["extract"] = lambda message: facts_json(
        (f"User said {message}", "identity", "fact", False)
    )
    settings.serve = ServeSettings(local_only=True)
    settings.write = WriteSettings(concurrency=1, max_pending=2, retry_after_s=7)
    service = open_local_service(settings, clock, embedder, engine)
    with TestClient(local_api(service)) as client:
        accepted, refused = [], []
        for n in range(8):
            body = {"wait": False, "turns": [{"role": "user", "content": f"I own {n + 2} bicycles"}]}
            answer = client.post(f"/v1/users/gus{n}/turns", json=body)
            (accepted if answer.status_code == 202 else refused).append((n, answer))
        assert refused, "the queue never filled"
        for _, answer in refused:
            assert answer.status_code == 429 and answer.headers["Retry-After"] == "7", answer.text
            assert answer.json()["error"] == "WriteQueueFullError"
        for n, answer in accepted:
            job_id = answer.json()["job_id"]
            deadline = time.monotonic() + 60
            while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] in ("queued", "running"):
                assert time.monotonic() < deadline
                time.sleep(0.05)
            assert job["status"] == "done", job
            stored = client.get(f"/v1/users/gus{n}/memories").json()["memories"]
            assert len(stored) == 1 and f"I own {n + 2} bicycles" in stored[0]["text"], stored
        for n, _ in refused:  # refused: nothing stored, not even in the working window
            assert client.get(f"/v1/users/gus{n}/memories").json()["memories"] == []
    service.close()


def _unreachable(_message: str) -> str:
    raise LLMUnavailableError("cannot reach the test's LLM")


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(writes, "LLM_RETRY_S", (0.05,))


@pytest.fixture
def quick_to_report(monkeypatch: pytest.MonkeyPatch) -> None:
    """A turn the server fails on is reported after its tries, however short they took."""
    monkeypatch.setattr(pipeline, "FAILING_WHILE_LLM_ANSWERS_S", 0.0)


def test_a_queued_turn_waits_for_an_llm_that_cannot_be_reached_and_is_written_once_it_answers(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None
) -> None:
    """A turn answered "accepted" was dropped when the LLM could not be reached for it (a
    server closing a kept-alive connection under the cluster-kill test): the batch was marked
    written with the error in its outcome."""
    engine = ScriptedEngine()
    engine.script("judge", _unreachable, _unreachable, "yes", "yes")
    engine.script("extract", _unreachable, facts_json(("User grows chillies", "identity", "fact", False)))
    engine.script("ping", _unreachable, _unreachable)  # an outage: nothing answers
    engine.defaults["extract"] = facts_json(("User keeps bees", "identity", "fact", False))
    service = open_local_service(settings, clock, embedder, engine)
    lanes = WriteLanes(settings.write)
    queued = UserWrites(service, lanes)
    turns = [Turn(role=Role.USER, content="I grow chillies"), Turn(role=Role.USER, content="I keep bees")]
    outcomes = queued.queue_turns("acme:ivy", "s", turns).future.result(timeout=30)
    assert [o.error for o in outcomes] == [None, None]
    assert sorted(f.text for f in service.list_facts("acme:ivy")) == [
        "User grows chillies",
        "User keeps bees",
    ]
    # The first turn, tried again once a short request is answered: in the outage only those.
    assert engine.calls[:10] == [
        "judge",
        "ping",
        "ping",
        "ping",
        "judge",
        "ping",
        "judge",
        "extract",
        "ping",
        "judge",
    ]
    assert service.facts.pending_turns() == []
    lanes.close()
    service.close()


def test_a_write_waiting_for_the_llm_gives_way_to_an_erase_and_to_a_stop_and_loses_nothing(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None
) -> None:
    engine = ScriptedEngine()
    engine.defaults["judge"] = engine.defaults["ping"] = _unreachable
    service = open_local_service(settings, clock, embedder, engine)
    lanes = WriteLanes(settings.write)
    queued = UserWrites(service, lanes)
    said = [Turn(role=Role.USER, content="I sail a dinghy")]
    erased_job = queued.queue_turns("acme:ned", "s", said)
    kept_job = queued.queue_turns("acme:ola", "s", said)
    deadline = time.monotonic() + 30
    while engine.calls.count("ping") < 4:  # the writes wait, asking the LLM a short request
        assert time.monotonic() < deadline, "the writes did not try the LLM again"
        time.sleep(0.01)
    queued.erase("acme:ned")
    with pytest.raises(LLMUnavailableError, match="stay accepted"):
        erased_job.future.result(timeout=10)
    lanes.close(wait=True)  # the writer stops while the LLM is still down
    with pytest.raises(LLMUnavailableError, match="stay accepted"):
        kept_job.future.result(timeout=10)
    assert [b.user_id for b in service.facts.pending_turns()] == ["acme:ola"]

    engine.defaults["judge"] = "yes"  # the next start, with the LLM back
    engine.defaults["extract"] = facts_json(("User sails a dinghy", "identity", "fact", False))
    lanes = WriteLanes(settings.write)
    assert UserWrites(service, lanes).resume() == 1
    lanes.close(wait=True)
    assert [f.text for f in service.list_facts("acme:ola")] == ["User sails a dinghy"]
    assert service.list_facts("acme:ned") == [] and service.facts.pending_turns() == []
    service.close()


def test_an_accepted_turn_is_written_when_the_llm_server_comes_up(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None
) -> None:
    """Over HTTP, with the OpenAI engine against a real server that is not listening yet."""
    port = free_port()
    engine = OpenAIEngine(f"http://127.0.0.1:{port}/v1", "fixed-latency", timeout_s=5)
    settings.serve = ServeSettings(local_only=True)
    service = open_local_service(settings, clock, embedder, engine)
    body = {"wait": False, "turns": [{"role": "user", "content": "I restore old radios"}]}
    with TestClient(local_api(service)) as client:
        answer = client.post("/v1/users/pam/turns", json=body)
        assert answer.status_code == 202, answer.text
        job_id = answer.json()["job_id"]
        time.sleep(0.5)
        assert client.get(f"/v1/jobs/{job_id}").json()["status"] == "running"  # waiting for the LLM
        assert 'longmem_writes_waiting_for_llm{part="local"} 1.0' in client.get("/metrics").text
        _, stop_llm = fixed_latency_server(0.01, port)
        try:
            deadline = time.monotonic() + 60
            while (job := client.get(f"/v1/jobs/{job_id}").json())["status"] == "running":
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            stop_llm()
        assert job["status"] == "done" and job["results"][0]["error"] is None, job
        assert 'longmem_writes_waiting_for_llm{part="local"} 0.0' in client.get("/metrics").text
        [memory] = client.get("/v1/users/pam/memories").json()["memories"]
        assert "I restore old radios" in memory["text"]
    service.close()


def test_a_batch_left_for_the_next_start_keeps_the_users_later_batches_behind_it(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None
) -> None:
    """The writer stopping ended a write waiting for the LLM (its batch stays for the next
    start), then ran the user's later batch as the lanes drained: the LLM answering it then wrote
    it before the earlier one."""
    engine = ScriptedEngine()

    def down_for_sailing(message: str) -> str:
        if "sail" in message:
            raise LLMUnavailableError("cannot reach the test's LLM")
        return "yes"

    engine.defaults["judge"] = down_for_sailing
    engine.defaults["ping"] = _unreachable
    service = open_local_service(settings, clock, embedder, engine)
    lanes = WriteLanes(settings.write)
    queued = UserWrites(service, lanes)
    first = queued.queue_turns("acme:uma", "s", [Turn(role=Role.USER, content="I sail a dinghy")])
    later = queued.queue_turns("acme:uma", "s", [Turn(role=Role.USER, content="I bake rye bread")])
    deadline = time.monotonic() + 30
    while engine.calls.count("ping") < 2:
        assert time.monotonic() < deadline, "the first batch did not wait for the LLM"
        time.sleep(0.01)
    lanes.close(wait=True)
    for job in (first, later):
        with pytest.raises(LLMUnavailableError, match="stay accepted"):
            job.future.result(timeout=10)
    assert [len(b.turns) for b in service.facts.pending_turns()] == [1, 1]
    assert service.list_facts("acme:uma") == []

    extracted: list[str] = []

    def fact_of(message: str) -> str:
        extracted.append("User sails a dinghy" if "sail" in message else "User bakes rye bread")
        return facts_json((extracted[-1], "identity", "fact", False))

    engine.defaults["judge"], engine.defaults["extract"] = "yes", fact_of  # the next start
    lanes = WriteLanes(settings.write)
    assert UserWrites(service, lanes).resume() == 2
    lanes.close(wait=True)
    assert extracted == ["User sails a dinghy", "User bakes rye bread"]  # written in the order accepted
    assert sorted(f.text for f in service.list_facts("acme:uma")) == extracted[::-1]

    engine.defaults["judge"] = down_for_sailing  # an erase takes the batch left behind with the user
    lanes = WriteLanes(settings.write)
    queued = UserWrites(service, lanes)
    erased = queued.queue_turns("acme:vic", "s", [Turn(role=Role.USER, content="I sail a dinghy")])
    while engine.calls.count("ping") < 4:
        assert time.monotonic() < deadline + 30, "the batch did not wait for the LLM"
        time.sleep(0.01)
    queued.erase("acme:vic")
    with pytest.raises(LLMUnavailableError, match="stay accepted"):
        erased.future.result(timeout=10)
    after = queued.queue_turns("acme:vic", "s", [Turn(role=Role.USER, content="I bake rye bread")])
    assert after.future.result(timeout=10)[0].error is None
    assert [f.text for f in service.list_facts("acme:vic")] == ["User bakes rye bread"]
    lanes.close()
    service.close()


def test_a_turn_the_llm_fails_on_while_it_answers_other_requests_is_reported_not_waited_for(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None, quick_to_report: None
) -> None:
    """A turn the server failed every time (a prompt it times out on, or answers 5xx to) was
    taken for an outage and waited for, for good: it held its user's lane, and as the probe every
    other user's queued turns. Only tries in a row after which a short request was answered count."""
    engine = ScriptedEngine()
    tries = []

    def fails_on_stamps(message: str) -> str:
        if "stamps" in message:
            tries.append(message)
            raise LLMUnavailableError("read timed out")
        return "yes"

    engine.defaults["judge"] = fails_on_stamps
    engine.defaults["extract"] = facts_json(("User repairs clocks", "identity", "fact", False))
    engine.script("ping", "yes", "yes", "yes", "yes", _unreachable)  # then up: count again
    service = open_local_service(settings, clock, embedder, engine)
    lanes = WriteLanes(settings.write)
    queued = UserWrites(service, lanes)
    said = [Turn(role=Role.USER, content="I collect stamps"), Turn(role=Role.USER, content="I repair clocks")]
    outcomes = queued.queue_turns("acme:rue", "s", said).future.result(timeout=30)
    assert outcomes[0].skipped == "error" and "failed this turn 5 times: read timed out" in (
        outcomes[0].error or ""
    )
    assert outcomes[1].error is None and [f.text for f in outcomes[1].facts] == ["User repairs clocks"]
    assert len(tries) == pipeline.TRIES_WHILE_LLM_ANSWERS + 5  # 4 up, 1 down, then 5 up in a row
    assert service.facts.pending_turns() == [] and lanes.waiting_for_llm() == 0
    lanes.close()
    service.close()


def test_a_busy_or_limited_llm_and_a_short_run_of_failures_never_lose_a_turn(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None
) -> None:
    """Rate limited (429) while the short request got through, or failing one turn a few times
    in a row for a moment, a turn was reported after 5 tries (18 s of waiting) and lost, then
    each queued user's turn after it."""
    engine = ScriptedEngine()
    refusals = {
        "chillies": [LLMUnavailableError("answered 429: Rate limit reached", overloaded=True)] * 8,
        "bees": [LLMUnavailableError("answered 500: worker restarted")] * 7,
    }

    def judge(message: str) -> str:
        for word, errors in refusals.items():
            if word in message and errors:
                raise errors.pop()
        return "yes"

    engine.defaults["judge"] = judge
    engine.defaults["extract"] = lambda message: facts_json(
        ("User grows chillies" if "chillies" in message else "User keeps bees", "identity", "fact", False)
    )
    service = open_local_service(settings, clock, embedder, engine)
    lanes = WriteLanes(settings.write)
    said = [Turn(role=Role.USER, content="I grow chillies"), Turn(role=Role.USER, content="I keep bees")]
    outcomes = UserWrites(service, lanes).queue_turns("acme:ada", "s", said).future.result(timeout=30)
    assert [o.error for o in outcomes] == [None, None]
    assert sorted(f.text for f in service.list_facts("acme:ada")) == [
        "User grows chillies",
        "User keeps bees",
    ]
    assert refusals == {"chillies": [], "bees": []} and engine.calls.count("ping") == 15
    lanes.close()
    service.close()


def test_a_turn_a_real_server_keeps_failing_does_not_hold_back_other_users(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None, quick_to_report: None
) -> None:
    """Over HTTP, against a server that answers 500 to one turn's prompts and others' in time."""
    url, stop_llm = fixed_latency_server(0.01, fails_on="kaboom")
    settings.serve = ServeSettings(local_only=True)
    service = open_local_service(settings, clock, embedder, OpenAIEngine(url, "fixed-latency", timeout_s=5))
    poisoned = {
        "wait": False,
        "turns": [{"role": "user", "content": "I play drums in a band called the kaboom trio"}],
    }
    plain = {"wait": False, "turns": [{"role": "user", "content": "I restore old radios"}]}
    try:
        with TestClient(local_api(service)) as client:
            jobs = [
                client.post(f"/v1/users/{who}/turns", json=body)
                for who, body in [("ari", poisoned), ("bo", plain)]
            ]
            assert [j.status_code for j in jobs] == [202, 202]
            done = []
            deadline = time.monotonic() + 60
            for job in jobs:
                while (state := client.get(f"/v1/jobs/{job.json()['job_id']}").json())["status"] == "running":
                    assert time.monotonic() < deadline, "a turn the server keeps failing was waited for"
                    time.sleep(0.05)
                done.append(state)
            assert [d["status"] for d in done] == ["done", "done"], done
            assert (
                "failed this turn 5 times" in done[0]["results"][0]["error"]
                and "500" in done[0]["results"][0]["error"]
            )
            assert done[1]["results"][0]["error"] is None
            [memory] = client.get("/v1/users/bo/memories").json()["memories"]
            assert "I restore old radios" in memory["text"]
            assert client.get("/v1/users/ari/memories").json()["memories"] == []
            assert 'longmem_writes_waiting_for_llm{part="local"} 0.0' in client.get("/metrics").text
    finally:
        stop_llm()
    service.close()


class _Call:
    def __init__(self, error: Exception) -> None:
        self._error = error

    def remote(self, *_args: object) -> _Call:
        return self

    def result(self) -> Completion:
        raise self._error


def test_the_llm_deployment_not_answering_is_the_llm_unavailable() -> None:
    """Under Serve the write path reaches the LLM through a deployment handle: a replica that
    died or none to take the call must be waited for like an unreachable server; the engine's own
    errors come through unchanged."""

    def engine(error: Exception) -> RemoteEngine:
        handle = SimpleNamespace(
            complete_json=_Call(error), complete_choice=_Call(error), complete_text=_Call(error)
        )
        return RemoteEngine(handle, "llm")  # type: ignore[arg-type]

    for outage in (ActorDiedError(), DeploymentUnavailableError(DeploymentID("llm", "longmem"))):
        with pytest.raises(LLMUnavailableError, match=type(outage).__name__):
            engine(outage).complete_choice([], ["yes", "no"])
    bad_output = LLMOutputError("extraction", "no JSON")
    with pytest.raises(LLMOutputError):
        engine(bad_output).complete_json([], {}, 10)
    with pytest.raises(ZeroDivisionError):  # a defect, not an outage: never waited for
        engine(ZeroDivisionError()).complete_text([], 10)


def test_a_write_waiting_for_the_llm_keeps_its_lane_but_not_the_pool(
    lanes: Callable[..., WriteLanes],
) -> None:
    """In an outage every worker held a write waiting for the LLM, and a memory stored as given
    for another user waited for the LLM too."""
    pool = lanes(concurrency=1)
    waiting = threading.Event()

    def unreachable() -> bool:  # user a's queued turn: the LLM is down until the lanes close
        waiting.set()
        return pool.pause("a", 60)

    a = pool.submit("a", unreachable, waits_for_llm=True)
    assert waiting.wait(5)
    assert pool.submit("b", lambda: "stored as given").result(timeout=5) == "stored as given"
    # The write that waits is the probe: another that would wait for the LLM is held back, and
    # a's own later writes stay behind it.
    c = pool.submit("c", lambda: "c's turn written", waits_for_llm=True)
    a_later = pool.submit("a", lambda: "a's later write")
    time.sleep(0.3)
    assert not c.done() and not a_later.done()
    pool.close(wait=True)  # the waiting write gives up; the held ones run
    assert a.result() is False
    assert c.result() == "c's turn written" and a_later.result() == "a's later write"


def test_a_write_waiting_for_the_llm_does_not_take_the_wake_up_of_an_idle_worker(
    lanes: Callable[..., WriteLanes],
) -> None:
    """The waiting write and the idle workers waited on one condition: a new write's wake-up went
    to the waiting write, and the write sat queued beside an idle worker until the LLM was back."""
    pool = lanes(concurrency=2)
    waiting = threading.Event()

    def unreachable() -> bool:
        waiting.set()
        return pool.pause("a", 60)

    pool.submit("a", unreachable, waits_for_llm=True)
    assert waiting.wait(5)
    assert pool.submit("b", lambda: 1).result(timeout=5) == 1  # the other worker, idle afterwards
    assert pool.submit("c", lambda: 2).result(timeout=5) == 2


def test_a_forget_request_tried_again_after_an_outage_reports_what_it_deleted(
    settings: Settings, clock: ManualClock, embedder: Embedder, quick_retries: None
) -> None:
    """Tried again after the LLM came back, a forget request looked again for the memory it had
    already deleted: the job said nothing was forgotten."""
    engine = ScriptedEngine()
    service = open_local_service(settings, clock, embedder, engine)
    service.remember("acme:kit", [Remember(text="User lives at 9 Elm Road")])
    engine.script("forget_target", '{"target": "9 Elm Road"}')
    engine.defaults["forget_match"] = "yes"
    engine.script(
        "extract", _unreachable, facts_json(("User lives at 3 Birch Lane", "identity", "fact", False))
    )
    lanes = WriteLanes(settings.write)
    said = [Turn(role=Role.USER, content="Forget 9 Elm Road, I live at 3 Birch Lane now.")]
    (outcome,) = UserWrites(service, lanes).queue_turns("acme:kit", "s", said).future.result(timeout=30)
    assert outcome.error is None and outcome.forgotten is not None
    assert [f.text for f in outcome.forgotten.facts] == ["User lives at 9 Elm Road"]
    assert engine.calls.count("forget_target") == 1 and engine.calls.count("extract") == 2
    assert [f.text for f in service.list_facts("acme:kit")] == ["User lives at 3 Birch Lane"]
    lanes.close()
    service.close()


def test_other_turns_wait_until_the_probe_is_done_not_only_while_it_sleeps(
    lanes: Callable[..., WriteLanes],
) -> None:
    """Held back only while the probe slept, the other turns started whenever it was out trying
    the LLM again: in an outage with slow timeouts every queued turn got an LLM call and a thread."""
    pool = lanes(concurrency=2)
    events: list[str] = []

    def probe() -> None:
        for _ in range(3):
            pool.pause("a", 0.05)
            events.append("a tries the LLM")
            time.sleep(0.2)  # out at the LLM, which times out
        events.append("a is written")

    a = pool.submit("a", probe, waits_for_llm=True)
    deadline = time.monotonic() + 5
    while not events:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    c = pool.submit("c", lambda: events.append("c starts"), waits_for_llm=True)
    a.result(timeout=10)
    c.result(timeout=10)
    assert events.index("c starts") > events.index("a is written"), events
