"""Trace context from proposal to release, in NATS headers (W3C `traceparent`/`tracestate`).

An agent that traces its work puts `traceparent` on the proposal it publishes. Headgate carries
that context to every event it publishes about the proposal — held, inbox, released, blocked —
so one trace spans propose → classify → route → approve → release. With `opentelemetry-api`
installed (an optional dependency), the intake and the collector add their own spans as
children and the events carry the span's context; without it the agent's context is passed
through unchanged. Nothing here ever fails a message.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TRACE_HEADERS = ("traceparent", "tracestate")

try:  # optional: spans only when OpenTelemetry is installed
    import opentelemetry.propagate as propagate
    import opentelemetry.trace as trace

    _tracer: Any = trace.get_tracer("headgate")
except ImportError:  # pragma: no cover - exercised when the package is absent
    _tracer = None


def trace_headers(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The trace context carried by an incoming message's headers (possibly empty)."""
    if not headers:
        return {}
    return {k: headers[k] for k in TRACE_HEADERS if k in headers}


def span_headers(name: str, parent: Mapping[str, str], **attributes: str) -> dict[str, str]:
    """Record a span named `name` under `parent` and return the context to propagate.

    The span covers the moment the decision was made (classification and routing are pure and
    take microseconds); the events published afterwards carry it as their parent.
    """
    if _tracer is None:
        return dict(parent)
    context = propagate.extract(dict(parent))
    with _tracer.start_as_current_span(name, context=context) as span:
        for key, value in attributes.items():
            span.set_attribute(f"headgate.{key}", value)
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
    return trace_headers(carrier) or dict(parent)
