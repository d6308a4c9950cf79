"""Outbox lag: from an execution's receipt committed to its webhook received, at a steady
rate of executions, for each relay trigger (LISTEN/NOTIFY with a slow safety poll, or a
``FOR UPDATE SKIP LOCKED`` poll alone at two intervals).

One run starts its own servers on loopback (embedded PostgreSQL with fsync on, the Temporal
dev server, Moat's worker and gateway, a webhook endpoint) and deletes them afterwards.
The start of the lag is the outcome event's ``occurred_at`` (the ``now()`` of the receipt's
transaction, which commits a few ms later), the end the endpoint's clock on arrival: one
machine, one clock. Run: ``python -m bench.outbox_lag [--rate 50] [--seconds 20]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from starlette.requests import Request
from starlette.responses import Response

import worker as moat_worker
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, local_temporal, serve_asgi
from starter.gateway.app import create_app
from starter.runtime.codec import data_converter
from starter.runtime.outbox_relay import OutboxRelay
from store import api_keys, make_engine, make_sessionmaker, receipts, tenancy, tenants, upgrade
from store import webhooks as subscriptions
from store.keys.codec import OutputSealer

NAMESPACE = "moat"
RESULTS = Path(__file__).resolve().parent / "results" / "outbox_lag.json"


class Endpoint:
    """Keeps the lag of every delivery it receives, by path."""

    def __init__(self) -> None:
        self.lags: dict[str, list[float]] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        arrived = time.time()
        request = Request(scope, receive)
        body = json.loads(await request.body())
        occurred = datetime.fromisoformat(body["timestamp"]).timestamp()
        self.lags.setdefault(request.url.path, []).append((arrived - occurred) * 1000)
        await Response(status_code=204)(scope, receive, send)


@dataclass
class Stack:
    settings: MoatSettings
    gateway: str
    api_key: str
    tenant_id: str
    endpoint: Endpoint
    endpoint_url: str
    client: Any
    app_sessions: Any
    owner_sessions: Any
    http: httpx.AsyncClient


@asynccontextmanager
async def stack() -> AsyncIterator[Stack]:
    with tempfile.TemporaryDirectory(prefix="moat-bench-outbox-") as tmp:
        root = Path(tmp)
        pg = EmbeddedPostgres(root / "pg", free_port(), fast=False)
        url = await asyncio.to_thread(pg.start)
        try:
            endpoint = Endpoint()
            async with AsyncExitStack() as st:
                endpoint_url = await st.enter_async_context(serve_asgi(endpoint))
                settings = MoatSettings(
                    home=root / "home",
                    database_url=url,
                    temporal_namespace=NAMESPACE,
                    task_queue=f"bench-outbox-{uuid.uuid4().hex}",
                    http_allow_hosts=[endpoint_url.removeprefix("http://")],
                )
                await asyncio.to_thread(upgrade, settings.sqlalchemy_url)
                env = await st.enter_async_context(
                    local_temporal(NAMESPACE, data_converter(settings), root / "temporal.db")
                )
                client = env.client
                wsessions, http_out = await st.enter_async_context(
                    moat_worker.activity_deps(settings)
                )
                async with wsessions.begin() as session:
                    await receipts.ensure_outcome_partitions(session, datetime.now(UTC))
                await st.enter_async_context(
                    moat_worker.build_worker(client, settings, wsessions, http_out)
                )
                owner = make_engine(settings.sqlalchemy_url)
                st.push_async_callback(owner.dispose)
                app_engine = make_engine(settings.app_sqlalchemy_url)
                st.push_async_callback(app_engine.dispose)
                app_sessions = make_sessionmaker(app_engine)
                gateway = await st.enter_async_context(
                    serve_asgi(create_app(settings, client=client, sessions=app_sessions))
                )
                owner_sessions = make_sessionmaker(owner)
                async with owner_sessions.begin() as session:
                    tenant = await tenants.create_tenant(session, f"bench-{uuid.uuid4().hex[:8]}")
                    key = await api_keys.create_api_key(session, tenant.id, name="bench")
                limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
                http = await st.enter_async_context(httpx.AsyncClient(timeout=120, limits=limits))
                yield Stack(
                    settings,
                    gateway,
                    key,
                    tenant.id,
                    endpoint,
                    endpoint_url,
                    client,
                    app_sessions,
                    owner_sessions,
                    http,
                )
        finally:
            await asyncio.to_thread(pg.stop)


async def subscribe(s: Stack, path: str) -> str:
    sealer = OutputSealer.from_settings(s.settings)
    async with s.app_sessions.begin() as session:
        await tenancy.set_tenant(session, s.tenant_id)
        row, _ = await subscriptions.create(
            session,
            sealer,
            tenant_id=s.tenant_id,
            url=s.endpoint_url + path,
            events=["execution.completed"],
            max_retries=3,
            retry_base_seconds=2.0,
        )
        return row.id


async def unsubscribe(s: Stack, sub_id: str) -> None:
    async with s.app_sessions.begin() as session:
        await tenancy.set_tenant(session, s.tenant_id)
        row = await subscriptions.get(session, s.tenant_id, sub_id)
        assert row is not None
        await subscriptions.remove(session, row, datetime.now(UTC))


async def series(
    s: Stack, name: str, listen: bool, poll: float, rate: float, seconds: float
) -> dict[str, Any]:
    path = f"/{name}"
    sub = await subscribe(s, path)
    settings = s.settings.model_copy(update={"outbox_listen": listen, "outbox_poll_seconds": poll})
    relay = OutboxRelay.from_settings(s.client, s.app_sessions, settings)
    n = int(rate * seconds)
    headers = {"Authorization": f"Bearer {s.api_key}", "Prefer": "wait=0"}

    async def one(i: int) -> None:
        body = {
            "schema_version": "1",
            "capability_id": "demo.echo",
            "input": {"message": f"{name}-{i}"},
        }
        key = {"Idempotency-Key": f"{name}-{i}-{uuid.uuid4().hex}"}
        await s.http.post(f"{s.gateway}/v1/executions", json=body, headers=headers | key)

    async with relay.running():
        started = time.monotonic()
        tasks = []
        for i in range(n):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(i)))
        await asyncio.gather(*tasks)
        sent_for = time.monotonic() - started
        for _ in range(600):  # at most 2 min for the last deliveries to arrive
            if len(s.endpoint.lags.get(path, [])) >= n:
                break
            await asyncio.sleep(0.2)
    await unsubscribe(s, sub)
    lags = s.endpoint.lags.get(path, [])
    q = statistics.quantiles(lags, n=20, method="inclusive")
    return {
        "series": name,
        "trigger": "LISTEN/NOTIFY + poll" if listen else "poll only",
        "poll_s": poll,
        "executions": n,
        "rate_achieved": round(n / sent_for, 1),
        "delivered": len(lags),
        "p50_ms": round(statistics.median(lags), 1),
        "p95_ms": round(q[-1], 1),
        "max_ms": round(max(lags), 1),
    }


async def main(rate: float, seconds: float) -> list[dict[str, Any]]:
    load_before = os.getloadavg()
    async with stack() as s:
        # Warm up the worker, the gateway and Temporal's caches first.
        await series(s, "warmup", True, 5.0, rate, 2)
        results = [
            await series(s, "notify", True, 5.0, rate, seconds),
            await series(s, "poll-1s", False, 1.0, rate, seconds),
            await series(s, "poll-200ms", False, 0.2, rate, seconds),
        ]
    table = Table(
        "trigger", "poll s", "executions", "rate/s", "delivered", "p50 ms", "p95 ms", "max ms"
    )
    for r in results:
        table.add_row(
            r["trigger"],
            f"{r['poll_s']:g}",
            str(r["executions"]),
            str(r["rate_achieved"]),
            str(r["delivered"]),
            str(r["p50_ms"]),
            str(r["p95_ms"]),
            str(r["max_ms"]),
        )
    Console().print(table)
    doc = {"results": results, "load_before": load_before, "load_after": os.getloadavg()}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2))
    print(json.dumps(doc))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0, help="Executions per second.")
    parser.add_argument("--seconds", type=float, default=20.0, help="How long each series sends.")
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds))
