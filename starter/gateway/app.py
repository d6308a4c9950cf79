"""The gateway app: agents in any language execute capabilities and read receipts.

Routes live in ``routes/`` (executions, receipts, capabilities and evidence for tenants;
admin and codec for operators); this module builds the app (dependencies, error envelope,
middleware, OpenAPI document) and serves it (``moat gateway``).

The routes that take the admin key can get a listener of their own (``MOAT_ADMIN_PORT``), so
a deployment keeps them on an internal network while the API faces the world: then the main
app does not route them at all, and the admin app serves only them (and the health check).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import uvicorn
from fastapi import APIRouter, FastAPI
from fastapi.routing import APIRoute
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.routing import BaseRoute
from temporalio.client import Client

from schemas.capabilities import CapabilityCatalog
from schemas.settings import MoatSettings
from starter.gateway import console, docs, openapi
from starter.gateway.console.pages import oidc as console_oidc
from starter.gateway.deps import Deps, require_admin
from starter.gateway.errors import EnvelopeJSONResponse, documented_errors, install
from starter.gateway.intake import guard_bodies
from starter.gateway.middleware import Boundary, CodecCors
from starter.gateway.routes import admin as admin_routes
from starter.gateway.routes import alerts as alert_routes
from starter.gateway.routes import approvals as approval_routes
from starter.gateway.routes import (
    capabilities,
    codec,
    connections,
    dead_letters,
    evidence,
    executions,
    people,
    receipts,
    slack,
    trust,
    webhooks,
    whoami,
)
from starter.gateway.routes import log as log_routes
from starter.gateway.routes import log_entries as log_entry_routes
from starter.gateway.routes import plans as plan_routes
from starter.gateway.routes import policy as policy_routes
from starter.gateway.routes import quotas as quota_routes
from starter.runtime import observability
from starter.runtime.loop import settle_heap
from starter.runtime.temporal import connect
from starter.service import Executions, HitLedger, KeyCache
from store import make_engine, make_sessionmaker
from store.keyrings.codec import OutputSealer
from store.keyrings.connections import ConnectionCipher
from store.keyrings.signing import PublishedJwks
from store.keyrings.start import StartKeyring

log = logging.getLogger("moat.gateway")

DESCRIPTION = """\
Durable, idempotent execution of AI agents' side-effecting tool calls, on Temporal.

**Authentication**: `Authorization: Bearer moat_<id>_<secret>` (a tenant's API key; an
operator creates one with `moat api-key create TENANT` or `POST /v1/admin/tenants/{id}/keys`).
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
    {
        "name": "plans",
        "description": "Several capability calls as one durable run: each step an execution "
        "of its own, checkpoints, skips, compensation and resume.",
    },
    {"name": "receipts", "description": "The immutable record of every execution attempt."},
    {"name": "capabilities", "description": "What can be executed."},
    {
        "name": "evidence",
        "description": "What happened, verifiably: an execution's event log, its signed run "
        "manifests, and the public keys that verify them.",
    },
    {
        "name": "log",
        "description": "The tenant's transparency log of every manifest and receipt: signed "
        "checkpoints, witnesses' cosignatures, inclusion and consistency proofs.",
    },
    {
        "name": "connections",
        "description": "Credentials stored once, sealed, and named by id in executions; "
        "never answered.",
    },
    {
        "name": "webhooks",
        "description": "Tenants hear about outcomes: signed webhook subscriptions (Standard "
        "Webhooks) and their delivery attempts.",
    },
    {
        "name": "dead-letters",
        "description": "What needs a person: deliveries out of attempts and executions whose "
        "effect dead-lettered; requeue or resolve, and compensating-action records.",
    },
    {"name": "admin", "description": "Tenants, API keys and connections; the admin key only."},
    {
        "name": "codec",
        "description": "Temporal's remote codec protocol, for ops: decode the encrypted "
        "payloads in the Temporal Web UI and CLI. Admin key, or the UI's token path.",
    },
    {"name": "health", "description": "Liveness."},
]


