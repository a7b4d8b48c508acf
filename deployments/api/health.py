"""Health answers for unauthenticated callers: a liveness answer that touches nothing, and the
deep probe (shards with their profiles, embedder, LLM) run at most once per time-to-live."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


class CachedProbe:
    """The last deep health report, renewed when older than ``ttl_s``.

    Anyone may call ``/healthz``: without the cache every hit would cost an embedding and a
    call to every store and deployment. Callers arriving while the probe runs wait for its report.
    """

    def __init__(
        self,
        probe: Callable[[], dict[str, Any]],
        ttl_s: float,
        timer: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._ttl = ttl_s
        self._timer = timer
        self._lock = threading.Lock()
        self._report: dict[str, Any] | None = None
        self._taken = 0.0

    def report(self) -> dict[str, Any]:
        """The deep report, with ``age_s``: seconds since the probe behind it ran."""
        with self._lock:
            if self._report is None or self._timer() - self._taken >= self._ttl:
                self._report = self._probe()
                self._taken = self._timer()
            return {**self._report, "age_s": round(self._timer() - self._taken, 3)}
