"""Chaos campaign: one effect per key and a receipt for every execution, whatever fails.

Starts its own stack (``bench.chaos_stack``: PostgreSQL, Temporal dev server on a file
store, 2 gateways, 3 workers, all separate processes) and the providers, never killed: for
``http.request`` (``provider_key``) ``bench.chaos_provider`` (dedupes on ``Idempotency-Key``,
counts effects per key, injects 500s, 429s with ``Retry-After``, answers slower than the
timeout, and effects whose answer is cut off); for Slack, GitHub, email over SMTP and Notion
(``reconcile``, and the ``natural`` undos) the devstack's fakes, with lost answers, rate
limits and server errors armed at their shares (``bench.chaos_tools``, which declares the
mix). Many concurrent
callers drive ``--executions`` executions, each key calling a capability drawn by its
share, retrying with the same key on any error; 10 % of the keys are sent 2-5 times at
once across both gateways. Meanwhile a random worker is killed with SIGKILL every few
seconds (started again after a pause), one gateway is killed and restarted, the Temporal
server is killed (SIGKILL) and PostgreSQL crashed (immediate shutdown), once each, and both are
started again on their data. After a drain the invariants are checked and
printed; the exit status is 1 if any of them fails.

Run: ``make chaos`` or ``python -m bench.chaos [--executions N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import platform
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console

from bench.chaos_checks import Verdict, check, render, stale_attempts
from bench.chaos_provider import ChaosProvider, Faults
from bench.chaos_stack import ChaosStack, Member, chaos_stack
from bench.chaos_tools import NATURAL, PROVIDER_KEY, PROVIDERS, TOOLS, FakeFaults, inject
from schemas.records import OUTCOME_UNKNOWN

RESULTS = Path(__file__).resolve().parent / "results" / "chaos-latest.json"
FINAL_STATUSES = frozenset({"executed", "failed"})


@dataclass
class Key:
    """One idempotency key, the capability it calls, and what its callers were answered.
    An undo key (``natural``) is sent only once its ``target``'s key executed."""

    key: str
    senders: int
    receipt_ids: set[str] = field(default_factory=set)  # every one it was answered, 202 too
    statuses: set[str] = field(default_factory=set)
    unexpected: list[str] = field(default_factory=list)  # answers no retry should get
    capability: str = "http.request"
    strategy: str = PROVIDER_KEY
    input: dict[str, Any] = field(default_factory=dict)
    output: dict[str, Any] | None = None  # an executed answer's
    error_codes: set[str] = field(default_factory=set)  # a failed answer's
    undo: Key | None = None
    target: Key | None = None
    sent: bool = True
    seconds: float | None = None  # from the first send to the last sender's final answer

    @property
    def answered(self) -> bool:
        return bool(self.statuses & FINAL_STATUSES)

    @property
    def outcome_unknown(self) -> bool:
        return OUTCOME_UNKNOWN in self.error_codes


@dataclass
class Progress:
    total: int
    done: int = 0
    requests: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    _waiting: list[tuple[float, asyncio.Event]] = field(default_factory=list)

    def answered(self) -> None:
        self.done += 1
        for fraction, event in self._waiting:
            if self.done >= fraction * self.total:
                event.set()

    async def at(self, fraction: float) -> None:
        """Wait until ``fraction`` of the keys are answered."""
        event = asyncio.Event()
        self._waiting.append((fraction, event))
        if self.done >= fraction * self.total:
            event.set()
        await event.wait()

    def error(self, what: str) -> None:
        self.errors[what] = self.errors.get(what, 0) + 1


@dataclass
class Event:
    at: float
    what: str
    seconds: float


