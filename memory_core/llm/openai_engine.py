"""Engine over any OpenAI-compatible chat server (vLLM serve, llama.cpp's llama-server,
llama-cpp-python's server, OpenAI itself), spoken to with httpx.

How output is constrained, and why this way:

* ``complete_json`` sends the schema as ``response_format``. The OpenAI form
  ``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}`` is what OpenAI,
  vLLM and llama-server honour; llama-cpp-python's server rejects it (with a 500) and only
  honours ``{"type": "json_object", "schema": ...}``, which vLLM accepts but *ignores the
  schema of*. So neither form can be sent blind: the first structured call tries the OpenAI
  form and, if the server rejects the request, retries it once in the llama-cpp-python form;
  whichever form succeeds first is kept for the engine's lifetime.
* ``complete_choice`` reuses the same path with the schema
  ``{"answer": <one of choices>}`` and returns the decoded answer. A root object (rather than
  a bare ``{"enum": ...}`` string) is what OpenAI's strict mode requires, and every server
  above compiles it to a grammar, so one mechanism covers all of them; server-specific
  knobs (vLLM's ``guided_choice``, llama.cpp's ``grammar``) would each need their own probe.

All decoding is at temperature 0. The API key goes only into the ``Authorization`` header and
is scrubbed from every error message.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from enum import Enum
from typing import TYPE_CHECKING, Any

from memory_core.errors import LLMRejectedError, LLMUnavailableError
from memory_core.llm.base import ChatMessage, Completion

if TYPE_CHECKING:
    import httpx

_CHOICE_KEY = "answer"
# Statuses that say the request was fine but the caller or server state is not (auth, wrong
# URL or model, rate limit, overload): retrying in another schema dialect cannot help.
_NO_DIALECT_RETRY = {401, 403, 404, 408, 429, 502, 503, 504}
# The request itself refused: asked again, the server answers the same. Any other error status
# (a bad key, a wrong model name, an overloaded or failing server) is the LLM being unavailable
# until someone or something fixes it, and a queued write waits for it.
_REJECTED = {400, 413, 422}
# Busy or limited: waited for like an outage, never taken for a request the server fails on.
_OVERLOADED = {408, 429, 502, 503, 504}
_MAX_ERROR_CHARS = 500


class SchemaDialect(Enum):
    """How a server wants a JSON schema passed in ``response_format``."""

    JSON_SCHEMA = "json_schema"  # OpenAI, vLLM, llama-server
    JSON_OBJECT = "json_object"  # llama-cpp-python's server

    def response_format(self, name: str, schema: dict[str, Any]) -> dict[str, Any]:
        """The ``response_format`` request field for ``schema`` in this dialect."""
        if self is SchemaDialect.JSON_SCHEMA:
            return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": True}}
        return {"type": "json_object", "schema": schema}


def choice_schema(choices: Sequence[str]) -> dict[str, Any]:
    """JSON schema of ``{"answer": c}`` for ``c`` in ``choices``."""
    return {
        "type": "object",
        "properties": {_CHOICE_KEY: {"type": "string", "enum": list(choices)}},
        "required": [_CHOICE_KEY],
        "additionalProperties": False,
    }


def decode_choice(text: str) -> str:
    """The answer inside ``{"answer": ...}``, or ``text`` unchanged if it is not that shape.

    Unchanged text lets :class:`~memory_core.llm.structured.StructuredLLM` see, count and
    retry the bad output, as it does for every engine.
    """
    try:
        value = json.loads(text)
    except ValueError:
        return text
    if isinstance(value, dict) and isinstance(value.get(_CHOICE_KEY), str):
        return str(value[_CHOICE_KEY])
    return text


class _HTTPStatusError(Exception):
    """An error status from the server, before it is turned into an LLMUnavailableError or an
    LLMRejectedError."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        self.message = message
        super().__init__(f"HTTP {status}: {message}")


