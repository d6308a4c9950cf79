"""The chaos campaign's stack, every part a process of its own on private loopback ports:
an embedded PostgreSQL with real durability settings, the Temporal dev server on a file
store, two gateways and three workers (``moat gateway`` / ``moat worker``, as deployed),
and the providers served from the campaign's process (the http provider in its event loop,
the Slack and GitHub fakes on threads of their own), never killed: they are the outside
world. Each part of Moat can be killed and started again while the rest keeps running.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from pydantic import SecretStr

from bench.chaos_provider import ChaosProvider
from bench.chaos_tools import FaultyFake, HttpProvider, Provider
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, serve_asgi
from starter.devstack.processes import ChildProcess, Service
from starter.devstack.temporal import TemporalDevServer
from starter.devstack.up import healthy
from starter.runtime.codec import data_converter
from starter.runtime.codec_door import current_token
from starter.runtime.database import owner_transaction
from store import api_keys, tenants, upgrade
from store.keyrings.codec import OutputSealer
from store.keyrings.connections import ConnectionCipher
from store.keyrings.signing import Keyring
from store.keyrings.start import StartKeyring

NAMESPACE = "moat"
GATEWAYS, WORKERS = 2, 3


@dataclass
class Member:
    """One gateway or worker process, and how often it was killed."""

    name: str
    child: ChildProcess
    url: str = ""  # a gateway's base URL
    kills: int = 0

    @property
    def alive(self) -> bool:
        return self.child.pid is not None and self.child.poll() is None

    def kill(self) -> None:
        """``kill -9``: no shutdown, whatever it was doing is cut off."""
        if self.alive and self.child.pid is not None:
            os.kill(self.child.pid, signal.SIGKILL)
            while self.child.poll() is None:
                time.sleep(0.01)
            self.kills += 1


@dataclass
class ChaosStack:
    root: Path
    settings: MoatSettings  # the campaign's own view: owner database URL, Temporal address
    postgres: EmbeddedPostgres
    temporal: TemporalDevServer
    provider: ChaosProvider
    fakes: Mapping[str, FaultyFake] = field(default_factory=dict)
    tenant_id: str = ""
    api_key: str = ""
    keep: bool = False
    gateways: list[Member] = field(default_factory=list)
    workers: list[Member] = field(default_factory=list)
    connections: dict[str, str] = field(default_factory=dict)  # provider name -> its id

    @property
    def members(self) -> list[Member]:
        return self.gateways + self.workers

    @property
    def providers(self) -> dict[str, Provider]:
        return {"http": HttpProvider(self.provider), **self.fakes}

    @property
    def provider_urls(self) -> dict[str, str]:
        urls = {"http": self.provider.base_url}
        urls.update({name: str(getattr(fake, "base_url", "")) for name, fake in self.fakes.items()})
        return urls

    def start_member(self, member: Member) -> None:
        member.child.start()

    def wait_ready(self, member: Member, timeout: float = 120) -> None:
        """Until a gateway answers its health check, a worker logs that it polls."""
        if member.url:
            member.child.wait_ready(member.name, lambda: healthy(member.url), timeout)
        else:
            member.child.wait_ready(member.name, lambda: _polling(member), timeout)

    def restart_temporal(self) -> None:
        """``kill -9``, then started again on the same port and file store."""
        _crash(self.temporal, signal.SIGKILL)
        self.temporal.start()

    def restart_postgres(self) -> None:
        """An immediate shutdown (SIGQUIT: every backend gone at once, no checkpoint), so the
        start replays the WAL as after a crash; clients are cut off mid-transaction."""
        _crash(self.postgres, signal.SIGQUIT)
        self.postgres.start()


def _crash(server: Service, how: signal.Signals) -> None:
    if server.pid is not None and server.poll() is None:
        os.kill(server.pid, how)
        while server.poll() is None:
            time.sleep(0.05)
    server.stop()  # forgets the ended process


@contextlib.asynccontextmanager
async def chaos_stack(
    provider: ChaosProvider, fakes: Mapping[str, FaultyFake], *, keep: bool
) -> AsyncIterator[ChaosStack]:
    """Start everything in a fresh folder; stop it all on exit and delete the folder unless
    ``keep`` or the stack's ``keep`` was set meanwhile (the logs of every process are under
    ``<folder>/logs``, the servers' data beside them). Each fake gets a connection of the
    campaign's tenant, made through the admin API, and is allow-listed."""
    root = Path(tempfile.mkdtemp(prefix="moat-chaos-"))
    logs = root / "logs"
    stack: ChaosStack | None = None
    try:
        async with serve_asgi(provider) as provider_url, _serving(fakes):
            provider.base_url = provider_url
            # A fake serving on several ports (SMTP and IMAP) names each, comma-separated.
            entries = ",".join([provider.allow_entry, *(f.allow_entry for f in fakes.values())])
            allowed = [entry for entry in entries.split(",") if entry]
            pg = EmbeddedPostgres(root / "pg", free_port(), log_file=logs / "postgres.log")
            url = await asyncio.to_thread(pg.start)
            temporal = TemporalDevServer(free_port(), free_port(), NAMESPACE,
                                         root / "temporal.db", logs / "temporal.log")  # fmt: skip
            settings = MoatSettings(
                home=root / "home",
                database_url=url,
                temporal_address=temporal.address,
                temporal_namespace=NAMESPACE,
                task_queue=f"chaos-{uuid.uuid4().hex[:12]}",
                http_allow_hosts=allowed,
                # Shorter than a late answer plus its retry: some callers get 202 and come
                # back to attach.
                wait_seconds=25.0,
                admin_api_key=SecretStr("moat_admin_" + secrets.token_urlsafe(32)),
            )
            stack = ChaosStack(root, settings, pg, temporal, provider, fakes, keep=keep)
            try:
                await asyncio.to_thread(temporal.start)
                await asyncio.to_thread(_prepare, stack)
                await _start_members(stack, logs)
                await _connect(stack)
                yield stack
            finally:
                for member in reversed(stack.members):
                    await asyncio.to_thread(member.child.stop)
                await asyncio.to_thread(temporal.stop)
                await asyncio.to_thread(pg.stop)
    finally:
        if not (keep or (stack is not None and stack.keep)):
            await asyncio.to_thread(_remove, root)


