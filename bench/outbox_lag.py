"""Outbox lag: from a receipt committed to its webhook received, at a steady rate, for
each relay trigger (LISTEN/NOTIFY with a slow safety poll, or a ``FOR UPDATE SKIP LOCKED``
poll alone at two intervals).

One run starts its own servers on loopback (embedded PostgreSQL with fsync on, the Temporal
dev server, Moat's worker, a webhook endpoint) and deletes them afterwards. The receipts are
committed the way the record step commits them (receipt, outcome events and their outbox
rows in one transaction, through ``store``), without the rest of an execution: what is
measured is the outbox's own path (trigger, relay, delivery workflow, signed POST), not
the execute pipeline, which ``execute_latency`` measures and which this shared machine
cannot sustain at the rate in one process. The lag runs from the commit's return to the
endpoint's arrival: one machine, one clock.
Run: ``python -m bench.outbox_lag [--rate 50] [--seconds 15]``.
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

from rich.console import Console
from rich.table import Table
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.requests import Request
from starlette.responses import Response
from temporalio.client import Client

import worker as moat_worker
from schemas.events import AggregateType, EventDraft, EventType, event_id
from schemas.records import ExecutionStatus, Receipt
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, local_temporal, serve_asgi
from starter.runtime.codec import data_converter
from starter.runtime.outbox_relay import OutboxRelay
from store import (
    api_keys,
    make_engine,
    make_sessionmaker,
    receipts,
    tenancy,
    tenants,
    upgrade,
)
from store import events as event_log
from store import webhooks as subscriptions
from store.keyrings.codec import OutputSealer

NAMESPACE = "moat"
RESULTS = Path(__file__).resolve().parent / "results" / "outbox_lag.json"


class Endpoint:
    """Notes when each receipt's webhook arrives."""

    def __init__(self) -> None:
        self.arrived: dict[str, float] = {}

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        body = json.loads(await request.body())
        self.arrived.setdefault(body["data"]["id"], time.time())
        await Response(status_code=204)(scope, receive, send)


@dataclass
class Stack:
    settings: MoatSettings
    tenant_id: str
    endpoint: Endpoint
    endpoint_url: str
    client: Client
    sessions: async_sessionmaker[AsyncSession]  # the producer's and the relay's own pool


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
                wsessions, http_out = await st.enter_async_context(
                    moat_worker.activity_deps(settings)
                )
                async with wsessions.begin() as session:
                    await receipts.ensure_outcome_partitions(session, datetime.now(UTC))
                await st.enter_async_context(
                    moat_worker.build_worker(env.client, settings, wsessions, http_out)
                )
                await st.enter_async_context(  # the relay starts deliveries on its queue
                    moat_worker.delivery_worker(env.client, settings, wsessions)
                )
                async with wsessions.begin() as session:
                    tenant = await tenants.create_tenant(session, f"bench-{uuid.uuid4().hex[:8]}")
                    await api_keys.create_api_key(session, tenant.id, name="bench")
                # Apart from the worker's pool, as the gateway's and the relay's are deployed.
                engine = make_engine(settings.app_sqlalchemy_url)
                st.push_async_callback(engine.dispose)
                sessions = make_sessionmaker(engine)
                yield Stack(settings, tenant.id, endpoint, endpoint_url, env.client, sessions)
        finally:
            await asyncio.to_thread(pg.stop)


async def subscribe(s: Stack, path: str) -> str:
    sealer = OutputSealer.from_settings(s.settings)
    async with s.sessions.begin() as session:
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
    async with s.sessions.begin() as session:
        await tenancy.set_tenant(session, s.tenant_id)
        row = await subscriptions.get(session, s.tenant_id, sub_id)
        assert row is not None
        await subscriptions.remove(session, row, datetime.now(UTC))


