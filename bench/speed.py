"""Speed at the limit: Moat against bare Temporal baselines measured in the same run, on
servers that are each a process of their own (``bench.speed_stack``).

* fresh execute p50 against B1 (a bare workflow with 4 regular activities) and against the
  floor (a bare workflow with 1 activity), sequential and interleaved;
* idempotent hit p50 against the gateway's ``/healthz``;
* a duplicate storm: 1,000 concurrent identical requests, counting the provider's effects;
* open loop: the highest arrival rate at which p99 stays under 1 s, Moat and B1, with the
  worker's and the gateway's RSS;
* per execution: Postgres statements and commits (``pg_stat_statements``), Temporal actions
  (counted from the histories as Temporal Cloud bills them), CPU time of worker and gateway.

Prints one table, writes ``bench/results/speed.json``.
Run: ``python -m bench.speed`` (``--help`` for the knobs).
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
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import psycopg
import temporalio
from rich.console import Console
from rich.table import Table
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from bench.bare_workflow import (
    ACTIVITIES,
    BARE_WORKFLOW,
    FLOOR_WORKFLOW,
    BareFloor,
    BareInput,
    BareSteps,
)
from bench.breakdown import breakdown, compared
from bench.speed_stack import SpeedStack, speed_stack
from schemas.names import REPLAYED_HEADER, TRACE_HEADER
from starter.runtime import loop

RESULTS = Path(__file__).resolve().parent / "results" / "speed.json"
Call = Callable[[int], Awaitable[None]]
CLK_TCK = os.sysconf("SC_CLK_TCK")
FIRST_HIT = "moat hit, first repeat (Postgres)"
FIRST_HEALTHZ = "gateway /healthz (first-repeat rounds)"


def load() -> float:
    return round(os.getloadavg()[0], 2)


def percentile(data: list[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100)."""
    ordered = sorted(data)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def summary(samples: list[float]) -> dict[str, Any]:
    return {
        "n": len(samples),
        "p50_ms": round(percentile(samples, 50), 2),
        "p95_ms": round(percentile(samples, 95), 2),
        "p99_ms": round(percentile(samples, 99), 2),
        "max_ms": round(max(samples), 2),
    }


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def thread_cpu_seconds(pid: int) -> dict[str, float]:
    """User + system CPU time so far of a process's threads, summed by thread name (the
    event loop's is the process's own name; the Temporal client's Rust threads are
    ``tokio-rt-worker``)."""
    by_name: dict[str, float] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rpartition(")")[2].split()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        by_name[name] = by_name.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / CLK_TCK
    return by_name


@dataclass
class Calls:
    stack: SpeedStack
    tag: str
    done: list[tuple[str, str, int]] = field(default_factory=list)  # key, receipt id, input
    repeated: list[tuple[str, str, int]] = field(default_factory=list)  # the done, repeated
    # series -> (workflow id, wall ms) of every call, for ``bench.breakdown`` and the actions
    runs: dict[str, list[tuple[str, float]]] = field(default_factory=dict)

    def _headers(self, key: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.stack.api_key}", "Idempotency-Key": key}

    async def post(self, key: str, body: dict[str, Any]) -> Any:
        return await self.stack.http.post(
            f"{self.stack.gateway_url}/v1/executions", json=body, headers=self._headers(key)
        )

    async def fresh(self, i: int) -> None:
        key = f"{self.tag}-fresh-{i}-{uuid.uuid4().hex[:6]}"
        body = {"schema_version": "1", "capability_id": "demo.echo", "input": {"i": i}}
        started = time.perf_counter()
        resp = await self.post(key, body)
        took = (time.perf_counter() - started) * 1000
        if resp.status_code != 200 or resp.headers.get(REPLAYED_HEADER):
            raise RuntimeError(f"fresh execute failed ({resp.status_code}): {resp.text[:300]}")
        envelope = resp.json()
        self.done.append((key, envelope["receipt_id"], i))
        self.runs.setdefault("moat", []).append((envelope["workflow_id"], took))

    async def first_hit(self, i: int) -> None:
        """The first repeat of a key: the gateway has not answered it yet, so Postgres does
        (and leaves the answer in the gateway's memory)."""
        if len(self.repeated) >= len(self.done):
            raise RuntimeError("no key left that has not been repeated yet")
        done = self.done[len(self.repeated)]
        await self._replay(*done)
        self.repeated.append(done)

    async def hit(self, i: int) -> None:
        """A repeat of a key repeated before: answered from the gateway's memory."""
        await self._replay(*self.repeated[i % len(self.repeated)])

    async def _replay(self, key: str, receipt_id: str, index: int) -> None:
        body = {"schema_version": "1", "capability_id": "demo.echo", "input": {"i": index}}
        resp = await self.post(key, body)
        if resp.status_code != 200 or resp.headers.get(REPLAYED_HEADER) != "true":
            raise RuntimeError(f"hit not replayed ({resp.status_code}): {resp.text[:300]}")
        if resp.json()["receipt_id"] != receipt_id:
            raise RuntimeError("a hit answered another receipt")

    async def healthz(self, i: int) -> None:
        resp = await self.stack.http.get(f"{self.stack.gateway_url}/healthz")
        if resp.status_code != 200:
            raise RuntimeError(f"healthz failed ({resp.status_code})")

    def bare(self, workflow: str, series: str, queue: str | None = None) -> Call:
        async def call(i: int) -> None:
            workflow_id = f"{self.tag}-{series}-{i}-{uuid.uuid4().hex[:6]}"
            started = time.perf_counter()
            await self.stack.bare_client.execute_workflow(
                workflow,
                BareInput(payload=f"step {i}", local=False),
                id=workflow_id,
                task_queue=queue or self.stack.bare_queue,
                result_type=str,
            )
            took = (time.perf_counter() - started) * 1000
            self.runs.setdefault(series, []).append((workflow_id, took))

        return call


