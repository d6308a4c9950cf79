"""The worker, built from its parts: the one place where workflows and activities meet a
task queue. The process that runs it (connection, schedules, signals) is
``starter.runtime.worker_process``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from datetime import timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities import (
    Adapter,
    AdapterStep,
    AlertActivities,
    Alerter,
    AnnounceActivities,
    Announcer,
    ApprovalActivities,
    CancelSweep,
    DeliveryActivities,
    HostGuard,
    LogActivities,
    ManifestActivities,
    PartitionActivities,
    PlanActivities,
    PolicyStep,
    ProbeActivities,
    RecordStep,
    RetentionActivities,
    StoreConnectionResolver,
    TrustActivities,
    http_client,
)
from activities.adapters.github_app import GithubAppTokens
from activities.adapters.plugins import AdapterContext, make_adapters
from activities.oauth import OAuthTokens
from activities.provider_buckets import ProviderBuckets
from schemas.capabilities import CapabilityCatalog
from schemas.settings import MoatSettings
from store import make_engine, make_sessionmaker
from store.keyrings.codec import OutputSealer
from store.keyrings.connections import ConnectionCipher
from store.keyrings.signing import Keyring
from store.keyrings.start import StartKeyring
from store.manifests import ManifestStore
from workflows.alert import AnnounceAlert
from workflows.announce import AnnounceApproval
from workflows.cancels import SweepCancelledRuns
from workflows.deliver import DeliverWebhook
from workflows.execute import ExecuteCapability
from workflows.partitions import OutcomePartitions
from workflows.plan import ExecutePlan
from workflows.probe import RunProbe
from workflows.retention import ManifestRetention
from workflows.translog import LogCheckpoint
from workflows.trust import RefreshTrust


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


def build_worker(
    client: Client,
    settings: MoatSettings,
    sessions: async_sessionmaker[AsyncSession],
    http: httpx.AsyncClient,
    task_queue: str | None = None,
    keyring: Keyring | None = None,
    adapters: Mapping[str, Adapter] | None = None,
    catalog: CapabilityCatalog | None = None,
    max_concurrent_activities: int = 200,
) -> Worker:
    """The worker with the built-in adapters; ``adapters`` adds to or replaces them by
    name (tests plant adapters that fail in ways a real provider cannot be made to)."""
    guard = HostGuard(settings.http_allow_hosts)
    catalog = catalog or CapabilityCatalog()
    by_name: dict[str, Adapter] = {
        **make_adapters(catalog, AdapterContext(http, guard, settings)),
        **(adapters or {}),
    }
    # A provider's Retry-After holds back every worker's calls on that tenant's connection.
    buckets = ProviderBuckets(sessions)
    by_name = {name: buckets.guard(adapter) for name, adapter in by_name.items()}
    sealer = OutputSealer.from_settings(settings)
    # Connections are opened at the call, under the tenant's row-level security.
    cipher = ConnectionCipher.from_settings(settings)
    # Operations alerts are sent from the delivery queue too (as the approvals' messages).
    alerter = Alerter(
        client,
        settings.deliveries_task_queue,
        enabled=settings.alerts_tenant is not None,
        sessions=sessions,
    )
    app_tokens = GithubAppTokens(sessions, cipher, http, guard, alerter)
    tokens = OAuthTokens(sessions, cipher, http, guard, alerter=alerter)
    resolver = StoreConnectionResolver(sessions, cipher, token_sources=[app_tokens], tokens=tokens)
    start_keys = StartKeyring.from_settings(settings)
    store = ManifestStore(settings.manifests_dir)
    signing = keyring or Keyring.from_settings(settings)
    manifests = ManifestActivities(sessions, store, signing)
    record_step = RecordStep(sessions, sealer, alerter, manifests)
    policy_step = PolicyStep(
        sessions, start_keys, quota_limits=settings.quota_limits, prepare=record_step.prepare
    )
    # A successful attempt records its receipt itself, as the record step would.
    adapter_step = AdapterStep(sessions, by_name, connections=resolver, recorder=record_step)
    retention = RetentionActivities(sessions, store)
    # An approval's Slack message is posted from the delivery queue, like a probe's run.
    announcer = Announcer(client, settings.deliveries_task_queue)
    approvals = ApprovalActivities(sessions, sealer, start_keys, announcer)
    announce = AnnounceActivities(sessions, catalog, sealer, start_keys, settings.local_activities)
    delivery = DeliveryActivities(
        sessions,
        http,
        guard,
        sealer,
        timeout_seconds=settings.webhook_timeout_seconds,
        deadline_seconds=settings.webhook_deadline_seconds,
        alerter=alerter,
    )
    alerts = AlertActivities(sessions, catalog, start_keys, settings)
    partitions = PartitionActivities(sessions)
    trust = TrustActivities(sessions)
    log = LogActivities(sessions, settings)
    cancels = CancelSweep(sessions, client)
    probes = ProbeActivities(sessions, catalog, start_keys, settings.local_activities)
    plans = PlanActivities(sessions, start_keys, sealer, catalog, store, signing)
    return Worker(
        client,
        task_queue=task_queue or settings.task_queue,
        workflows=[
            ExecuteCapability,
            ManifestRetention,
            DeliverWebhook,
            OutcomePartitions,
            RefreshTrust,
            RunProbe,
            ExecutePlan,
            SweepCancelledRuns,
            AnnounceApproval,
            AnnounceAlert,
            LogCheckpoint,
        ],
        activities=[
            policy_step.check_policy,
            adapter_step.call_adapter,
            record_step.record_outcome,
            record_step.record_run,
            approvals.request_approval,
            approvals.record_approval,
            manifests.write_manifest,
            retention.expire_manifests,
            delivery.attempt_delivery,
            partitions.ensure_partitions,
            trust.refresh_trust,
            probes.prepare_probe,
            delivery.give_up_delivery,
            plans.begin_plan,
            plans.prepare_step,
            plans.checkpoint,
            plans.finish_plan,
            cancels.sweep_cancelled,
            announce.prepare_announcement,
            alerts.prepare_alert,
            log.log_checkpoint,
        ],
        max_concurrent_activities=max_concurrent_activities,
        max_concurrent_workflow_tasks=settings.worker_max_concurrent_workflow_tasks,
        workflow_runner=(
            SandboxedWorkflowRunner() if settings.workflow_sandbox else UnsandboxedWorkflowRunner()
        ),
        graceful_shutdown_timeout=timedelta(seconds=10),
        # Heartbeats reach Temporal as they are made (activities/heartbeat.py beats several
        # times per timeout), not once per 80 % of the timeout, which a busy loop can miss.
        max_heartbeat_throttle_interval=timedelta(seconds=1),
    )


@asynccontextmanager
async def delivery_worker(
    client: Client,
    settings: MoatSettings,
    sessions: async_sessionmaker[AsyncSession],
    keyring: Keyring | None = None,
    adapters: Mapping[str, Adapter] | None = None,
    catalog: CapabilityCatalog | None = None,
) -> AsyncIterator[Worker]:
    """The worker of the delivery queue, polling meanwhile: webhook deliveries and synthetic
    probes (their runs and the executions they start as children), with activity slots and
    an HTTP pool of their own, so a slow tenant endpoint or probed provider never holds a
    slot or a connection an execution needs. The same workflows and activities as the
    execution queue's worker, so nothing started on either queue lacks a handler."""
    http = http_client(max_connections=settings.delivery_max_connections)
    try:
        async with build_worker(
            client,
            settings,
            sessions,
            http,
            task_queue=settings.deliveries_task_queue,
            keyring=keyring,
            adapters=adapters,
            catalog=catalog,
            max_concurrent_activities=settings.delivery_max_concurrent_activities,
        ) as polling:
            yield polling
    finally:
        await http.aclose()
