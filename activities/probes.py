"""The synthetic prober's one activity: turn a probe's configuration into the signed start
of a normal execution marked ``is_synthetic``.

The schedule's workflow carries only the probe's id: what is run (capability, input,
connection) is read here from Postgres under the tenant's row-level security, and checked
against the catalog's probe rule again, so someone able to start workflows in the
namespace can at most fire a probe a tenant configured, never sign a run of their own.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from schemas.canonical import redacted_hash
from schemas.capabilities import CapabilityCatalog
from schemas.ids import uuid7
from schemas.names import PREPARE_PROBE
from schemas.probes import ProbeStart, ProbeStartInput
from schemas.run import ExecuteWorkflowInput, workflow_id_for
from store import probes, tenancy, tenants
from store.keys.start import StartKeyring


class ProbeActivities:
    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        catalog: CapabilityCatalog,
        start_keys: StartKeyring,
        local_activities: bool,
    ) -> None:
        self._sessions = sessions
        self._catalog = catalog
        self._start_keys = start_keys
        self._local_activities = local_activities

    @activity.defn(name=PREPARE_PROBE)
    async def prepare_probe(self, inp: ProbeStartInput) -> ProbeStart:
        async with tenancy.tenant_transaction(self._sessions, inp.tenant_id) as session:
            row = await probes.get_probe(session, inp.tenant_id, inp.probe_id)
            tenant = await tenants.get_tenant(session, inp.tenant_id)
        if row is None or tenant is None:
            return ProbeStart(skipped="probe_not_found")
        if row.paused:
            return ProbeStart(skipped="probe_paused")
        spec = self._catalog.get(row.capability_id, row.capability_version)
        if spec is None or spec.probe is None:
            return ProbeStart(skipped="capability_not_probeable")
        refusal = spec.probe.refusal(row.input)
        if refusal is not None:
            return ProbeStart(skipped=f"capability_not_probeable: {refusal}")
        payload = {
            "capability_id": row.capability_id,
            "capability_version": row.capability_version,
            "connection_id": row.connection_id,
            "input": row.input,
        }
        request = ExecuteWorkflowInput(
            receipt_id=str(uuid7()),
            tenant_id=inp.tenant_id,
            idempotency_key=inp.idempotency_key,
            input_hash=redacted_hash(payload),
            capability=spec,
            input=row.input,
            connection_id=row.connection_id,
            request_id=str(uuid7()),
            trace_id=uuid.uuid4().hex,
            submitted_at=datetime.now(UTC),
            is_synthetic=True,
            idempotency_ttl_seconds=tenant.idempotency_ttl_seconds,
            local_activities=self._local_activities,
        )
        workflow_id = workflow_id_for(inp.tenant_id, inp.idempotency_key)
        return ProbeStart(
            request=self._start_keys.signed(request, workflow_id), workflow_id=workflow_id
        )
