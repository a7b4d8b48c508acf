"""The FastAPI application of HTTP API v1: errors, auth, limits, health and metrics.

Status codes live here only (STYLE.md): the core raises ``LongmemError`` subclasses.
"""

from __future__ import annotations

import logging
import math
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.staticfiles import StaticFiles

from deployments.api.auth import AuthError, Principal
from deployments.api.dto import ErrorOut
from deployments.api.health import CachedProbe
from deployments.api.limits import limit_body
from deployments.api.metrics import CONTENT_TYPE
from deployments.api.runtime import Runtime
from memory_core.errors import (
    ConfigError,
    LLMOutputError,
    LLMRejectedError,
    LLMUnavailableError,
    LongmemError,
    NotFoundError,
    ProfileFullError,
    ReshardBusyError,
    StorageError,
    SweepBusyError,
    ValidationError,
    WriteQueueFullError,
)

log = logging.getLogger("longmem.api")

# Most specific first: the first class an error is an instance of decides its status.
_STATUS: list[tuple[type[LongmemError], int]] = [
    (ValidationError, 422),
    (NotFoundError, 404),
    (SweepBusyError, 409),
    (ReshardBusyError, 409),
    (ProfileFullError, 409),
    (WriteQueueFullError, 429),
    (LLMOutputError, 502),
    (LLMRejectedError, 502),
    (LLMUnavailableError, 503),
    (StorageError, 503),
    (ConfigError, 500),
]


# Every answer of an authenticated route other than its success, as documented in OpenAPI: the
# same ErrorOut body whatever raised it (FastAPI's own 422 shape included).
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": description}
    for status, description in [
        (400, "The body is not JSON."),
        (401, "No API key, or an unknown one."),
        (403, "The key may not make this call."),
        (404, "No such memory, profile entry or job for this caller."),
        (409, "A sweep, or a reshard, is already running."),
        (413, "The body is over serve.max_request_bytes."),
        (429, "Too many writes are queued (write.max_pending): retry after Retry-After seconds."),
        (422, "The request is invalid; nothing was stored."),
        (502, "The LLM's output stayed invalid, or the LLM server refused the request."),
        (503, "The LLM or the disk is unavailable; nothing was stored."),
    ]
}


def status_of(error: LongmemError) -> int:
    """The HTTP status for a core error."""
    return next((status for cls, status in _STATUS if isinstance(error, cls)), 500)


def _error(status: int, name: str, detail: object) -> JSONResponse:
    return JSONResponse(ErrorOut(error=name, detail=detail).model_dump(), status_code=status)


