"""The servers one bench run measures against, all in this process and on loopback: an
embedded PostgreSQL with real durability settings, the Temporal dev server, Moat's worker,
one gateway per bookkeeping mode, the bare baseline's worker and a bare one-SELECT endpoint.
"""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse
from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

import worker as moat_worker
from bench.bare_workflow import ACTIVITIES, BareSteps
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, local_temporal, serve_asgi
from starter.gateway.app import create_app
from starter.runtime import observability
from starter.runtime.codec import data_converter
from store import api_keys, make_engine, make_sessionmaker, receipts, tenants, upgrade

NAMESPACE = "moat"
_SELECT_RECEIPT = text("SELECT * FROM receipts WHERE id = :id")


@dataclass(frozen=True)
class BenchStack:
    """What the measurements talk to."""

    bare_client: Client
    bare_queue: str
    gateways: dict[bool, str]  # MoatSettings.local_activities -> gateway base URL
    select_url: str
    api_key: str
    http: httpx.AsyncClient
    tenant_id: str = ""
    # As the owner role, for setting up what a bench needs (policies, keys).
    sessions: async_sessionmaker[AsyncSession] | None = None


def select_app(sessions: async_sessionmaker[AsyncSession]) -> FastAPI:
    """The idempotent-hit baseline: one route, one primary-key SELECT, nothing else."""
    app = FastAPI()

    @app.get("/receipts/{receipt_id}")
    async def receipt(receipt_id: str) -> JSONResponse:
        async with sessions() as session:
            result = await session.execute(_SELECT_RECEIPT, {"id": receipt_id})
            row = result.mappings().one_or_none()
        if row is None:
            return JSONResponse({"error": "not_found"}, status_code=404)
        return JSONResponse(jsonable_encoder(dict(row)))

    return app


@asynccontextmanager
async def bench_stack(*, tracing: bool, temporal_file: bool) -> AsyncIterator[BenchStack]:
    """Start everything, yield, then stop it all in reverse order and delete the state."""
    with tempfile.TemporaryDirectory(prefix="moat-bench-") as tmp:
        root = Path(tmp)
        pg = EmbeddedPostgres(root / "pg", free_port(), fast=False)
        url = await asyncio.to_thread(pg.start)
        try:
            settings = MoatSettings(
                home=root / "home",
                database_url=url,
                temporal_namespace=NAMESPACE,
                task_queue=f"bench-moat-{uuid.uuid4().hex}",
                wait_seconds=30.0,
            )
            await asyncio.to_thread(upgrade, settings.sqlalchemy_url)
            async with (
                local_temporal(
                    NAMESPACE,
                    pydantic_data_converter,
                    root / "temporal.db" if temporal_file else None,
                ) as env,
                AsyncExitStack() as st,
            ):
                yield await _start_processes(st, env, settings, tracing)
        finally:
            await asyncio.to_thread(pg.stop)


async def _start_processes(
    st: AsyncExitStack, env: WorkflowEnvironment, settings: MoatSettings, tracing: bool
) -> BenchStack:
    """Workers, gateways and the baseline endpoint, registered on ``st`` for shutdown."""
    # Production wiring (``worker.run``, the gateway's lifespan) adds the tracing interceptor.
    interceptors = observability.temporal_interceptors() if tracing else []
    moat_client = Client(
        env.client.service_client,
        namespace=NAMESPACE,
        data_converter=data_converter(settings),  # encrypted payloads, as deployed
        interceptors=interceptors,
    )
    wsessions, http_out = await st.enter_async_context(moat_worker.activity_deps(settings))
    async with wsessions.begin() as session:
        await receipts.ensure_outcome_partitions(session, datetime.now(UTC))
    await st.enter_async_context(
        moat_worker.build_worker(moat_client, settings, wsessions, http_out)
    )
    bare_queue = f"bench-bare-{uuid.uuid4().hex}"
    await st.enter_async_context(
        Worker(
            env.client,
            task_queue=bare_queue,
            workflows=[BareSteps],
            activities=ACTIVITIES,
            max_concurrent_activities=200,
            graceful_shutdown_timeout=timedelta(seconds=10),
        )
    )
    engine = make_engine(settings.sqlalchemy_url)
    st.push_async_callback(engine.dispose)
    sessions = make_sessionmaker(engine)
    # The gateway connects as the application role, under row-level security, as deployed;
    # the bare baseline is a plain primary-key SELECT.
    app_engine = make_engine(settings.app_sqlalchemy_url)
    st.push_async_callback(app_engine.dispose)
    app_sessions = make_sessionmaker(app_engine)
    gateways: dict[bool, str] = {}
    for local in (True, False):
        mode = settings.model_copy(update={"local_activities": local})
        app = create_app(mode, client=moat_client, sessions=app_sessions)
        gateways[local] = await st.enter_async_context(serve_asgi(app))
    select_url = await st.enter_async_context(serve_asgi(select_app(sessions)))
    async with sessions.begin() as session:
        tenant = await tenants.create_tenant(session, f"bench-{uuid.uuid4().hex[:12]}")
        api_key = await api_keys.create_api_key(session, tenant.id, name="bench")
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    http = await st.enter_async_context(httpx.AsyncClient(timeout=60, limits=limits))
    return BenchStack(
        env.client, bare_queue, gateways, select_url, api_key, http, tenant.id, sessions
    )
