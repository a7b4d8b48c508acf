"""Run by tests/test_telemetry.py in a process of its own (OpenTelemetry's provider is global):
a local service with telemetry on and the packaged LLM writes one turn and answers one recall;
the spans go to the OTLP/HTTP endpoint given.

    python -m tests.traced_run DATA_DIR ENDPOINT USER TEXT QUESTION
"""

from __future__ import annotations

import sys
from pathlib import Path

from opentelemetry import trace

from memory_core.llm.factory import make_engine
from memory_core.models import Role, Turn
from memory_core.service import open_local_service
from memory_core.settings import Settings, StorageSettings, TelemetrySettings


def main() -> None:
    data_dir, endpoint, user, text, question = sys.argv[1:]
    settings = Settings(
        storage=StorageSettings(data_dir=Path(data_dir)),
        telemetry=TelemetrySettings(enabled=True, otlp_endpoint=endpoint, service_name="longmem-test"),
    )
    engine = make_engine(settings.llm)
    service = open_local_service(settings, engine=engine)
    [outcome] = service.ingest(user, "s1", [Turn(role=Role.USER, content=text, turn_id="t1")])
    hits = service.recall(user, question)
    service.close()
    engine.close()
    trace.get_tracer_provider().shutdown()  # type: ignore[attr-defined]  # flushes the batch
    print(f"written={len(outcome.facts)} llm_calls={outcome.llm_calls} hits={len(hits)}")


if __name__ == "__main__":
    main()
