"""Notion's reconcile cost: what the look-up before a repeated ``notion.create_page`` costs,
under each Notion version, against the fake Notion (``starter.devstack.providers``).

The adapter is driven as a worker drives it (``plugins.driven``), with a credential, in the
series ``bench/reconcile_cost.py`` measures for Slack and GitHub: ``first attempt``,
``repeat, found`` (only the repeated attempt timed), ``repeat, not found`` and ``repeat,
not found, <depth> deep`` (``depth`` other pages in the database: the query filters on the
mark at Notion, so its cost should not grow). Under ``2025-09-03`` each create and each
look-up first reads the database for its data source (one more round trip).

``python -m bench.reconcile_cost`` includes these series; ``python -m bench.notion_cost
[--n 200] [--depth 450]`` prints them alone.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from activities import HostGuard, http_client
from activities.adapters.base import Adapter
from activities.adapters.notion import NotionCreatePage
from activities.adapters.plugins import driven
from schemas.capabilities import CapabilityCatalog
from schemas.connections import Credential
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.run import AdapterInput
from starter.devstack.providers import FakeNotion

VERSIONS = ("2022-06-28", "2025-09-03")
MARK = "Moat key"


def _input(database_id: str, allow: str, attempt: int) -> AdapterInput:
    spec = CapabilityCatalog().get("notion.create_page")
    assert spec is not None
    return AdapterInput(
        ref=ExecutionRef(tenant_id="bench", receipt_id=str(uuid7())),
        capability=spec,
        input={"database_id": database_id, "title": "bench"},
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=[allow],
        attempt=attempt,
    )


def summary(samples: list[tuple[float, int]]) -> dict[str, Any]:
    """A series of (ms, round trips) samples as ``bench.reconcile_cost`` reports every
    series: how many, round trips per call, median and p95 ms."""
    times = sorted(t for t, _ in samples)
    return {
        "n": len(samples),
        "round_trips": sum(k for _, k in samples) / len(samples),
        "median_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[max(0, math.ceil(0.95 * len(times)) - 1)], 2),
    }


async def _timed(fake: FakeNotion, call: Awaitable[Any]) -> tuple[float, int]:
    before = len(fake.requests)
    start = time.perf_counter()
    await call
    return (time.perf_counter() - start) * 1000, len(fake.requests) - before


async def series(http: httpx.AsyncClient, n: int, depth: int) -> dict[str, dict[str, Any]]:
    """The four series under each version, by name (``notion <version> …``)."""
    adapter = driven(
        NotionCreatePage(http, HostGuard([])),
        CapabilityCatalog().declaration("notion_create_page"),
    )
    results: dict[str, dict[str, Any]] = {}
    with FakeNotion() as fake:
        for version in VERSIONS:
            for kind, result in (await _version(adapter, fake, version, n, depth)).items():
                results[f"notion {version} {kind}"] = result
    return results


async def _version(
    adapter: Adapter, fake: FakeNotion, version: str, n: int, depth: int
) -> dict[str, dict[str, Any]]:
    config = {"base_url": f"{fake.base_url}/v1", "notion_version": version, "mark_property": MARK}
    cred = Credential("con_b", "notion", "ntn_bench", config)
    props = {"Name": "title", MARK: "rich_text"}
    db, deep = fake.add_database(props), fake.add_database(props)
    for _ in range(depth):
        await adapter(_input(deep, fake.allow_entry, 1), cred)

    async def call(database: str, attempt: int) -> tuple[float, int]:
        return await _timed(fake, adapter(_input(database, fake.allow_entry, attempt), cred))

    async def found() -> tuple[float, int]:
        inp = _input(db, fake.allow_entry, 1)
        fake.fail_next(1)
        with contextlib.suppress(Exception):
            await adapter(inp, cred)
        return await _timed(fake, adapter(inp.model_copy(update={"attempt": 2}), cred))

    kinds: dict[str, Callable[[], Awaitable[tuple[float, int]]]] = {
        "first attempt": lambda: call(db, 1),
        "repeat, found": found,
        "repeat, not found": lambda: call(db, 2),
        f"repeat, not found, {depth} deep": lambda: call(deep, 2),
    }
    results: dict[str, dict[str, Any]] = {}
    for kind, measure in kinds.items():
        for _ in range(min(10, n)):  # warm-up (connections, code paths)
            await measure()
        results[kind] = summary([await measure() for _ in range(n)])
    return results


async def _main(n: int, depth: int) -> dict[str, dict[str, Any]]:
    http = http_client()
    try:
        return await series(http, n, depth)
    finally:
        await http.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.notion_cost")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--depth", type=int, default=450)
    args = parser.parse_args()
    for name, result in asyncio.run(_main(args.n, args.depth)).items():
        print(json.dumps({"series": name, **result}))


if __name__ == "__main__":
    main()
