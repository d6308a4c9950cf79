"""What needs a person, as Prometheus gauges on the process's metrics endpoint (the Temporal
runtime's, ``MOAT_METRICS_ADDRESS``), beside the trust gauges: the numbers the alerting
rules in ``deploy/prometheus/alerts.yml`` and the dashboard ``deploy/grafana/moat.json``
read. Labels are bounded (a dead letter's ``kind``, a ``window``): never a tenant or an id.
An age with nothing waiting is 0."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from functools import partial

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.common import MetricGauge, MetricGaugeFloat, MetricMeter
from temporalio.runtime import Runtime

from schemas.webhooks import DeadLetterKind
from starter.runtime.database import every_tenant
from store import operations
from store.operations import NeedsAPerson

log = logging.getLogger("moat.worker")

# name: (help, unit); every gauge this module publishes (the deploy files' tests read it).
GAUGES = {
    "moat_dead_letters_open": ("Dead letters open (label kind)", "dead letters"),
    "moat_dead_letters_oldest_age_seconds": ("Age of the oldest open dead letter", "s"),
    "moat_executions_outcome_unknown": (
        "Executions that ended outcome_unknown within the window (label window)",
        "executions",
    ),
    "moat_approvals_pending": ("Approvals waiting for a person", "approvals"),
    "moat_approvals_pending_oldest_age_seconds": ("Age of the oldest pending approval", "s"),
    "moat_approvals_pending_expired": (
        "Pending approvals past their expiry (their expiry timer has not run)",
        "approvals",
    ),
    "moat_outbox_lag_seconds": ("Age of the oldest undelivered webhook event", "s"),
    "moat_connections_needs_reauth": (
        "Connections that need re-authorising (connections.status = needs_reauth)",
        "connections",
    ),
    "moat_probes_failing": (
        "Probes whose latest run (within two intervals) did not succeed",
        "probes",
    ),
}


class OperatorGauges:
    def __init__(self, meter: MetricMeter) -> None:
        def float_gauge(name: str) -> MetricGaugeFloat:
            return meter.create_gauge_float(name, *GAUGES[name])

        def int_gauge(name: str) -> MetricGauge:
            return meter.create_gauge(name, *GAUGES[name])

        self._letters = int_gauge("moat_dead_letters_open")
        self._letters_age = float_gauge("moat_dead_letters_oldest_age_seconds")
        self._unknown = int_gauge("moat_executions_outcome_unknown")
        self._pending = int_gauge("moat_approvals_pending")
        self._pending_age = float_gauge("moat_approvals_pending_oldest_age_seconds")
        self._expired = int_gauge("moat_approvals_pending_expired")
        self._outbox_lag = float_gauge("moat_outbox_lag_seconds")
        self._reauth = int_gauge("moat_connections_needs_reauth")
        self._probes = int_gauge("moat_probes_failing")

    def publish(self, counts: NeedsAPerson, now: datetime) -> None:
        for kind in DeadLetterKind:
            open_ = counts.dead_letters.get(kind.value, operations.OpenDeadLetters())
            self._letters.set(open_.count, {"kind": kind.value})
            self._letters_age.set(_age(open_.oldest, now), {"kind": kind.value})
        for window in operations.RECENT_WINDOWS:
            self._unknown.set(counts.outcome_unknown.get(window, 0), {"window": window})
        self._pending.set(counts.approvals_pending)
        self._pending_age.set(_age(counts.approvals_oldest, now))
        self._expired.set(counts.approvals_overdue)
        self._outbox_lag.set(_age(counts.outbox_oldest, now))
        self._reauth.set(counts.connections_needs_reauth)
        self._probes.set(counts.probes_failing)


def _age(since: datetime | None, now: datetime) -> float:
    return 0.0 if since is None else max(0.0, (now - since).total_seconds())


def operator_gauges(runtime: Runtime | None) -> OperatorGauges:
    return OperatorGauges((runtime or Runtime.default()).metric_meter)


async def read_every_tenant(sessions: async_sessionmaker[AsyncSession]) -> NeedsAPerson:
    """Every tenant's counts, summed (each read in the tenant's own transaction)."""
    now = datetime.now(UTC)
    found = await every_tenant(sessions, partial(operations.needs_a_person, now=now))
    total = NeedsAPerson()
    for counts in found:
        total = total.plus(counts)
    return total


async def publish_forever(
    sessions: async_sessionmaker[AsyncSession], gauges: OperatorGauges, every: timedelta
) -> None:
    """Keep the gauges current; every worker publishes the same numbers, scrape any."""
    while True:
        try:
            gauges.publish(await read_every_tenant(sessions), datetime.now(UTC))
        except Exception:  # a database blip must not stop the worker; the next turn retries
            log.exception("operator gauges not published")
        await asyncio.sleep(every.total_seconds())
