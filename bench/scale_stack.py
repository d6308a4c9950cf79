"""The stack ``bench.scale`` measures, every server a process of its own as deployed: an
embedded PostgreSQL with real durability settings, the Temporal dev server on a file store,
``moat gateway`` processes and ``moat worker`` processes, all on loopback. Workers are
started and stopped one at a time between the bench's configurations; the gateways all run
from the start (an idle gateway costs nothing measurable) and the bench chooses which of
them it sends to. CPU is read per process tree from ``/proc``."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from bench.speed_stack import make_keyrings, moat_environment
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port
from starter.devstack.processes import ChildProcess
from starter.devstack.temporal import TemporalDevServer
from starter.devstack.up import healthy
from starter.runtime.database import owner_transaction
from store import api_keys, tenants, upgrade

NAMESPACE = "moat"
CLK_TCK = os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (every thread's list: a child may belong to any)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            continue
    return found


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process, its children reaped so far, and its live
    descendants: a PostgreSQL server's backends, which come and go, all count."""
    try:
        fields = _stat_fields(pid)
        children = _children(pid)
    except OSError:  # the process has ended
        return 0.0
    ticks = sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return ticks / CLK_TCK + sum(tree_cpu_seconds(child) for child in children)


def machine_busy_seconds() -> float:
    """CPU seconds every core of the machine spent busy so far (all users' processes)."""
    values = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = values[3] + values[4]  # idle, iowait
    return (sum(values[:8]) - idle) / CLK_TCK


@dataclass
class Member:
    name: str
    child: ChildProcess
    url: str = ""  # a gateway's base URL

    @property
    def pid(self) -> int:
        assert self.child.pid is not None
        return self.child.pid


@dataclass
class ScaleStack:
    root: Path
    postgres: EmbeddedPostgres
    temporal: TemporalDevServer
    environment: dict[str, str]
    api_key: str = ""
    gateways: list[Member] = field(default_factory=list)
    workers: list[Member] = field(default_factory=list)
    started_workers: int = 0

    def pids(self, gateways: int) -> dict[str, int]:
        """The processes of a configuration: the first ``gateways`` gateways, every running
        worker, PostgreSQL (its whole tree) and the Temporal server."""
        named = {f"gateway-{i + 1}": m.pid for i, m in enumerate(self.gateways[:gateways])}
        named |= {f"worker-{i + 1}": m.pid for i, m in enumerate(self.workers)}
        assert self.postgres.pid is not None and self.temporal.pid is not None
        return {**named, "postgres": self.postgres.pid, "temporal": self.temporal.pid}

    async def scale_workers(self, count: int) -> None:
        """Start or stop workers (the newest first) until ``count`` run and poll."""
        while len(self.workers) > count:
            await asyncio.to_thread(self.workers.pop().child.stop)
        while len(self.workers) < count:
            self.started_workers += 1
            name = f"worker-{self.started_workers}"
            log = self.root / "logs" / f"{name}.log"
            argv = [sys.executable, "-m", "starter.cli", "worker"]
            member = Member(name, ChildProcess(argv, log, env=self.environment, stop_timeout=15))
            member.child.start()
            self.workers.append(member)
            await asyncio.to_thread(member.child.wait_ready, name, partial(_polling, log), 120)


def _polling(log: Path) -> bool:
    return log.exists() and "worker polling task queue" in log.read_text()


@asynccontextmanager
async def scale_stack(gateways: int) -> AsyncIterator[ScaleStack]:
    """PostgreSQL, Temporal and ``gateways`` gateways, no worker yet; all stopped and the
    state deleted on exit."""
    with tempfile.TemporaryDirectory(prefix="moat-scale-") as tmp:
        root = Path(tmp)
        logs = root / "logs"
        pg = EmbeddedPostgres(root / "pg", free_port(), fast=False, log_file=logs / "pg.log")
        temporal = TemporalDevServer(free_port(), free_port(), NAMESPACE,
                                     root / "temporal.db", logs / "temporal.log")  # fmt: skip
        stack: ScaleStack | None = None
        try:
            await asyncio.to_thread(pg.start)
            await asyncio.to_thread(temporal.start)
            stack = await _prepare(root, pg, temporal)
            await _start_gateways(stack, gateways)
            yield stack
        finally:
            for member in (stack.workers + stack.gateways) if stack else []:
                await asyncio.to_thread(member.child.stop)
            await asyncio.to_thread(temporal.stop)
            await asyncio.to_thread(pg.stop)


async def _prepare(root: Path, pg: EmbeddedPostgres, temporal: TemporalDevServer) -> ScaleStack:
    """Schema, keyrings (made once, before any process could race to make them) and the
    bench's tenant with its API key."""
    settings = MoatSettings(
        home=root / "home",
        database_url=pg.url,
        temporal_address=temporal.address,
        temporal_namespace=NAMESPACE,
        task_queue=f"scale-{uuid.uuid4().hex[:12]}",
    )
    await asyncio.to_thread(upgrade, settings.sqlalchemy_url)
    make_keyrings(settings)
    # No per-tenant rate limit: the bench's one tenant is the whole load.
    env = moat_environment(settings, pg.url, temporal.address, NAMESPACE, "", 60.0,
                           rate_limit_per_second="0")  # fmt: skip
    stack = ScaleStack(root, pg, temporal, env)
    async with owner_transaction(settings) as session:
        tenant = await tenants.create_tenant(session, f"scale-{uuid.uuid4().hex[:8]}")
        stack.api_key = await api_keys.create_api_key(session, tenant.id, name="scale")
    return stack


async def _start_gateways(stack: ScaleStack, count: int) -> None:
    for i in range(count):
        port = free_port()
        env = {**stack.environment, "MOAT_GATEWAY_PORT": str(port)}
        log = stack.root / "logs" / f"gateway-{i + 1}.log"
        argv = [sys.executable, "-m", "starter.cli", "gateway"]
        member = Member(f"gateway-{i + 1}", ChildProcess(argv, log, env=env, stop_timeout=15),
                        url=f"http://127.0.0.1:{port}")  # fmt: skip
        member.child.start()
        stack.gateways.append(member)
    for member in stack.gateways:
        await asyncio.to_thread(
            member.child.wait_ready, member.name, partial(healthy, member.url), 60
        )
