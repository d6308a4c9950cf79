"""The synthetic prober's one activity: turn a probe's configuration into the signed start
of a normal execution marked ``is_synthetic``.

The schedule's workflow carries only the probe's id: what is run (capability, input,
connection) is read here from Postgres under the tenant's row-level security, and checked
against the catalog's probe rule again, so someone able to start workflows in the
namespace can at most fire a probe a tenant configured, never sign a run of their own.

The start carries the authority of the key that set the probe running (its id and scopes,
stored with the probe), so the run's policy step holds it to that key's scopes, approvals
and revocation like the key's own calls. A probe stored before probes carried a key is not
run; its connection is checked as ingest checks a call's.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio import activity

from schemas.capabilities import CapabilityCatalog
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.names import PREPARE_PROBE
from schemas.probes import ProbeStart, ProbeStartInput
from schemas.redaction import redacted_hash
from schemas.run import ExecuteWorkflowInput, workflow_id_for
from store import connections, probes, tenancy, tenants
from store.keyrings.start import StartKeyring


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
            connection = (
                await connections.get_connection(session, inp.tenant_id, row.connection_id)
                if row is not None and row.connection_id is not None
                else None
            )
        if row is None or tenant is None:
            return ProbeStart(skipped="probe_not_found")
        if row.paused:
            return ProbeStart(skipped="probe_paused")
        if row.api_key_id is None or row.scopes is None:
            return ProbeStart(
                skipped="probe_without_key: made before probes carried their creator's key; "
                "resume it with a key holding what executing it needs"
            )
        spec = self._catalog.get(row.capability_id, row.capability_version)
        if spec is None or spec.probe is None:
            return ProbeStart(skipped="capability_not_probeable")
        refusal = spec.probe.refusal(row.input)
        if refusal is not None:
            return ProbeStart(skipped=f"capability_not_probeable: {refusal}")
        if row.connection_id is not None and (
            connection is None or connection.type not in spec.connection_types
        ):
            return ProbeStart(skipped="connection_not_usable: gone, or of a type it does not take")
        payload = {
            "capability_id": row.capability_id,
            "capability_version": row.capability_version,
            "connection_id": row.connection_id,
            "input": row.input,
        }
        ref = ExecutionRef(
            receipt_id=str(uuid7()),
            tenant_id=inp.tenant_id,
            idempotency_key=inp.idempotency_key,
            input_hash=redacted_hash(payload),
            connection_id=row.connection_id,
            is_synthetic=True,
        )
        request = ExecuteWorkflowInput(
            ref=ref,
            capability=spec,
            input=row.input,
            request_id=str(uuid7()),
            trace_id=uuid.uuid4().hex,
            submitted_at=datetime.now(UTC),
            idempotency_ttl_seconds=tenant.idempotency_ttl_seconds,
            local_activities=self._local_activities,
            # Signed with the start: the run acts with this key's authority, no more.
            scopes=list(row.scopes),
            api_key_id=row.api_key_id,
        )
        workflow_id = workflow_id_for(inp.tenant_id, inp.idempotency_key)
        return ProbeStart(
            request=self._start_keys.signed(request, workflow_id), workflow_id=workflow_id
        )