class OpenAIEngine:
    """A model behind an OpenAI-compatible ``/chat/completions`` endpoint.

    Thread-safe: the underlying ``httpx.Client`` pools connections across threads.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        timeout_s: float = 120,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        """Prepare a client; nothing is sent until the first completion.

        Args:
            base_url: the API root including ``/v1``, e.g. ``http://127.0.0.1:8000/v1``.
            model: the model name the server serves (sent as ``model``).
            api_key: sent as ``Authorization: Bearer <key>``; never logged or echoed.
            timeout_s: limit for connecting and for each read of one request.
            transport: an httpx transport to use instead of the network (tests).

        Raises:
            LLMUnavailableError: httpx is not installed.
        """
        try:
            import httpx
        except ImportError as exc:
            raise LLMUnavailableError("httpx is not installed (extra 'llm')") from exc
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(
            base_url=base_url.rstrip("/") + "/",
            headers=headers,
            timeout=httpx.Timeout(timeout_s),
            transport=transport,
        )
        self._secret = api_key or None
        self._model = model
        # Shown in messages: the URL without any user:password part.
        self._where = str(self._client.base_url.copy_with(username=None, password=None)) + "chat/completions"
        self._dialect: SchemaDialect | None = None
        self._dialect_lock = threading.Lock()
        self.name = f"openai:{model}"

    @property
    def schema_dialect(self) -> SchemaDialect | None:
        """The ``response_format`` form this server accepted, or None before the first success."""
        return self._dialect

    def __repr__(self) -> str:
        return f"OpenAIEngine(url={self._where!r}, model={self._model!r})"

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return text[:_MAX_ERROR_CHARS]

    def _post(self, body: dict[str, Any]) -> Completion:
        """POST one chat completion and decode it.

        Raises:
            _HTTPStatusError: the server answered with an error status.
            LLMUnavailableError: no answer, or an answer that is not a chat completion.
        """
        import httpx

        try:
            response = self._client.post("chat/completions", json=body)
        except httpx.TimeoutException as exc:
            raise LLMUnavailableError(f"{self._where} timed out ({type(exc).__name__})") from None
        except httpx.HTTPError as exc:
            raise LLMUnavailableError(
                f"cannot reach {self._where}: {type(exc).__name__}: {self._scrub(str(exc))}"
            ) from None
        if response.status_code >= 400:
            raise _HTTPStatusError(response.status_code, self._scrub(_error_message(response)))
        try:
            out = response.json()
            text = out["choices"][0]["message"]["content"] or ""
            usage = out.get("usage") or {}
            return Completion(
                text=str(text),
                prompt_tokens=int(usage.get("prompt_tokens") or 0),
                completion_tokens=int(usage.get("completion_tokens") or 0),
            )
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            # Not the body: a near-miss answer holds model output, i.e. memory text.
            raise LLMUnavailableError(
                f"{self._where} did not answer with a chat completion ({type(exc).__name__}; "
                f"{len(response.content)} bytes of {response.headers.get('content-type', 'no content type')})"
            ) from None

    def _failed(self, err: _HTTPStatusError) -> LLMUnavailableError | LLMRejectedError:
        said = f"{self._where} answered {err.status}: {err.message}"
        if err.status in _REJECTED:
            return LLMRejectedError(said)
        return LLMUnavailableError(said, overloaded=err.status in _OVERLOADED)

    def _body(self, messages: Sequence[ChatMessage], max_tokens: int) -> dict[str, Any]:
        return {
            "model": self._model,
            "messages": [m.model_dump() for m in messages],
            "temperature": 0.0,
            "max_tokens": max_tokens,
            "stream": False,
        }

    def _complete_schema(
        self, messages: Sequence[ChatMessage], name: str, schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        body = self._body(messages, max_tokens)
        dialect = self._dialect
        if dialect is not None:
            try:
                return self._post({**body, "response_format": dialect.response_format(name, schema)})
            except _HTTPStatusError as err:
                raise self._failed(err) from None
        # Dialect unknown: try the OpenAI form, fall back to llama-cpp-python's once.
        try:
            completion = self._post(
                {**body, "response_format": SchemaDialect.JSON_SCHEMA.response_format(name, schema)}
            )
            found = SchemaDialect.JSON_SCHEMA
        except _HTTPStatusError as first:
            if first.status in _NO_DIALECT_RETRY:
                raise self._failed(first) from None
            try:
                completion = self._post(
                    {**body, "response_format": SchemaDialect.JSON_OBJECT.response_format(name, schema)}
                )
            except _HTTPStatusError:
                raise self._failed(first) from None  # the standard form's error is the useful one
            found = SchemaDialect.JSON_OBJECT
        with self._dialect_lock:
            self._dialect = found
        return completion

    def complete_json(
        self, messages: Sequence[ChatMessage], schema: dict[str, Any], max_tokens: int
    ) -> Completion:
        """Generate a JSON document valid under ``schema`` (server-side guided decoding).

        Raises:
            LLMUnavailableError: the server cannot be reached, timed out, or answered an error
                status (its message included, the API key scrubbed).
            LLMRejectedError: the server refused the request itself (400, 413, 422).
        """
        name = str(schema.get("title") or "output")
        return self._complete_schema(messages, name, schema, max_tokens)

    def complete_choice(self, messages: Sequence[ChatMessage], choices: Sequence[str]) -> Completion:
        """Generate exactly one of ``choices``; ``text`` is the bare choice.

        Raises:
            LLMUnavailableError, LLMRejectedError: as for :meth:`complete_json`.
        """
        # {"answer": "..."} plus the choice itself: a UTF-8 byte is at most one token, and
        # grammar-allowed whitespace is bounded.
        longest = max(len(c.encode("utf-8")) for c in choices)
        completion = self._complete_schema(
            messages, "choice", choice_schema(choices), max_tokens=longest + 32
        )
        return Completion(
            text=decode_choice(completion.text),
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
        )

    def complete_text(self, messages: Sequence[ChatMessage], max_tokens: int) -> Completion:
        """Generate a free-text reply.

        Raises:
            LLMUnavailableError, LLMRejectedError: as for :meth:`complete_json`.
        """
        try:
            return self._post(self._body(messages, max_tokens))
        except _HTTPStatusError as err:
            raise self._failed(err) from None

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()


def _error_message(response: httpx.Response) -> str:
    """The server's own words for an error: OpenAI's ``error.message``, FastAPI's ``detail``, or the body."""
    try:
        payload = response.json()
    except ValueError:
        return response.text.strip() or response.reason_phrase
    if isinstance(payload, dict):
        error = payload.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        for key in ("error", "detail", "message"):
            if payload.get(key):
                value = payload[key]
                return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return response.text.strip()
