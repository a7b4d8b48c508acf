"""Traces for operators: a real run (packaged LLM, real shards) with telemetry on exports its
spans over OTLP/HTTP to a collector endpoint (a real HTTP server here, decoding the protobuf an
OpenTelemetry collector receives): recall and each write stage, with the LLM tokens each used,
and never the memory text or the user id."""

from __future__ import annotations

import http.server
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

USER = "acme:trace-owner-7f3a"
TEXT = "I restore old mechanical typewriters in my garage workshop on weekends"
QUESTION = "What do I do in my free time?"


@pytest.fixture
def collector() -> Iterator[tuple[str, list[bytes]]]:
    received: list[bytes] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (the standard library's name)
            received.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.end_headers()

        def log_message(self, *_: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1/traces", received
    server.shutdown()


def _spans(bodies: list[bytes]) -> list[dict[str, Any]]:
    spans = []
    for body in bodies:
        request = ExportTraceServiceRequest.FromString(body)
        for resource in request.resource_spans:
            service = {a.key: a.value.string_value for a in resource.resource.attributes}["service.name"]
            for scope in resource.scope_spans:
                for span in scope.spans:
                    attributes = {
                        a.key: getattr(a.value, a.value.WhichOneof("value")) for a in span.attributes
                    }
                    spans.append(
                        {
                            "name": span.name,
                            "id": span.span_id,
                            "parent": span.parent_span_id,
                            "service": service,
                            "attributes": attributes,
                        }
                    )
    return spans


def test_recall_and_every_write_stage_are_traced_with_tokens_and_no_text(
    collector: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    endpoint, received = collector
    run = subprocess.run(
        [sys.executable, "-m", "tests.traced_run", str(tmp_path / "data"), endpoint, USER, TEXT, QUESTION],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=Path(__file__).parent.parent,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "written=0" not in run.stdout, run.stdout  # the turn was worth a memory: every stage ran
    spans = _spans(received)
    by_name: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    assert {s["service"] for s in spans} == {"longmem-test"}

    [turn] = by_name["longmem.write.turn"]
    stages = {s["name"]: s for s in spans if s["parent"] == turn["id"]}
    assert {"forget_intent", "prefilter", "judge", "extract", "resolve", "store"} <= set(stages), stages
    assert turn["attributes"]["longmem.facts_written"] >= 1
    for stage in ("judge", "extract"):
        usage = stages[stage]["attributes"]
        assert usage["longmem.llm.calls"] >= 1 and usage["gen_ai.usage.input_tokens"] > 0, usage
        assert usage["gen_ai.usage.output_tokens"] > 0, usage
    # The turn's total is the sum of its stages': each LLM call counted once per level.
    assert turn["attributes"]["gen_ai.usage.input_tokens"] == sum(
        s["attributes"].get("gen_ai.usage.input_tokens", 0) for s in stages.values()
    )
    calls = [s for s in spans if s["name"].startswith("llm.")]
    assert len(calls) == turn["attributes"]["longmem.llm.calls"]
    assert all(c["attributes"]["longmem.model"] for c in calls)

    [recall] = by_name["longmem.recall"]
    assert {s["name"] for s in spans if s["parent"] == recall["id"]} == {"embed", "search", "rank"}
    assert recall["attributes"]["longmem.hits"] >= 1

    everything = b"".join(received)
    for secret in (USER, "trace-owner-7f3a", "typewriters", QUESTION):
        assert secret.encode() not in everything, secret
