"""The HTTP gateway: agents in any language execute capabilities and read receipts.

Routes live in ``gateway_executions`` and ``gateway_reads`` (tenants), ``gateway_admin``
(operators) and ``evidence_routes``; this module builds the app: dependencies, error
envelope, OpenAPI document.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from schemas.capabilities import CapabilityCatalog
from schemas.settings import MoatSettings
from starter import (
    codec_routes,
    evidence_routes,
    gateway_admin,
    gateway_executions,
    gateway_openapi,
    gateway_reads,
    observability,
)
from starter.errors import Boundary, EnvelopeJSONResponse, documented_errors, install
from starter.gateway_deps import Deps
from starter.ingest import Ingest
from starter.temporal import connect
from store import make_engine, make_sessionmaker
from store.start_keys import StartKeyring

DESCRIPTION = """\
Durable, idempotent execution of AI agents' side-effecting tool calls, on Temporal.

**Authentication**: `Authorization: Bearer moat_<id>_<secret>` (a tenant's API key; an
operator creates one with `moat key create TENANT` or `POST /v1/admin/tenants/{id}/keys`).
The admin routes take the admin key (`MOAT_ADMIN_API_KEY`) instead.

**Idempotency**: one execution per tenant and `Idempotency-Key` (or `idempotency_key`
field, else `sha256:` of the canonical request) within the tenant's window (24 h). A repeat
answers the stored receipt with `X-Moat-Idempotent-Replayed: true`; the same key with a
different request is `422 idempotency_key_reused`.

**Errors**: every refusal is the same envelope: `{"status": "failed", "trace_id", "error":
{"code", "message", "details"}}`, with a stable `code`. The `trace_id` (also the
`X-Moat-Trace-Id` header) identifies the request in Moat's traces and logs.
"""

TAGS = [
    {"name": "executions", "description": "Execute capabilities and poll executions."},
    {"name": "receipts", "description": "The immutable record of every execution attempt."},
    {"name": "capabilities", "description": "What can be executed."},
    {"name": "admin", "description": "Tenants and API keys; the admin key only."},
    {
        "name": "codec",
        "description": "Temporal's remote codec protocol, for ops: decode the encrypted "
        "payloads in the Temporal Web UI and CLI. Admin key, or the UI's token path.",
    },
    {"name": "health", "description": "Liveness."},
]


def create_app(
    settings: MoatSettings,
    *,
    client: Client | None = None,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    catalog: CapabilityCatalog | None = None,
) -> FastAPI:
    """The gateway. Without ``sessions``/``client`` it connects to the configured Postgres
    (as the application role) and Temporal in its lifespan."""
    observability.setup("moat-gateway", log_format=settings.log_format)
    capabilities = catalog or CapabilityCatalog()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engine = None
        db, temporal = sessions, client
        if db is None:
            engine = make_engine(settings.app_sqlalchemy_url)
            db = make_sessionmaker(engine)
        if temporal is None:
            temporal = await connect(settings, observability.temporal_interceptors())
        ingest = Ingest(settings, db, temporal, capabilities, StartKeyring.from_settings(settings))
        app.state.deps = Deps(settings=settings, sessions=db, client=temporal, ingest=ingest)
        try:
            yield
        finally:
            if engine is not None:
                await engine.dispose()

    app = FastAPI(
        title="Moat",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        openapi_tags=TAGS,
        default_response_class=EnvelopeJSONResponse,
        generate_unique_id_function=lambda route: route.name,  # operationId: the function
    )
    install(app)
    app.add_middleware(Boundary, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(codec_routes.CodecCors, origins=settings.codec_cors_origins)

    @app.get("/healthz", tags=["health"], summary="Liveness", responses=documented_errors(500))
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    app.include_router(gateway_executions.router)
    app.include_router(gateway_reads.router)
    app.include_router(gateway_admin.router)
    app.include_router(evidence_routes.router)
    app.include_router(codec_routes.router)
    gateway_openapi.install(app, capabilities)
    return app