async def timed(call: Call, i: int, samples: list[float]) -> None:
    start = time.perf_counter()
    await call(i)
    samples.append((time.perf_counter() - start) * 1000)


async def sequential(
    series: dict[str, Call], n: int, warmup: int, rng: random.Random, until: float
) -> dict[str, list[float]]:
    """Request i of every series in turn, shuffled per round, so drift in the machine's
    load is shared evenly; stops early (at least 10 rounds) when the budget runs out."""
    samples: dict[str, list[float]] = {name: [] for name in series}
    for i in range(warmup + n):
        if i >= warmup + 10 and time.monotonic() > until:
            break
        for name in rng.sample(list(series), len(series)):
            await timed(series[name], i, samples[name] if i >= warmup else [])
    return samples


async def raw_request(
    url: str, method: str, path: str, headers: dict[str, str], body: bytes = b""
) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.1 request on a connection of its own (``Connection: close``), with nothing
    but asyncio streams: a storm's client must cost far less than the server it measures,
    and a pooled client library spends more CPU per request than the gateway does."""
    parsed = urlsplit(url)
    host, port = parsed.hostname or "127.0.0.1", parsed.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    try:
        lines = [f"{method} {path} HTTP/1.1", f"Host: {host}:{port}", "Connection: close"]
        lines += [f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        raw = await reader.read(-1)
    finally:
        writer.close()
    head, _, payload = raw.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode("latin-1").split("\r\n")
    answer_headers = {
        name.strip().lower(): value.strip()
        for name, _, value in (line.partition(":") for line in header_lines)
    }
    if "chunked" in answer_headers.get("transfer-encoding", ""):
        raise RuntimeError("a chunked answer: raw_request reads only sized ones")
    return int(status_line.split()[1]), answer_headers, payload


async def released_at_once(size: int, request: Callable[[], Awaitable[Any]]) -> list[Any]:
    """``size`` copies of ``request`` released together (each retried on a dropped
    connection, as an agent would): their answers and latencies in ms."""
    go = asyncio.Event()

    async def one() -> tuple[float, Any]:
        await go.wait()
        start = time.perf_counter()
        for attempt in range(3):
            try:
                answer = await request()
                break
            except OSError:
                if attempt == 2:
                    raise
        return (time.perf_counter() - start) * 1000, answer

    tasks = [asyncio.create_task(one()) for _ in range(size)]
    await asyncio.sleep(0.2)
    go.set()
    return list(await asyncio.gather(*tasks))


async def storm(stack: SpeedStack, calls: Calls, size: int) -> dict[str, Any]:
    """``size`` identical requests at once: one effect, and the followers' latency."""
    key = f"{calls.tag}-storm"
    body = {
        "schema_version": "1",
        "capability_id": "http.request",
        "input": {"method": "POST", "url": f"{stack.provider_url}/effects", "json": {"n": 1}},
    }
    payload = json.dumps(body).encode()
    headers = {**calls._headers(key), "Content-Type": "application/json"}
    before = sum(stack.effects.effects.values())
    answers = await released_at_once(
        size,
        lambda: raw_request(stack.gateway_url, "POST", "/v1/executions", headers, payload),
    )
    results: list[tuple[float, int, bool, str]] = []
    for latency, (status, answer_headers, answer) in answers:
        envelope = json.loads(answer) if status == 200 else {}
        # A follower gets the leader's answer (the run's trace, not its own): none of them
        # is a replay, since they all waited for the one run.
        follower = answer_headers.get(TRACE_HEADER.lower()) != envelope.get("trace_id")
        results.append((latency, status, follower, envelope.get("receipt_id", "")))
    leaders = [r for r in results if r[1] == 200 and not r[2]]
    followers = [r[0] for r in results if r[1] == 200 and r[2]]
    leader_ms = leaders[0][0] if len(leaders) == 1 else math.nan
    followers_p99 = percentile(followers, 99) if followers else math.nan
    return {
        "requests": size,
        "answered_200": sum(1 for r in results if r[1] == 200),
        "receipts": len({r[3] for r in results if r[3]}),
        "leaders": len(leaders),
        "effects": sum(stack.effects.effects.values()) - before,
        "leader_ms": round(leader_ms, 1),
        "followers": summary(followers) if followers else None,
        "followers_p99_minus_leader_ms": round(followers_p99 - leader_ms, 1),
    }


