"""Approvals in Slack, the worker's side: hand an approval's message to ``AnnounceApproval``
(from the step that requested or recorded it), and turn that into the signed start of a
normal execution of ``slack.post_message`` (the request) or ``slack.update_message`` (the
outcome) with the idempotency key ``approval/<id>/announce`` or ``approval/<id>/outcome``.

The hand-off is part of the approval step itself: the step completes only once the
workflow is started, and it starts it on every attempt under an id derived from the
approval, so a retried or reset step finds it there and nothing is posted twice.

The workflow carries only the approval's id: the channel, the connection and the message
are read here from Postgres under the tenant's row-level security, and the start carries
the authority of the key that configured the channel (its id and scopes, stored with the
setting), so the policy step holds the announcement to that key's scopes like its own
calls; a revoked key announces nothing.
"""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity
from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from schemas.approvals import Approval, ApprovalStatus
from schemas.capabilities import CapabilityCatalog
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.names import ANNOUNCE_APPROVAL_WORKFLOW, PREPARE_ANNOUNCEMENT
from schemas.records import ExecutionStatus
from schemas.redaction import redacted_hash
from schemas.run import ExecuteWorkflowInput, workflow_id_for
from schemas.slack_approvals import (
    POST_CAPABILITY,
    UPDATE_CAPABILITY,
    AnnounceInput,
    AnnounceStart,
    Stage,
    announce_key,
    announce_workflow_id,
    input_summary,
    outcome_blocks,
    outcome_text,
    request_blocks,
    request_text,
)
from store import (
    api_keys,
    approval_channels,
    approvals,
    connections,
    idempotency,
    outputs,
    tenancy,
    tenants,
)
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring


class Announcer:
    """Starts ``AnnounceApproval`` for an approval's message (built once in ``worker.py``)."""

    def __init__(self, client: Client, task_queue: str) -> None:
        self._client = client
        self._task_queue = task_queue

    async def hand_off(self, tenant_id: str, approval_id: str, stage: Stage) -> None:
        with contextlib.suppress(WorkflowAlreadyStartedError):
            await self._client.start_workflow(
                ANNOUNCE_APPROVAL_WORKFLOW,
                AnnounceInput(tenant_id=tenant_id, approval_id=approval_id, stage=stage),
                id=announce_workflow_id(tenant_id, approval_id, stage),
                task_queue=self._task_queue,
                id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )


class AnnounceActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        catalog: CapabilityCatalog,
        sealer: OutputSealer,
        start_keys: StartKeyring,
        local_activities: bool,
    ) -> None:
        self._sessions = sessions
        self._catalog = catalog
        self._sealer = sealer
        self._start_keys = start_keys
        self._local_activities = local_activities

    @activity.defn(name=PREPARE_ANNOUNCEMENT)
    async def prepare_announcement(self, inp: AnnounceInput) -> AnnounceStart:
        tid = inp.tenant_id
        async with tenancy.tenant_transaction(self._sessions, tid) as session:
            channel = await approval_channels.get(session, tid)
            row = await approvals.get(session, tid, inp.approval_id)
            tenant = await tenants.get_tenant(session, tid)
            connection = (
                await connections.get_connection(session, tid, channel.connection_id)
                if channel is not None
                else None
            )
            posted = await self._posted(session, tid, inp.approval_id)
            revoked = channel is not None and await api_keys.is_revoked(
                session, tid, channel.api_key_id
            )
        if channel is None:
            return AnnounceStart(skipped="no_approval_channel")
        if revoked:
            # Nobody presents that key now: it must still be live to lend its authority.
            return AnnounceStart(
                skipped="key_revoked: the key that set the approvals channel is revoked; "
                "set the channel again with a live key"
            )
        if row is None or tenant is None:
            return AnnounceStart(skipped="approval_not_found")
        approval = approvals.to_approval(row, self._sealer)
        if inp.stage == "requested":
            capability_id = POST_CAPABILITY
            message: dict[str, Any] = {
                "channel": channel.channel,
                "text": request_text(approval),
                "blocks": request_blocks(approval, input_summary(approval.input)),
            }
        else:
            if approval.status == ApprovalStatus.PENDING:
                return AnnounceStart(skipped="approval_pending")
            if posted is None:
                return AnnounceStart(
                    skipped="message_not_found: the request's message was not posted, or "
                    "what its execution answered is no longer kept"
                )
            capability_id = UPDATE_CAPABILITY
            message = {"channel": posted[0], "ts": posted[1], **_outcome(approval)}
        spec = self._catalog.get(capability_id)
        if spec is None:
            return AnnounceStart(skipped=f"capability_not_found: {capability_id}")
        if connection is None or connection.type not in spec.connection_types:
            return AnnounceStart(skipped="connection_not_usable: gone, or not a Slack one")
        key = announce_key(inp.approval_id, inp.stage)
        payload = {
            "capability_id": spec.id,
            "capability_version": spec.version,
            "connection_id": channel.connection_id,
            "input": message,
        }
        request = ExecuteWorkflowInput(
            ref=ExecutionRef(
                receipt_id=str(uuid7()),
                tenant_id=tid,
                idempotency_key=key,
                input_hash=redacted_hash(payload),
                connection_id=channel.connection_id,
            ),
            capability=spec,
            input=message,
            request_id=str(uuid7()),
            trace_id=uuid.uuid4().hex,
            submitted_at=datetime.now(UTC),
            idempotency_ttl_seconds=tenant.idempotency_ttl_seconds,
            local_activities=self._local_activities,
            # Signed with the start: the announcement acts with this key's authority, no more.
            scopes=list(channel.scopes),
            api_key_id=channel.api_key_id,
        )
        workflow_id = workflow_id_for(tid, key)
        return AnnounceStart(
            request=self._start_keys.signed(request, workflow_id), workflow_id=workflow_id
        )

    async def _posted(
        self, session: AsyncSession, tenant_id: str, approval_id: str
    ) -> tuple[str, str] | None:
        """(channel, ts) of the approval's request message, from what its execution kept."""
        key = announce_key(approval_id, "requested")
        found = await idempotency.find_replay(session, tenant_id, key, datetime.now(UTC))
        if found is None:
            return None
        _, receipt, kept = found
        if receipt is None or receipt.status != ExecutionStatus.SUCCESS or kept is None:
            return None
        output = outputs.opened(self._sealer, kept).output
        if not isinstance(output, dict) or not output.get("channel") or not output.get("ts"):
            return None
        return str(output["channel"]), str(output["ts"])


def _outcome(approval: Approval) -> dict[str, Any]:
    return {"text": outcome_text(approval), "blocks": outcome_blocks(approval)}
