"""Reconcile cost: what the look-up before a repeated attempt costs a ``reconcile`` adapter.

The Slack and GitHub adapters against their local fakes (``starter.devstack.providers``),
called directly with a credential, as the activity calls them. For each provider, series
of calls of one kind:

* ``first attempt`` — attempt 1: the post alone, no look-up;
* ``repeat, found`` — attempt 2 after an attempt whose answer was lost: the look-up finds
  the effect and answers with it (no post);
* ``repeat, not found`` — attempt 2 (or a resumed run's first) when nothing was created:
  look-up, then post;
* ``repeat, not found, deep`` — the same with ``--depth`` other items created since the
  execution started (Slack pages its history 200 messages at a time, GitHub 100 issues).

For each: provider round trips per call (counted by the fake) and latency (median, p95).
The same series for ``notion.create_page``, under each Notion version: ``bench.notion_cost``.
Prints a table and one JSON line; saves it to ``bench/results/reconcile.json``.
Run: ``python -m bench.reconcile_cost [--n 200] [--depth 450]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import platform
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from activities import GithubAdapter, HostGuard, SlackAdapter, http_client
from bench import notion_cost
from schemas.capabilities import CapabilityCatalog
from schemas.connections import ConnectionType, Credential
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.run import AdapterInput
from starter.devstack.providers import FakeGithub, FakeServer, FakeSlack

RESULTS = Path(__file__).resolve().parent / "results" / "reconcile.json"


def _input(capability_id: str, data: dict[str, Any], allow: str, attempt: int) -> AdapterInput:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    return AdapterInput(
        ref=ExecutionRef(tenant_id="bench", receipt_id=str(uuid7())),
        capability=spec,
        input=data,
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=[allow],
        attempt=attempt,
    )


async def _series(
    fake: FakeServer, n: int, call: Callable[[int], Awaitable[None]]
) -> dict[str, Any]:
    times: list[float] = []
    trips = 0
    for i in range(n):
        before = len(fake.requests)
        start = time.perf_counter()
        await call(i)
        times.append((time.perf_counter() - start) * 1000)
        trips += len(fake.requests) - before
    times.sort()
    return {
        "n": n,
        "round_trips": trips / n,
        "median_ms": round(statistics.median(times), 2),
        "p95_ms": round(times[max(0, math.ceil(0.95 * n) - 1)], 2),
    }


async def run(n: int, depth: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    http = http_client()
    results: dict[str, dict[str, Any]] = {}
    with FakeSlack() as slack, FakeGithub() as github:
        guard = HostGuard([])
        s_adapter = SlackAdapter(http, guard)
        s_cred = Credential(
            "con_b", ConnectionType.SLACK, "xoxb-bench", {"base_url": slack.base_url}
        )
        g_adapter = GithubAdapter(http, guard)
        g_cred = Credential(
            "con_b", ConnectionType.GITHUB, "ghp_bench", {"base_url": github.base_url}
        )

        def slack_in(channel: str, attempt: int) -> AdapterInput:
            data = {"channel": channel, "text": "bench"}
            return _input("slack.post_message", data, slack.allow_entry, attempt)

        def github_in(repo: str, attempt: int) -> AdapterInput:
            data = {"owner": "bench", "repo": repo, "title": "bench"}
            return _input("github.create_issue", data, github.allow_entry, attempt)

        async def slack_first(i: int) -> None:
            await s_adapter(slack_in(f"CF{i}", 1), s_cred)

        async def slack_found(i: int) -> None:
            inp = slack_in(f"CR{i}", 1)
            slack.fail_next(1)
            with contextlib.suppress(Exception):
                await s_adapter(inp, s_cred)
            before = len(slack.requests)
            start = time.perf_counter()
            out = await s_adapter(inp.model_copy(update={"attempt": 2}), s_cred)
            assert out.reconciled is True
            # Only the repeated attempt is measured: drop the lost first call from the count.
            _measured.append(((time.perf_counter() - start) * 1000, len(slack.requests) - before))

        async def slack_not_found(i: int) -> None:
            await s_adapter(slack_in(f"CN{i}", 2), s_cred)

        deep_channel = "CDEEP"
        for _ in range(depth):
            await s_adapter(slack_in(deep_channel, 1), s_cred)

        async def slack_deep(i: int) -> None:
            await s_adapter(slack_in(deep_channel, 2), s_cred)

        async def github_first(i: int) -> None:
            await g_adapter(github_in(f"f{i}", 1), g_cred)

        async def github_found(i: int) -> None:
            inp = github_in(f"r{i}", 1)
            github.fail_next(1)
            with contextlib.suppress(Exception):
                await g_adapter(inp, g_cred)
            before = len(github.requests)
            start = time.perf_counter()
            out = await g_adapter(inp.model_copy(update={"attempt": 2}), g_cred)
            assert out.reconciled is True
            _measured.append(((time.perf_counter() - start) * 1000, len(github.requests) - before))

        async def github_not_found(i: int) -> None:
            await g_adapter(github_in(f"n{i}", 2), g_cred)

        for _ in range(depth):
            await g_adapter(github_in("deep", 1), g_cred)

        async def github_deep(i: int) -> None:
            await g_adapter(github_in("deep", 2), g_cred)

        plan: list[tuple[str, FakeServer, Callable[[int], Awaitable[None]], bool]] = [
            ("slack first attempt", slack, slack_first, False),
            ("slack repeat, found", slack, slack_found, True),
            ("slack repeat, not found", slack, slack_not_found, False),
            (f"slack repeat, not found, {depth} deep", slack, slack_deep, False),
            ("github first attempt", github, github_first, False),
            ("github repeat, found", github, github_found, True),
            ("github repeat, not found", github, github_not_found, False),
            (f"github repeat, not found, {depth} deep", github, github_deep, False),
        ]
        for name, fake, call, self_timed in plan:
            for i in range(min(10, n)):  # warm-up (connections, code paths)
                await call(-1 - i)
            _measured.clear()
            result = await _series(fake, n, call)
            if self_timed:
                times = sorted(t for t, _ in _measured)
                result.update(
                    round_trips=sum(k for _, k in _measured) / len(_measured),
                    median_ms=round(statistics.median(times), 2),
                    p95_ms=round(times[max(0, math.ceil(0.95 * len(times)) - 1)], 2),
                )
            results[name] = result
    results.update(await notion_cost.series(http, n, depth))
    await http.aclose()
    return {
        "at": datetime.now(UTC).isoformat(),
        "n": n,
        "depth": depth,
        "machine": {"python": platform.python_version(), "load_before": load_before},
        "series": results,
    }


_measured: list[tuple[float, int]] = []


def render(report: dict[str, Any]) -> Table:
    table = Table("series", "n", "round trips", "median ms", "p95 ms", title="reconcile cost")
    for name, r in report["series"].items():
        table.add_row(
            name,
            str(r["n"]),
            f"{r['round_trips']:.2f}",
            f"{r['median_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.reconcile_cost")
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--depth", type=int, default=450)
    args = parser.parse_args()
    report = asyncio.run(run(args.n, args.depth))
    report["machine"]["load_after"] = os.getloadavg()
    console = Console()
    console.print(render(report))
    console.print(json.dumps(report), soft_wrap=True)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
