"""A plan of three steps against the same three calls made one after another.

* **plan of 3**: one ``POST /v1/plans`` of three ``demo.echo`` steps, the second and third
  using references to what the first answered (``${steps.first.output...}``), until the
  plan's answer (``executed``);
* **3 sequential executions**: three ``POST /v1/executions`` of ``demo.echo``, each sent
  after the previous one answered, the second and third carrying the first's output as
  the client read it: what an agent does without plans.

Both series are sequential and interleaved in a shuffled order each round, on the servers
``make bench`` measures (``bench.speed_stack``: embedded PostgreSQL with fsync on, the
Temporal dev server, one ``moat worker`` and one ``moat gateway``, each a process of its
own on loopback). Prints p50 / p90 / p99 side by side with the ratio of the medians, and
writes ``bench/results/plans.json``.
Run: ``python -m bench.plans`` (``--help`` for the knobs).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from bench.speed import load, percentile, run_bench, sequential, temporal_actions
from bench.speed_stack import speed_stack

RESULTS = Path(__file__).resolve().parent / "results" / "plans.json"
PLAN = "plan of 3 (references)"
SEQUENCE = "3 sequential executions"
ONE = "one execution (in the sequence)"
WAIT = "wait=60"


def first_input(i: int) -> dict[str, Any]:
    return {"i": i, "text": f"first {i}"}


def plan_body(i: int) -> dict[str, Any]:
    """Three ``demo.echo`` steps; the 2nd and 3rd refer to what the 1st answered."""
    return {
        "schema_version": "1",
        "steps": [
            {"id": "first", "capability_id": "demo.echo", "input": first_input(i)},
            {
                "id": "second",
                "capability_id": "demo.echo",
                "input": {
                    "i": "${steps.first.output.i}",
                    "note": "after ${steps.first.output.text}",
                },
            },
            {
                "id": "third",
                "capability_id": "demo.echo",
                "input": {"from": "${steps.first.output.text}"},
            },
        ],
    }


def later_inputs(first: dict[str, Any]) -> list[dict[str, Any]]:
    """The 2nd and 3rd inputs as a client builds them from the 1st output (what the plan's
    references resolve to)."""
    return [{"i": first["i"], "note": f"after {first['text']}"}, {"from": first["text"]}]


def stats(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50), 1),
        "p90_ms": round(percentile(samples, 90), 1),
        "p99_ms": round(percentile(samples, 99), 1),
        "max_ms": round(max(samples), 1),
    }


@dataclass
class PlanCalls:
    """The two series' requests, each checking its answer (a failed call fails the run)."""

    http: httpx.AsyncClient
    gateway_url: str
    api_key: str
    tag: str
    one: list[float] = field(default_factory=list)  # each execution of the sequence, ms
    workflow_ids: dict[str, str] = field(default_factory=dict)  # series -> one workflow id
    plan_workflows: list[str] = field(default_factory=list)  # every plan run, in order

    def _headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}", "Idempotency-Key": key, "Prefer": WAIT}

    async def plan(self, i: int) -> None:
        key = f"{self.tag}-plan-{i}-{uuid.uuid4().hex[:6]}"
        resp = await self.http.post(
            f"{self.gateway_url}/v1/plans", json=plan_body(i), headers=self._headers(key)
        )
        body = resp.json()
        if resp.status_code != 200 or body.get("status") != "executed":
            raise RuntimeError(f"plan not executed ({resp.status_code}): {resp.text[:300]}")
        self.workflow_ids.setdefault(PLAN, body["workflow_id"])
        self.plan_workflows.append(body["workflow_id"])
        outputs = [s["output"] for s in body["steps"]]
        if outputs[1:] != later_inputs(outputs[0]):
            raise RuntimeError(f"the references did not resolve as expected: {outputs}")

    async def sequence(self, i: int) -> None:
        key = f"{self.tag}-seq-{i}-{uuid.uuid4().hex[:6]}"
        first = await self._execute(f"{key}/first", first_input(i))
        for step, given in zip(("second", "third"), later_inputs(first), strict=True):
            await self._execute(f"{key}/{step}", given)

    async def _execute(self, key: str, given: dict[str, Any]) -> Any:
        body = {"schema_version": "1", "capability_id": "demo.echo", "input": given}
        start = time.perf_counter()
        resp = await self.http.post(
            f"{self.gateway_url}/v1/executions", json=body, headers=self._headers(key)
        )
        self.one.append((time.perf_counter() - start) * 1000)
        if resp.status_code != 200 or resp.json().get("status") != "executed":
            raise RuntimeError(f"execution failed ({resp.status_code}): {resp.text[:300]}")
        self.workflow_ids.setdefault(ONE, resp.json()["workflow_id"])
        return resp.json()["output"]


