"""Reconcile cost: what the look-up before a repeated attempt costs a ``reconcile`` adapter.

The Slack, GitHub and email (SMTP, looking back over IMAP) adapters against their local fakes
(``starter.devstack.providers``), called directly with a credential, as the activity calls
them. For each provider, series of calls of one kind:

* ``first attempt`` — attempt 1: the post alone, no look-up;
* ``repeat, found`` — attempt 2 after an attempt whose answer was lost: the look-up finds
  the effect and answers with it (no post);
* ``repeat, not found`` — attempt 2 (or a resumed run's first) when nothing was created:
  look-up, then post;
* ``repeat, not found, deep`` — the same with ``--depth`` other items created since the
  execution started (Slack pages its history 200 messages at a time, GitHub 100 issues;
  IMAP's SEARCH runs at the server).

For each: provider round trips per call (counted by the fake: HTTP requests; for email, SMTP
transactions plus IMAP sessions, each a LOGIN, SELECT, SEARCH and LOGOUT) and latency
(median, p95).
The same series for ``notion.create_page``, under each Notion version: ``bench.notion_cost``.
Prints a table and one JSON line; saves it to ``bench/results/reconcile.json``.
Run: ``python -m bench.reconcile_cost [--n 200] [--depth 450]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from activities import Adapter, GithubAdapter, HostGuard, SlackAdapter, http_client
from activities.adapters.email import EmailAdapter
from activities.adapters.plugins import driven
from bench import notion_cost
from schemas.capabilities import CapabilityCatalog
from schemas.connections import ConnectionType, Credential
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.run import AdapterInput
from starter.devstack.providers import FakeGithub, FakeServer, FakeSlack
from starter.devstack.providers.mail import FakeMail

RESULTS = Path(__file__).resolve().parent / "results" / "reconcile.json"


def _input(
    capability_id: str, data: dict[str, Any], allow: str | list[str], attempt: int
) -> AdapterInput:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    return AdapterInput(
        ref=ExecutionRef(tenant_id="bench", receipt_id=str(uuid7())),
        capability=spec,
        input=data,
        idempotency_key=f"moat-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=[allow] if isinstance(allow, str) else allow,
        attempt=attempt,
    )


# What a provider counts as round trips: HTTP requests for Slack and GitHub; SMTP
# transactions and IMAP sessions (each LOGIN, SELECT, SEARCH and LOGOUT) for email.
Counter = Callable[[], int]


def _requests(fake: FakeServer) -> Counter:
    return lambda: len(fake.requests)


async def _series(
    trips_of: Counter, n: int, call: Callable[[int], Awaitable[None]]
) -> dict[str, Any]:
    samples: list[tuple[float, int]] = []
    for i in range(n):
        before = trips_of()
        start = time.perf_counter()
        await call(i)
        samples.append(((time.perf_counter() - start) * 1000, trips_of() - before))
    return notion_cost.summary(samples)


Series = list[tuple[str, Counter, Callable[[int], Awaitable[None]], bool]]


async def _found(
    adapter: Adapter, inp: AdapterInput, cred: Credential, trips: Counter, lose: Callable[[], None]
) -> None:
    """A first attempt whose answer is lost, then the repeat that finds its effect: only the
    repeat is measured (its time and round trips into ``_measured``)."""
    lose()
    with contextlib.suppress(Exception):
        await adapter(inp, cred)
    before = trips()
    start = time.perf_counter()
    out = await adapter(inp.model_copy(update={"attempt": 2}), cred)
    assert out.reconciled is True
    _measured.append(((time.perf_counter() - start) * 1000, trips() - before))


async def _slack(http: httpx.AsyncClient, slack: FakeSlack, depth: int) -> Series:
    adapter = SlackAdapter(http, HostGuard([]))
    cred = Credential("con_b", ConnectionType.SLACK, "xoxb-bench", {"base_url": slack.base_url})
    trips = _requests(slack)

    def message(channel: str, attempt: int) -> AdapterInput:
        data = {"channel": channel, "text": "bench"}
        return _input("slack.post_message", data, slack.allow_entry, attempt)

    async def first(i: int) -> None:
        await adapter(message(f"CF{i}", 1), cred)

    async def found(i: int) -> None:
        await _found(adapter, message(f"CR{i}", 1), cred, trips, lambda: slack.fail_next(1))

    async def not_found(i: int) -> None:
        await adapter(message(f"CN{i}", 2), cred)

    for _ in range(depth):
        await adapter(message("CDEEP", 1), cred)

    async def deep(i: int) -> None:
        await adapter(message("CDEEP", 2), cred)

    return [
        ("slack first attempt", trips, first, False),
        ("slack repeat, found", trips, found, True),
        ("slack repeat, not found", trips, not_found, False),
        (f"slack repeat, not found, {depth} deep", trips, deep, False),
    ]


async def _github(http: httpx.AsyncClient, github: FakeGithub, depth: int) -> Series:
    adapter = GithubAdapter(http, HostGuard([]))
    cred = Credential("con_b", ConnectionType.GITHUB, "ghp_bench", {"base_url": github.base_url})
    trips = _requests(github)

    def issue(repo: str, attempt: int) -> AdapterInput:
        data = {"owner": "bench", "repo": repo, "title": "bench"}
        return _input("github.create_issue", data, github.allow_entry, attempt)

    async def first(i: int) -> None:
        await adapter(issue(f"f{i}", 1), cred)

    async def found(i: int) -> None:
        await _found(adapter, issue(f"r{i}", 1), cred, trips, lambda: github.fail_next(1))

    async def not_found(i: int) -> None:
        await adapter(issue(f"n{i}", 2), cred)

    for _ in range(depth):
        await adapter(issue("deep", 1), cred)

    async def deep(i: int) -> None:
        await adapter(issue("deep", 2), cred)

    return [
        ("github first attempt", trips, first, False),
        ("github repeat, found", trips, found, True),
        ("github repeat, not found", trips, not_found, False),
        (f"github repeat, not found, {depth} deep", trips, deep, False),
    ]


async def _email(http: httpx.AsyncClient, mail: FakeMail, depth: int) -> Series:
    """``email.send`` over SMTP, looking back over IMAP in the Sent mailbox, which holds
    ``depth`` other messages for the deep series (IMAP's SEARCH runs at the server)."""
    declaration = CapabilityCatalog().declaration("email")
    adapter = driven(EmailAdapter(http, HostGuard([])), declaration)
    imap = {"host": "127.0.0.1", "port": mail.imap_port, "security": "none", "mailbox": "Sent"}
    config = {
        "host": "127.0.0.1",
        "port": mail.smtp_port,
        "security": "none",
        "username": mail.username,
        "from": "bench@moat.test",
        "imap": imap,
    }
    cred = Credential("con_b", "smtp", mail.password, config)
    allow = [mail.smtp_allow_entry, mail.imap_allow_entry]

    def trips() -> int:
        return len(mail.transactions) + len(mail.imap_sessions)

    def message(attempt: int) -> AdapterInput:
        data = {"to": ["someone@moat.test"], "subject": "bench", "text": "bench"}
        return _input("email.send", data, allow, attempt)

    async def first(i: int) -> None:
        await adapter(message(1), cred)

    async def found(i: int) -> None:
        await _found(adapter, message(1), cred, trips, lambda: mail.fail_next(1))

    async def not_found(i: int) -> None:
        await adapter(message(2), cred)

    return [
        ("email first attempt", trips, first, False),
        ("email repeat, found", trips, found, True),
        ("email repeat, not found", trips, not_found, False),
    ]


async def _email_deep(http: httpx.AsyncClient, mail: FakeMail, depth: int) -> Series:
    """The email look-up that finds nothing with ``depth`` messages in the mailbox."""
    series = await _email(http, mail, depth)
    send = series[0][2]
    for i in range(max(0, depth - len(mail.sent()))):
        await send(i)
    _, trips, not_found, _ = series[2]
    return [(f"email repeat, not found, {depth} deep", trips, not_found, False)]


async def run(n: int, depth: int) -> dict[str, Any]:
    load_before = os.getloadavg()
    http = http_client()
    results: dict[str, dict[str, Any]] = {}
    with FakeSlack() as slack, FakeGithub() as github, FakeMail() as mail:
        makers: list[Callable[[], Awaitable[Series]]] = [
            lambda: _slack(http, slack, depth),
            lambda: _github(http, github, depth),
            lambda: _email(http, mail, depth),
            lambda: _email_deep(http, mail, depth),
        ]
        for make in makers:
            for name, trips, call, self_timed in await make():
                for i in range(min(10, n)):  # warm-up (connections, code paths)
                    await call(-1 - i)
                results[name] = await _measure(trips, n, call, self_timed)
    results.update(await notion_cost.series(http, n, depth))
    await http.aclose()
    return {
        "at": datetime.now(UTC).isoformat(),
        "n": n,
        "depth": depth,
        "machine": {"python": platform.python_version(), "load_before": load_before},
        "series": results,
    }


async def _measure(
    trips: Counter, n: int, call: Callable[[int], Awaitable[None]], self_timed: bool
) -> dict[str, Any]:
    _measured.clear()
    result = await _series(trips, n, call)
    # A self-timed call measures only its repeat, into ``_measured``: one sample per call.
    return notion_cost.summary(_measured) if self_timed else result


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
