"""Tracing, logging and metrics, set up once by every entry point (gateway, worker).

- **Traces**: the envelope's ``trace_id`` is the OpenTelemetry trace id of the request; the
  Temporal interceptor carries it into the workflow and its activities, and the adapter
  into the provider call (``traceparent``). Spans are exported over OTLP/HTTP when the
  standard ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``…_TRACES_ENDPOINT``) is set.
- **Logs**: one JSON object per line (``MOAT_LOG_FORMAT=text`` for plain lines) with the
  current ``trace_id`` and ``span_id``, so a log line leads to its trace and back.
- **No secret in a log**: every record's message and traceback are passed through the
  secret-value redaction when the record is made, whichever handler writes it.
"""

from __future__ import annotations

import json
import logging
import math
import os
import traceback
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
from temporalio.client import Interceptor
from temporalio.common import MetricMeter
from temporalio.contrib.opentelemetry import TracingInterceptor
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from schemas.redaction import redact_text
from schemas.trust import TrustReport

OTLP_ENDPOINT_VARIABLES = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")

_configured = False


def setup(service: str, level: int = logging.INFO, log_format: str = "json") -> None:
    """Install the tracer provider (with an OTLP exporter when configured), the log format
    and the redaction of log records (idempotent: the first call wins)."""
    global _configured
    if _configured:
        return
    _configured = True
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = span_exporter_from_env(os.environ)
    if exporter is not None:
        provider.add_span_processor(BatchSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    install_redaction()
    root = logging.getLogger()
    if not root.handlers:  # like basicConfig: a host that configured logging keeps its own
        handler = logging.StreamHandler()
        handler.setFormatter(
            JsonFormatter(service)
            if log_format == "json"
            else logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s")
        )
        root.addHandler(handler)
        root.setLevel(level)
    # The HTTP libraries' debug lines quote providers' headers and errors: secrets, at times.
    for name in ("httpx", "httpcore"):
        logging.getLogger(name).setLevel(logging.WARNING)


def span_exporter_from_env(environ: Mapping[str, str]) -> SpanExporter | None:
    """An OTLP/HTTP span exporter when an OTLP endpoint is configured (the exporter reads
    the rest of the standard ``OTEL_EXPORTER_OTLP_*`` settings itself)."""
    if not any(environ.get(name) for name in OTLP_ENDPOINT_VARIABLES):
        return None
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


_factory = logging.getLogRecordFactory()


def _redacting_factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _factory(*args, **kwargs)
    try:
        message = record.getMessage()
    except Exception:  # a malformed call; let the handler report it as logging does
        return record
    record.msg, record.args = _redacted(message), None
    if record.exc_info and record.exc_info[1] is not None:
        record.exc_text = _redacted("".join(traceback.format_exception(*record.exc_info)))
    return record


def _redacted(text: str) -> str:
    """``text`` redacted (in bounded time: see ``redact_text``); should redaction itself
    fail, a marker instead of the text, never the text unredacted, and never an error out
    of a logging call."""
    try:
        return redact_text(text)
    except Exception:
        return f"[REDACTED: a message of {len(text)} characters that could not be redacted]"


def install_redaction() -> None:
    """Redact every log record of this process as it is made (idempotent)."""
    if logging.getLogRecordFactory() is not _redacting_factory:
        logging.setLogRecordFactory(_redacting_factory)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, trace and span ids, and the
    traceback when there is one."""

    def __init__(self, service: str) -> None:
        super().__init__()
        self.service = service

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            "service": self.service,
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = format(context.trace_id, "032x")
            entry["span_id"] = format(context.span_id, "016x")
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, ensure_ascii=False, default=str)


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


class TrustGauges:
    """The trust scores as Prometheus gauges on the process's metrics endpoint (the Temporal
    runtime's, ``MOAT_METRICS_ADDRESS``), so an existing Grafana can chart them: labels
    ``capability``, ``version``, ``traffic`` (real | synthetic) and ``window``. A score with
    too few samples is NaN, never a stale or made-up value."""

    def __init__(self, meter: MetricMeter) -> None:
        self._rate = meter.create_gauge_float(
            "moat_trust_success_rate", "Success rate (rate-limited counts half)", "ratio"
        )
        self._samples = meter.create_gauge("moat_trust_samples", "Outcomes counted", "outcomes")
        self._latency = meter.create_gauge_float(
            "moat_trust_latency_ms", "Latency percentile (label quantile)", "ms"
        )

    def publish(self, report: TrustReport) -> None:
        for entry in report.scores:
            for traffic, score in (("real", entry.real), ("synthetic", entry.synthetic)):
                labels = {
                    "capability": entry.capability_id,
                    "version": entry.capability_version,
                    "traffic": traffic,
                    "window": report.window.value,
                }
                rate = score.success_rate
                self._rate.set(math.nan if rate is None else rate, labels)
                self._samples.set(score.samples, labels)
                for quantile, value in score.latency_ms.model_dump().items():
                    self._latency.set(
                        math.nan if value is None else value, {**labels, "quantile": quantile}
                    )


def trust_gauges(runtime: Runtime | None) -> TrustGauges:
    return TrustGauges((runtime or Runtime.default()).metric_meter)
