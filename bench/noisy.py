"""Noisy neighbour: does one tenant's flood slow another tenant's calls?

Tenant A keeps ``--callers`` (100) callers sending ``http.request`` calls to a provider that
takes ``--slow-seconds`` (3 s) each; tenant B sends sequential ``http.request`` calls to a
fast endpoint, first alone (idle), then during A's flood. Printed, same run: B's p50/p99
idle and under the flood (and their ratio), B's slowest call, and A's own figures (calls
completed per second, p50/p99, answers by status).

Every server is a process of its own as deployed (``bench.speed_stack``'s way): PostgreSQL
with real durability, the Temporal dev server (SQLite file), one ``moat worker`` and one
``moat gateway``; the providers and the load run in this process, on loopback. Each mode
(``--modes``) runs on a fresh Temporal server and fresh processes: ``fair``, the dev server
as ``moat up`` starts it (task-queue fairness on); ``unfair``, ``matching.enableFairness``
off; ``fair+limit``, fairness on and A rate-limited at the gateway (``--a-rate``, through
``MOAT_RATE_LIMITS``), its callers retrying a 429 after its Retry-After as moat_client does.
Target (issue 23): under the flood B's p50 within 4x its idle p50, B's slowest call under 2 s.

Writes ``bench/results/noisy.json``. Run: ``python -m bench.noisy`` (``make bench-noisy``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import temporalio
from fastapi import FastAPI
from rich.console import Console
from rich.table import Table
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from bench.speed import cpu_seconds, load, percentile
from bench.speed_stack import _healthy, make_keyrings, moat_environment
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, serve_asgi
from starter.devstack.processes import ChildProcess
from starter.devstack.temporal import (
    TEMPORAL_DYNAMIC_CONFIG,
    search_attribute_keys,
    temporal_binary,
)
from starter.runtime import loop
from store import api_keys, make_engine, make_sessionmaker, tenants, upgrade

RESULTS = Path(__file__).resolve().parent / "results" / "noisy.json"
NAMESPACE = "moat"
FAIRNESS_FLAG = "matching.enableFairness=true"


def providers(slow_seconds: float) -> FastAPI:
    """A's slow provider and B's fast endpoint."""
    app = FastAPI()

    @app.post("/slow")
    async def slow() -> dict[str, bool]:
        await asyncio.sleep(slow_seconds)
        return {"ok": True}

    @app.post("/fast")
    async def fast() -> dict[str, bool]:
        return {"ok": True}

    return app


@dataclass(frozen=True)
class Mode:
    """One run of the scenario: task-queue fairness on the server or not, and A's rate limit
    (requests per second; 0: the default, which A's flood stays under)."""

    name: str
    fair: bool
    a_rate: float = 0.0


def modes(names: str, a_rate: float) -> list[Mode]:
    known = {
        "fair": Mode("fair", True),
        "unfair": Mode("unfair", False),
        "fair+limit": Mode(f"fair + A limited to {a_rate:g}/s", True, a_rate),
    }
    return [known[name.strip()] for name in names.split(",")]


@dataclass
class NoisyStack:
    gateway_url: str
    provider_url: str
    keys: dict[str, str]  # tenant name (A, B) -> API key
    pids: dict[str, int]


def dynamic_config(fair: bool) -> list[str]:
    if fair:
        return list(TEMPORAL_DYNAMIC_CONFIG)
    config = list(TEMPORAL_DYNAMIC_CONFIG)
    at = config.index(FAIRNESS_FLAG)
    del config[at - 1 : at + 1]
    return config


def pid_of(needle: str) -> int | None:
    """The process whose command line holds ``needle`` (the dev server, by its db file)."""
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            with contextlib.suppress(OSError):
                if needle.encode() in (proc / "cmdline").read_bytes():
                    return int(proc.name)
    return None


async def _dev_server(mode: Mode, root: Path) -> WorkflowEnvironment:
    """The dev server of one mode; started again when a busy machine makes it miss the
    SDK's 5 s start deadline."""
    for attempt in range(3):
        try:
            return await WorkflowEnvironment.start_local(
                namespace=NAMESPACE,
                data_converter=pydantic_data_converter,
                dev_server_existing_path=str(temporal_binary()),
                dev_server_extra_args=dynamic_config(mode.fair),
                dev_server_database_filename=str(root / f"temporal-{mode.fair}-{attempt}.db"),
                search_attributes=search_attribute_keys(),
            )
        except RuntimeError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@asynccontextmanager
async def noisy_stack(
    root: Path,
    pg: EmbeddedPostgres,
    provider_url: str,
    mode: Mode,
    wait_seconds: float,
) -> AsyncIterator[NoisyStack]:
    """Two fresh tenants, then a Temporal dev server (with or without fairness), a worker
    and a gateway (A's rate limited or not) as processes on a fresh task queue."""
    provider_host = provider_url.removeprefix("http://")
    settings = MoatSettings(
        home=root / "home",
        database_url=pg.url,
        temporal_namespace=NAMESPACE,
        task_queue=f"noisy-{uuid.uuid4().hex}",
        gateway_port=free_port(),
        http_allow_hosts=[provider_host],
    )
    make_keyrings(settings)
    engine = make_engine(settings.sqlalchemy_url, pool_size=1)
    keys, ids = {}, {}
    async with make_sessionmaker(engine).begin() as session:
        for name in ("A", "B"):
            label = f"noisy-{name}-{uuid.uuid4().hex[:8]}"
            tenant = await tenants.create_tenant(session, label)
            keys[name] = await api_keys.create_api_key(session, tenant.id, name="bench")
            ids[name] = tenant.id
    await engine.dispose()
    limits = {"rate_limits": json.dumps({ids["A"]: mode.a_rate})} if mode.a_rate else {}
    env = await _dev_server(mode, root)
    async with AsyncExitStack() as st:
        st.push_async_callback(env.shutdown)
        target = env.client.service_client.config.target_host
        child_env = moat_environment(
            settings, pg.url, target, NAMESPACE, provider_host, wait_seconds, **limits
        )
        pids: dict[str, int] = {}
        server = pid_of(str(root / f"temporal-{mode.fair}-"))
        if server is not None:
            pids["temporal"] = server
        children = {}
        for name in ("worker", "gateway"):
            argv = [sys.executable, "-m", "starter.cli", name]
            log = root / "logs" / f"{mode.name}-{name}.log"
            child = ChildProcess(argv, log, env=child_env)
            child.start()
            st.callback(child.stop)
            children[name] = child
            pids[name] = child.pid or 0
        gateway_url = f"http://127.0.0.1:{settings.gateway_port}"
        await asyncio.to_thread(
            children["gateway"].wait_ready, "gateway", lambda: _healthy(gateway_url), 60
        )
        yield NoisyStack(gateway_url, provider_url, keys, pids)


@dataclass
class Caller:
    stack: NoisyStack
    tenant: str
    http: httpx.AsyncClient

    async def call(self, path: str) -> tuple[float, int, float]:
        """One fresh ``http.request`` execution: its latency (ms), HTTP status, and the
        Retry-After of a 429 (else 0)."""
        body = {
            "schema_version": "1",
            "capability_id": "http.request",
            "input": {"method": "POST", "url": f"{self.stack.provider_url}{path}"},
        }
        headers = {
            "Authorization": f"Bearer {self.stack.keys[self.tenant]}",
            "Idempotency-Key": f"{self.tenant}-{uuid.uuid4().hex}",
        }
        start = time.perf_counter()
        retry_after = 0.0
        try:
            resp = await self.http.post(
                f"{self.stack.gateway_url}/v1/executions", json=body, headers=headers
            )
            status = resp.status_code
            if status == 429:
                retry_after = float(resp.headers.get("Retry-After", "1"))
        except httpx.HTTPError:
            status = 0
        return (time.perf_counter() - start) * 1000, status, retry_after


def figures(samples: list[float]) -> dict[str, Any]:
    if not samples:
        return {"n": 0}
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50), 1),
        "p99_ms": round(percentile(samples, 99), 1),
        "max_ms": round(max(samples), 1),
    }


