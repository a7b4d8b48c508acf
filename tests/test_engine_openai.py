"""The OpenAI-compatible HTTP engine: the engine contract against a real server, and its error mapping.

The contract runs against llama-cpp-python's OpenAI-compatible server (a subprocess on a
free loopback port, serving the packaged SmolLM2 GGUF). Error mapping and the wire format
are checked with an httpx MockTransport, plus one real refused connection.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from benchmarks.mem0_peer import LlamaServer, free_port
from memory_core.errors import LLMRejectedError, LLMUnavailableError
from memory_core.llm.base import ChatMessage, LLMEngine
from memory_core.llm.openai_engine import OpenAIEngine, SchemaDialect, choice_schema, decode_choice
from memory_core.llm.packaged import smollm2_path
from tests.engine_contract import ALL_CHECKS

SECRET = "sk-test-very-secret-0123456789"
HI = [ChatMessage(role="user", content="hi")]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaServer]:
    """llama-cpp-python's server on a free loopback port (the one the mem0 peer is served by)."""
    log = tmp_path_factory.mktemp("llama-server") / "server.log"
    with LlamaServer(smollm2_path(), n_ctx=2048, log_path=log) as running:
        yield running


@pytest.fixture(scope="module")
def engine(server: LlamaServer) -> Iterator[OpenAIEngine]:
    eng = OpenAIEngine(server.url, model=server.model)  # default 120 s: the 2-core CI box may be busy
    yield eng
    eng.close()


@pytest.mark.parametrize("check", ALL_CHECKS, ids=lambda c: c.__name__)
def test_contract(engine: LLMEngine, check: Callable[[LLMEngine], None]) -> None:
    check(engine)


def test_llama_cpp_python_server_settles_on_json_object_dialect(engine: OpenAIEngine) -> None:
    engine.complete_json(HI, {"type": "object", "properties": {"a": {"type": "boolean"}}}, max_tokens=20)
    assert engine.schema_dialect is SchemaDialect.JSON_OBJECT


# --- wire format and error mapping, no model -------------------------------------------------


def _completion(content: str, prompt: int = 7, completion: int = 3) -> dict[str, Any]:
    return {
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }


class Recorder:
    """A MockTransport handler that records requests and answers from a script."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def body(self, i: int) -> dict[str, Any]:
        return dict(json.loads(self.requests[i].content))


def _engine(recorder: Recorder, api_key: str | None = SECRET) -> OpenAIEngine:
    return OpenAIEngine(
        "http://llm.test:8000/v1/", "m", api_key=api_key, timeout_s=5, transport=httpx.MockTransport(recorder)
    )


def test_request_is_openai_json_schema_at_temperature_zero() -> None:
    rec = Recorder(httpx.Response(200, json=_completion('{"a": true}', 11, 4)))
    schema = {"title": "Thing", "type": "object", "properties": {"a": {"type": "boolean"}}}
    out = _engine(rec).complete_json(HI, schema, max_tokens=33)
    assert (out.text, out.prompt_tokens, out.completion_tokens) == ('{"a": true}', 11, 4)
    req = rec.requests[0]
    assert req.method == "POST" and str(req.url) == "http://llm.test:8000/v1/chat/completions"
    assert req.headers["authorization"] == f"Bearer {SECRET}"
    body = rec.body(0)
    assert body["model"] == "m" and body["temperature"] == 0 and body["max_tokens"] == 33
    assert body["messages"] == [{"role": "user", "content": "hi"}]
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Thing", "schema": schema, "strict": True},
    }


def test_choice_is_decoded_from_answer_object() -> None:
    rec = Recorder(httpx.Response(200, json=_completion('{"answer": "否"}')))
    out = _engine(rec).complete_choice(HI, ["是", "否"])
    assert out.text == "否" and out.completion_tokens == 3
    assert rec.body(0)["response_format"]["json_schema"]["schema"] == choice_schema(["是", "否"])


def test_decode_choice_passes_bad_shapes_through() -> None:
    assert decode_choice('{"answer": "yes"}') == "yes"
    assert decode_choice('"yes"') == '"yes"'
    assert decode_choice("not json") == "not json"


def test_rejected_json_schema_falls_back_to_json_object_once_and_sticks() -> None:
    rejected = httpx.Response(500, json={"error": {"message": "Input should be 'text' or 'json_object'"}})
    rec = Recorder(rejected, *[httpx.Response(200, json=_completion("{}"))] * 3)
    eng = _engine(rec)
    eng.complete_json(HI, {"type": "object"}, max_tokens=8)
    eng.complete_json(HI, {"type": "object"}, max_tokens=8)
    kinds = [rec.body(i)["response_format"]["type"] for i in range(len(rec.requests))]
    assert kinds == ["json_schema", "json_object", "json_object"]
    assert rec.body(1)["response_format"]["schema"] == {"type": "object"}


def test_accepted_json_schema_is_never_downgraded() -> None:
    rec = Recorder(httpx.Response(200, json=_completion("{}")))
    eng = _engine(rec)
    assert eng.schema_dialect is None
    eng.complete_json(HI, {"type": "object"}, max_tokens=8)
    eng.complete_choice(HI, ["a", "b"])
    assert eng.schema_dialect is SchemaDialect.JSON_SCHEMA
    assert [rec.body(i)["response_format"]["type"] for i in range(2)] == ["json_schema", "json_schema"]


def test_server_error_is_unavailable_with_status_and_message() -> None:
    rec = Recorder(httpx.Response(500, json={"error": {"message": "CUDA out of memory"}}))
    with pytest.raises(LLMUnavailableError, match="500: CUDA out of memory") as info:
        _engine(rec).complete_json(HI, {"type": "object"}, max_tokens=8)
    assert len(rec.requests) == 2  # the one dialect retry, no more
    assert not info.value.overloaded


@pytest.mark.parametrize("status", [408, 429, 502, 503, 504])
def test_a_busy_or_limited_server_is_overloaded_never_the_requests_fault(status: int) -> None:
    """A rate limit lets the write path's short request through and refuses its long prompts:
    taken for a turn the server fails on, each queued user's turn was reported and lost."""
    rec = Recorder(httpx.Response(status, json={"error": {"message": "Rate limit reached"}}))
    with pytest.raises(LLMUnavailableError, match=f"{status}: Rate limit reached") as info:
        _engine(rec).complete_choice(HI, ["a", "b"])
    assert info.value.overloaded