async def healthz_storm(stack: SpeedStack, size: int) -> dict[str, Any]:
    """``size`` concurrent ``GET /healthz`` at once, each on a new connection like the
    storm's: the gateway's HTTP floor for that many requests on this machine (connections
    accepted, parsed, answered), beside which the storm's followers are read."""
    answers = await released_at_once(
        size, lambda: raw_request(stack.gateway_url, "GET", "/healthz", {})
    )
    latencies = [latency for latency, (status, _, _) in answers if status == 200]
    return {"requests": size, "answered_200": len(latencies), **summary(latencies)}


async def open_loop(
    call: Call, rate: float, seconds: float, pids: dict[str, int]
) -> dict[str, Any]:
    """Arrivals every 1/rate s regardless of answers (no coordinated omission): latency is
    measured from each request's scheduled time. Samples the processes' RSS meanwhile."""
    loop = asyncio.get_running_loop()
    count = max(1, int(rate * seconds))
    start = loop.time() + 0.05
    samples: list[float] = []
    errors = 0
    rss = dict.fromkeys(pids, 0.0)

    async def one(i: int, at: float) -> None:
        nonlocal errors
        try:
            await call(i)
        except Exception:
            errors += 1
            return
        samples.append((loop.time() - at) * 1000)

    async def sample_rss() -> None:
        while True:
            for name, pid in pids.items():
                rss[name] = max(rss[name], rss_mb(pid))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample_rss())
    tasks = []
    for i in range(count):
        at = start + i / rate
        await asyncio.sleep(max(0.0, at - loop.time()))
        tasks.append(asyncio.create_task(one(i, at)))
    _, pending = await asyncio.wait(tasks, timeout=seconds + 30)
    for task in pending:
        task.cancel()
    sampler.cancel()
    errors += len(pending)
    p99 = percentile(samples, 99) if samples and not errors else math.inf
    return {
        "rate": rate,
        "sent": count,
        "errors": errors,
        **(summary(samples) if samples else {}),
        "p99_ms": round(p99, 1) if p99 != math.inf else None,
        "ok": p99 < 1000,
        "rss_mb": rss,
    }


async def ladder(
    name: str,
    call: Call,
    rates: list[float],
    seconds: float,
    pids: dict[str, int],
    console: Console,
    until: float,
) -> dict[str, Any]:
    steps = []
    for rate in rates:
        if time.monotonic() > until:
            break
        with console.status(f"open loop, {name}: {rate:g}/s for {seconds:g}s…"):
            step = await open_loop(call, rate, seconds, pids)
        step["load_1m"] = load()
        steps.append(step)
        console.log(f"{name} {rate:g}/s: p99 {step['p99_ms']} ms, errors {step['errors']}")
        await asyncio.sleep(2)  # drain
        if not step["ok"]:
            break
    passing = [s for s in steps if s["ok"]]
    best = max(passing, key=lambda s: s["rate"]) if passing else None
    return {"steps": steps, "max_rate_p99_under_1s": best["rate"] if best else 0, "at_max": best}


