"""What resolving a connection adds to an adapter attempt.

Every attempt that names a connection reads it under the tenant's row-level security (one
transaction as the application role: set the tenant, one primary-key SELECT) and opens its
secret (AES-256-GCM). Measured against its own servers (an embedded PostgreSQL with real
durability settings, migrated, in a temporary folder), sequentially:

* ``resolve``: ``StoreConnectionResolver.resolve``, as the adapter activity calls it;
* ``tenant txn``: the same transaction without the SELECT and the decryption (what any
  bookkeeping step's transaction costs anyway), the baseline;
* ``open``: the AES-GCM decryption alone.

Run: ``python -m bench.connection_resolve [--n 2000]``; prints a table and one JSON line.
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
from collections.abc import Awaitable, Callable
from pathlib import Path

from rich.console import Console
from rich.table import Table
from sqlalchemy import text

from activities.connections import StoreConnectionResolver
from schemas.connections import ConnectionCreate, ConnectionType
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port
from starter.service import connections
from store import make_engine, make_sessionmaker, tenancy, tenants, upgrade
from store.keyrings.connections import ConnectionCipher, Sealed, context

SECRET = "xoxb-" + "0123456789" * 5


async def _timed(n: int, call: Callable[[], Awaitable[object]]) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        await call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def _summary(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1], 3),
    }


async def main(n: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="moat-bench-") as tmp:
        root = Path(tmp)
        pg = EmbeddedPostgres(root / "pg", free_port(), fast=False)
        url = await asyncio.to_thread(pg.start)
        try:
            settings = MoatSettings(home=root / "home", database_url=url)
            await asyncio.to_thread(upgrade, settings.sqlalchemy_url)
            cipher = ConnectionCipher.from_settings(settings)
            owner = make_engine(settings.sqlalchemy_url)
            app = make_engine(settings.app_sqlalchemy_url)
            try:
                async with make_sessionmaker(owner).begin() as session:
                    tenant = await tenants.create_tenant(session, f"bench-{uuid.uuid4().hex[:8]}")
                    info = await connections.add(
                        session,
                        cipher,
                        tenant.id,
                        ConnectionCreate(type=ConnectionType.SLACK, name="bench", secret=SECRET),
                    )
                sessions = make_sessionmaker(app)
                resolver = StoreConnectionResolver(sessions, cipher)

                async def resolve() -> object:
                    return await resolver.resolve(tenant.id, info.id)

                async def tenant_txn() -> object:
                    async with tenancy.tenant_transaction(sessions, tenant.id) as session:
                        return await session.execute(text("SELECT 1"))

                sealed = cipher.seal(SECRET, context(tenant.id, info.id))

                async def open_only() -> object:
                    return cipher.open(
                        Sealed(sealed.key_id, sealed.nonce, sealed.ciphertext),
                        context(tenant.id, info.id),
                    )

                for call in (resolve, tenant_txn):  # warm the pool and the plans
                    await _timed(50, call)
                results: dict[str, dict[str, float]] = {}
                # Interleaved in rounds so that load drift hits both alike.
                series = {"resolve": resolve, "tenant txn": tenant_txn, "open": open_only}
                samples: dict[str, list[float]] = {name: [] for name in series}
                for _ in range(10):
                    for name, call in series.items():
                        samples[name] += await _timed(n // 10, call)
                results = {name: _summary(s) for name, s in samples.items()}
            finally:
                await owner.dispose()
                await app.dispose()
        finally:
            await asyncio.to_thread(pg.stop)
    return {
        "n": n,
        "series": results,
        "added_median_ms": round(
            results["resolve"]["median_ms"] - results["tenant txn"]["median_ms"], 3
        ),
        "loadavg": os.getloadavg(),
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    report = asyncio.run(main(parser.parse_args().n))
    table = Table("series", "median ms", "p95 ms")
    for name, figures in report["series"].items():  # type: ignore[attr-defined]
        table.add_row(name, str(figures["median_ms"]), str(figures["p95_ms"]))
    console = Console()
    console.print(table)
    console.print(f"resolve adds {report['added_median_ms']} ms (median) to a tenant transaction")
    console.print(json.dumps(report))
