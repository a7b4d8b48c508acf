"""The public behaviour scenarios with the real default model: all of them over HTTP against the
Ray Serve app, and in-process (``longmem eval scenarios``' own target) those that use each of
its operations (turns, recall, absent, forget, clock, profile), in both languages.

The product goal is 90 % overall and per language (measured with ``longmem eval scenarios``);
these tests are a regression floor a little under it, so one unlucky step of a 1.5B model does
not block CI while a real regression does.
"""

from __future__ import annotations

from pathlib import Path

from longmem.http_target import HttpTarget, writes_llm_usage
from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.evaluation.local import LocalTarget
from memory_core.evaluation.scenarios import load_scenarios, run_scenarios, user_id_for
from memory_core.llm.factory import make_engine
from memory_core.service import open_local_service
from memory_core.settings import Settings
from tests.serve_app import ADMIN_KEY, ServeApp

PUBLIC = Path(__file__).resolve().parents[2] / "shared" / "eval" / "scenarios" / "public.jsonl"
# Every operation of the in-process target, Chinese and English: the full set runs over HTTP.
IN_PROCESS = ("pub-zh-trip-forget", "pub-en-expiry", "pub-en-style")


def _check(report: dict) -> None:
    summary = report["summary"]
    print(summary, report["failures"])
    assert summary["steps"] >= 19  # every checked step of the public file ran
    assert summary["pass_rate"] >= 0.85, report["failures"]
    for lang in ("zh", "en"):
        assert summary["by_lang"][lang]["pass_rate"] >= 0.75, report["failures"]


def test_public_scenarios_of_every_operation_pass_in_process(
    settings: Settings, clock: ManualClock, embedder: Embedder
) -> None:
    scenarios = [s for s in load_scenarios(PUBLIC) if s["id"] in IN_PROCESS]
    assert len(scenarios) == len(IN_PROCESS)
    ops = {step["op"] for s in scenarios for step in s["steps"]}
    assert ops == {"turns", "recall", "absent", "forget", "clock", "profile"}
    engine = make_engine(settings.llm)
    svc = open_local_service(settings, clock, embedder, engine=engine)
    try:
        report = run_scenarios(LocalTarget(svc, clock), scenarios).as_dict()
    finally:
        svc.close()
        engine.close()
    print(report["summary"], report["failures"])
    # Two of the 7 checked steps may miss (2 Chinese, 5 English); the full set over HTTP holds 0.85.
    assert report["summary"]["pass_rate"] >= 0.7, report["failures"]


def test_public_scenarios_pass_over_http(serve_app: ServeApp) -> None:
    target = HttpTarget(serve_app.url, ADMIN_KEY)
    try:
        report = run_scenarios(target, load_scenarios(PUBLIC)).as_dict()
    finally:
        target.close()
    assert report["summary"]["llm_calls"] > 0  # read from the server's metrics
    _check(report)


def test_the_write_paths_llm_usage_is_summed_over_the_writers_without_chat_replies() -> None:
    metrics = (
        "# HELP longmem_llm_calls longmem llm calls\n"
        'longmem_llm_calls{part="writer0"} 12.0\n'
        'longmem_llm_calls{part="writer1"} 30.0\n'
        'longmem_llm_calls{part="ingress"} 7.0\n'
        'longmem_llm_calls_in_flight{part="writer0"} 2.0\n'
        'longmem_llm_seconds{part="writer0"} 1.5\n'
        'longmem_llm_seconds{part="writer1"} 2.25\n'
        'longmem_llm_seconds{part="ingress"} 9.0\n'
    )
    assert writes_llm_usage(metrics) == (42, 3.75)


def test_scenario_user_ids_are_valid_and_distinct() -> None:
    ids = [user_id_for(s) for s in ("pub-zh-trip", "pub zh trip", "pub/zh/trip", "场景-一", "x" * 300)]
    assert len(set(ids)) == len(ids)
    assert all(len(i) <= 128 for i in ids)
