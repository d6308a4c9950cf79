"""Where the worker's and the gateway's CPU goes per execution: ``py-spy`` samples both
processes of a ``bench.speed_stack`` while this process sends sequential fresh executions
(and then first repeats), and the top entries are printed by own and total time.

    .venv/bin/python -m bench.profile --n 300        # needs py-spy (pip install py-spy)

Samples (speedscope JSON and a flat text summary) are written to ``--out``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg

from bench.speed import Calls, cpu_seconds, percentile, pg_reset, timed
from bench.speed_stack import speed_stack


def _record(pid: int, out: Path, rate: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            "py-spy",
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--output",
            str(out),
            "--nonblocking",
            "--gil",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _statements(url: str, n: int) -> list[tuple[float, str]]:
    """Every statement of the application role, per request."""
    query = """
        SELECT calls, left(regexp_replace(query, '\\s+', ' ', 'g'), 160)
        FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
        WHERE r.rolname = 'moat_app' ORDER BY calls DESC
    """
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(query).fetchall()
    return [(round(calls / n, 2), q) for calls, q in rows if calls / n >= 0.1]


def _top(raw: Path, limit: int) -> dict[str, Any]:
    """Own and total sample counts by function from py-spy's collapsed stacks."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        samples += n
        own[frames[-1]] += n
        for frame in set(frames):
            total[frame] += n
    return {
        "samples": samples,
        "own": [(f, round(100 * c / samples, 1)) for f, c in own.most_common(limit)],
        "total": [(f, round(100 * c / samples, 1)) for f, c in total.most_common(limit)],
    }


async def run(args: argparse.Namespace, out: Path) -> dict[str, Any]:
    async with speed_stack() as stack:
        calls = Calls(stack, uuid.uuid4().hex[:6])
        for i in range(args.warmup):
            await calls.fresh(i)
        report: dict[str, Any] = {}
        for series, call in (("fresh", calls.fresh), ("first_repeat", calls.first_hit)):
            spies = {
                name: (_record(stack.pids[name], out / f"{series}-{name}.txt", args.rate))
                for name in ("worker", "gateway")
            }
            await asyncio.sleep(1.0)
            await asyncio.to_thread(pg_reset, stack.owner_url)
            n = args.n if series == "fresh" else min(args.n, len(calls.done) - len(calls.repeated))
            took: list[float] = []
            healthz: list[float] = []
            cpu0 = {name: cpu_seconds(stack.pids[name]) for name in ("worker", "gateway")}
            for i in range(n):
                await timed(call, args.warmup + i, took)
                await timed(calls.healthz, i, healthz)
            cpu = {
                name: round((cpu_seconds(stack.pids[name]) - cpu0[name]) * 1000 / n, 2)
                for name in cpu0
            }
            statements = await asyncio.to_thread(_statements, stack.owner_url, n)
            for spy in spies.values():
                spy.send_signal(2)
            for spy in spies.values():
                spy.wait(timeout=30)
            report[series] = {name: _top(out / f"{series}-{name}.txt", args.top) for name in spies}
            report[series]["latency"] = {
                "p50_ms": round(percentile(took, 50), 2),
                "healthz_p50_ms": round(percentile(healthz, 50), 2),
                "cpu_ms_per_request": cpu,
            }
            report[series]["statements"] = statements
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--rate", type=int, default=500, help="samples per second")
    parser.add_argument("--top", type=int, default=40)
    parser.add_argument("--out", default="bench/results/profile")
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = asyncio.run(run(args, out))
    Path(args.out, "top.json").write_text(json.dumps(report, indent=1))
    for series, procs in report.items():
        print(f"\n== {series}: {procs.pop('latency')}")
        for per, query in procs.pop("statements"):
            print(f"  {per:5.2f}  {query}")
        for name, top in procs.items():
            print(f"\n== {series} · {name}: {top['samples']} samples")
            print("  own %   | total %")
            for (f1, p1), (f2, p2) in zip(top["own"], top["total"], strict=False):
                print(f"  {p1:5.1f} {f1[:70]:70} | {p2:5.1f} {f2[:80]}")


if __name__ == "__main__":
    main()
