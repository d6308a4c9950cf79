"""The HTTP gateway: agents in any language execute capabilities and read receipts."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from schemas.capabilities import CapabilityCatalog
from schemas.execute import Envelope, EnvelopeStatus, envelope_for_receipt
from schemas.records import Receipt
from schemas.settings import MoatSettings
from starter import observability
from starter.errors import ApiError, install
from starter.ingest import Ingest, prepare
from starter.temporal import connect
from store import make_engine, make_sessionmaker
from store import repository as repo

MAX_BODY_BYTES = 256 * 1024
MAX_WAIT_SECONDS = 300.0
_PREFER_WAIT = re.compile(r"(?:^|[;,\s])wait=(\d+(?:\.\d+)?)")


class Deps:
    """What the routes need; built in the lifespan or handed in by tests."""

    sessions: async_sessionmaker[AsyncSession]
    ingest: Ingest


def create_app(
    settings: MoatSettings,
    *,
    client: Client | None = None,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    catalog: CapabilityCatalog | None = None,
) -> FastAPI:
    observability.setup("moat-gateway")
    deps = Deps()

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        engine = None
        nonlocal sessions, client
        if sessions is None:
            engine = make_engine(settings.sqlalchemy_url)
            sessions = make_sessionmaker(engine)
        if client is None:
            client = await connect(settings, observability.temporal_interceptors())
        deps.sessions = sessions
        deps.ingest = Ingest(settings, sessions, client, catalog or CapabilityCatalog())
        try:
            yield
        finally:
            if engine is not None:
                await engine.dispose()

    app = FastAPI(
        title="Moat",
        version="0.1.0",
        lifespan=lifespan,
        description="Durable, idempotent execution of agents' side-effecting calls.",
    )
    install(app)
    tracer = observability.tracer("moat.gateway")

    async def tenant_of(
        session: AsyncSession, authorization: str | None
    ) -> repo.AuthenticatedTenant:
        if not authorization or not authorization.lower().startswith("bearer "):
            raise ApiError(
                401,
                "unauthenticated",
                "Send 'Authorization: Bearer <api key>'.",
                headers={"WWW-Authenticate": "Bearer"},
            )
        tenant = await repo.authenticate(session, authorization[7:].strip())
        if tenant is None:
            raise ApiError(
                401,
                "unauthenticated",
                "The API key is unknown or revoked.",
                headers={"WWW-Authenticate": "Bearer"},
            )
        return tenant

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/executions", response_model=Envelope, status_code=200)
    async def execute(
        request: Request,
        authorization: Annotated[str | None, Header()] = None,
        idempotency_key: Annotated[str | None, Header(alias="Idempotency-Key")] = None,
        prefer: Annotated[str | None, Header()] = None,
    ) -> JSONResponse:
        submitted_at = datetime.now(UTC)
        with tracer.start_as_current_span("POST /v1/executions"):
            trace_id = observability.current_trace_id()
            body = await request.body()
            if len(body) > MAX_BODY_BYTES:
                raise ApiError(
                    413, "payload_too_large", f"The body is over {MAX_BODY_BYTES} bytes."
                )
            async with deps.sessions.begin() as session:
                tenant = await tenant_of(session, authorization)
                prepared = prepare(body, idempotency_key, deps.ingest.catalog)
                answer = await deps.ingest.replay(session, tenant.tenant_id, prepared, trace_id)
            if answer is None:
                answer = await deps.ingest.run(
                    tenant.tenant_id,
                    tenant.idempotency_ttl_seconds,
                    prepared,
                    trace_id,
                    submitted_at,
                    _wait_budget(prefer, settings.wait_seconds),
                )
            return JSONResponse(
                answer.envelope.model_dump(mode="json"),
                status_code=answer.status,
                headers=answer.headers,
            )

    @app.get("/v1/executions/{receipt_id}", response_model=Envelope)
    async def get_execution(
        receipt_id: str, authorization: Annotated[str | None, Header()] = None
    ) -> JSONResponse:
        async with deps.sessions.begin() as session:
            tenant = await tenant_of(session, authorization)
            receipt = await repo.get_receipt(session, tenant.tenant_id, receipt_id)
            claim = (
                None
                if receipt
                else await repo.find_claim_by_receipt(session, tenant.tenant_id, receipt_id)
            )
        if receipt is None:
            if claim is None:
                raise ApiError(404, "execution_not_found", f"No execution {receipt_id}.")
            running = Envelope(
                receipt_id=receipt_id,
                trace_id=observability.current_trace_id(),
                status=EnvelopeStatus.ACCEPTED,
                idempotency_key=claim.key,
                workflow_id=claim.workflow_id,
            )
            return JSONResponse(running.model_dump(mode="json"), status_code=202)
        status, envelope = envelope_for_receipt(receipt)
        return JSONResponse(envelope.model_dump(mode="json"), status_code=status)

    @app.get("/v1/receipts/{receipt_id}", response_model=Receipt)
    async def get_receipt(
        receipt_id: str, authorization: Annotated[str | None, Header()] = None
    ) -> Receipt:
        async with deps.sessions.begin() as session:
            tenant = await tenant_of(session, authorization)
            receipt = await repo.get_receipt(session, tenant.tenant_id, receipt_id)
        if receipt is None:
            raise ApiError(404, "receipt_not_found", f"No receipt {receipt_id}.")
        return receipt

    @app.get("/v1/capabilities")
    async def capabilities() -> list[dict[str, Any]]:
        catalog = deps.ingest.catalog
        return [
            {
                **spec.model_dump(mode="json", exclude={"retry"}),
                "retry": spec.retry_settings.model_dump(),
                "input_schema": catalog.input_model(spec).model_json_schema(),
            }
            for spec in catalog.all()
        ]

    return app


def _wait_budget(prefer: str | None, default: float) -> float:
    if prefer:
        match = _PREFER_WAIT.search(prefer)
        if match:
            return min(float(match.group(1)), MAX_WAIT_SECONDS)
    return default
