"""Scale-out, measured: fresh executions per second, p50/p99 and the CPU of every process
with 1, 2 and 3 ``moat worker`` processes behind one ``moat gateway``, then with 1 and 2
gateways (requests spread over both) at the best worker count, all in one run on one stack
(``bench.scale_stack``: PostgreSQL with fsync on, the Temporal dev server, each Moat
process on its own).

Each configuration is a closed loop: ``--clients`` callers, each sending its next
``demo.echo`` execute as soon as the last is answered, for ``--warmup-seconds`` (not
counted) then ``--seconds``. CPU is read from ``/proc`` per process (PostgreSQL with all its
backends) and for the whole machine, which is shared: what is busy beyond the bench's own
processes is someone else's.

Prints a table and a verdict, writes ``bench/results/scale.json``.
Run: ``python -m bench.scale`` (``--help`` for the knobs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench.scale_stack import ScaleStack, machine_busy_seconds, scale_stack, tree_cpu_seconds
from bench.speed import load, run_bench, summary
from schemas.names import REPLAYED_HEADER

RESULTS = Path(__file__).resolve().parent / "results" / "scale.json"
BENCH = "bench client"


@dataclass(frozen=True)
class Config:
    workers: int
    gateways: int

    @property
    def name(self) -> str:
        return f"{self.workers} worker{'s' * (self.workers > 1)}, " + (
            f"{self.gateways} gateway{'s' * (self.gateways > 1)}"
        )


def worker_plan(max_workers: int, rounds: int) -> list[Config]:
    """1..``max_workers`` workers behind one gateway, then back down, ``rounds`` times
    (1 2 3 3 2 1 ...): the machine's drift, shared with others, falls on every count."""
    up = [Config(w, 1) for w in range(1, max_workers + 1)]
    return [c for r in range(rounds) for c in (up if r % 2 == 0 else up[::-1])]


def gateway_plan(best: int, gateways: int) -> list[Config]:
    """``gateways`` gateways at the best worker count, then one again, back to back."""
    return [Config(best, gateways), Config(best, 1)] if gateways > 1 else []


