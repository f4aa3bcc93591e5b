"""OpenTelemetry (the optional `[otel]` extra): a span per decision, incidents as its events.

Attributes hold machine names, ids and numbers (event kind, heuristic, verdict, tool, the
counters that decided), never payload text. An engine traces when OpenTelemetry is installed
and a tracer provider is configured when it is built (or it is given a tracer);
`agent-breaker serve` configures one exporting over OTLP when the standard variables
(OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) are set.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from ._extras import install_hint

OTLP_ENDPOINT_ENVS = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
INSTRUMENTATION = "agent_breaker"


def configured_tracer() -> Any | None:
    """A tracer of the process's provider, or None when OpenTelemetry is absent or no provider
    was set (every span would be dropped: not worth its microseconds)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return None
    provider = trace.get_tracer_provider()
    if isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider)):
        return None
    return trace.get_tracer(INSTRUMENTATION)


def export_from_env(environ: Mapping[str, str] = os.environ) -> bool:
    """Install an OTLP/HTTP exporting provider when the standard endpoint variable is set
    (the exporter reads OTEL_EXPORTER_OTLP_* itself). False when nothing asks for it; an
    ImportError naming the extra when it is asked for but not installed."""
    if not any(environ.get(name) for name in OTLP_ENDPOINT_ENVS):
        return False
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise ImportError(
            f"{' or '.join('$' + n for n in OTLP_ENDPOINT_ENVS)} is set, but OpenTelemetry's SDK and OTLP exporter are not "
            f"installed: {install_hint('otel')}"
        ) from exc
    provider = TracerProvider(resource=Resource.create({"service.name": environ.get("OTEL_SERVICE_NAME", "agent-breaker")}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return True


def attributes(prefix: str, values: Mapping[str, Any]) -> dict[str, Any]:
    """Span attributes of numbers, booleans and short machine strings (a counter's value)."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, (bool, int, float)) or (isinstance(value, str) and len(value) <= 64):
            out[f"{prefix}.{key}"] = value
    return out