def test_overloaded_server_is_not_retried() -> None:
    rec = Recorder(httpx.Response(503, text="overloaded"))
    with pytest.raises(LLMUnavailableError, match="503: overloaded"):
        _engine(rec).complete_choice(HI, ["a", "b"])
    assert len(rec.requests) == 1


def test_client_error_carries_server_message_but_never_the_key() -> None:
    rec = Recorder(httpx.Response(401, json={"error": {"message": f"Incorrect API key provided: {SECRET}"}}))
    eng = _engine(rec)
    with pytest.raises(LLMUnavailableError) as info:
        eng.complete_json(HI, {"type": "object"}, max_tokens=8)
    assert rec.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert "401" in str(info.value) and "Incorrect API key provided: ***" in str(info.value)
    assert SECRET not in str(info.value) and SECRET not in repr(eng)
    assert SECRET not in "".join(traceback.format_exception(info.value))


def test_fastapi_validation_detail_is_the_message() -> None:
    rec = Recorder(httpx.Response(422, json={"detail": [{"msg": "field required"}]}))
    with pytest.raises(LLMRejectedError, match="422: .*field required"):
        _engine(rec).complete_json(HI, {"type": "object"}, max_tokens=8)


@pytest.mark.parametrize("status", [400, 413, 422])
def test_a_request_the_server_refuses_is_rejected_not_unavailable(status: int) -> None:
    """A prompt over the server's context answers 400 every time: taken for an outage, a queued
    write waited for it for ever, holding the user's later writes."""
    rec = Recorder(
        httpx.Response(status, json={"error": {"message": "maximum context length is 4096 tokens"}})
    )
    with pytest.raises(LLMRejectedError, match=f"{status}: maximum context length") as info:
        _engine(rec).complete_text(HI, max_tokens=8)
    assert not isinstance(info.value, LLMUnavailableError)


def test_no_key_sends_no_authorization_header() -> None:
    rec = Recorder(httpx.Response(200, json=_completion("{}")))
    _engine(rec, api_key=None).complete_json(HI, {"type": "object"}, max_tokens=8)
    assert "authorization" not in rec.requests[0].headers


@pytest.mark.parametrize(
    "failure",
    [httpx.ConnectError("[Errno 111] Connection refused"), httpx.ReadTimeout("timed out")],
    ids=["refused", "timeout"],
)
def test_transport_failures_are_unavailable(failure: Exception) -> None:
    rec = Recorder(failure)
    with pytest.raises(LLMUnavailableError, match="llm.test:8000"):
        _engine(rec).complete_choice(HI, ["a", "b"])
    assert len(rec.requests) == 1


def test_not_a_chat_completion_is_unavailable() -> None:
    rec = Recorder(httpx.Response(200, text="<html>proxy login</html>"))
    with pytest.raises(LLMUnavailableError, match="did not answer with a chat completion") as info:
        _engine(rec).complete_json(HI, {"type": "object"}, max_tokens=8)
    assert "proxy login" not in str(info.value)  # a near-miss body may be model output: memory text


def test_real_refused_connection_is_unavailable() -> None:
    eng = OpenAIEngine(f"http://127.0.0.1:{free_port()}/v1", "m", api_key=SECRET, timeout_s=5)
    with pytest.raises(LLMUnavailableError, match="cannot reach") as info:
        eng.complete_json(HI, {"type": "object"}, max_tokens=8)
    assert SECRET not in str(info.value)
    eng.close()
