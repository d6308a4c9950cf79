"""``bench.scale`` measures what it claims: its plan is 1..N workers behind one gateway then
the gateways at the best count, its verdict reads the CPU it was given, and its closed loop
runs real executions against a stack while reading CPU from ``/proc``."""

from __future__ import annotations

import os
from typing import Any

from bench.scale import (
    BENCH,
    Config,
    aggregate,
    best_workers,
    closed_loop,
    gateway_plan,
    parser,
    verdict,
    worker_plan,
)
from bench.scale_stack import machine_busy_seconds, tree_cpu_seconds
from tests.support.stack import Stack


def _result(workers: int, gateways: int, per_second: float) -> dict[str, Any]:
    cpu = {**{f"worker-{i + 1}": 40.0 for i in range(workers)},
           **{f"gateway-{i + 1}": 10.0 for i in range(gateways)},
           "postgres": 10.0, "temporal": 50.0, BENCH: 5.0}  # fmt: skip
    return {
        "config": Config(workers, gateways).name, "workers": workers, "gateways": gateways,
        "per_second": per_second, "cpu_percent": cpu,
        "cpu_ms_per_execution": {k: v * 10 / per_second for k, v in cpu.items()},
        "ours_percent": sum(cpu.values()), "machine_busy_percent": 190.0,
        "ceiling_per_second": per_second * 2,
    }  # fmt: skip


def test_the_plan_the_best_count_and_the_verdict() -> None:
    args = parser().parse_args([])
    assert args.max_seconds <= 300 and (args.max_workers, args.gateways) == (3, 2)
    one, two, three = Config(1, 1), Config(2, 1), Config(3, 1)
    assert worker_plan(3, 2) == [one, two, three, three, two, one]
    assert gateway_plan(2, 2) == [Config(2, 2), two] and gateway_plan(2, 1) == []
    runs = [_result(1, 1, 8.0), _result(2, 1, 12.0), _result(3, 1, 12.3), _result(1, 1, 10.0)]
    results = aggregate(runs)
    assert [r["config"] for r in results] == [one.name, two.name, three.name]
    assert results[0]["per_second"] == 9.0 and results[0]["runs"] == 2
    assert best_workers(results) == 2  # within 5 % of 3 workers: the smaller count
    v = verdict([*results, _result(2, 2, 13.0)], cpus=2)
    assert v["best"] == "2 workers, 2 gateways" and v["saturated"]
    assert v["speedup_over_one_worker"] == {"1": 1.0, "2": 1.33, "3": 1.37}
    assert v["cpu_percent_at_best"]["workers"] == 80.0 and v["largest"] == "workers"


async def test_a_closed_loop_against_a_stack(stack: Stack) -> None:
    assert tree_cpu_seconds(os.getpid()) > 0 and machine_busy_seconds() > 0
    result = await closed_loop(
        stack.http, [stack.url], stack.api_key, 2, 0.2, 1.0, {"worker-1": os.getpid()}
    )
    assert result["errors"] == 0 and result["executions"] >= 1
    assert result["p99_ms"] >= result["p50_ms"] > 0
    assert set(result["cpu_percent"]) == {"worker-1", BENCH}
