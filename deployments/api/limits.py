"""Request body size limit, as ASGI middleware (before any route parses the body)."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


def limit_body(app: ASGIApp, max_bytes: int) -> ASGIApp:
    """ASGI middleware answering 413 to bodies over ``max_bytes`` (declared or streamed)."""

    async def limited(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > max_bytes:
            await _too_large(send, max_bytes)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > max_bytes:
                    raise _BodyTooLarge
            return message

        try:
            await app(scope, counted, send)
        except _BodyTooLarge:
            await _too_large(send, max_bytes)

    return limited


class _BodyTooLarge(Exception):
    pass


async def _too_large(send: Send, max_bytes: int) -> None:
    body = b'{"error":"RequestTooLarge","detail":"request body over ' + str(max_bytes).encode() + b' bytes"}'
    await send(
        {"type": "http.response.start", "status": 413, "headers": [(b"content-type", b"application/json")]}
    )
    await send({"type": "http.response.body", "body": body})
