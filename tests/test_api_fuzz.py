"""Schemathesis over the served OpenAPI document of the in-process app (real FAISS shards and
DuckDB, the scripted engine as the LLM): every operation, positive and negative cases, with a key
and without one; plus the defects it found, pinned as plain tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import schemathesis
from fastapi import FastAPI
from fastapi.testclient import TestClient

from memory_core.clock import ManualClock
from memory_core.embedding import Embedder
from memory_core.service import open_local_service
from memory_core.settings import ApiKey, ServeSettings, Settings, StorageSettings
from tests import fuzzing
from tests.asgi_app import local_api
from tests.conftest import START
from tests.scripted_engine import ScriptedEngine

ADMIN = "acme-admin-key-0123456789"
KEYED = {"Authorization": f"Bearer {ADMIN}"}
EXAMPLES = 25  # per operation and mode: ~1000 cases, about a minute on 2 shared cores


@pytest.fixture(scope="module")
def fuzz_app(tmp_path_factory: pytest.TempPathFactory, embedder: Embedder) -> Iterator[FastAPI]:
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path_factory.mktemp("fuzz") / "data", shards=2),
        serve=ServeSettings(api_keys=[ApiKey(key=ADMIN, tenant="acme", admin=True)]),
    )
    service = open_local_service(settings, ManualClock(START), embedder, ScriptedEngine())
    yield local_api(service)
    service.close()


@pytest.fixture(scope="module")
def api_schema(fuzz_app: FastAPI) -> schemathesis.BaseSchema:
    # The tests send the key themselves (or none): no generated Authorization headers.
    config = schemathesis.Config.from_dict({"generation": {"with-security-parameters": False}})
    return schemathesis.openapi.from_asgi("/openapi.json", fuzz_app, config=config)


def test_every_operation_with_a_key_answers_within_its_schema_and_never_5xx(
    api_schema: schemathesis.BaseSchema,
) -> None:
    run = fuzzing.with_key(api_schema, KEYED, EXAMPLES)
    print("\n" + run.report("with a key"))
    assert not run.failures, "\n\n".join(f"{name}\n{curl}" for name, curl in run.failures.items())
    assert run.statuses["5xx"] == 0


def test_no_operation_answers_without_a_key(api_schema: schemathesis.BaseSchema) -> None:
    run = fuzzing.without_key(api_schema, EXAMPLES)
    print("\n" + run.report("without a key"))
    assert not run.failures, "\n\n".join(run.failures)


def test_a_ttl_or_an_instant_past_the_year_9999_is_a_422_not_a_500(fuzz_app: FastAPI) -> None:
    """Found by the fuzzer: ``ttl_seconds`` of 1e9 days overflowed timedelta; an expiry offset
    past 9999-12-31 overflowed in the conversion to UTC."""
    with TestClient(fuzz_app, headers=KEYED) as client:
        for memory in (
            {"text": "x", "ttl_seconds": 86_400_000_000_000.0},
            {"text": "x", "ttl_seconds": 86_399_999_913_600.0},
            {"text": "x", "expire_at": "9999-12-31T23:00:00-05:00"},
        ):
            answer = client.post("/v1/users/alice/memories", json={"memories": [memory]})
            assert answer.status_code == 422, (memory, answer.text)
            assert answer.json()["error"] in ("ValidationError", "HTTPError"), answer.text


def test_every_error_answer_has_the_documented_shape(fuzz_app: FastAPI) -> None:
    """Found by the fuzzer: a body that is not JSON answered Starlette's ``{"detail": ...}``, and
    the schema documented FastAPI's 422 shape, not the one the app sends; the schema now names
    every error status and the security schemes."""
    with TestClient(fuzz_app, headers=KEYED) as client:
        not_json = client.post(
            "/v1/users/alice/recall", content=b"{", headers={"Content-Type": "application/json"}
        )
        assert not_json.status_code in (400, 422)
        assert set(not_json.json()) == {"error", "detail"}, not_json.text
        unknown = client.get("/v1/nowhere")
        assert unknown.status_code == 404 and set(unknown.json()) == {"error", "detail"}
        document = client.get("/openapi.json").json()
    assert set(document["components"]["securitySchemes"]) == {"HTTPBearer", "APIKeyHeader"}
    recall = document["paths"]["/v1/users/{user_id}/recall"]["post"]
    assert {"401", "403", "404", "422", "503"} <= set(recall["responses"])
    assert recall["responses"]["422"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"
    }
    assert "text/plain" in document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
