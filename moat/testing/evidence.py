"""Where a secret could leak, captured for a search: log records (as text and through the
JSON formatter the services use), exported spans, Postgres rows, Temporal histories and
manifest files."""

from __future__ import annotations

import asyncio
import io
import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import text
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest

from moat.testing.stack import Stack
from starter.runtime.observability import JsonFormatter


@contextmanager
def captured_logs() -> Iterator[io.StringIO]:
    """Every record at DEBUG from every logger (the HTTP client's request lines included),
    written both as ``name level message`` lines and through the services' JSON formatter."""
    out = io.StringIO()
    plain = logging.StreamHandler(out)
    plain.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    as_json = logging.StreamHandler(out)
    as_json.setFormatter(JsonFormatter("moat-conformance"))
    root = logging.getLogger()
    levels = {name: logging.getLogger(name).level for name in ("", "httpx", "httpcore")}
    for name in levels:
        logging.getLogger(name).setLevel(logging.DEBUG)
    root.addHandler(plain)
    root.addHandler(as_json)
    try:
        yield out
    finally:
        root.removeHandler(plain)
        root.removeHandler(as_json)
        for name, level in levels.items():
            logging.getLogger(name).setLevel(level)


@contextmanager
def captured_spans() -> Iterator[InMemorySpanExporter]:
    """An in-memory exporter on the tracer provider the stack's services use."""
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider), "the gateway installs the SDK provider"
    exporter = InMemorySpanExporter()
    processor = SimpleSpanProcessor(exporter)
    provider.add_span_processor(processor)
    try:
        yield exporter
    finally:
        processor.shutdown()


def span_texts(span: ReadableSpan) -> Iterator[str]:
    """Everything a span exporter would send: name, attributes, events, links, status."""
    yield span.name
    yield from (k + "=" + str(v) for k, v in (span.attributes or {}).items())
    for event in span.events:
        yield event.name
        yield from (k + "=" + str(v) for k, v in (event.attributes or {}).items())
    for link in span.links:
        yield from (k + "=" + str(v) for k, v in (link.attributes or {}).items())
    yield span.status.description or ""
    yield from (k + "=" + str(v) for k, v in span.resource.attributes.items())


def files_under(root: Path) -> Iterator[tuple[Path, bytes]]:
    for folder, _, names in os.walk(root):
        for name in names:
            file = Path(folder) / name
            if file.is_file():  # not a server's socket
                yield file, file.read_bytes()


async def table_texts(stack: Stack) -> dict[str, str]:
    """Every row of every table of the public schema, as text, read as the owner."""
    out: dict[str, str] = {}
    async with stack.sessions() as s:
        query = text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        tables = (await s.execute(query)).scalars().all()
        for table in tables:
            rows = (await s.execute(text(f'SELECT t::text FROM "{table}" t'))).scalars().all()
            out[table] = "\n".join(rows)
    return out


async def histories(stack: Stack, workflows: Iterable[tuple[str, str | None]]) -> dict[str, bytes]:
    """Each workflow's history as the server hands it out (no codec applied)."""
    out: dict[str, bytes] = {}
    for workflow_id, run_id in workflows:
        history = await stack.client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=stack.settings.temporal_namespace,
                execution=WorkflowExecution(workflow_id=workflow_id, run_id=run_id or ""),
            )
        )
        out[f"{workflow_id}/{run_id or ''}"] = history.SerializeToString()
    return out


async def manifest_files(stack: Stack) -> dict[Path, bytes]:
    """Everything under the tenant's manifest folder."""
    folder = stack.settings.manifests_dir / stack.tenant_id
    return await asyncio.to_thread(lambda: dict(files_under(folder)))