async def plan_time(client: Client, workflow_id: str) -> dict[str, float]:
    """Where one plan's time went, from its history: its steps' executions (child started
    to completed), its own steps (regular activities scheduled to completed, and the
    workflow tasks that ran local activities), and the rest (other workflow tasks, queueing,
    child starts), in ms."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    events = history.events
    at = {e.event_id: e.event_time.ToMicroseconds() / 1000 for e in events}
    children = activities = 0.0
    # The workflow tasks that ran local activities: each is followed by their markers.
    with_markers = {
        events[i].event_id
        for i in range(len(events) - 1)
        if events[i].event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        and events[i + 1].event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    }
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
            child = e.child_workflow_execution_completed_event_attributes
            children += at[e.event_id] - at[child.started_event_id]
        elif e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            activity = e.activity_task_completed_event_attributes
            activities += at[e.event_id] - at[activity.scheduled_event_id]
        elif e.event_id in with_markers:
            # Local activities (the plan's bookkeeping by default) run inside its tasks.
            task = e.workflow_task_completed_event_attributes
            activities += at[e.event_id] - at[task.started_event_id]
    total = at[events[-1].event_id] - at[events[0].event_id]
    return {
        "total_ms": total,
        "steps_ms": children,
        "plan_activities_ms": activities,
        "rest_ms": total - children - activities,
    }


async def plan_breakdown(client: Client, workflow_ids: list[str]) -> dict[str, float]:
    """The medians of ``plan_time`` over the last plans measured (at most 10)."""
    times = [await plan_time(client, w) for w in workflow_ids[-10:]]
    return {k: round(statistics.median(t[k] for t in times), 1) for k in times[0]}


async def run_series(
    calls: PlanCalls, n: int, warmup: int, rng: random.Random, until: float
) -> dict[str, Any]:
    """Both series interleaved (``bench.speed.sequential``), and the ratio of their p50s."""
    samples = await sequential({PLAN: calls.plan, SEQUENCE: calls.sequence}, n, warmup, rng, until)
    measured = len(samples[SEQUENCE])
    ones = calls.one[-3 * measured :] if measured else []
    latency = {name: stats(s) for name, s in samples.items() if s}
    if ones:
        latency[ONE] = stats(ones)
    ratio = latency[PLAN]["p50_ms"] / latency[SEQUENCE]["p50_ms"]
    return {
        "latency": latency,
        "ratio_p50": round(ratio, 2),
        "plan_minus_sequence_p50_ms": round(
            latency[PLAN]["p50_ms"] - latency[SEQUENCE]["p50_ms"], 1
        ),
    }


async def measure(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    started = time.monotonic()
    end = started + args.max_seconds
    report: dict[str, Any] = {"load_1m": {"before": load()}}
    console.log("starting PostgreSQL, Temporal, worker, gateway…")
    async with speed_stack() as stack:
        report["startup_seconds"] = round(time.monotonic() - started, 1)
        console.log(f"servers up in {report['startup_seconds']}s")
        calls = PlanCalls(
            stack.http, stack.gateway_url, stack.api_key, f"plans-{uuid.uuid4().hex[:8]}"
        )
        with console.status(f"plan of 3 vs 3 sequential: {args.n} each, interleaved…"):
            report.update(
                await run_series(calls, args.n, args.warmup, random.Random(args.seed), end)
            )
        # The plan's own history (its steps' executions are child workflows of their own).
        report["temporal_actions"] = {
            series: await temporal_actions(stack.moat_client, workflow_id)
            for series, workflow_id in calls.workflow_ids.items()
        }
        report["plan_time"] = await plan_breakdown(stack.moat_client, calls.plan_workflows)
    report["load_1m"]["after"] = load()
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    return report


def render(report: dict[str, Any], console: Console) -> None:
    table = Table(title="A plan of 3 demo.echo steps vs 3 sequential executions (ms)")
    for column in ("series", "n", "p50", "p90", "p99", "max", "p50 ratio"):
        table.add_column(column, justify="left" if column == "series" else "right")
    latency = report["latency"]
    for name, row in latency.items():
        ratio = f"{report['ratio_p50']:.2f}x" if name == PLAN else ""
        table.add_row(
            name,
            str(row["n"]),
            f"{row['p50_ms']:.1f}",
            f"{row['p90_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            f"{row['max_ms']:.1f}",
            ratio,
        )
    console.print(table)
    actions = report["temporal_actions"]
    if PLAN in actions and ONE in actions:
        console.print(
            f"Temporal actions: the plan's own history {actions[PLAN]['actions']} "
            f"({actions[PLAN]['events']} events), plus its 3 steps' executions; one "
            f"execution {actions[ONE]['actions']} ({actions[ONE]['events']} events)"
        )
    split = report["plan_time"]
    console.print(
        f"A plan's time, from its history (each part the median over the last plans): "
        f"{split['total_ms']:.0f} ms in all; its steps' executions {split['steps_ms']:.0f}, "
        f"its own activities {split['plan_activities_ms']:.0f}, workflow tasks and child "
        f"starts {split['rest_ms']:.0f}"
    )
    loads = report["load_1m"]
    console.print(
        f"plan p50 - sequence p50: {report['plan_minus_sequence_p50_ms']:+.1f} ms; load "
        f"average (1 min) before {loads['before']}, after {loads['after']}, on "
        f"{os.cpu_count()} CPUs; wall {report['wall_seconds']} s"
    )
    if report["latency"][PLAN]["n"] < report["settings"]["n"]:
        console.print(
            f"[yellow]The --max-seconds {report['settings']['max_seconds']:g} budget cut the "
            "series short; n shows how many each measured.[/]"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.plans",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=30, help="measured requests per series")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up requests per series")
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=55,
        help="wall-clock budget, start-up included; the series stop early (at least 10 "
        "rounds) when it runs out (default 55)",
    )
    parser.add_argument("--seed", type=int, default=8785)
    args = parser.parse_args()
    run_bench(measure, render, args, RESULTS, 100)


if __name__ == "__main__":
    main()