async def scenario(stack: NoisyStack, args: argparse.Namespace) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=args.callers + 10, max_keepalive_connections=200)
    timeout = args.wait_seconds + 30
    async with (
        httpx.AsyncClient(timeout=timeout, limits=limits) as a_http,
        httpx.AsyncClient(timeout=timeout) as b_http,
    ):
        a, b = Caller(stack, "A", a_http), Caller(stack, "B", b_http)
        for _ in range(args.warmup):
            await b.call("/fast")
        idle: list[float] = []
        idle_status: Counter[int] = Counter()
        for _ in range(args.b_calls):
            ms, status, _ = await b.call("/fast")
            idle.append(ms)
            idle_status[status] += 1
            await asyncio.sleep(args.b_pause)

        stop = asyncio.Event()
        a_samples: list[tuple[float, float, int]] = []  # ended at, ms, status

        async def flood() -> None:
            while not stop.is_set():
                ms, status, retry_after = await a.call("/slow")
                a_samples.append((time.monotonic(), ms, status))
                # As moat_client does: a 429 is retried after its Retry-After.
                await asyncio.sleep(retry_after)

        cpu_before = {name: cpu_seconds(pid) for name, pid in stack.pids.items()}
        callers = [asyncio.create_task(flood()) for _ in range(args.callers)]
        await asyncio.sleep(args.ramp_seconds)  # A's backlog builds up first
        window_start = time.monotonic()
        busy: list[float] = []
        busy_status: Counter[int] = Counter()
        while time.monotonic() - window_start < args.flood_seconds:
            ms, status, _ = await b.call("/fast")
            busy.append(ms)
            busy_status[status] += 1
            await asyncio.sleep(args.b_pause)
        window = time.monotonic() - window_start
        load_during = load()
        cpu = {
            name: round((cpu_seconds(pid) - cpu_before[name]) / (window + args.ramp_seconds), 2)
            for name, pid in stack.pids.items()
        }
        stop.set()
        for task in callers:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.gather(*callers, return_exceptions=True)
    in_window = [s for s in a_samples if s[0] >= window_start]
    a_ok = [ms for _, ms, status in in_window if status == 200]
    idle_fig, busy_fig = figures(idle), figures(busy)
    return {
        "b_idle": {**idle_fig, "statuses": dict(idle_status)},
        "b_flood": {**busy_fig, "statuses": dict(busy_status)},
        "b_p50_ratio": round(busy_fig["p50_ms"] / idle_fig["p50_ms"], 2),
        "b_p99_ratio": round(busy_fig["p99_ms"] / idle_fig["p99_ms"], 2),
        "b_slowest_ms": busy_fig["max_ms"],
        "a_flood": {
            **figures(a_ok),
            "completed_per_second": round(len(a_ok) / window, 1),
            "statuses": dict(Counter(status for _, _, status in in_window)),
        },
        "cpu_cores": cpu,
        "load_1m": load_during,
        "window_seconds": round(window, 1),
    }


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="moat-noisy-") as tmp:
        root = Path(tmp)
        pg = EmbeddedPostgres(root / "pg", free_port(), fast=False)
        await asyncio.to_thread(pg.start)
        try:
            await asyncio.to_thread(upgrade, MoatSettings(database_url=pg.url).sqlalchemy_url)
            async with serve_asgi(providers(args.slow_seconds)) as provider_url:
                for mode in modes(args.modes, args.a_rate):
                    async with noisy_stack(root, pg, provider_url, mode, args.wait_seconds) as s:
                        results[mode.name] = await scenario(s, args)
                    print(json.dumps({mode.name: results[mode.name]}), flush=True)
        finally:
            await asyncio.to_thread(pg.stop)
    return results


