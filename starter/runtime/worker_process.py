"""``moat worker``: the process around the worker that ``worker.py`` builds. It checks the
signing keyring before connecting to anything, connects to Temporal and Postgres, makes
sure of the outcome partitions and the retention schedule, then polls until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import logging
import signal
from datetime import UTC, datetime

import worker
from schemas.settings import MoatSettings
from starter.runtime import observability
from starter.runtime.schedules import ensure_retention_schedule, ensure_trust_schedule
from starter.runtime.temporal import connect
from store import receipts
from store.keys.signing import Keyring

log = logging.getLogger("moat.worker")


async def run(settings: MoatSettings) -> None:
    """Run one worker until SIGINT/SIGTERM, then shut down cleanly."""
    observability.setup("moat-worker", log_format=settings.log_format)
    keyring = Keyring.from_settings(settings)  # a missing keyring stops it before it polls
    client = await connect(settings, observability.temporal_interceptors())
    async with worker.activity_deps(settings) as (sessions, http):
        async with sessions.begin() as session:
            await receipts.ensure_outcome_partitions(session, datetime.now(UTC))
        await ensure_retention_schedule(client, settings)
        await ensure_trust_schedule(client, settings)
        polling = worker.build_worker(client, settings, sessions, http, keyring=keyring)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        async with polling:
            log.info(
                "worker polling task queue %s in namespace %s",
                settings.task_queue,
                settings.temporal_namespace,
            )
            await stop.wait()
        log.info("worker stopped")