def pg_counts(url: str) -> dict[str, float]:
    """Statements and commits of the application role so far (pg_stat_statements)."""
    query = """
        SELECT
          coalesce(sum(calls) FILTER (WHERE query ~* '^\\s*(BEGIN|COMMIT|ROLLBACK)'), 0),
          coalesce(sum(calls) FILTER (WHERE query ~* '^\\s*COMMIT'), 0),
          coalesce(sum(calls) FILTER (WHERE query !~* '^\\s*(BEGIN|COMMIT|ROLLBACK)'), 0),
          coalesce(sum(total_exec_time) FILTER (
              WHERE query !~* '^\\s*(BEGIN|COMMIT|ROLLBACK)'), 0)
        FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
        WHERE r.rolname = 'moat_app'
    """
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(query).fetchone()
    assert row is not None
    return {
        "transaction_control": float(row[0]),
        "commits": float(row[1]),
        "statements": float(row[2]),
        "exec_ms": float(row[3]),
    }


def pg_reset(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


def pg_top(url: str, per: int, limit: int = 12) -> list[dict[str, Any]]:
    """The application role's statements by calls, per execution."""
    query = """
        SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), calls, mean_exec_time
        FROM pg_stat_statements s JOIN pg_roles r ON r.oid = s.userid
        WHERE r.rolname = 'moat_app' ORDER BY calls DESC, total_exec_time DESC LIMIT %s
    """
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(query, (limit,)).fetchall()
    return [
        {"query": q, "per_execution": round(c / per, 2), "mean_ms": round(m, 3)} for q, c, m in rows
    ]


async def per_execution(
    stack: SpeedStack, calls: Calls, call: Call, n: int, offset: int
) -> dict[str, Any]:
    """Statements, commits and CPU of worker and gateway per request, over ``n`` sequential
    requests (nothing else runs meanwhile)."""
    await asyncio.to_thread(pg_reset, stack.owner_url)
    cpu0 = {name: cpu_seconds(pid) for name, pid in stack.pids.items()}
    for i in range(n):
        await call(offset + i)
    await asyncio.sleep(1.5)  # the gateway's hit counters flush every second
    cpu1 = {name: cpu_seconds(pid) for name, pid in stack.pids.items()}
    counts = await asyncio.to_thread(pg_counts, stack.owner_url)
    top = await asyncio.to_thread(pg_top, stack.owner_url, n)
    return {
        "n": n,
        "statements": round(counts["statements"] / n, 2),
        "commits": round(counts["commits"] / n, 2),
        "transaction_control": round(counts["transaction_control"] / n, 2),
        "sql_exec_ms": round(counts["exec_ms"] / n, 2),
        "cpu_ms": {
            name: round((cpu1[name] - cpu0[name]) * 1000 / n, 2)
            for name in ("gateway", "worker", "bare worker")
        },
        "top_statements": top,
    }


async def closed_loop(
    call: Call, clients: int, seconds: float, pids: dict[str, int]
) -> dict[str, Any]:
    """``clients`` callers back to back for ``seconds``: requests/s and CPU per request."""
    done = 0
    stop = time.monotonic() + seconds
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}

    async def client(c: int) -> None:
        nonlocal done
        i = c
        while time.monotonic() < stop:
            await call(i)
            done += 1
            i += clients

    start = time.perf_counter()
    await asyncio.gather(*(client(c) for c in range(clients)))
    elapsed = time.perf_counter() - start
    cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
    return {
        "clients": clients,
        "requests": done,
        "per_second": round(done / elapsed, 1),
        "cpu_ms_per_request": {name: round(c * 1000 / max(done, 1), 2) for name, c in cpu.items()},
        "cpu_utilization": {name: round(c / elapsed, 2) for name, c in cpu.items()},
        "load_1m": load(),
    }