def render(report: dict[str, Any], console: Console) -> None:
    s = report["settings"]
    table = Table(
        title=f"Noisy neighbour: A = {s['callers']} callers x {s['slow_seconds']:g} s provider, "
        f"B = sequential fast calls ({s['flood_seconds']:g} s under the flood)",
        caption="target: B's p50 under the flood <= 4x idle, B's slowest call < 2 s",
    )
    for column in (
        "mode", "B idle p50/p99", "B flood p50/p99", "p50 x", "B slowest", "B statuses",
        "A done/s", "A p50/p99", "A statuses", "CPU worker/gateway/temporal",
    ):  # fmt: skip
        table.add_column(column, justify="left" if column == "mode" else "right")
    for mode, r in report["modes"].items():
        idle, busy, a = r["b_idle"], r["b_flood"], r["a_flood"]
        table.add_row(
            mode,
            f"{idle['p50_ms']:.0f} / {idle['p99_ms']:.0f} ms",
            f"{busy['p50_ms']:.0f} / {busy['p99_ms']:.0f} ms",
            f"{r['b_p50_ratio']:.2f}",
            f"{r['b_slowest_ms']:.0f} ms",
            json.dumps(busy["statuses"]),
            f"{a['completed_per_second']:.1f}",
            f"{a.get('p50_ms', 0):.0f} / {a.get('p99_ms', 0):.0f} ms",
            json.dumps(a["statuses"]),
            " / ".join(
                f"{r['cpu_cores'].get(p, 0):.2f}" for p in ("worker", "gateway", "temporal")
            ),
        )
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.noisy",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--callers", type=int, default=100, help="A's concurrent callers")
    parser.add_argument("--slow-seconds", type=float, default=3.0, help="A's provider latency")
    parser.add_argument("--b-calls", type=int, default=30, help="B's idle calls")
    parser.add_argument("--b-pause", type=float, default=0.2, help="pause between B's calls")
    parser.add_argument("--warmup", type=int, default=5, help="B's warm-up calls")
    parser.add_argument("--ramp-seconds", type=float, default=10.0, help="A alone, first")
    parser.add_argument("--flood-seconds", type=float, default=40.0, help="B during A's flood")
    parser.add_argument("--wait-seconds", type=float, default=60.0, help="the gateway's wait")
    parser.add_argument(
        "--modes",
        default="fair,unfair,fair+limit",
        help="runs, in order: fair (as `moat up`), unfair (matching.enableFairness off), "
        "fair+limit (A rate-limited to --a-rate)",
    )
    parser.add_argument("--a-rate", type=float, default=4.0, help="A's rate in fair+limit")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)
    started = datetime.now(UTC)
    load_before = load()
    modes = loop.run(measure(args))
    report = {
        "measured_at": started.isoformat(timespec="seconds"),
        "wall_seconds": round((datetime.now(UTC) - started).total_seconds()),
        "load_1m_before": load_before,
        "settings": vars(args),
        "modes": modes,
        "environment": {
            "python": platform.python_version(),
            "temporalio": temporalio.__version__,
            "cpus": os.cpu_count(),
            "temporal": "dev server, SQLite file, " + " ".join(TEMPORAL_DYNAMIC_CONFIG[1::2]),
        },
    }
    render(report, console)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