def takes_admin_key(route: BaseRoute) -> bool:
    """Whether a route is guarded by the admin key (the admin API, the operators' codec
    door): the routes ``MOAT_ADMIN_PORT`` moves to their own listener."""
    return isinstance(route, APIRoute) and any(
        d.dependency is require_admin for d in route.dependencies
    )


async def _last_flush(ledger: HitLedger) -> None:
    """On shutdown: the hits counted since the last flush, so a clean stop loses none."""
    try:
        await ledger.flush()
    except Exception as err:
        log.warning(
            "%d idempotent hits not recorded at shutdown (%s)", ledger.pending, type(err).__name__
        )


def _only(router: APIRouter, keep: Callable[[BaseRoute], bool]) -> APIRouter:
    return APIRouter(routes=[route for route in router.routes if keep(route)])


def create_app(
    settings: MoatSettings,
    *,
    client: Client | None = None,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    owner_sessions: async_sessionmaker[AsyncSession] | None = None,
    catalog: CapabilityCatalog | None = None,
    admin: bool = False,
) -> FastAPI:
    """The gateway. Without ``sessions``/``client`` it connects to the configured Postgres
    (as the application role) and Temporal in its lifespan. ``owner_sessions`` (else the
    owner's URL, when one is configured) serve the admin writes the application role may
    not make.

    With ``MOAT_ADMIN_PORT`` set, the admin-key routes are left out of this app and
    ``admin=True`` builds the app that serves them: the admin API and both codec doors (the
    Web UI's too, for a UI that reaches only the internal network)."""
    observability.setup("moat-gateway", log_format=settings.log_format)
    capability_catalog = catalog or CapabilityCatalog()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        engines = []
        db, owner, temporal = sessions, owner_sessions, client
        if db is None:
            engines.append(make_engine(settings.app_sqlalchemy_url))
            db = make_sessionmaker(engines[-1])
        if owner is None and settings.owner_database_configured:
            engines.append(make_engine(settings.sqlalchemy_url, pool_size=1))
            owner = make_sessionmaker(engines[-1])
        if temporal is None:
            temporal = await connect(settings, observability.temporal_interceptors())
        sealer = OutputSealer.from_settings(settings)
        ledger = HitLedger(db)
        app.state.deps = Deps(
            settings=settings,
            sessions=db,
            client=temporal,
            executions=Executions(
                settings,
                temporal,
                capability_catalog,
                StartKeyring.from_settings(settings),
                db,
                sealer,
                ledger,
            ),
            catalog=capability_catalog,
            owner_sessions=owner,
            connection_cipher=ConnectionCipher.from_settings(settings),
            sealer=sealer,
            keys=KeyCache(settings.auth_cache_seconds),
        )
        flushing = asyncio.create_task(ledger.run(settings.hit_flush_seconds))
        try:
            yield
        finally:
            flushing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flushing
            await _last_flush(ledger)
            await app.state.deps.executions.close()
            for engine in engines:
                await engine.dispose()

    app = FastAPI(
        title="Moat admin" if admin else "Moat",
        version="0.1.0",
        description=DESCRIPTION,
        lifespan=lifespan,
        # The request's span is ``Boundary``'s, which continues the caller's W3C trace.
        # FastAPI's own telemetry is off: its HTTP span doubled that one on every request,
        # and its spans per dependency, endpoint and serialization tripled them (with no
        # meter or log provider configured, its metrics and logs are off anyway).
        telemetry={"tracing": False, "metrics": False, "logs": False},
        openapi_tags=TAGS,
        default_response_class=EnvelopeJSONResponse,
        generate_unique_id_function=lambda route: route.name,  # operationId: the function
        docs_url=None,  # served by ``docs`` from installed assets, not a CDN
        redoc_url=None,
    )
    install(app)
    app.add_middleware(Boundary, max_body_bytes=settings.max_body_bytes)
    app.add_middleware(CodecCors, origins=settings.codec_cors_origins, prefix=codec.PREFIX)

    @app.get("/healthz", tags=["health"], summary="Liveness", responses=documented_errors(500))
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    if admin:
        routers = [
            admin_routes.router,
            connections.admin_router,
            trust.admin_router,
            quota_routes.admin_router,
            codec.router,
        ]
    else:
        routers = [
            executions.router,
            plan_routes.router,
            receipts.router,
            capabilities.router,
            connections.router,
            policy_routes.router,
            # Before the approvals' routes: /v1/approvals/channel is not an approval's id.
            slack.router,
            approval_routes.router,
            alert_routes.router,
            admin_routes.router,
            connections.admin_router,
            trust.router,
            trust.admin_router,
            evidence.router,
            log_routes.router,
            log_entry_routes.router,
            webhooks.router,
            dead_letters.router,
            quota_routes.router,
            quota_routes.admin_router,
            whoami.router,
            people.router,
            codec.router,
        ]
    for router in routers:
        if settings.admin_port is not None and not admin:
            router = _only(router, lambda route: not takes_admin_key(route))
        guard_bodies(router)  # every body-taking route: its credential before its body
        app.include_router(router)
    app.state.jwks = PublishedJwks(settings.jwks_file)
    openapi.install(app, capability_catalog, settings.probe_min_interval_seconds)
    docs.install(app)
    if not admin:
        console.install(app)
        console_oidc.configure(app, settings)
    return app


