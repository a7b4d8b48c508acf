"""Traces of recall and of the write path (OpenTelemetry), off by default.

The code opens spans through OpenTelemetry's API everywhere; until :func:`configure_tracing`
installs a provider (``telemetry.enabled``), they cost next to nothing and go nowhere. Once it
has, each recall is a ``longmem.recall`` span (embed, search, rank) and each user turn a
``longmem.write.turn`` span (forget_intent, forget, prefilter, judge, extract, resolve, store),
exported over OTLP/HTTP to ``telemetry.otlp_endpoint``. Every span sums the LLM calls made under
it in this thread or task (``longmem.llm.calls``, ``gen_ai.usage.input_tokens``,
``gen_ai.usage.output_tokens``), and each call is a span of its own.

Spans carry stages, counts, timings and token usage: never memory text, questions or user ids
(the same rule as the logs).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING

from opentelemetry import trace
from opentelemetry.util.types import AttributeValue

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider

    from memory_core.settings import TelemetrySettings

_TRACER = "longmem"


@dataclass
class _Usage:
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0


# The stages open in this thread or task, innermost last: an LLM call counts towards each.
_open: ContextVar[tuple[_Usage, ...]] = ContextVar("longmem_llm_usage", default=())


@contextmanager
def span(name: str, **attributes: AttributeValue) -> Iterator[trace.Span]:
    """A span named ``name`` around a stage; the LLM calls made inside it are summed on it.

    Args:
        name: the stage ("judge", "longmem.recall").
        **attributes: counts and settings to record (``.`` may not be in a keyword: use ``_``;
            they are recorded under ``longmem.<name>``). Never memory text or user ids.
    """
    usage = _Usage()
    token = _open.set((*_open.get(), usage))
    named = {f"longmem.{key}": value for key, value in attributes.items()}
    with trace.get_tracer(_TRACER).start_as_current_span(name, attributes=named) as current:
        try:
            yield current
        finally:
            _open.reset(token)
            if usage.calls:
                current.set_attributes(
                    {
                        "longmem.llm.calls": usage.calls,
                        "gen_ai.usage.input_tokens": usage.input_tokens,
                        "gen_ai.usage.output_tokens": usage.output_tokens,
                    }
                )


def count_llm_call(input_tokens: int, output_tokens: int) -> None:
    """Add one LLM call's tokens to every stage open in this thread or task."""
    for usage in _open.get():
        usage.calls += 1
        usage.input_tokens += input_tokens
        usage.output_tokens += output_tokens


_configure_lock = threading.Lock()


def configure_tracing(settings: TelemetrySettings) -> TracerProvider | None:
    """Export this process's spans as ``settings`` say (once per process: OpenTelemetry's
    provider is global, so a later call returns the one installed).

    Returns:
        The provider in use, or None when telemetry is off.
    """
    if not settings.enabled:
        return None
    # Imported here: processes with telemetry off never load the SDK or the exporter.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    with _configure_lock:
        installed = trace.get_tracer_provider()
        if isinstance(installed, TracerProvider):
            return installed
        provider = TracerProvider(
            resource=Resource.create({"service.name": settings.service_name}),
            sampler=ParentBased(TraceIdRatioBased(settings.sample_ratio)),
        )
        exporter = OTLPSpanExporter(endpoint=settings.otlp_endpoint, timeout=settings.export_timeout_s)
        provider.add_span_processor(BatchSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        return provider
