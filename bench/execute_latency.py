"""Execute latency: what Moat adds on top of bare Temporal and bare Postgres.

One run, the same servers (see ``bench.stack``):

* fresh executes through the gateway (real HTTP, real worker) against a bare workflow with
  the same four steps, for both modes of Moat's bookkeeping steps (local or regular
  activities);
* idempotent hits (answered from Postgres) against a bare endpoint doing one primary-key
  SELECT.

Prints a table and a recommendation, then one JSON line; saves it to ``bench/results/``.
Run: ``python -m bench.execute_latency [--n 200]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import platform
import random
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import temporalio
from rich.console import Console

from bench.bare_workflow import BARE_WORKFLOW, BareInput
from bench.report import MOAT_LOCAL, MOAT_REGULAR, recommendation, render
from bench.stack import BenchStack, bench_stack
from schemas.names import REPLAYED_HEADER

RESULTS = Path(__file__).resolve().parent / "results" / "latest.json"

Call = Callable[[int], Awaitable[None]]


@dataclass
class Series:
    """One measured series; ``baseline`` names the series its ratio is taken against."""

    name: str
    call: Call
    baseline: str | None = None
    clients: int = 1
    samples: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return self.name if self.clients == 1 else f"{self.name} x{self.clients}"

    async def timed(self, i: int) -> None:
        start = time.perf_counter()
        await self.call(i)
        self.samples.append((time.perf_counter() - start) * 1000)

    def summary(self) -> dict[str, Any]:
        data = self.samples
        return {
            "n": len(data),
            "median_ms": round(statistics.median(data), 2),
            "p95_ms": round(statistics.quantiles(data, n=20, method="inclusive")[-1], 2),
            "mean_ms": round(statistics.fmean(data), 2),
            "min_ms": round(min(data), 2),
            "clients": self.clients,
            "baseline": self.baseline
            and (self.baseline if self.clients == 1 else f"{self.baseline} x{self.clients}"),
        }


class Calls:
    """The requests each series makes; every fresh execute gets a new Idempotency-Key."""

    def __init__(self, stack: BenchStack, tag: str) -> None:
        self.stack, self.tag = stack, tag
        self.hits: list[tuple[str, str]] = []  # (idempotency key, receipt id) to repeat

    async def _post(self, local: bool, key: str) -> Any:
        body = {"schema_version": "1", "capability_id": "demo.echo", "input": {"key": key}}
        headers = {"Authorization": f"Bearer {self.stack.api_key}", "Idempotency-Key": key}
        url = f"{self.stack.gateways[local]}/v1/executions"
        return await self.stack.http.post(url, json=body, headers=headers)

    def moat_fresh(self, local: bool) -> Call:
        mode = "local" if local else "regular"

        async def call(i: int) -> None:
            key = f"{self.tag}-{mode}-{i}"
            resp = await self._post(local, key)
            if resp.status_code != 200 or resp.headers.get(REPLAYED_HEADER):
                raise RuntimeError(f"fresh execute failed ({resp.status_code}): {resp.text}")
            self.hits.append((key, resp.json()["receipt_id"]))

        return call

    def bare_workflow(self, local: bool) -> Call:
        async def call(i: int) -> None:
            await self.stack.bare_client.execute_workflow(
                BARE_WORKFLOW,
                BareInput(payload=f"step {i}", local=local),
                id=f"{self.tag}-bare-{'local' if local else 'regular'}-{i}",
                task_queue=self.stack.bare_queue,
                result_type=str,
            )

        return call

    async def moat_hit(self, i: int) -> None:
        key, receipt_id = self.hits[i % len(self.hits)]
        resp = await self._post(True, key)
        if resp.status_code != 200 or resp.headers.get(REPLAYED_HEADER) != "true":
            raise RuntimeError(f"idempotent hit not replayed ({resp.status_code}): {resp.text}")
        if resp.json()["receipt_id"] != receipt_id:
            raise RuntimeError("idempotent hit returned another receipt")

    async def bare_select(self, i: int) -> None:
        _, receipt_id = self.hits[i % len(self.hits)]
        resp = await self.stack.http.get(f"{self.stack.select_url}/receipts/{receipt_id}")
        if resp.status_code != 200:
            raise RuntimeError(f"bare select failed ({resp.status_code}): {resp.text}")


@dataclass
class Budget:
    """The run's wall-clock budget. Each phase gets a share of what is left, so a busy
    machine shortens the series (the n column shows how many ran) instead of the run."""

    end: float
    reserve: float = 10.0  # for the shutdown

    def share(self, fraction: float) -> float:
        """A deadline (``time.monotonic()``) ``fraction`` of the remaining time away."""
        now = time.monotonic()
        return now + max(0.0, self.end - self.reserve - now) * fraction


async def interleaved(
    series: list[Series], n: int, rng: random.Random, offset: int, until: float = math.inf
) -> None:
    """Request i of every series in turn (order shuffled per round), so drift in the
    machine's load is shared evenly instead of landing on whichever series ran last."""
    for i in range(offset, offset + n):
        if i - offset >= 2 and time.monotonic() > until:
            return
        for s in rng.sample(series, len(series)):
            await s.timed(i)


