"""The servers ``bench.speed`` measures, each a process of its own as deployed: an embedded
PostgreSQL with real durability settings (and ``pg_stat_statements``, to count statements),
the Temporal dev server (SQLite file, as ``moat up``), one ``moat worker``, one ``moat
gateway``, the baselines' worker, and a fake provider that counts the effects it receives.
The load generator (this process) talks to them over loopback only."""

from __future__ import annotations

import asyncio
import sys
import tempfile
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from fastapi import FastAPI, Request
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, local_temporal, serve_asgi
from starter.devstack.processes import ChildProcess
from starter.runtime.codec import data_converter
from store import api_keys, make_engine, make_sessionmaker, tenants, upgrade
from store.keyrings.codec import OutputSealer
from store.keyrings.signing import Keyring
from store.keyrings.start import StartKeyring

NAMESPACE = "moat"


@dataclass
class EffectCounter:
    """A provider endpoint that records every request it receives, by ``Idempotency-Key``,
    without deduplicating: what it counts is every effect Moat caused."""

    effects: Counter[str] = field(default_factory=Counter)

    def app(self) -> FastAPI:
        app = FastAPI()

        @app.post("/effects")
        async def effect(request: Request) -> dict[str, bool]:
            self.effects[request.headers.get("idempotency-key", "")] += 1
            return {"ok": True}

        return app


@dataclass
class SpeedStack:
    gateway_url: str
    provider_url: str
    effects: EffectCounter
    api_key: str
    bare_client: Client  # plain converter: the baselines' client and worker
    moat_client: Client  # Moat's converter: reads Moat's histories
    bare_queue: str
    owner_url: str  # psycopg URL, for pg_stat_* reads
    pids: dict[str, int]
    http: httpx.AsyncClient


def _enable_statement_stats(pg: EmbeddedPostgres) -> None:
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
    pg.stop()
    pg.start()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def moat_environment(
    settings: MoatSettings,
    database_url: str,
    temporal_address: str,
    namespace: str,
    allow_hosts: str,
    wait_seconds: float,
    **overrides: str,
) -> dict[str, str]:
    """The environment of a ``moat worker`` / ``moat gateway`` process of a bench stack:
    ``settings``' home, task queue and gateway port, on loopback, logging text."""
    env = settings.child_environment(
        home=str(settings.home),
        database_url=database_url,
        temporal_address=temporal_address,
        temporal_namespace=namespace,
        task_queue=settings.task_queue,
        gateway_port=str(settings.gateway_port),
        gateway_host="127.0.0.1",
        wait_seconds=str(wait_seconds),
        http_allow_hosts=allow_hosts,
        log_format="text",
        **overrides,
    )
    # Deployed code runs from compiled bytecode; without it the workflow sandbox, which
    # re-imports the workflow modules for every run, would compile their source each time.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def make_keyrings(settings: MoatSettings) -> None:
    """The development keyrings (and the payload codec's key) of a bench stack, made once
    before any worker or gateway starts, so that every process reads the same files instead
    of racing to create them."""
    data_converter(settings)
    StartKeyring.from_settings(settings)
    OutputSealer.from_settings(settings)
    Keyring.from_settings(settings)


@asynccontextmanager
async def speed_stack(logs: Path | None = None) -> AsyncIterator[SpeedStack]:
    with tempfile.TemporaryDirectory(prefix="moat-speed-") as tmp:
        root = Path(tmp)
        logs = logs or root / "logs"
        pg = EmbeddedPostgres(root / "pg", free_port(), fast=False)
        await asyncio.to_thread(pg.start)
        try:
            await asyncio.to_thread(_enable_statement_stats, pg)
            async with AsyncExitStack() as st:
                yield await _start(st, root, logs, pg)
        finally:
            await asyncio.to_thread(pg.stop)


async def _start(st: AsyncExitStack, root: Path, logs: Path, pg: EmbeddedPostgres) -> SpeedStack:
    effects = EffectCounter()
    provider_url = await st.enter_async_context(serve_asgi(effects.app()))
    provider_port = provider_url.rsplit(":", 1)[1]
    settings = MoatSettings(
        home=root / "home",
        database_url=pg.url,
        temporal_namespace=NAMESPACE,
        task_queue=f"speed-{uuid.uuid4().hex}",
        wait_seconds=60.0,
        gateway_port=free_port(),
        http_allow_hosts=[f"127.0.0.1:{provider_port}"],
    )
    await asyncio.to_thread(upgrade, settings.sqlalchemy_url)
    make_keyrings(settings)
    env = await st.enter_async_context(
        local_temporal(NAMESPACE, pydantic_data_converter, root / "temporal.db")
    )
    target = env.client.service_client.config.target_host
    children: dict[str, ChildProcess] = {}
    child_env = moat_environment(
        settings, pg.url, target, NAMESPACE, f"127.0.0.1:{provider_port}", 60.0
    )
    bare_queue = f"speed-bare-{uuid.uuid4().hex}"
    commands = {
        "worker": [sys.executable, "-m", "starter.cli", "worker"],
        "gateway": [sys.executable, "-m", "starter.cli", "gateway"],
        "bare worker": [sys.executable, "-m", "bench.bare_worker", target, NAMESPACE, bare_queue],
    }
    for name, argv in commands.items():
        child = ChildProcess(argv, logs / f"{name.replace(' ', '-')}.log", env=child_env)
        child.start()
        st.callback(child.stop)
        children[name] = child
    gateway_url = f"http://127.0.0.1:{settings.gateway_port}"
    await asyncio.to_thread(
        children["gateway"].wait_ready, "gateway", lambda: _healthy(gateway_url), 60
    )
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    st.push_async_callback(engine.dispose)
    async with make_sessionmaker(engine).begin() as session:
        tenant = await tenants.create_tenant(session, f"speed-{uuid.uuid4().hex[:12]}")
        api_key = await api_keys.create_api_key(session, tenant.id, name="bench")
    moat_client = Client(
        env.client.service_client, namespace=NAMESPACE, data_converter=data_converter(settings)
    )
    # Idle connections are dropped well before the gateway's keep-alive timeout (uvicorn's
    # 5 s): reusing one the server closes at that moment fails the request (a ReadError).
    limits = httpx.Limits(
        max_connections=1100, max_keepalive_connections=1100, keepalive_expiry=2.0
    )
    http = await st.enter_async_context(httpx.AsyncClient(timeout=120, limits=limits))
    return SpeedStack(
        gateway_url=gateway_url,
        provider_url=provider_url,
        effects=effects,
        api_key=api_key,
        bare_client=env.client,
        moat_client=moat_client,
        bare_queue=bare_queue,
        owner_url=pg.url,
        pids={name: child.pid for name, child in children.items() if child.pid},
        http=http,
    )
