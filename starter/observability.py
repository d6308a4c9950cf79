"""Tracing and logging, set up once by every entry point (gateway, worker, CLI).

The envelope's ``trace_id`` is the OpenTelemetry trace id of the request; the Temporal
interceptor carries it into the workflow and its activities.
"""

from __future__ import annotations

import logging

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from temporalio.client import Interceptor
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

_configured = False


def setup(service: str, level: int = logging.INFO) -> None:
    """Install the tracer provider and a structured-ish log format (idempotent)."""
    global _configured
    if _configured:
        return
    _configured = True
    from opentelemetry.sdk.resources import Resource

    trace.set_tracer_provider(TracerProvider(resource=Resource.create({"service.name": service})))
    logging.basicConfig(
        level=level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    logging.getLogger("httpx").setLevel(logging.WARNING)


def temporal_runtime(metrics_address: str | None) -> Runtime | None:
    """A Temporal runtime exporting the SDK's metrics (task latencies, poller counts,
    activity failures, ...) for Prometheus at ``http://<address>/metrics``; None: the
    default runtime, no metrics endpoint."""
    if not metrics_address:
        return None
    return Runtime(
        telemetry=TelemetryConfig(metrics=PrometheusConfig(bind_address=metrics_address))
    )


def temporal_interceptors() -> list[Interceptor]:
    return [TracingInterceptor()]


def tracer(name: str) -> trace.Tracer:
    return trace.get_tracer(name)


def current_trace_id() -> str:
    ctx = trace.get_current_span().get_span_context()
    return format(ctx.trace_id, "032x") if ctx.trace_id else ""