async def concurrent(s: Series, n: int, offset: int, until: float) -> float:
    """Up to ``n`` requests from ``s.clients`` concurrent clients; returns requests/s."""
    queue = iter(range(offset, offset + n))

    async def client() -> None:
        for i in queue:
            await s.timed(i)
            if len(s.samples) >= 2 and time.monotonic() > until:
                return

    start = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(s.clients)))
    return len(s.samples) / (time.perf_counter() - start)


async def run_series(
    stack: BenchStack, args: argparse.Namespace, console: Console, budget: Budget
) -> dict[str, Any]:
    """Warm up, then measure every series; the summaries by series name."""
    rng = random.Random(args.seed)
    calls = Calls(stack, f"bench-{uuid.uuid4().hex[:8]}")
    fresh = [
        Series(MOAT_LOCAL, calls.moat_fresh(True), "bare local"),
        Series(MOAT_REGULAR, calls.moat_fresh(False), "bare regular"),
        Series("bare local", calls.bare_workflow(True)),
        Series("bare regular", calls.bare_workflow(False)),
    ]
    hits = [
        Series("moat idempotent hit", calls.moat_hit, "bare PK select"),
        Series("bare PK select", calls.bare_select),
    ]
    with console.status(f"warming up ({args.warmup} per series)…"):
        await interleaved(fresh, args.warmup, rng, 0)
        await interleaved(hits, args.warmup, rng, 0)
    for s in fresh + hits:
        s.samples.clear()
    conc = args.concurrency > 0
    with console.status(f"fresh executes: {args.n} per series, sequential, interleaved…"):
        await interleaved(fresh, args.n, rng, args.warmup, budget.share(0.7 if conc else 0.9))
    with console.status(f"idempotent hits: {args.n} per series, sequential, interleaved…"):
        await interleaved(hits, args.n, rng, args.warmup, budget.share(0.2 if conc else 1.0))
    results = {s.key: {**s.summary(), "requested": args.n} for s in fresh + hits}
    for k, s in enumerate(fresh if conc else []):
        parallel = Series(s.name, s.call, s.baseline, clients=args.concurrency)
        with console.status(f"{parallel.key}: up to {args.concurrent_n} requests…"):
            until = budget.share(1 / (len(fresh) - k))
            rate = await concurrent(parallel, args.concurrent_n, args.warmup + args.n, until)
        results[parallel.key] = {
            **parallel.summary(),
            "requested": args.concurrent_n,
            "throughput_rps": round(rate, 1),
        }
    for row in results.values():
        base = results.get(row["baseline"]) if row["baseline"] else None
        row["ratio"] = round(row["median_ms"] / base["median_ms"], 2) if base else None
    return results


async def measure(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    started = time.perf_counter()
    budget = Budget(time.monotonic() + args.max_seconds)
    load_before = os.getloadavg()
    console.log("starting PostgreSQL, Temporal, workers and gateways…")
    async with bench_stack(
        tracing=not args.no_tracing, temporal_file=not args.temporal_memory
    ) as stack:
        console.log(f"servers up in {time.perf_counter() - started:.1f}s")
        results = await run_series(stack, args, console, budget)
        console.log("measured; shutting down…")
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "settings": {
            "n": args.n,
            "warmup": args.warmup,
            "concurrency": args.concurrency,
            "concurrent_n": args.concurrent_n,
            "max_seconds": args.max_seconds,
            "tracing": not args.no_tracing,
            "temporal_db": "memory" if args.temporal_memory else "file",
            "postgres": "durable (fsync on, synchronous_commit on)",
        },
        "environment": {
            "python": platform.python_version(),
            "temporalio": temporalio.__version__,
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            # Other processes on the machine inflate every figure; judge them by this.
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "wall_seconds": round(time.perf_counter() - started, 1),
        "series": results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.execute_latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=200, help="requests per series (default 200)")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up requests per series")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=10,
        help="concurrent clients for the extra fresh series; 0 skips them",
    )
    parser.add_argument(
        "--concurrent-n", type=int, default=100, help="requests per concurrent series"
    )
    parser.add_argument(
        "--temporal-memory",
        action="store_true",
        help="in-memory Temporal dev server (default: SQLite file, as moat up)",
    )
    parser.add_argument(
        "--no-tracing",
        action="store_true",
        help="leave out the OpenTelemetry interceptor production wiring adds",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=170,
        help="wall-clock budget; series stop early rather than exceed it (default 170)",
    )
    parser.add_argument("--seed", type=int, default=8785, help="seed of the interleaving order")
    args = parser.parse_args()
    if args.n < 2 or args.warmup < 0 or (args.concurrency > 0 and args.concurrent_n < 2):
        parser.error("--n and --concurrent-n must be at least 2, --warmup not negative")
    # Before the gateway's observability.setup(), whose basicConfig would log at INFO.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 100)  # a pipe or log file: keep the table unwrapped
    report = asyncio.run(measure(args, console))
    local_wins, report["recommendation"] = recommendation(report["series"])
    report["local_activities_faster"] = local_wins
    render(report, console)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