class Campaign:
    def __init__(self, stack: ChaosStack, args: argparse.Namespace, console: Console) -> None:
        self.stack, self.args, self.console = stack, args, console
        self.rng = random.Random(args.seed)
        self.tag = f"chaos-{self.rng.getrandbits(32):08x}"
        self.tools = {t.capability: t for t in TOOLS if t.provider in args.providers}
        self.first = self._draw_keys(args.executions)
        self.keys = [k for first in self.first for k in (first, first.undo) if k is not None]
        self.progress = Progress(len(self.keys))
        self.injected: Counter[str] = Counter()
        self.events: list[Event] = []
        self.outages: set[asyncio.Task[None]] = set()
        self.started = time.monotonic()
        self.give_up_at = self.started + args.max_seconds
        self.http = httpx.AsyncClient(
            timeout=httpx.Timeout(60, connect=5),
            limits=httpx.Limits(max_connections=args.callers * 3),
        )

    def _senders(self) -> int:
        return self.rng.randint(2, 5) if self.rng.random() < self.args.duplicates else 1

    def _draw_keys(self, executions: int) -> list[Key]:
        """``executions`` keys, each calling a tool drawn by its share; a tool's undo takes
        the next key for its share of them."""
        tools = list(self.tools.values())
        weights = [t.share for t in tools]
        first: list[Key] = []
        made = 0
        while made < executions:
            tool = self.rng.choices(tools, weights)[0]
            k = self._key(made, tool.capability, tool.strategy)
            k.input = tool.input(k.key, self.stack.provider_urls[tool.provider])
            made += 1
            if tool.undo and made < executions and self.rng.random() < tool.undo.share:
                k.undo = self._key(made, tool.undo.capability, NATURAL)
                k.undo.target = k
                made += 1
            first.append(k)
        return first

    def _key(self, n: int, capability: str, strategy: str) -> Key:
        return Key(f"{self.tag}-{n:06d}", self._senders(), capability=capability,
                   strategy=strategy)  # fmt: skip

    async def run(self) -> None:
        queue: asyncio.Queue[Key] = asyncio.Queue()
        for k in self.first:
            queue.put_nowait(k)
        callers = [asyncio.create_task(self._caller(queue)) for _ in range(self.args.callers)]
        milestones = asyncio.create_task(self._milestones())
        faults = FakeFaults().scaled(self.args.fault_scale)
        chaos = [
            asyncio.create_task(self._kill_workers()),
            asyncio.create_task(self._report_progress()),
            *(
                asyncio.create_task(inject(fake, faults, random.Random(self.rng.random()),
                                           self.injected))
                for fake in self.stack.fakes.values()
            ),
        ]  # fmt: skip
        try:
            await asyncio.gather(*callers)
            # A restart under way finishes (a server left down would fail the checks);
            # one whose turn never came is skipped.
            await asyncio.wait([milestones], timeout=120)
        finally:
            milestones.cancel()
            for task in chaos:
                task.cancel()
            await asyncio.gather(*chaos, return_exceptions=True)
            # A killed worker's restart is not cut short: it would leave it down.
            await asyncio.gather(*self.outages, return_exceptions=True)
            await self.http.aclose()

    async def _caller(self, queue: asyncio.Queue[Key]) -> None:
        while not queue.empty():
            k = queue.get_nowait()
            await self._execute(k)
            undo = k.undo
            if undo is None:
                continue
            tool = self.tools[k.capability]
            if tool.undo is not None and k.statuses == {"executed"} and k.output is not None:
                try:
                    undo.input = tool.undo.input(k.input, k.output)
                except (KeyError, TypeError):
                    k.unexpected.append(f"an answer with nothing to undo: {k.output}")
                else:
                    await self._execute(undo)
                    continue
            undo.sent = False  # nothing to undo
            self.progress.answered()

    async def _execute(self, k: Key) -> None:
        start = time.monotonic()
        await asyncio.gather(*(self._send(k, n) for n in range(k.senders)))
        k.seconds = time.monotonic() - start
        self.progress.answered()

    async def _send(self, k: Key, sender: int) -> None:
        """Send ``k`` until it gets a final answer, retrying with the same key on anything
        else; each sender of a duplicated key starts on another gateway, and every retry
        moves to the next one."""
        if sender:
            await asyncio.sleep(self.rng.uniform(0, 0.3))
        body: dict[str, Any] = {
            "schema_version": "1",
            "capability_id": k.capability,
            "input": k.input,
        }
        provider = self.tools[k.target.capability if k.target else k.capability].provider
        if provider in self.stack.connections:
            body["connection_id"] = self.stack.connections[provider]
        headers = {"Authorization": f"Bearer {self.stack.api_key}", "Idempotency-Key": k.key}
        attempt, delay = sender, 0.2
        while time.monotonic() < self.give_up_at:
            gateway = self.stack.gateways[attempt % len(self.stack.gateways)]
            attempt += 1
            self.progress.requests += 1
            try:
                resp = await self.http.post(
                    f"{gateway.url}/v1/executions", json=body, headers=headers
                )
            except httpx.HTTPError as err:
                self.progress.error(type(err).__name__)
            else:
                if self._settled(k, resp):
                    return
            await asyncio.sleep(delay * self.rng.uniform(0.5, 1.5))
            delay = min(delay * 2, 3.0)

    def _settled(self, k: Key, resp: httpx.Response) -> bool:
        """Whether ``resp`` is a final answer (recorded on ``k``); anything else is retried."""
        try:
            envelope: dict[str, Any] = resp.json()
        except ValueError:
            envelope = {}
        status = envelope.get("status") if isinstance(envelope, dict) else None
        if resp.status_code in (200, 502) and status in FINAL_STATUSES:
            k.statuses.add(str(status))
            if status == "executed" and isinstance(envelope.get("output"), dict):
                k.output = k.output or envelope["output"]
            error = envelope.get("error")
            if status == "failed" and isinstance(error, dict):
                k.error_codes.add(str(error.get("code")))
            if envelope.get("receipt_id"):
                k.receipt_ids.add(str(envelope["receipt_id"]))
            return True
        if resp.status_code == 202 and envelope.get("receipt_id"):
            k.receipt_ids.add(str(envelope["receipt_id"]))  # accepted: it may not be lost
        if resp.status_code == 202 or resp.status_code >= 500 or resp.status_code == 429:
            self.progress.error(f"HTTP {resp.status_code}")
            return False
        # A 4xx to a valid request repeated with its own key is a bug, not a fault to ride out.
        k.unexpected.append(f"HTTP {resp.status_code}: {resp.text[:200]}")
        return True

    async def _kill_workers(self) -> None:
        """A random live worker gets SIGKILL every few seconds; it comes back after a pause."""
        while True:
            await asyncio.sleep(self.rng.uniform(*self.args.kill_every))
            alive = [w for w in self.stack.workers if w.alive]
            if len(alive) < 2:
                continue  # leave one polling, or the run would only wait
            victim = self.rng.choice(alive)
            pause = self.rng.uniform(1.0, 4.0)
            task = asyncio.create_task(self._outage(victim, pause, f"kill -9 {victim.name}"))
            self.outages.add(task)
            task.add_done_callback(self.outages.discard)

    async def _outage(self, member: Member, pause: float, what: str) -> None:
        start = time.monotonic()
        await asyncio.to_thread(member.kill)
        await asyncio.sleep(pause)
        await asyncio.to_thread(self.stack.start_member, member)
        self._event(start, what)

    async def _milestones(self) -> None:
        """The one-off failures, each at its share of the run."""
        await self.progress.at(0.25)
        gateway = self.stack.gateways[-1]
        await self._outage(gateway, 3.0, f"kill -9 {gateway.name}, restart")
        await self.progress.at(0.45)
        start = time.monotonic()
        await asyncio.to_thread(self.stack.restart_temporal)
        self._event(start, "kill -9 Temporal dev server, restart")
        await self.progress.at(0.65)
        start = time.monotonic()
        await asyncio.to_thread(self.stack.restart_postgres)
        self._event(start, "PostgreSQL immediate shutdown (crash), restart")

    def _event(self, start: float, what: str) -> None:
        self.events.append(Event(start - self.started, what, time.monotonic() - start))
        if not what.startswith("kill -9 worker"):
            self.console.log(f"{what} ({time.monotonic() - start:.1f} s)")

    async def _report_progress(self) -> None:
        while True:
            await asyncio.sleep(15)
            p = self.progress
            kills = sum(w.kills for w in self.stack.workers)
            self.console.log(
                f"{p.done}/{p.total} keys answered, {p.requests} requests, "
                f"{kills} worker kills, retried answers: {p.errors}"
            )

    async def settle(self) -> None:
        """Every process up again (a worker may have been killed just before the end), so
        the drain has workers to finish on."""
        for member in self.stack.members:
            if not member.alive:
                await asyncio.to_thread(self.stack.start_member, member)


