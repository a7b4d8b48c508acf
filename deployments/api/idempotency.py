"""``Idempotency-Key`` on write calls: a call repeated with the same key (a client's retry after
a timeout) gets the first call's answer, and nothing is written twice.

The answer is kept in the user's shard (``memory_core.store.inbox``) for
``write.idempotency_hours``, so a repeat is recognised after a restart, and an erase takes the
user's kept answers with it. The same key sent with another request is refused (422). Repeats
that arrive while the first call still runs wait for it (one at a time per key in this
replica). Only successful answers are kept: a call that failed wrote nothing and may be retried.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Annotated

from fastapi import Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel

from memory_core.clock import Clock
from memory_core.errors import ValidationError
from memory_core.store.facts import FactStore
from memory_core.store.inbox import StoredAnswer

REPLAYED = "Idempotent-Replayed"
KeyHeader = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        max_length=200,
        description="Any unique string per intended write (a UUID): a repeat gets the first answer.",
    ),
]


class Replays:
    """Answers repeated write calls from the answers kept for their keys."""

    def __init__(self, facts: FactStore, clock: Clock, keep: timedelta) -> None:
        self._facts = facts
        self._clock = clock
        self._keep = keep
        # Repeats of one key wait for each other; striped, so the locks never grow.
        self._stripes = [threading.Lock() for _ in range(1024)]

    def respond(
        self,
        request: Request,
        user_id: str,
        key: str | None,
        body: BaseModel | None,
        status: int,
        write: Callable[[], BaseModel],
    ) -> Response:
        """``write``'s answer as JSON with ``status``, or the answer kept for ``key`` when this
        call repeats an earlier one.

        Args:
            request: the call (its method and path are part of what a key stands for).
            user_id: the stored id of the user written.
            key: the ``Idempotency-Key`` header, if sent.
            body: the call's parsed body, if it has one.
            status: the status of a first answer.
            write: makes the write; returns the answer's body.

        Raises:
            ValidationError: the key is blank, or was used before with another request.
        """
        if key is None:
            return JSONResponse(write().model_dump(mode="json"), status_code=status)
        if not key.strip() or not key.isprintable():
            raise ValidationError("Idempotency-Key must be printable and not blank")
        sent = f"{request.method} {request.url.path}\n{body.model_dump_json() if body else ''}"
        digest = hashlib.sha256(sent.encode("utf-8")).hexdigest()
        with self._stripes[hash((user_id, key)) % len(self._stripes)]:
            now = self._clock.now()
            kept = self._facts.answer(user_id, key, now - self._keep)
            if kept is not None:
                if kept.fingerprint != digest:
                    raise ValidationError("this Idempotency-Key was used with another request: use a new key")
                return Response(
                    kept.body, kept.status, media_type="application/json", headers={REPLAYED: "true"}
                )
            response = JSONResponse(write().model_dump(mode="json"), status_code=status)
            answer = StoredAnswer(user_id, key, digest, status, bytes(response.body).decode("utf-8"), now)
            self._facts.keep_answer(answer, now - self._keep)
            return response
