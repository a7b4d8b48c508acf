"""The scenario target over HTTP: the same scenario files, run against a running longmem server.

The server's clock is the wall clock, so every call carries the scenario's time (``at`` on
ingest and recall; ``now`` on the sweep, which needs an admin key).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime

from longmem.client import Client
from memory_core.models import ProfileEntry, Turn, as_utc
from memory_core.prompt import render_profile

# One series per part that calls the LLM: each writer, and the answering ingress replica for its
# chat replies (which replica answers changes from call to call: the writers' sum does not).
_GAUGE = re.compile(
    r'^(longmem_llm_calls|longmem_llm_seconds)(?:\{part="([^"]*)"\})?\s+([0-9.eE+-]+)$', re.MULTILINE
)


def writes_llm_usage(metrics: str) -> tuple[int, float]:
    """LLM calls and seconds of the write path in a server's metrics text (every part but the
    ingress replica's chat replies)."""
    totals = {"longmem_llm_calls": 0.0, "longmem_llm_seconds": 0.0}
    for name, part, value in _GAUGE.findall(metrics):
        if part != "ingress":
            totals[name] += float(value)
    return int(totals["longmem_llm_calls"]), totals["longmem_llm_seconds"]


class HttpTarget:
    """Runs scenario steps against ``base_url`` with an API key (admin, for the sweep steps)."""

    def __init__(self, base_url: str, api_key: str | None, timeout_s: float = 900.0) -> None:
        self._client = Client(base_url, api_key, timeout_s=timeout_s)
        self._now: datetime | None = None

    def ingest(self, user_id: str, session_id: str, turns: Sequence[Turn], at: datetime) -> None:
        """Ingest synchronously at the scenario's time."""
        self._now = as_utc(at)
        sent = [{"role": t.role.value, "content": t.content, "turn_id": t.turn_id, "at": t.at} for t in turns]
        self._client.ingest(user_id, sent, session_id=session_id, at=self._now)

    def recall_texts(self, user_id: str, query: str, k: int) -> list[str]:
        """Top-k memory texts plus the profile, as of the scenario's time."""
        out = self._client.recall(user_id, query, k=k, at=self._now)
        return [m.text for m in out.memories] + [e.text for e in out.profile]

    def profile_text(self, user_id: str) -> str:
        """The rendered profile block."""
        entries = self._client.profile(user_id)
        return render_profile([ProfileEntry(user_id=user_id, **entry.model_dump()) for entry in entries])

    def advance_and_sweep(self, to: datetime) -> None:
        """Move the scenario's time and run the sweep at it (admin)."""
        self._now = as_utc(to)
        self._client.sweep(now=self._now)

    def llm_usage(self) -> tuple[int, float]:
        """LLM calls and seconds of the server's write path, read from its metrics."""
        return writes_llm_usage(self._client.metrics())

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()