async def campaign(args: argparse.Namespace, console: Console) -> dict[str, Any]:
    started = time.monotonic()
    load_before = os.getloadavg()
    faults = Faults().scaled(args.fault_scale)
    provider = ChaosProvider(faults, args.seed)
    fakes = {name: make(args.seed) for name, make in PROVIDERS.items() if name in args.providers}
    console.log(
        "starting PostgreSQL, Temporal, 2 gateways, 3 workers and the providers "
        f"({', '.join(args.providers)})…"
    )
    async with chaos_stack(provider, fakes, keep=args.keep) as stack:
        console.log(f"stack up in {time.monotonic() - started:.1f} s, under {stack.root}")
        run = Campaign(stack, args, console)
        await run.run()
        load_seconds = time.monotonic() - run.started
        console.log(f"load phase done in {load_seconds:.1f} s; draining…")
        await run.settle()
        drain_until = time.monotonic() + args.drain_seconds
        verdict = await check(stack, run.keys, run.progress.requests, drain_until=drain_until)
        verdict.info(
            "attempts that outlived their timeout (a live worker too starved to finish or "
            "heartbeat in time; the retry used the same key)",
            stale_attempts(stack.root / "logs"),
        )
        wall = time.monotonic() - started
        verdict.info("wall time", f"{wall:.0f} s (load {load_seconds:.0f} s)")
        if not verdict.ok:
            stack.keep = True  # the logs are what explains a failure
            console.log(f"kept the stack's folder for its logs: {stack.root}")
    return {
        "measured_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "ok": verdict.ok,
        "settings": {
            "executions": args.executions,
            "callers": args.callers,
            "duplicates": args.duplicates,
            "fault_scale": args.fault_scale,
            "kill_every_seconds": list(args.kill_every),
            "gateway_wait_seconds": stack.settings.wait_seconds,
            "seed": args.seed,
        },
        "environment": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            # Other processes on the machine slow the run; judge its wall time by this.
            "loadavg_1m_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
        },
        "requests": run.progress.requests,
        "retried_answers": run.progress.errors,
        "capabilities": dict(Counter(k.capability for k in run.keys if k.sent)),
        "faults_injected": _faults(provider, run),
        "worker_kills": sum(w.kills for w in stack.workers),
        "events": [
            {"at_s": round(e.at, 1), "what": e.what, "seconds": round(e.seconds, 1)}
            for e in run.events
            if not e.what.startswith("kill -9 worker")
        ],
        "wall_seconds": round(wall, 1),
        "invariants": verdict.rows,
        "_verdict": verdict,
    }


