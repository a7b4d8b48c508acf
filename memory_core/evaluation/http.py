"""The scenario target over HTTP: the same scenario files, run against a running longmem server.

The server's clock is the wall clock, so every call carries the scenario's time (``at`` on
ingest and recall; ``now`` on the sweep, which needs an admin key).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any
from urllib.parse import quote

import httpx

from memory_core.errors import RemoteError
from memory_core.models import ProfileEntry, Turn, as_utc
from memory_core.prompt import render_profile

_GAUGE = re.compile(r"^(longmem_llm_calls|longmem_llm_seconds)\s+([0-9.eE+-]+)$", re.MULTILINE)


def call_server(client: httpx.Client, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
    """One call to a longmem server: the decoded JSON answer (or the text of a non-JSON one).

    Raises:
        RemoteError: the server is unreachable (status 0) or answered an error status.
    """
    try:
        response = client.request(method, path, json=body)
    except httpx.HTTPError as exc:
        raise RemoteError(0, f"cannot reach {client.base_url}: {type(exc).__name__}: {exc}") from None
    if response.status_code >= 400:
        raise RemoteError(response.status_code, response.text)
    if response.headers.get("content-type", "").startswith("application/json"):
        return response.json()
    return response.text


class HttpTarget:
    """Runs scenario steps against ``base_url`` with an API key (admin, for the sweep steps)."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 900.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = httpx.Client(base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s)
        self._now: datetime | None = None

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        return call_server(self._client, method, path, body)

    def _user(self, user_id: str) -> str:
        return "/v1/users/" + quote(user_id, safe="")

    def ingest(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> None:
        """Ingest synchronously at the scenario's time."""
        self._now = as_utc(at)
        body = {
            "session_id": session_id,
            "at": self._now.isoformat(),
            "wait": True,
            "turns": [
                {
                    "role": t.role.value,
                    "content": t.content,
                    "turn_id": t.turn_id,
                    **({"at": t.at.isoformat()} if t.at else {}),
                }
                for t in turns
            ],
        }
        self._call("POST", self._user(user_id) + "/turns", body)

    def recall_texts(self, user_id: str, query: str, k: int) -> list[str]:
        """Top-k memory texts plus the profile, as of the scenario's time."""
        body: dict[str, Any] = {"query": query, "k": k}
        if self._now is not None:
            body["at"] = self._now.isoformat()
        out = self._call("POST", self._user(user_id) + "/recall", body)
        return [m["text"] for m in out["memories"]] + [e["text"] for e in out["profile"]]

    def profile_text(self, user_id: str) -> str:
        """The rendered profile block."""
        out = self._call("GET", self._user(user_id) + "/profile")
        return render_profile([ProfileEntry(user_id=user_id, **entry) for entry in out["profile"]])

    def advance_and_sweep(self, to: datetime) -> None:
        """Move the scenario's time and run the sweep at it (admin)."""
        self._now = as_utc(to)
        self._call("POST", "/v1/admin/sweep", {"now": self._now.isoformat()})

    def llm_usage(self) -> tuple[int, float]:
        """LLM calls and seconds of the server's ingress, read from its metrics."""
        gauges = dict(_GAUGE.findall(self._call("GET", "/metrics")))
        return int(float(gauges.get("longmem_llm_calls", 0))), float(gauges.get("longmem_llm_seconds", 0.0))

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