class _Server(uvicorn.Server):
    """A uvicorn server that leaves SIGINT/SIGTERM to ``serve``, which stops every listener
    of the process together (uvicorn's own handlers would each stop only their server)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def _server(app: FastAPI, settings: MoatSettings, port: int) -> _Server:
    return _Server(
        uvicorn.Config(
            app,
            host=settings.gateway_host,
            port=port,
            log_level="warning",
            log_config=None,  # uvicorn's own lines go through Moat's log format too
        )
    )


STARTUP_FAILURE = 3  # uvicorn's exit code when an app cannot start


async def serve(settings: MoatSettings, stop: asyncio.Event | None = None) -> int:
    """``moat gateway``: the API on ``MOAT_GATEWAY_PORT`` and, with ``MOAT_ADMIN_PORT``, the
    admin routes on that port, sharing one database pool and one Temporal client. Runs until
    ``stop`` is set, or SIGINT/SIGTERM without one; then both drain and close. Returns the
    exit code: 0 when stopped, ``STARTUP_FAILURE`` when a listener ended on its own."""
    loop = asyncio.get_running_loop()
    servers: list[_Server] = []
    handled: list[signal.Signals] = []
    if stop is None:
        stop = asyncio.Event()

        def on_signal(event: asyncio.Event = stop) -> None:
            if event.is_set():  # a second signal: stop waiting for requests still open
                for server in servers:
                    server.force_exit = True
            event.set()

        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, on_signal)
            handled.append(sig)
    engine = None
    try:
        if settings.admin_port is None:
            servers.append(_server(create_app(settings), settings, settings.gateway_port))
        else:
            engine = make_engine(settings.app_sqlalchemy_url)
            client = await connect(settings, observability.temporal_interceptors())
            sessions = make_sessionmaker(engine)
            public = create_app(settings, client=client, sessions=sessions)
            admin = create_app(settings, client=client, sessions=sessions, admin=True)
            servers += [
                _server(public, settings, settings.gateway_port),
                _server(admin, settings, settings.admin_port),
            ]
        settle_heap()
        running = [asyncio.create_task(server.serve()) for server in servers]
        stopped = asyncio.create_task(stop.wait())
        await asyncio.wait([*running, stopped], return_when=asyncio.FIRST_COMPLETED)
        for server in servers:  # one ending (e.g. its port is taken) ends them all
            server.should_exit = True
        stopped.cancel()
        await asyncio.gather(*running)
        return 0 if stop.is_set() else STARTUP_FAILURE
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
        if engine is not None:
            await engine.dispose()