def _faults(provider: ChaosProvider, run: Campaign) -> dict[str, int]:
    """Every fault the providers served: the http provider's draws, the fakes' armed rate
    limits and server errors, and their answers lost (dropped, or late)."""
    found = {f"http {what}": n for what, n in provider.injected.items()}
    found.update(run.injected)
    for fake in run.stack.fakes.values():
        found.update({f"{fake.name} {how}": n for how, n in fake.lost().items()})
    return dict(sorted(found.items()))


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.chaos",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--executions", type=int, default=2000, help="keys (default 2000)")
    parser.add_argument("--callers", type=int, default=32, help="concurrent callers")
    parser.add_argument(
        "--duplicates", type=float, default=0.10, help="share of keys sent 2-5 times at once"
    )
    parser.add_argument(
        "--fault-scale", type=float, default=1.0, help="multiplies every provider fault rate"
    )
    parser.add_argument(
        "--kill-every",
        type=float,
        nargs=2,
        default=(5.0, 10.0),
        metavar=("MIN", "MAX"),
        help="seconds between worker kills, drawn uniformly (default 5 10)",
    )
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=3600,
        help="callers give up on keys still unanswered after this long (they then fail the "
        "run); a safety net, not a budget: a busy machine only makes the run longer",
    )
    parser.add_argument(
        "--drain-seconds",
        type=float,
        default=300,
        help="after the load, how long unfinished executions may take to finish",
    )
    parser.add_argument("--seed", type=int, default=14, help="seed of keys, faults and kills")
    names = sorted({t.provider for t in TOOLS})
    parser.add_argument(
        "--providers",
        nargs="+",
        choices=names,
        default=names,
        help="the providers whose capabilities the keys call (default: all)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the stack's folder (logs, data) afterwards"
    )
    args = parser.parse_args()
    if args.executions < 1 or args.callers < 1:
        parser.error("--executions and --callers must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s %(message)s")
    # The provider cuts answers off on purpose; uvicorn would log each one as an error.
    logging.getLogger("uvicorn.error").addFilter(
        lambda record: "without completing response" not in record.getMessage()
    )
    console = Console()
    if not console.is_terminal:
        console.width = max(console.width, 130)
    report = asyncio.run(campaign(args, console))
    verdict: Verdict = report.pop("_verdict")
    render(report, verdict, console)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    raise SystemExit(0 if verdict.ok else 1)


if __name__ == "__main__":
    main()
