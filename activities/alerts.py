"""Operations alerts, the worker's side: hand an event to ``AnnounceAlert`` (from the step
where the event is born, after its transaction commits, on every attempt), and turn that
into the signed start of a normal execution of ``slack.post_message`` or ``webhook.post``,
idempotency key ``alert/<kind>/<event id>``: in the tenant itself when it set its own route
(``alert_routes``), else in the deployment's alerts tenant.

The hand-off is a durable step: the calling step completes only once the workflow is
started, under an id derived from the event, so a retried step finds it there and a repeat
sends nothing twice (``AnnounceApproval``'s model). The workflow carries only ids; the event
is read here under its tenant's row-level security, and the route (``route_for``). A
tenant's own route runs with the authority of the key that set it (its id and scopes, never
more; a revoked key sends nothing), under that tenant's policy and budget; the deployment's
(``MOAT_ALERTS_*``) with Moat's own (an operator configured it, as for the schedules), under
the alerts tenant's policy and budget like any call.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from schemas.alerts import (
    SLACK_CAPABILITY,
    WEBHOOK_CAPABILITY,
    AlertInput,
    AlertKind,
    alert_for,
    alert_key,
    alert_workflow_id,
    slack_input,
    webhook_input,
)
from schemas.capabilities import CapabilityCatalog
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.names import ANNOUNCE_ALERT_WORKFLOW, PREPARE_ALERT
from schemas.redaction import redacted_hash
from schemas.run import ExecuteWorkflowInput, workflow_id_for
from schemas.settings import MoatSettings
from schemas.slack_approvals import AnnounceStart
from store import (
    alert_routes,
    api_keys,
    connections,
    dead_letters,
    receipts,
    tenancy,
    tenants,
)
from store.keyrings.start import StartKeyring

# How much of a dead letter's reason an alert quotes.
REASON_CHARS = 300


class Alerter:
    """Starts ``AnnounceAlert`` for an event (built once in ``worker.py``). Without a route
    (the deployment's, ``enabled``, or the tenant's own, read through ``sessions``) it
    starts nothing."""

    def __init__(
        self,
        client: Client,
        task_queue: str,
        enabled: bool,
        sessions: async_sessionmaker[AsyncSession] | None = None,
    ) -> None:
        self._client = client
        self._task_queue = task_queue
        self.enabled = enabled
        self._sessions = sessions

    async def hand_off(self, tenant_id: str, kind: AlertKind, event_id: str) -> None:
        """Announce the event once: call it after the event's transaction commits, on every
        attempt of the step (a repeat finds the workflow and starts nothing)."""
        if not self.enabled and not await self._tenant_routed(tenant_id):
            return
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._client.start_workflow(
                ANNOUNCE_ALERT_WORKFLOW,
                AlertInput(tenant_id=tenant_id, kind=kind, event_id=event_id),
                id=alert_workflow_id(kind, event_id),
                task_queue=self._task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )

    async def _tenant_routed(self, tenant_id: str) -> bool:
        if self._sessions is None:
            return False
        async with tenancy.tenant_transaction(self._sessions, tenant_id) as session:
            return await alert_routes.get(session, tenant_id) is not None


class AlertActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        catalog: CapabilityCatalog,
        start_keys: StartKeyring,
        settings: MoatSettings,
    ) -> None:
        self._sessions = sessions
        self._catalog = catalog
        self._start_keys = start_keys
        self._settings = settings

    @activity.defn(name=PREPARE_ALERT)
    async def prepare_alert(self, inp: AlertInput) -> AnnounceStart:
        s = self._settings
        async with tenancy.tenant_transaction(self._sessions, inp.tenant_id) as session:
            what = await _what(session, inp)
            tenant = await tenants.get_tenant(session, inp.tenant_id)
            route = await route_for(session, s, inp.tenant_id)
        if isinstance(route, str):
            return AnnounceStart(skipped=route)
        if what is None or tenant is None:
            return AnnounceStart(skipped="event_not_found")
        alert = alert_for(
            inp.kind,
            inp.event_id,
            tenant_id=tenant.id,
            tenant_name=tenant.name,
            what=what,
            console_base=s.alerts_console_url,
        )
        tid, con_id = route.tenant_id, route.connection_id
        async with tenancy.tenant_transaction(self._sessions, tid) as session:
            sender = await tenants.get_tenant(session, tid)
            connection = await connections.get_connection(session, tid, con_id)
        if sender is None or connection is None or connection.revoked_at is not None:
            return AnnounceStart(skipped="connection_not_usable: the alerts connection is gone")
        if connection.type == "slack":
            capability_id, message = SLACK_CAPABILITY, slack_input(alert, route.target)
        else:
            capability_id, message = WEBHOOK_CAPABILITY, webhook_input(alert, route.target)
        spec = self._catalog.get(capability_id)
        if spec is None or connection.type not in spec.connection_types:
            return AnnounceStart(skipped="connection_not_usable: not a Slack or webhook one")
        key = alert_key(inp.kind, inp.event_id)
        payload = {
            "capability_id": spec.id,
            "capability_version": spec.version,
            "connection_id": con_id,
            "input": message,
        }
        request = ExecuteWorkflowInput(
            ref=ExecutionRef(
                receipt_id=str(uuid7()),
                tenant_id=tid,
                idempotency_key=key,
                input_hash=redacted_hash(payload),
                connection_id=con_id,
            ),
            capability=spec,
            input=message,
            request_id=str(uuid7()),
            trace_id=uuid.uuid4().hex,
            submitted_at=datetime.now(UTC),
            idempotency_ttl_seconds=sender.idempotency_ttl_seconds,
            local_activities=s.local_activities,
            # The deployment's route: Moat's own call, configured by the operator (None); a
            # tenant's: the key that set it, signed with the start, never more.
            scopes=route.scopes,
            **({"api_key_id": route.api_key_id} if route.api_key_id else {}),
        )
        workflow_id = workflow_id_for(tid, key)
        return AnnounceStart(
            request=self._start_keys.signed(request, workflow_id), workflow_id=workflow_id
        )


@dataclass(frozen=True)
class Route:
    """Where one alert goes: the sending tenant's connection and target, and the authority
    it is sent with (None: Moat's own, the deployment's route)."""

    tenant_id: str
    connection_id: str
    target: str
    scopes: list[str] | None = None
    api_key_id: str | None = None


async def route_for(session: AsyncSession, settings: MoatSettings, tenant_id: str) -> Route | str:
    """The tenant's own route first (sent in the tenant, under the key that set it), the
    deployment's otherwise; a string says why nothing is sent. Read under the tenant's
    row-level security."""
    own = await alert_routes.get(session, tenant_id)
    if own is not None:
        if await api_keys.is_revoked(session, tenant_id, own.api_key_id):
            # Nobody presents that key now: it must still be live to lend its authority.
            return (
                "key_revoked: the key that set the tenant's alert route is revoked; set the "
                "route again with a live key"
            )
        return Route(
            tenant_id=tenant_id,
            connection_id=own.connection_id,
            target=own.target,
            scopes=list(own.scopes),
            api_key_id=own.api_key_id,
        )
    s = settings
    if not (s.alerts_tenant and s.alerts_connection_id and s.alerts_target):
        return "no_alert_route: the tenant has none, and MOAT_ALERTS_* are not set"
    return Route(
        tenant_id=s.alerts_tenant, connection_id=s.alerts_connection_id, target=s.alerts_target
    )


async def _what(session: AsyncSession, inp: AlertInput) -> str | None:
    """One line on the event, read under its tenant's row-level security (None: gone)."""
    tid = inp.tenant_id
    if inp.kind == AlertKind.DEAD_LETTER:
        row = await dead_letters.get(session, tid, inp.event_id)
        if row is None:
            return None
        return (
            f"a {row.kind} dead letter ({row.error_code or 'error'}): {row.reason[:REASON_CHARS]}"
        )
    if inp.kind == AlertKind.OUTCOME_UNKNOWN:
        receipt = await receipts.get_receipt(session, tid, inp.event_id)
        if receipt is None:
            return None
        return (
            f"{receipt.capability_id} ended outcome_unknown: the provider may or may not have "
            "done it, and Moat will not repeat it; check the provider and settle it"
        )
    connection = await connections.get_connection(session, tid, inp.event_id)
    if connection is None:
        return None
    return f"the {connection.type} connection {connection.name!r} needs re-authorising"
