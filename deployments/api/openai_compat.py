"""``POST /v1/chat/completions``: an OpenAI client gets memory by pointing its base URL here.

The request's ``user`` names the end user; the conversation comes in ``messages`` as OpenAI
clients send it, so the working window is the request's own history. The reply is built
from the user's profile and recalled memories; the memory write runs after it.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any, Literal

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, Field

from deployments.api.app import ERROR_RESPONSES, principal_dependency
from deployments.api.auth import Principal
from deployments.api.runtime import Runtime
from memory_core.errors import ValidationError
from memory_core.models import Role, Turn


class _Part(BaseModel):
    type: str
    text: str = ""


class OpenAIMessage(BaseModel):
    """A chat message as OpenAI clients send it."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[_Part] | None = None

    def text(self) -> str:
        """The message's text (text parts of a multi-part message joined)."""
        if isinstance(self.content, list):
            return "\n".join(p.text for p in self.content if p.type == "text")
        return self.content or ""


class ChatCompletionIn(BaseModel):
    """The subset of OpenAI's chat-completions request longmem honours (other fields are ignored)."""

    model: str = Field(default="longmem", description="Echoed back; the server's LLM answers.")
    messages: list[OpenAIMessage] = Field(min_length=1)
    user: str = Field(description="The end user's id: whose memory to use (longmem keeps memory per user).")
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    stream: bool = False


def _split(body: ChatCompletionIn) -> tuple[str, list[Turn], str]:
    """(instructions, history, question) of a request."""
    instructions = "\n\n".join(m.text() for m in body.messages if m.role in ("system", "developer"))
    talk = [m for m in body.messages if m.role in ("user", "assistant") and m.text().strip()]
    if not talk or talk[-1].role != "user":
        raise ValidationError("the last message must be the user's")
    history = [Turn(role=Role(m.role), content=m.text()) for m in talk[:-1]]
    return instructions, history, talk[-1].text()


def openai_router(rt: Runtime) -> APIRouter:
    """The OpenAI-compatible route."""
    router = APIRouter(prefix="/v1", tags=["openai"], responses=ERROR_RESPONSES)
    caller = principal_dependency(rt)
    svc = rt.service

    @router.post(
        "/chat/completions",
        response_model=None,
        # With "stream": true the answer is server-sent events (found by the schemathesis run).
        responses={200: {"content": {"application/json": {}, "text/event-stream": {}}}},
    )
    def chat_completions(body: ChatCompletionIn, principal: Principal = caller) -> object:
        """An OpenAI chat completion answered with the user's memory."""
        user = rt.user(principal, body.user)
        instructions, history, question = _split(body)
        cap = rt.settings.serve.reply_max_tokens
        wanted = body.max_completion_tokens or body.max_tokens or cap
        window = history[-rt.settings.working.turns :]
        answer = svc.chat(
            user, "openai", question, history=window, instructions=instructions, max_tokens=min(wanted, cap)
        )
        job_id = rt.writes.write_after_reply(user, "openai", answer.turns)
        completion_id = "chatcmpl-" + secrets.token_hex(12)
        created = int(time.time())
        extension = {"memories": [h.fact.text for h in answer.hits], "write_job_id": job_id}
        if body.stream:
            return StreamingResponse(
                _stream(completion_id, created, body.model, answer.reply, extension),
                media_type="text/event-stream",
            )
        return {
            "id": completion_id,
            "object": "chat.completion",
            "created": created,
            "model": body.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": answer.reply},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": answer.prompt_tokens,
                "completion_tokens": answer.completion_tokens,
                "total_tokens": answer.prompt_tokens + answer.completion_tokens,
            },
            "longmem": extension,
        }

    return router


def _stream(
    completion_id: str, created: int, model: str, reply: str, extension: dict[str, Any]
) -> Iterator[str]:
    """The reply as server-sent events (one content chunk: the reply is generated whole)."""
    base = {"id": completion_id, "object": "chat.completion.chunk", "created": created, "model": model}
    chunks = [
        {
            **base,
            "choices": [
                {"index": 0, "delta": {"role": "assistant", "content": reply}, "finish_reason": None}
            ],
        },
        {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "longmem": extension},
    ]
    for chunk in chunks:
        yield f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"
    yield "data: [DONE]\n\n"
