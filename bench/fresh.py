"""Fresh executes against the floor alone, quickly: ``bench.speed``'s first comparison and
its breakdown, without the rest of its phases, for trying a change to the execute path.

    .venv/bin/python -m bench.fresh --n 60

Run it alternately from checkouts of two commits (each its own stack) to compare them: the
machine's speed drifts between runs, so read the ratio of each run, and more than one.

With ``--clients N``: instead, N clients each send fresh executes one after another for
``--seconds`` (a closed loop, as ``bench.scale``'s, on one gateway and one worker), and it
prints the gateway's CPU per execution (``/proc``, by thread: the event loop's and the
Temporal client's) and the application role's statements per execution
(``pg_stat_statements``). Under such load every run outlasts the wait's first look at it
(``wait.APPROVAL_POLL_SECONDS``); ``--strict`` gives the tenant a strict policy whose rule
lets ``demo.*`` run without approval, so that the wait also looks for approvals.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
import uuid

import psycopg

from bench.bare_workflow import FLOOR_WORKFLOW
from bench.breakdown import breakdown, compared
from bench.speed import Calls, load, pg_reset, pg_top, sequential, thread_cpu_seconds
from bench.speed_stack import SpeedStack, speed_stack


async def measure(n: int, warmup: int, seed: int) -> None:
    async with speed_stack() as stack:
        calls = Calls(stack, f"fresh-{uuid.uuid4().hex[:8]}")
        series = {"moat": calls.fresh, "floor": calls.bare(FLOOR_WORKFLOW, "floor")}
        rng = random.Random(seed)
        before = load()
        samples = await sequential(series, n, warmup, rng, time.monotonic() + 3600)
        moat, floor = statistics.median(samples["moat"]), statistics.median(samples["floor"])
        print(
            f"fresh p50 {moat:.1f} ms, floor p50 {floor:.1f} ms: {moat / floor:.3f} x "
            f"(n={n}, load {before:.1f} -> {load():.1f})"
        )
        ours = await breakdown(stack.moat_client, calls.runs["moat"][-n:])
        theirs = await breakdown(stack.bare_client, calls.runs["floor"][-n:])
        for name, a, b in compared(ours, theirs):
            print(f"  {name:24s} {a:6.1f} {b:6.1f} {a - b:+6.1f}")


def _strict_policy(stack: SpeedStack) -> None:
    """The bench tenant's policy made strict, ``demo.*`` allowed without approval."""
    rule = {"capability": "demo.*", "requires_approval": False}
    document = json.dumps({"mode": "strict", "rules": [rule]})
    with psycopg.connect(stack.owner_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO policy_versions (tenant_id, version, mode, document, created_by)"
            " SELECT k.tenant_id, 1, 'strict', %s, 'bench' FROM api_keys k WHERE k.id = %s",
            (document, stack.api_key.split("_", 2)[1]),
        )


async def closed_loop(clients: int, seconds: float, warmup: int, strict: bool) -> None:
    async with speed_stack() as stack:
        if strict:
            await asyncio.to_thread(_strict_policy, stack)
        calls = Calls(stack, f"loop-{uuid.uuid4().hex[:8]}")
        for i in range(warmup):
            await calls.fresh(i)
        gateway = stack.pids["gateway"]
        await asyncio.to_thread(pg_reset, stack.owner_url)
        took: list[float] = []
        until = time.monotonic() + seconds

        async def client(c: int) -> None:
            i = 0
            while time.monotonic() < until:
                started = time.perf_counter()
                await calls.fresh(warmup + (c + 1) * 1_000_000 + i)
                took.append((time.perf_counter() - started) * 1000)
                i += 1

        before, cpu0 = load(), thread_cpu_seconds(gateway)
        began = time.monotonic()
        await asyncio.gather(*(client(c) for c in range(clients)))
        elapsed, cpu1 = time.monotonic() - began, thread_cpu_seconds(gateway)
        n = len(took)
        per = {name: (cpu1[name] - cpu0.get(name, 0.0)) * 1000 / n for name in cpu1}
        threads = ", ".join(f"{name} {ms:.2f}" for name, ms in sorted(per.items()) if ms >= 0.01)
        print(
            f"{clients} clients{' (strict policy)' if strict else ''}: {n} executions, "
            f"{n / elapsed:.1f}/s, p50 {statistics.median(took):.0f} ms "
            f"(load {before:.1f} -> {load():.1f})"
        )
        print(f"gateway CPU per execution {sum(per.values()):.2f} ms ({threads})")
        print("statements of the application role per execution:")
        for top in await asyncio.to_thread(pg_top, stack.owner_url, n, 30):
            if top["per_execution"] >= 0.1:
                print(f"  {top['per_execution']:5.2f}  {top['query']}")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fresh", description=__doc__)
    parser.add_argument("--n", type=int, default=60, help="measured requests per series")
    parser.add_argument("--warmup", type=int, default=20, help="warm-up requests per series")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=0, help="a closed loop of N clients")
    parser.add_argument("--seconds", type=float, default=30.0, help="the closed loop's length")
    parser.add_argument("--strict", action="store_true", help="a strict policy (closed loop)")
    args = parser.parse_args()
    if args.clients > 0:
        asyncio.run(closed_loop(args.clients, args.seconds, args.warmup, args.strict))
    else:
        asyncio.run(measure(args.n, args.warmup, args.seed))


if __name__ == "__main__":
    main()