async def record(s: Stack) -> tuple[str, float]:
    """A success receipt and its ``RUN_COMPLETED`` event, committed as the record step
    commits them (the event log announces it to the outbox); the receipt id and the time
    the commit returned."""
    receipt_id = str(uuid.uuid4())
    now = datetime.now(UTC)
    receipt = Receipt(
        id=receipt_id,
        capability_id="demo.echo",
        capability_version="1.0.0",
        adapter_id="echo",
        tenant_id=s.tenant_id,
        connection_id="",
        request_id=str(uuid.uuid4()),
        timestamp=now,
        latency_ms=1,
        idempotency_key=receipt_id,
        input_hash="sha256:" + "0" * 64,
        output_hash="sha256:" + "1" * 64,
        status=ExecutionStatus.SUCCESS,
        policy_decision_id=str(uuid.uuid4()),
        workflow_id=f"bench/{receipt_id}",
        run_id=receipt_id,
        trace_id="0" * 32,
    )
    draft = EventDraft(
        id=event_id(receipt_id, receipt_id, "RUN_COMPLETED"),
        tenant_id=s.tenant_id,
        event_type=EventType.RUN_COMPLETED,
        aggregate_type=AggregateType.RUN,
        aggregate_id=receipt_id,
        event_data={"receipt_status": "success"},
        correlation_id=receipt_id,
        actor="bench",
    )
    async with s.sessions.begin() as session:
        await tenancy.set_tenant(session, s.tenant_id)
        await receipts.insert_receipt(session, receipt)
        await event_log.append(session, [draft])
    return receipt_id, time.time()


async def series(
    s: Stack, name: str, listen: bool, poll: float, rate: float, seconds: float
) -> dict[str, Any]:
    sub = await subscribe(s, f"/{name}")
    settings = s.settings.model_copy(update={"outbox_listen": listen, "outbox_poll_seconds": poll})
    relay = OutboxRelay.from_settings(s.client, s.sessions, settings, tenant_id=s.tenant_id)
    n = int(rate * seconds)
    committed: dict[str, float] = {}
    failed: list[str] = []

    async def one() -> None:
        try:
            receipt_id, at = await record(s)
        except Exception as err:
            failed.append(type(err).__name__)
            return
        committed[receipt_id] = at

    async with relay.running():
        await asyncio.sleep(0.5)  # the relay is listening
        started = time.monotonic()
        tasks = []
        for i in range(n):
            delay = started + i / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one()))
        await asyncio.gather(*tasks)
        sent_for = time.monotonic() - started
        for _ in range(600):  # at most 2 min for the last deliveries to arrive
            if all(r in s.endpoint.arrived for r in committed):
                break
            await asyncio.sleep(0.2)
    await unsubscribe(s, sub)
    lags = [
        (s.endpoint.arrived[r] - at) * 1000
        for r, at in committed.items()
        if r in s.endpoint.arrived
    ]
    return {
        "trigger": "LISTEN/NOTIFY + poll" if listen else "poll only",
        "poll_s": poll,
        "receipts": n,
        "commit_failures": len(failed),
        "rate_achieved": round(n / sent_for, 1),
        "delivered": len(lags),
        "p50_ms": round(statistics.median(lags), 1),
        "p95_ms": round(statistics.quantiles(lags, n=20, method="inclusive")[-1], 1),
        "max_ms": round(max(lags), 1),
    }


async def main(rate: float, seconds: float) -> list[dict[str, Any]]:
    load_before = os.getloadavg()
    async with stack() as s:
        await series(s, "warmup", True, 5.0, rate, 2)  # worker, Temporal and pools warm
        results = [
            await series(s, "notify", True, 5.0, rate, seconds),
            await series(s, "poll-1s", False, 1.0, rate, seconds),
            await series(s, "poll-200ms", False, 0.2, rate, seconds),
        ]
    load_after = os.getloadavg()
    table = Table(
        "trigger", "poll s", "receipts", "rate/s", "delivered", "p50 ms", "p95 ms", "max ms"
    )
    for r in results:
        table.add_row(
            r["trigger"],
            f"{r['poll_s']:g}",
            str(r["receipts"]),
            str(r["rate_achieved"]),
            str(r["delivered"]),
            str(r["p50_ms"]),
            str(r["p95_ms"]),
            str(r["max_ms"]),
        )
    console = Console()
    console.print(table)
    console.print(f"load average before {load_before}, after {load_after}")
    doc = {"results": results, "load_before": load_before, "load_after": load_after}
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(doc, indent=2))
    print(json.dumps(doc))
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0, help="Receipts committed per second.")
    parser.add_argument("--seconds", type=float, default=15.0, help="How long each series sends.")
    args = parser.parse_args()
    asyncio.run(main(args.rate, args.seconds))
