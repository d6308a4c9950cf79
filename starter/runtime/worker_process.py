"""``moat worker``: the process around the worker that ``worker.py`` builds. It checks the
signing keyring before connecting to anything, connects to Temporal and Postgres, makes
sure of the outcome partitions and the schedules (retention, partitions ahead, cancel sweep), then
polls until SIGINT/SIGTERM: the execution queue, and the delivery queue (webhook deliveries,
synthetic probes) with its own worker, slots and HTTP pool."""

from __future__ import annotations

import asyncio
import logging
import signal
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

import worker
from schemas.settings import MoatSettings
from schemas.trust import TrustWindow, report
from starter.runtime import observability, operator_gauges
from starter.runtime.database import every_tenant
from starter.runtime.loop import settle_heap
from starter.runtime.outbox_relay import OutboxRelay
from starter.runtime.schedules import (
    ensure_cancel_sweep_schedule,
    ensure_log_checkpoint_schedule,
    ensure_partitions_schedule,
    ensure_retention_schedule,
    ensure_trust_schedule,
    move_probe_schedules,
)
from starter.runtime.temporal import connect
from store import receipts, trust
from store.keyrings.signing import Keyring

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
        await ensure_partitions_schedule(client, settings)
        await ensure_trust_schedule(client, settings)
        await ensure_cancel_sweep_schedule(client, settings)
        await ensure_log_checkpoint_schedule(client, settings)
        await move_probe_schedules(client, settings)
        polling = worker.build_worker(client, settings, sessions, http, keyring=keyring)
        delivering = worker.delivery_worker(client, settings, sessions, keyring=keyring)
        gauges = observability.trust_gauges(client.service_client.config.runtime)
        publishing = asyncio.create_task(publish_trust(sessions, gauges, settings))
        operating = asyncio.create_task(
            operator_gauges.publish_forever(
                sessions,
                operator_gauges.operator_gauges(client.service_client.config.runtime),
                timedelta(seconds=settings.operator_metrics_seconds),
            )
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        relay = OutboxRelay.from_settings(client, sessions, settings)
        settle_heap()
        async with polling, delivering, relay.running():
            log.info(
                "worker polling task queues %s and %s (deliveries, probes) in namespace %s",
                settings.task_queue,
                settings.deliveries_task_queue,
                settings.temporal_namespace,
            )
            await stop.wait()
        publishing.cancel()
        operating.cancel()
        log.info("worker stopped")


# The windows published as gauges (longer ones are for the API: a dashboard has its own).
GAUGE_WINDOWS = (TrustWindow.H1, TrustWindow.H24)


async def publish_trust(
    sessions: async_sessionmaker[AsyncSession],
    gauges: observability.TrustGauges,
    settings: MoatSettings,
) -> None:
    """Keep the platform's trust gauges current, as often as the rollup is refreshed. Every
    worker publishes the same numbers (read from the same rollup), so any one of them can
    be scraped."""
    while True:
        try:
            now = datetime.now(UTC)
            for window in GAUGE_WINDOWS:
                bounds = window.bounds(now)
                windows = [bounds, (bounds[0] - window.length, bounds[0])]
                read = partial(
                    trust.windows_counts, windows=windows, span_minutes=window.span_minutes
                )
                found = await every_tenant(sessions, read)
                (current, previous), _ = trust.platform_counts(found, len(windows))
                gauges.publish(
                    report(window, bounds, current, previous, settings.trust_min_samples)
                )
        except Exception:  # a database blip must not stop the worker; the next turn retries
            log.exception("trust gauges not published")
        await asyncio.sleep(timedelta(seconds=settings.trust_refresh_seconds).total_seconds())
