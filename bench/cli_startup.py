"""What the ``moat`` command costs before it does anything: each series is a fresh process,
timed from spawn to exit, beside a baseline run in the same rounds that does the same work
without the CLI (``python -c pass`` for help; one ``httpx`` call to the same gateway for
the commands that call it). Overhead = the series' median minus its baseline's.

    .venv/bin/python -m bench.cli_startup            # = make bench-cli
    .venv/bin/python -m bench.cli_startup --rounds 20 --source ../other-checkout

``--source DIR`` runs the CLI of another checkout (its ``starter`` first on the path)
against this one's stack, to measure a before and an after in one run of the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench.stack import bench_stack

# The budget the issue sets for ``moat --help`` and ``moat execute`` (seconds of overhead).
TARGET = 0.4
CLI = [sys.executable, "-m", "starter.cli"]
POST = """
import httpx, sys
httpx.post(sys.argv[1] + "/v1/executions", json={"schema_version": "1",
    "capability_id": "demo.echo", "input": {"n": sys.argv[3]}},
    headers={"Authorization": "Bearer " + sys.argv[2], "Idempotency-Key": sys.argv[3]},
    timeout=60).raise_for_status()
"""
GET = """
import httpx, sys
httpx.get(sys.argv[1] + "/v1/receipts", params={"limit": 20},
    headers={"Authorization": "Bearer " + sys.argv[2]}, timeout=60).raise_for_status()
"""


@dataclass(frozen=True)
class Series:
    name: str
    argv: list[str]
    baseline: str | None  # the series it is measured against; None: it is a baseline
    unique: bool = False  # the last argument gets a fresh idempotency key each run


def series(url: str, key: str) -> list[Series]:
    py = sys.executable
    return [
        Series("python -c pass", [py, "-c", "pass"], None),
        Series("python: import httpx", [py, "-c", "import httpx"], None),
        Series("python + httpx POST", [py, "-c", POST, url, key, ""], None, unique=True),
        Series("python + httpx GET", [py, "-c", GET, url, key], None),
        Series("moat --help", [*CLI, "--help"], "python -c pass"),
        Series("moat execute --help", [*CLI, "execute", "--help"], "python -c pass"),
        Series(
            "moat execute demo.echo",
            [*CLI, "execute", "demo.echo", "--json", "--input", "{}", "--key", ""],
            "python + httpx POST",
            unique=True,
        ),
        Series("moat receipts list", [*CLI, "receipts", "list", "--json"], "python + httpx GET"),
    ]


def _children_cpu() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


async def run_once(s: Series, env: dict[str, str]) -> tuple[float, float]:
    """One process's wall time and CPU time (user + system: what other processes' load
    inflates least), run in ``MOAT_HOME`` (the working directory is first on the path of
    ``python -m``: the checkout measured is the one ``PYTHONPATH`` names)."""
    argv = list(s.argv)
    if s.unique:
        argv[-1] = f"bench-cli-{uuid.uuid4().hex}"
    cpu = _children_cpu()
    started = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        env=env,
        cwd=env["MOAT_HOME"],
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    _, stderr = await proc.communicate()
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise RuntimeError(f"{s.name} exited {proc.returncode}: {stderr.decode()[-2000:]}")
    return elapsed, _children_cpu() - cpu


async def measure(rounds: int, checkout: str) -> dict[str, list[tuple[float, float]]]:
    async with bench_stack(tracing=False, temporal_file=False) as stack:
        url = stack.gateways[True]
        with tempfile.TemporaryDirectory(prefix="moat-cli-bench-") as home:
            env = {
                **os.environ,
                "MOAT_HOME": home,
                "MOAT_GATEWAY_URL": url,
                "MOAT_API_KEY": stack.api_key,
                "COLUMNS": "80",
            }
            env["PYTHONPATH"] = checkout
            todo = series(url, stack.api_key)
            for s in todo:  # warm the file cache and the gateway
                await run_once(s, env)
            samples: dict[str, list[tuple[float, float]]] = {s.name: [] for s in todo}
            for _ in range(rounds):
                random.shuffle(todo)  # load drift hits every series alike
                for s in todo:
                    samples[s.name].append(await run_once(s, env))
    return samples


def report(
    samples: dict[str, list[tuple[float, float]]], source: str | None
) -> list[dict[str, object]]:
    wall = {name: statistics.median(w for w, _ in runs) for name, runs in samples.items()}
    cpu = {name: statistics.median(c for _, c in runs) for name, runs in samples.items()}
    rows: list[dict[str, object]] = []
    for s in series("", ""):
        row: dict[str, object] = {
            "series": s.name,
            "median_s": round(wall[s.name], 3),
            "cpu_s": round(cpu[s.name], 3),
        }
        if s.baseline is not None:
            row |= {
                "baseline": s.baseline,
                "overhead_s": round(wall[s.name] - wall[s.baseline], 3),
                "cpu_overhead_s": round(cpu[s.name] - cpu[s.baseline], 3),
                "ratio": round(wall[s.name] / wall[s.baseline], 2),
            }
        rows.append(row)
    rounds = len(next(iter(samples.values())))
    print(f"CLI start-up ({'--source ' + source if source else 'this checkout'}), "
          f"{rounds} rounds, load {os.getloadavg()[0]:.2f}; seconds, medians")  # fmt: skip
    print(f"{'series':<24} {'wall':>6} {'cpu':>6} {'overhead':>9} {'cpu over':>9} {'ratio':>6}")
    for row in rows:
        extra = ""
        if "overhead_s" in row:
            extra = (
                f" {row['overhead_s']:>9.3f} {row['cpu_overhead_s']:>9.3f} {row['ratio']:>6.2f}"
                f"  vs {row['baseline']}"
            )
        print(f"{row['series']:<24} {row['median_s']:>6.3f} {row['cpu_s']:>6.3f}{extra}")
    print(f"target: overhead of moat --help and moat execute under {TARGET} s")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--source", help="Run the CLI of this checkout instead.")
    args = parser.parse_args()
    checkout = Path(args.source) if args.source else Path(__file__).parent.parent
    samples = asyncio.run(measure(args.rounds, str(checkout.absolute())))
    rows = report(samples, args.source)
    results = Path(__file__).parent / "results"
    results.mkdir(exist_ok=True)
    name = "cli_startup_source.json" if args.source else "cli_startup.json"
    (results / name).write_text(json.dumps({"rows": rows, "samples": samples}, indent=1) + "\n")


if __name__ == "__main__":
    main()
