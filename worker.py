"""The Temporal worker process: the one place where workflows and activities meet a queue."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.worker import Worker

from activities import (
    Adapter,
    ExecuteActivities,
    HostGuard,
    HttpAdapter,
    ManifestActivities,
    RetentionActivities,
    echo_adapter,
    http_client,
)
from schemas.settings import MoatSettings
from starter.runtime import observability
from starter.runtime.schedules import ensure_retention_schedule
from starter.runtime.temporal import connect
from store import make_engine, make_sessionmaker, receipts
from store.keys.signing import Keyring, KeyringMissingError
from store.keys.start import StartKeyring
from store.manifests import ManifestStore
from workflows import ExecuteCapability, ManifestRetention

log = logging.getLogger("moat.worker")


@asynccontextmanager
async def activity_deps(
    settings: MoatSettings,
) -> AsyncIterator[tuple[async_sessionmaker[AsyncSession], httpx.AsyncClient]]:
    """The sessionmaker (as the application role, under row-level security) and HTTP client
    the activities share for the worker's lifetime."""
    engine = make_engine(settings.app_sqlalchemy_url)
    http = http_client(max_connections=200)
    try:
        yield make_sessionmaker(engine), http
    finally:
        await http.aclose()
        await engine.dispose()


def signing_keyring(settings: MoatSettings) -> Keyring:
    """The keyring that signs manifests. A configured one (``MOAT_SIGNING_KEYRING``, e.g. a
    mounted secret shared by every worker) must exist: a worker minting a key of its own would
    sign manifests nobody can verify. Only the development default under ``MOAT_HOME`` is
    created on first use, with its public JWK Set beside it for the gateway."""
    path = settings.signing_keyring
    if path is not None:
        if not path.exists():
            raise KeyringMissingError(
                f"MOAT_SIGNING_KEYRING points at {path}, which does not exist; create the "
                "keyring with `moat keys rotate` and mount it on every worker"
            )
        return Keyring.load(path)  # only read: a read-only mount is enough
    return Keyring.load_or_create(settings.signing_keyring_path, jwks_path=settings.jwks_file)


def build_worker(
    client: Client,
    settings: MoatSettings,
    sessions: async_sessionmaker[AsyncSession],
    http: httpx.AsyncClient,
    task_queue: str | None = None,
    keyring: Keyring | None = None,
    adapters: Mapping[str, Adapter] | None = None,
) -> Worker:
    """The worker with the built-in adapters; ``adapters`` adds to or replaces them by
    name (tests plant adapters that fail in ways a real provider cannot be made to)."""
    by_name: dict[str, Adapter] = {
        "http": HttpAdapter(
            http,
            HostGuard(settings.http_allow_hosts),
            max_response_bytes=settings.http_max_response_bytes,
        ),
        "echo": echo_adapter,
        **(adapters or {}),
    }
    acts = ExecuteActivities(sessions, by_name, StartKeyring.from_settings(settings))
    store = ManifestStore(settings.manifests_dir)
    manifests = ManifestActivities(sessions, store, keyring or signing_keyring(settings))
    retention = RetentionActivities(sessions, store)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[ExecuteCapability, ManifestRetention],
        activities=[
            acts.check_policy,
            acts.call_adapter,
            acts.record_outcome,
            manifests.write_manifest,
            retention.expire_manifests,
        ],
        max_concurrent_activities=200,
        graceful_shutdown_timeout=timedelta(seconds=10),
    )


async def run(settings: MoatSettings) -> None:
    """Run one worker until SIGINT/SIGTERM, then shut down cleanly."""
    observability.setup("moat-worker", log_format=settings.log_format)
    keyring = signing_keyring(settings)  # a missing keyring stops the worker before it polls
    client = await connect(settings, observability.temporal_interceptors())
    async with activity_deps(settings) as (sessions, http):
        async with sessions.begin() as session:
            await receipts.ensure_outcome_partitions(session, datetime.now(UTC))
        await ensure_retention_schedule(client, settings)
        worker = build_worker(client, settings, sessions, http, keyring=keyring)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with worker:
            log.info(
                "worker polling task queue %s in namespace %s",
                settings.task_queue,
                settings.temporal_namespace,
            )
            await stop.wait()
        log.info("worker stopped")


if __name__ == "__main__":
    asyncio.run(run(MoatSettings()))