def aggregate(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One result per configuration, in order of first run: the mean of its runs' figures
    (per process too), with the runs' count."""
    by_name: dict[str, list[dict[str, Any]]] = {}
    for run in runs:
        by_name.setdefault(run["config"], []).append(run)
    return [_mean(same) for same in by_name.values()]


def _mean(runs: list[dict[str, Any]]) -> dict[str, Any]:
    merged: dict[str, Any] = {**runs[0], "runs": len(runs)}
    for key, value in runs[0].items():
        if isinstance(value, dict):
            merged[key] = {k: round(sum(r[key][k] for r in runs) / len(runs), 1) for k in value}
        elif isinstance(value, float) or key in ("executions", "errors", "n"):
            merged[key] = round(sum(r[key] for r in runs) / len(runs), 2)
    return merged


def best_workers(results: list[dict[str, Any]]) -> int:
    """The worker count with the most executions/s behind one gateway; a count within 5 %
    of the best counts as the best if it is smaller (more workers buy nothing then)."""
    one = [r for r in results if r["gateways"] == 1]
    top = max(r["per_second"] for r in one)
    return int(min(r["workers"] for r in one if r["per_second"] >= 0.95 * top))


async def closed_loop(
    http: httpx.AsyncClient,
    urls: list[str],
    api_key: str,
    clients: int,
    warmup: float,
    seconds: float,
    pids: dict[str, int],
) -> dict[str, Any]:
    """``clients`` callers back to back (caller c sends to ``urls[c % len(urls)]``): after
    ``warmup`` seconds, executions/s, latency and CPU per process over ``seconds``."""
    tag = uuid.uuid4().hex[:8]
    window: dict[str, float] = {}
    latencies: list[float] = []
    errors: list[str] = []

    async def caller(c: int) -> None:
        url, i = urls[c % len(urls)], 0
        while "end" not in window:
            i += 1
            key = f"scale-{tag}-{c}-{i}"
            body = {"schema_version": "1", "capability_id": "demo.echo", "input": {"i": i}}
            headers = {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}
            start = time.perf_counter()
            resp = await http.post(f"{url}/v1/executions", json=body, headers=headers)
            if resp.status_code != 200 or resp.headers.get(REPLAYED_HEADER):
                errors.append(f"{resp.status_code}: {resp.text[:200]}")
                if len(errors) > 20:
                    raise RuntimeError(f"execute failed 20 times, last {errors[-1]}")
                continue
            if "start" in window and start >= window["start"]:
                latencies.append((time.perf_counter() - start) * 1000)

    tasks = [asyncio.create_task(caller(c)) for c in range(clients)]
    try:
        await asyncio.sleep(warmup)
        cpu0, busy0 = _cpu(pids), machine_busy_seconds()
        window["start"] = time.perf_counter()
        await asyncio.sleep(seconds)
        # Answers to requests sent in the window still count; the clock stops here.
        elapsed = time.perf_counter() - window["start"]
        cpu1, busy1 = _cpu(pids), machine_busy_seconds()
        window["end"] = elapsed
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
    done = len(latencies)
    cpu = {name: cpu1[name] - cpu0[name] for name in cpu0}
    ours = sum(cpu.values())
    return {
        "clients": clients,
        "seconds": round(elapsed, 1),
        "executions": done,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "per_second": round(done / elapsed, 2),
        **(summary(latencies) if latencies else {}),
        "cpu_percent": {name: round(c * 100 / elapsed, 1) for name, c in cpu.items()},
        "cpu_ms_per_execution": {
            name: round(c * 1000 / max(done, 1), 1) for name, c in cpu.items()
        },
        "ours_percent": round(ours * 100 / elapsed, 1),
        # The rate if the bench's processes had every core: what others' load cannot move.
        "ceiling_per_second": round((os.cpu_count() or 1) * done / max(ours, 1e-3), 1),
        "machine_busy_percent": round((busy1 - busy0) * 100 / elapsed, 1),
        "load_1m": load(),
    }


def _cpu(pids: dict[str, int]) -> dict[str, float]:
    return {**{name: tree_cpu_seconds(pid) for name, pid in pids.items()},
            BENCH: time.process_time()}  # fmt: skip


async def run_config(
    stack: ScaleStack, http: httpx.AsyncClient, config: Config, args: argparse.Namespace,
    seconds: float, console: Console,
) -> dict[str, Any]:  # fmt: skip
    await stack.scale_workers(config.workers)
    urls = [g.url for g in stack.gateways[: config.gateways]]
    with console.status(f"{config.name}: {args.clients} clients, {seconds:.0f}s…"):
        result = await closed_loop(http, urls, stack.api_key, args.clients,
                                   args.warmup_seconds, seconds,
                                   stack.pids(config.gateways))  # fmt: skip
    result = {"config": config.name, "workers": config.workers,
              "gateways": config.gateways, **result}  # fmt: skip
    console.log(f"{config.name}: {result['per_second']}/s, p50 {result.get('p50_ms')} ms, "
                f"p99 {result.get('p99_ms')} ms, ours {result['ours_percent']} %, "
                f"machine {result['machine_busy_percent']} %")  # fmt: skip
    return result


async def measure(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    started = time.monotonic()
    end = started + args.max_seconds
    report: dict[str, Any] = {"load_1m": {"before": load()}, "runs": []}
    plan = worker_plan(args.max_workers, args.rounds)
    console.log("starting PostgreSQL, Temporal, gateways…")
    async with scale_stack(args.gateways) as stack:
        limits = httpx.Limits(max_connections=args.clients * 2)
        async with httpx.AsyncClient(timeout=120, limits=limits) as http:
            console.log(f"servers up in {time.monotonic() - started:.1f}s")
            todo = len(plan) + len(gateway_plan(1, args.gateways))
            runs: list[dict[str, Any]] = report["runs"]
            for n in range(todo):
                if n == len(plan):
                    plan += gateway_plan(best_workers(aggregate(runs)), args.gateways)
                # Each configuration may start a worker, warms up and drains: ~8 s more.
                share = (end - time.monotonic()) / (todo - n) - args.warmup_seconds - 8
                seconds = max(3.0, min(args.seconds, share))
                runs.append(await run_config(stack, http, plan[n], args, seconds, console))
    report["configs"] = aggregate(report["runs"])
    report["load_1m"]["after"] = load()
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    report["verdict"] = verdict(report["configs"], os.cpu_count() or 1)
    return report


GROUPS = ("workers", "gateways", "postgres", "temporal", BENCH)


def groups(result: dict[str, Any], key: str) -> dict[str, float]:
    """``result[key]`` (per process) summed per kind: workers, gateways, PostgreSQL,
    Temporal, the bench client."""
    summed = dict.fromkeys(GROUPS, 0.0)
    for name, value in result[key].items():
        kind = next((g for g in GROUPS if g.startswith(name.split("-")[0])), name)
        summed[kind] = round(summed[kind] + value, 1)
    return summed


def verdict(results: list[dict[str, Any]], cpus: int) -> dict[str, Any]:
    """Where the cores saturate, which kind of process takes most of them, and what the
    worker's CPU per execution makes of a core."""
    one = {r["workers"]: r for r in results if r["gateways"] == 1}
    best = max(results, key=lambda r: r["per_second"])
    ms = groups(best, "cpu_ms_per_execution")
    share = groups(best, "cpu_percent")
    share["others (not the bench's)"] = round(
        max(0.0, best["machine_busy_percent"] - best["ours_percent"]), 1
    )
    moat_ms = ms["workers"] + ms["gateways"] + ms["postgres"]
    return {
        "best": best["config"],
        "best_per_second": best["per_second"],
        "one_worker_per_second": one[1]["per_second"],
        "speedup_over_one_worker": {
            str(w): round(r["per_second"] / one[1]["per_second"], 2) for w, r in one.items()
        },
        "ceiling_per_second": {r["config"]: r["ceiling_per_second"] for r in results},
        "cores": cpus,
        "saturated": best["machine_busy_percent"] >= 85 * cpus,
        "machine_busy_percent_at_best": best["machine_busy_percent"],
        "cpu_percent_at_best": share,
        "largest": max(GROUPS[:4], key=lambda k: share[k]),
        # A process near a core of its own bounds the rate alone.
        "pinned": [n for n, p in best["cpu_percent"].items() if p >= 90 and n != BENCH],
        "cpu_ms_per_execution_at_best": ms,
        "worker_core_executions_per_second": round(1000 / max(ms["workers"], 0.1), 1),
        "moat_ms_per_execution": round(moat_ms, 1),
        "moat_executions_per_second_per_core": round(1000 / max(moat_ms, 0.1), 1),
        "stack_ms_per_execution": round(moat_ms + ms["temporal"], 1),
    }


def render(report: dict[str, Any], console: Console) -> None:
    table = Table(title="Moat scale-out (closed loop, fresh demo.echo executes)")
    columns = ("configuration", "runs", "exec/s", "p50 ms", "p99 ms", "workers %",
               "gateways %", "postgres %", "temporal %", "bench %", "ours %", "machine %",
               "ceiling/s", "load 1m")  # fmt: skip
    for column in columns:
        table.add_column(column, justify="left" if column == "configuration" else "right")
    for r in report["configs"]:
        cpu = r["cpu_percent"]
        workers = " + ".join(f"{v:.0f}" for n, v in cpu.items() if n.startswith("worker"))
        gateways = " + ".join(f"{v:.0f}" for n, v in cpu.items() if n.startswith("gateway"))
        table.add_row(r["config"], str(r["runs"]), f"{r['per_second']:.1f}",
                      f"{r.get('p50_ms', 0):.0f}", f"{r.get('p99_ms', 0):.0f}", workers,
                      gateways, f"{cpu['postgres']:.0f}", f"{cpu['temporal']:.0f}",
                      f"{cpu[BENCH]:.0f}", f"{r['ours_percent']:.0f}",
                      f"{r['machine_busy_percent']:.0f}", f"{r['ceiling_per_second']:.1f}",
                      f"{r['load_1m']:.1f}")  # fmt: skip
    console.print(table)
    for line in verdict_lines(report["verdict"]):
        console.print(line)
    loads = report["load_1m"]
    console.print(f"load average (1 min) before {loads['before']}, after {loads['after']}, on "
                  f"{os.cpu_count()} CPUs; wall {report['wall_seconds']} s")  # fmt: skip


def verdict_lines(v: dict[str, Any]) -> list[str]:
    ms, share = v["cpu_ms_per_execution_at_best"], v["cpu_percent_at_best"]
    speedups = ", ".join(f"{w}: {s:.2f}x" for w, s in v["speedup_over_one_worker"].items())
    state = "saturated" if v["saturated"] else "NOT saturated: something other than CPU bounds"
    shares = ", ".join(f"{k} {p:.0f} %" for k, p in share.items())
    ceilings = ", ".join(f"{c}: {r:.1f}" for c, r in v["ceiling_per_second"].items())
    return [
        f"Best: {v['best']}, {v['best_per_second']:.1f} executions/s; workers against one "
        f"worker behind one gateway: {speedups}. With every core to itself (the ceiling, "
        f"CPU-bound): {ceilings} executions/s.",
        f"The {v['cores']} cores are {state} ({v['machine_busy_percent_at_best']:.0f} % busy "
        f"of {v['cores'] * 100} %): {shares}. "
        + (
            f"Near a core of its own, so the bound: {', '.join(v['pinned'])}. "
            if v["pinned"]
            else "No process reaches a core: the cores together are the bound. "
        )
        + f"Of the bench's processes, {v['largest']} take the most.",
        f"CPU per execution: workers {ms['workers']:.1f} ms, gateways {ms['gateways']:.1f}, "
        f"PostgreSQL {ms['postgres']:.1f}, Temporal dev server {ms['temporal']:.1f}, bench "
        f"client {ms[BENCH]:.1f}.",
        f"So one worker process on a core of its own runs about "
        f"{v['worker_core_executions_per_second']:.1f} executions/s; worker, gateway and "
        f"PostgreSQL together cost {v['moat_ms_per_execution']:.0f} ms, about "
        f"{v['moat_executions_per_second_per_core']:.1f} executions/s per core of a bigger "
        f"machine with Temporal elsewhere ({v['stack_ms_per_execution']:.0f} ms with the dev "
        f"server on the same cores), until PostgreSQL's commits or Temporal bound instead.",
    ]


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m bench.scale", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--max-workers", type=int, default=3, help="worker counts 1..N (default 3)")
    p.add_argument("--gateways", type=int, default=2, help="gateways at the best count (2)")
    p.add_argument("--clients", type=int, default=16, help="closed-loop callers (16)")
    p.add_argument("--rounds", type=int, default=2, help="worker counts up, down... (2)")
    p.add_argument("--seconds", type=float, default=20, help="measured per configuration run")
    p.add_argument("--warmup-seconds", type=float, default=5, help="before each measurement")
    p.add_argument("--max-seconds", type=float, default=300, help="wall budget (default 300)")
    return p


def main() -> None:
    args = parser().parse_args()
    run_bench(measure, render, args, RESULTS, 200)


if __name__ == "__main__":
    main()