async def temporal_actions(client: Client, workflow_id: str) -> dict[str, Any]:
    """Billable actions in one run's history, by Temporal Cloud's rules: the start; every
    activity attempt; the local activities of one workflow task together as one; every
    search-attribute upsert (but a patch's ``TemporalChangeVersion``), timer and signal."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    kinds: dict[str, int] = {}
    task_with_markers: set[int] = set()
    last_task = 0
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            last_task = event.event_id
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            task_with_markers.add(last_task)
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            kinds["workflow started"] = 1
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attempts = event.activity_task_started_event_attributes.attempt
            kinds["activity attempts"] = kinds.get("activity attempts", 0) + attempts
        elif kind == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
            # A patch's TemporalChangeVersion alone is exempt from billing.
            fields = event.upsert_workflow_search_attributes_event_attributes.search_attributes
            if set(fields.indexed_fields) - {"TemporalChangeVersion"}:
                kinds["search attribute upserts"] = kinds.get("search attribute upserts", 0) + 1
        elif kind == EventType.EVENT_TYPE_TIMER_STARTED:
            kinds["timers"] = kinds.get("timers", 0) + 1
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
            kinds["signals"] = kinds.get("signals", 0) + 1
    if task_with_markers:
        kinds["local activity groups"] = len(task_with_markers)
    return {"actions": sum(kinds.values()), "by_kind": kinds, "events": len(history.events)}


async def measure(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    started = time.monotonic()
    end = started + args.max_seconds
    report: dict[str, Any] = {"load_1m": {"before": load()}}
    console.log("starting PostgreSQL, Temporal, worker, gateway, baseline worker…")
    async with speed_stack() as stack:
        console.log(f"servers up in {time.monotonic() - started:.1f}s")
        calls = Calls(stack, f"speed-{uuid.uuid4().hex[:8]}")
        rng = random.Random(args.seed)
        b1, floor = calls.bare(BARE_WORKFLOW, "B1"), calls.bare(FLOOR_WORKFLOW, "floor")
        # B1 as a team writing the workflow themselves would often run it: its worker in the
        # client's own process (this one), on a task queue of its own.
        in_client_queue = f"speed-in-client-{uuid.uuid4().hex}"
        b1_in_client = calls.bare(BARE_WORKFLOW, "B1 in-client", in_client_queue)
        # Warm every path (the worker's first run imports and connects).
        await calls.fresh(-1)
        async with Worker(
            stack.bare_client,
            task_queue=in_client_queue,
            workflows=[BareSteps, BareFloor],
            activities=ACTIVITIES,
        ):
            with console.status(f"fresh vs B1 vs floor: {args.n} each, interleaved…"):
                fresh = await sequential(
                    {
                        "moat fresh": calls.fresh,
                        "B1 (4 activities)": b1,
                        B1_IN_CLIENT: b1_in_client,
                        "floor (1 activity)": floor,
                    },
                    args.n,
                    args.warmup,
                    rng,
                    time.monotonic() + (end - time.monotonic()) * 0.25,
                )
        report["load_1m"]["after_fresh"] = load()
        with console.status("where a fresh execution's time goes, from its history…"):
            measured = len(fresh["moat fresh"])
            report["breakdown"] = {
                "moat": await breakdown(stack.moat_client, calls.runs["moat"][-measured:]),
                "floor": await breakdown(stack.bare_client, calls.runs["floor"][-measured:]),
            }
        # A key's first repeat on a gateway is answered by Postgres, every later one from the
        # gateway's memory: two series, each against /healthz sent in the same rounds.
        firsts = max(10, min(args.n, len(calls.done) - args.warmup))
        with console.status(f"first repeats vs /healthz: {firsts} each, interleaved…"):
            first = await sequential(
                {FIRST_HIT: calls.first_hit, FIRST_HEALTHZ: calls.healthz},
                firsts,
                args.warmup,
                rng,
                time.monotonic() + (end - time.monotonic()) * 0.05,
            )
        with console.status(f"idempotent hit vs /healthz: {args.n * 2} each, interleaved…"):
            hits = await sequential(
                {"moat idempotent hit": calls.hit, "gateway /healthz": calls.healthz},
                args.n * 2,
                args.warmup,
                rng,
                time.monotonic() + (end - time.monotonic()) * 0.1,
            )
        report["load_1m"]["after_hits"] = load()
        series = {**fresh, **first, **hits}
        report["latency"] = {name: summary(s) for name, s in series.items()}
        with console.status("counting statements, commits, CPU and Temporal actions…"):
            report["per_execution"] = await per_execution(stack, calls, calls.fresh, 30, 10_000)
            report["per_hit"] = await per_execution(stack, calls, calls.hit, 60, 0)
            # The 30 executions just counted have not been repeated yet.
            report["per_first_hit"] = await per_execution(stack, calls, calls.first_hit, 30, 0)
            report["per_b1"] = await per_execution(stack, calls, b1, 30, 10_000)
            report["temporal_actions"] = {
                series: await temporal_actions(
                    stack.moat_client if series == "moat" else stack.bare_client, runs[0][0]
                )
                for series, runs in calls.runs.items()  # each series' first run
            }
        with console.status("closed loop: 16 clients of hits, then of fresh executes…"):
            gateway_only = {"gateway": stack.pids["gateway"]}
            both = {"gateway": stack.pids["gateway"], "worker": stack.pids["worker"]}
            report["closed_loop"] = {
                "hits": await closed_loop(calls.hit, 16, 5, gateway_only),
                "fresh": await closed_loop(calls.fresh, 16, 10, both),
            }
        with console.status(f"duplicate storm: {args.storm} identical requests…"):
            report["storm"] = await storm(stack, calls, args.storm)
            report["storm"]["load_1m"] = load()
            report["storm"]["healthz"] = await healthz_storm(stack, args.storm)
        rates = [float(r) for r in args.rates.split(",")]
        remaining = end - time.monotonic()
        report["open_loop"] = {
            "moat": await ladder(
                "moat",
                calls.fresh,
                rates,
                args.step_seconds,
                {"gateway": stack.pids["gateway"], "worker": stack.pids["worker"]},
                console,
                time.monotonic() + remaining * 0.55,
            ),
            "B1": await ladder(
                "B1",
                b1,
                rates,
                args.step_seconds,
                {"bare worker": stack.pids["bare worker"]},
                console,
                end,
            ),
        }
        report["rss_idle_mb"] = {name: rss_mb(pid) for name, pid in stack.pids.items()}
    report["load_1m"]["after"] = load()
    report["wall_seconds"] = round(time.monotonic() - started, 1)
    return report


B1_IN_CLIENT = "B1, worker in the client"


def ratios(report: dict[str, Any]) -> dict[str, Any]:
    lat = report["latency"]
    fresh = lat["moat fresh"]["p50_ms"]
    storm = report["storm"]
    moat_rate = report["open_loop"]["moat"]["max_rate_p99_under_1s"]
    b1_rate = report["open_loop"]["B1"]["max_rate_p99_under_1s"]
    return {
        "fresh_over_B1": round(fresh / lat["B1 (4 activities)"]["p50_ms"], 2),
        "fresh_over_B1_in_client": round(fresh / lat[B1_IN_CLIENT]["p50_ms"], 2),
        "fresh_over_floor": round(fresh / lat["floor (1 activity)"]["p50_ms"], 2),
        "first_hit_over_healthz": round(lat[FIRST_HIT]["p50_ms"] / lat[FIRST_HEALTHZ]["p50_ms"], 2),
        "hit_over_healthz": round(
            lat["moat idempotent hit"]["p50_ms"] / lat["gateway /healthz"]["p50_ms"], 2
        ),
        "storm_effects": storm["effects"],
        "storm_followers_p99_minus_leader_ms": storm["followers_p99_minus_leader_ms"],
        "open_loop_rate_over_B1": round(moat_rate / b1_rate, 2) if b1_rate else None,
    }


def render(report: dict[str, Any], console: Console) -> None:
    r = report["ratios"]
    lat = report["latency"]
    table = Table(title="Moat speed (same-run baselines; latency in ms)")
    for column in ("measure", "Moat", "baseline", "ratio / gap", "target", "met", "load 1m"):
        table.add_column(column, justify="left" if column == "measure" else "right")
    loads = report["load_1m"]

    def row(measure: str, moat: str, base: str, ratio: str, target: str, met: bool | None,
            load_1m: float) -> None:  # fmt: skip
        mark = "" if met is None else ("yes" if met else "no")
        table.add_row(measure, moat, base, ratio, target, mark, f"{load_1m:.1f}")

    fresh = lat["moat fresh"]["p50_ms"]
    row("fresh p50 vs B1 (4 activities)", f"{fresh:.1f}",
        f"{lat['B1 (4 activities)']['p50_ms']:.1f}", f"{r['fresh_over_B1']:.2f}x", "<= 1.0x",
        r["fresh_over_B1"] <= 1.0, loads["after_fresh"])  # fmt: skip
    row("fresh p50 vs B1, its worker in the client", f"{fresh:.1f}",
        f"{lat[B1_IN_CLIENT]['p50_ms']:.1f}", f"{r['fresh_over_B1_in_client']:.2f}x", "<= 1.0x",
        r["fresh_over_B1_in_client"] <= 1.0, loads["after_fresh"])  # fmt: skip
    row("fresh p50 vs floor (1 activity)", f"{fresh:.1f}",
        f"{lat['floor (1 activity)']['p50_ms']:.1f}", f"{r['fresh_over_floor']:.2f}x", "<= 1.5x",
        r["fresh_over_floor"] <= 1.5, loads["after_fresh"])  # fmt: skip
    row("idempotent hit p50 vs /healthz (memory)", f"{lat['moat idempotent hit']['p50_ms']:.2f}",
        f"{lat['gateway /healthz']['p50_ms']:.2f}", f"{r['hit_over_healthz']:.2f}x", "<= 2.0x",
        r["hit_over_healthz"] <= 2.0, loads["after_hits"])  # fmt: skip
    row("first repeat of a key p50 vs /healthz (Postgres)", f"{lat[FIRST_HIT]['p50_ms']:.2f}",
        f"{lat[FIRST_HEALTHZ]['p50_ms']:.2f}", f"{r['first_hit_over_healthz']:.2f}x", "<= 2.0x",
        r["first_hit_over_healthz"] <= 2.0, loads["after_hits"])  # fmt: skip
    s = report["storm"]
    followers = s["followers"] or {}
    row(f"storm of {s['requests']}: effects", str(s["effects"]), "", "", "1",
        s["effects"] == 1, s["load_1m"])  # fmt: skip
    row("storm: followers p99 vs leader", f"{followers.get('p99_ms', math.nan):.0f}",
        f"{s['leader_ms']:.0f}", f"{s['followers_p99_minus_leader_ms']:+.0f} ms", "<= +50 ms",
        s["followers_p99_minus_leader_ms"] <= 50, s["load_1m"])  # fmt: skip
    hz = s.get("healthz") or {}
    row(f"storm of {s['requests']} /healthz: p50 / p99", f"{hz.get('p50_ms', math.nan):.0f} / "
        f"{hz.get('p99_ms', math.nan):.0f}", "", "", "", None, s["load_1m"])  # fmt: skip
    row("storm: followers p50 / p99", f"{followers.get('p50_ms', math.nan):.0f} / "
        f"{followers.get('p99_ms', math.nan):.0f}", f"{hz.get('p99_ms', math.nan):.0f}",
        f"{followers.get('p99_ms', math.nan) - hz.get('p99_ms', math.nan):+.0f} ms", "", None,
        s["load_1m"])  # fmt: skip
    ol = report["open_loop"]
    moat_best, b1_best = ol["moat"]["at_max"] or {}, ol["B1"]["at_max"] or {}
    ratio = r["open_loop_rate_over_B1"]
    row("open loop: max rate/s with p99 < 1 s", f"{ol['moat']['max_rate_p99_under_1s']:g}",
        f"{ol['B1']['max_rate_p99_under_1s']:g}", f"{ratio:.2f}x" if ratio else "", "", None,
        moat_best.get("load_1m", math.nan))  # fmt: skip
    rss = moat_best.get("rss_mb", {})
    row("RSS MB at that rate: gateway / worker",
        f"{rss.get('gateway', 0):.0f} / {rss.get('worker', 0):.0f}",
        f"{(b1_best.get('rss_mb') or {}).get('bare worker', 0):.0f}", "", "", None,
        moat_best.get("load_1m", math.nan))  # fmt: skip
    pe, ph = report["per_execution"], report["per_hit"]
    row("per execution: SQL statements / commits", f"{pe['statements']:g} / {pe['commits']:g}",
        "", "", "", None, loads["after"])  # fmt: skip
    row("per hit (memory): SQL statements / commits / gateway CPU ms",
        f"{ph['statements']:g} / {ph['commits']:g} / {ph['cpu_ms']['gateway']:.1f}",
        "", "", "", None, loads["after"])  # fmt: skip
    pf = report["per_first_hit"]
    row("per first repeat (Postgres): statements / commits / gateway CPU ms",
        f"{pf['statements']:g} / {pf['commits']:g} / {pf['cpu_ms']['gateway']:.1f}",
        "", "", "", None, loads["after"])  # fmt: skip
    ta = report["temporal_actions"]
    row("Temporal actions per execution", str(ta.get("moat", {}).get("actions", "")),
        str(ta.get("B1", {}).get("actions", "")), "", "", None, loads["after"])  # fmt: skip
    cpu = pe["cpu_ms"]
    row("CPU ms per execution: gateway / worker",
        f"{cpu['gateway']:.1f} / {cpu['worker']:.1f}",
        f"{report['per_b1']['cpu_ms']['bare worker']:.1f}", "", "", None,
        loads["after"])  # fmt: skip
    cl = report.get("closed_loop")
    if cl:
        hits, fresh_cl = cl["hits"], cl["fresh"]
        row("closed loop x16: hits/s (gateway CPU)",
            f"{hits['per_second']:.0f} ({hits['cpu_utilization']['gateway']:.0%})", "", "",
            "", None, hits["load_1m"])  # fmt: skip
        row("closed loop x16: executions/s (gw / worker CPU)",
            f"{fresh_cl['per_second']:.0f} ({fresh_cl['cpu_utilization']['gateway']:.0%} / "
            f"{fresh_cl['cpu_utilization']['worker']:.0%})", "", "", "", None,
            fresh_cl["load_1m"])  # fmt: skip
    console.print(table)
    render_breakdown(report.get("breakdown", {}), console)
    console.print(
        f"load average (1 min) before {loads['before']}, after {loads['after']}, on "
        f"{os.cpu_count()} CPUs; wall {report['wall_seconds']} s"
    )


def render_breakdown(found: dict[str, Any], console: Console) -> None:
    """Where a fresh execution's time goes (``bench.breakdown``), Moat against the floor."""
    rows = compared(found.get("moat", {}), found.get("floor", {}))
    if not rows:
        return
    table = Table(title="fresh execute, where the time goes (p50 ms of each segment)")
    for column in ("segment", "Moat", "floor", "Moat's extra"):
        table.add_column(column, justify="left" if column == "segment" else "right")
    for name, moat, floor in rows:
        table.add_row(name, f"{moat:.1f}", f"{floor:.1f}", f"{moat - floor:+.1f}")
    console.print(table)


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.speed",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--n", type=int, default=100, help="sequential requests per series")
    parser.add_argument("--warmup", type=int, default=10, help="warm-up requests per series")
    parser.add_argument("--storm", type=int, default=1000, help="identical concurrent requests")
    parser.add_argument(
        "--rates", default="1,2,3,5,8,12,20,30,50,80", help="open-loop arrival rates per second"
    )
    parser.add_argument("--step-seconds", type=float, default=8.0, help="per open-loop step")
    parser.add_argument(
        "--max-seconds", type=float, default=420, help="wall-clock budget (default 420)"
    )
    parser.add_argument("--seed", type=int, default=8785)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 110)
    # The clients on the loop Moat's processes run on: a storm's client must cost far less
    # than the gateway it measures (B1's client is on it too).
    report = loop.run(measure(args, console))
    report["ratios"] = ratios(report)
    stamp(report, args, "dev server, SQLite file, transferProcessorMaxPollRPS=1000")
    render(report, console)
    write(report, RESULTS, console)


def stamp(report: dict[str, Any], args: argparse.Namespace, temporal: str) -> None:
    """When, with which settings and on what the report was measured."""
    report["measured_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    report["settings"] = vars(args)
    report["environment"] = {
        "python": platform.python_version(),
        "temporalio": temporalio.__version__,
        "event_loop": "uvloop" if loop.loop_factory() else "asyncio",
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "postgres": "embedded, durable (fsync on, synchronous_commit on)",
        "temporal": temporal,
    }


def write(report: dict[str, Any], path: Path, console: Console) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"written to {path}")


def run_bench(
    measure: Callable[[argparse.Namespace, Console], Coroutine[Any, Any, dict[str, Any]]],
    render: Callable[[dict[str, Any], Console], None],
    args: argparse.Namespace,
    results: Path,
    width: int,
) -> None:
    """A bench on the speed stack's servers, as its command runs it: measured, stamped,
    printed (at least ``width`` columns wide when not on a terminal) and saved."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, width)
    report = loop.run(measure(args, console))
    stamp(report, args, "dev server, SQLite file")
    render(report, console)
    write(report, results, console)


if __name__ == "__main__":
    main()
