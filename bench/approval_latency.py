"""What waiting for a person costs the machinery (not the person): under a strict policy,
how long a call takes to be answered ``202`` with its approval, how long the approval
takes (checks, the run's update, its recording activity), and how long from the approval
until the execution's receipt can be read.

    .venv/bin/python -m bench.approval_latency --n 30

Sequential requests on the bench stack (bench/stack.py), local bookkeeping activities.
Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.stack import BenchStack, bench_stack
from store import api_keys, policy_versions, tenancy

RULE = {"capability": "demo.echo", "requires_approval": True}


async def _setup(stack: BenchStack) -> str:
    assert stack.sessions is not None
    async with stack.sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        await policy_versions.add(
            session, stack.tenant_id, "strict", {"mode": "strict", "rules": [RULE]}, "bench"
        )
        approver = await api_keys.create_api_key(
            session, stack.tenant_id, name="approver", scopes=["approvals:write"]
        )
    return approver


async def _one(stack: BenchStack, url: str, approver: str) -> tuple[float, float, float]:
    t0 = time.perf_counter()
    asked = await stack.http.post(
        f"{url}/v1/executions",
        json={"schema_version": "1", "capability_id": "demo.echo", "input": {"n": 1}},
        headers={
            "Authorization": f"Bearer {stack.api_key}",
            "Idempotency-Key": f"bench-{uuid.uuid4().hex}",
        },
    )
    t1 = time.perf_counter()
    envelope = asked.json()
    assert asked.status_code == 202 and envelope["approval"], asked.text
    approval = envelope["approval"]
    decided = await stack.http.post(
        f"{url}/v1/approvals/{approval['id']}/approve",
        json={"input_hash": approval["input_hash"], "policy_version": approval["policy_version"]},
        headers={"Authorization": f"Bearer {approver}"},
    )
    t2 = time.perf_counter()
    assert decided.status_code == 200, decided.text
    while True:
        done = await stack.http.get(
            f"{url}/v1/executions/{envelope['receipt_id']}",
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
        if done.status_code != 202:
            break
        await asyncio.sleep(0.005)
    t3 = time.perf_counter()
    assert done.status_code == 200, done.text
    return (t1 - t0) * 1000, (t2 - t1) * 1000, (t3 - t2) * 1000


def _stats(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median_ms": statistics.median(ordered),
        "p95_ms": ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))],
    }


async def measure(n: int, warmup: int) -> dict[str, Any]:
    async with bench_stack(tracing=False, temporal_file=True) as stack:
        approver = await _setup(stack)
        url = stack.gateways[True]
        for _ in range(warmup):
            await _one(stack, url, approver)
        samples = [await _one(stack, url, approver) for _ in range(n)]
    names = (
        "strict call -> 202 with approval",
        "approve (update round trip)",
        "approved -> receipt",
    )
    return {
        "n": n,
        "series": {name: _stats([s[i] for s in samples]) for i, name in enumerate(names)},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--n", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=5)
    args = parser.parse_args()
    report = asyncio.run(measure(args.n, args.warmup))
    table = Table("series", "n", "median ms", "p95 ms")
    for name, row in report["series"].items():
        table.add_row(name, str(report["n"]), f"{row['median_ms']:.1f}", f"{row['p95_ms']:.1f}")
    Console().print(table)
    print(json.dumps(report, separators=(",", ":")))


if __name__ == "__main__":
    main()