def create_api(rt: Runtime) -> FastAPI:
    """The whole HTTP API over one runtime.

    Args:
        rt: the service and the app's parts (auth, jobs, metrics, sweeps, health).

    Returns:
        An ASGI app (served by Ray Serve's ingress, or by any ASGI server in-process).
    """
    from deployments.api.admin import admin_router
    from deployments.api.memories import memory_router
    from deployments.api.openai_compat import openai_router
    from deployments.ui.router import STATIC_DIR, error_page, is_ui, ui_router
    from deployments.ui.session import Sessions

    def answer(request: Request, status: int, name: str, detail: object) -> Response:
        # The inspector's pages get their errors as pages (or the sign-in page), the API as JSON.
        return error_page(status, detail) if is_ui(request) else _error(status, name, detail)

    api = FastAPI(
        title="longmem",
        version="1",
        description="Long-term memory for AI agents: working window, extracted facts, preference profile.",
        # No redirect to the path without its trailing slash: "DELETE /v1/users/a%3Ab%2F" (user
        # "a:b/", invalid) was redirected to, and erased, user "a:b".
        redirect_slashes=False,
    )

    @api.exception_handler(LongmemError)
    async def core_error(request: Request, exc: LongmemError) -> JSONResponse:
        status = status_of(exc)
        if status >= 500:
            # Class and route template only: a message may quote the user or their memories
            # (the caller gets it in the answer's detail).
            route = getattr(request.scope.get("route"), "path", "unmatched")
            log.warning("%s %s answered %d: %s", request.method, route, status, type(exc).__name__)
        # Another user's (or no one's) memory id gets the same answer as a missing one.
        detail = (
            "no such memory or profile entry for this user" if isinstance(exc, NotFoundError) else str(exc)
        )
        response = answer(request, status, type(exc).__name__, detail)
        if isinstance(exc, WriteQueueFullError):
            response.headers["Retry-After"] = str(math.ceil(exc.retry_after_s))
        return response

    @api.exception_handler(AuthError)
    async def auth_error(request: Request, exc: AuthError) -> Response:
        response = answer(request, exc.status, "AuthError", str(exc))
        if exc.status == 401 and not is_ui(request):
            response.headers["WWW-Authenticate"] = "Bearer"
        return response

    @api.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        # Starlette's own answers (unknown route, wrong method, a body that is not JSON) in the
        # one error shape.
        response = answer(request, exc.status_code, "HTTPError", exc.detail)
        for name, value in (exc.headers or {}).items():
            response.headers[name] = value
        return response

    @api.exception_handler(RequestValidationError)
    async def bad_request(request: Request, exc: RequestValidationError) -> Response:
        errors = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", "")} for e in exc.errors()]
        return answer(request, 422, "ValidationError", errors)

    deep = CachedProbe(rt.health, rt.settings.serve.health_cache_s)

    @api.get("/livez", tags=["ops"])
    def livez() -> dict[str, bool]:
        """The ingress answers (touches no store, embedder or LLM)."""
        return {"ok": True}

    @api.get("/healthz", tags=["ops"], responses={503: {"description": "A part is down (same report)."}})
    def healthz() -> JSONResponse:
        """Shards (index loaded, log writable, profile file open), embedder and LLM reachable;
        probed at most once per ``serve.health_cache_s`` (``age_s`` says how long ago)."""
        report = deep.report()
        return JSONResponse(report, status_code=200 if report["ok"] else 503)

    @api.get("/metrics", tags=["ops"], response_class=PlainTextResponse)
    def metrics() -> Response:
        """Prometheus metrics."""
        return Response(rt.metrics.render(), media_type=CONTENT_TYPE)

    api.include_router(memory_router(rt))
    api.include_router(openai_router(rt))
    api.include_router(admin_router(rt))
    api.include_router(ui_router(rt, Sessions(rt.auth, rt.settings.serve.ui_session_hours * 3600)))
    api.mount("/ui/static", StaticFiles(directory=STATIC_DIR), name="ui-static")
    api.add_middleware(_Wrap, wrap=rt.metrics.middleware)
    api.add_middleware(_Wrap, wrap=lambda app: limit_body(app, rt.settings.serve.max_request_bytes))
    return api


class _Wrap:
    """Adapts a function ``app -> app`` to Starlette's middleware class protocol."""

    def __init__(self, app, wrap) -> None:  # type: ignore[no-untyped-def]
        self._app = wrap(app)

    async def __call__(self, scope, receive, send) -> None:  # type: ignore[no-untyped-def]
        await self._app(scope, receive, send)


# Declared as OpenAPI security schemes (not as plain headers), so clients and fuzzers see that
# every route but the ops ones needs a key; neither raises itself: the Authenticator decides.
_BEARER = HTTPBearer(auto_error=False, description="Authorization: Bearer <API key>.")
_API_KEY = APIKeyHeader(name="X-API-Key", auto_error=False, description="The API key, instead of a bearer.")


def principal_dependency(rt: Runtime):  # type: ignore[no-untyped-def]
    """A FastAPI dependency resolving the caller from the request headers (fails closed)."""

    def caller(
        request: Request,
        _: Annotated[HTTPAuthorizationCredentials | None, Security(_BEARER)],
        x_api_key: Annotated[str | None, Security(_API_KEY)],
    ) -> Principal:
        # The raw header: HTTPBearer drops a malformed one, which must be refused, not ignored.
        return rt.auth.authenticate(request.headers.get("authorization"), x_api_key)

    return Depends(caller)