def _prepare(stack: ChaosStack) -> None:
    """Schema, keyrings and the campaign's tenant, before any worker or gateway starts (the
    processes would otherwise race to create the same key files)."""
    settings = stack.settings
    upgrade(settings.sqlalchemy_url)
    Keyring.from_settings(settings)
    StartKeyring.from_settings(settings)
    OutputSealer.from_settings(settings)
    ConnectionCipher.from_settings(settings)
    data_converter(settings)
    current_token(settings)

    async def tenant() -> tuple[str, str]:
        async with owner_transaction(settings) as session:
            created = await tenants.create_tenant(session, f"chaos-{uuid.uuid4().hex[:8]}")
            return created.id, await api_keys.create_api_key(session, created.id, "chaos")

    stack.tenant_id, stack.api_key = asyncio.run(tenant())


async def _start_members(stack: ChaosStack, logs: Path) -> None:
    settings = stack.settings
    assert settings.admin_api_key is not None
    common = {
        "home": str(settings.home),
        "database_url": stack.postgres.url,
        "temporal_address": stack.temporal.address,
        "temporal_namespace": NAMESPACE,
        "task_queue": settings.task_queue,
        "http_allow_hosts": ",".join(settings.http_allow_hosts),
        "wait_seconds": str(settings.wait_seconds),
        "admin_api_key": settings.admin_api_key.get_secret_value(),
        "log_format": "json",
    }
    for i in range(GATEWAYS):
        port = free_port()
        env = settings.child_environment(**common, gateway_port=str(port))
        stack.gateways.append(Member(f"gateway-{i + 1}", _child("gateway", env, logs, i + 1),
                                     url=f"http://127.0.0.1:{port}"))  # fmt: skip
    for i in range(WORKERS):
        env = settings.child_environment(**common)
        stack.workers.append(Member(f"worker-{i + 1}", _child("worker", env, logs, i + 1)))
    for member in stack.members:
        stack.start_member(member)
    await asyncio.gather(*(asyncio.to_thread(stack.wait_ready, m) for m in stack.members))


@contextlib.asynccontextmanager
async def _serving(fakes: Mapping[str, FaultyFake]) -> AsyncIterator[None]:
    started: list[FaultyFake] = []
    try:
        for fake in fakes.values():
            await asyncio.to_thread(fake.start)
            started.append(fake)
        yield
    finally:
        for fake in started:
            await asyncio.to_thread(fake.stop)


async def _connect(stack: ChaosStack) -> None:
    """A connection of the campaign's tenant to each fake, as an operator makes one."""
    admin = stack.settings.admin_api_key
    assert admin is not None
    url = f"{stack.gateways[0].url}/v1/admin/tenants/{stack.tenant_id}/connections"
    headers = {"Authorization": f"Bearer {admin.get_secret_value()}"}
    async with httpx.AsyncClient(timeout=30) as http:
        for name, fake in stack.fakes.items():
            made = await http.post(url, json=fake.connection(), headers=headers)
            if made.status_code != 201:
                raise RuntimeError(f"connection to the {name} fake refused: {made.text[:300]}")
            stack.connections[name] = str(made.json()["id"])


def _child(role: str, env: dict[str, str], logs: Path, n: int) -> ChildProcess:
    return ChildProcess([sys.executable, "-m", "starter.cli", role], logs / f"{role}-{n}.log",
                        env=env, stop_timeout=10)  # fmt: skip


def _polling(member: Member) -> bool:
    log = member.child.log_file
    return log is not None and log.exists() and "worker polling task queue" in log.read_text()


def _remove(root: Path) -> None:
    import shutil

    shutil.rmtree(root, ignore_errors=True)
