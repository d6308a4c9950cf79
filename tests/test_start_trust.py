"""The worker trusts only what Moat's gateway vouched for: a start that did not come through
the gateway (plaintext, or not signed for what it names) runs nothing, writes no receipt and
takes no idempotency key, whoever it names."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest
from sqlalchemy import func, select
from temporalio.api.enums.v1 import EventType as HistoryEventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from schemas.canonical import redacted_hash
from schemas.capabilities import CapabilityCatalog
from schemas.ids import uuid7
from schemas.run import WORKFLOW_NAME, ExecuteResult, ExecuteWorkflowInput, workflow_id_for
from starter.codec import PLAINTEXT_REFUSED
from store.models import IdempotencyClaim, ReceiptRow
from tests.conftest import Stack
from tests.fakes import FakeProvider

# A run that never reaches its first activity ends within seconds; bounded all the same.
RESULT_WAIT = 60


def forged_input(stack: Stack, tenant_id: str, url: str, key: str) -> ExecuteWorkflowInput:
    """What the gateway would have built for this tenant: every field valid-looking."""
    capability = CapabilityCatalog().get("http.request")
    assert capability is not None
    payload: dict[str, Any] = {"method": "POST", "url": url, "json": {"pay": 100}}
    return ExecuteWorkflowInput(
        receipt_id=str(uuid7()),
        tenant_id=tenant_id,
        idempotency_key=key,
        input_hash=redacted_hash(
            {
                "capability_id": capability.id,
                "capability_version": None,
                "connection_id": None,
                "input": payload,
            }
        ),
        capability=capability,
        input=payload,
        request_id=str(uuid7()),
        trace_id="0" * 32,
        submitted_at=datetime.now(UTC),
    )


async def start(
    client: Client, stack: Stack, arg: ExecuteWorkflowInput
) -> WorkflowHandle[Any, ExecuteResult]:
    return await client.start_workflow(
        WORKFLOW_NAME,
        arg,
        id=workflow_id_for(arg.tenant_id, arg.idempotency_key),
        task_queue=stack.settings.task_queue,
        result_type=ExecuteResult,
    )


async def assert_nothing_happened(
    stack: Stack, provider: FakeProvider, path: str, tenant_id: str, key: str
) -> None:
    assert provider.calls_to(path) == []
    async with stack.sessions() as s:
        receipts = await s.scalar(
            select(func.count()).select_from(ReceiptRow).filter_by(tenant_id=tenant_id)
        )
        claims = await s.scalar(
            select(func.count())
            .select_from(IdempotencyClaim)
            .filter_by(tenant_id=tenant_id, idempotency_key=key)
        )
    assert (receipts, claims) == (0, 0)


async def test_a_plaintext_start_is_refused_by_the_worker(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script("/plaintext")
    arg = forged_input(stack, stack.tenant_id, url, "forged-plaintext")
    # Someone with access to the namespace but not to Moat's codec keyring.
    plain = Client(
        stack.client.service_client,
        namespace=stack.settings.temporal_namespace,
        data_converter=pydantic_data_converter,
    )
    handle = await start(plain, stack, arg)
    with pytest.raises(WorkflowFailureError) as failed:
        await asyncio.wait_for(handle.result(), RESULT_WAIT)
    assert isinstance(failed.value.cause, ApplicationError)
    assert failed.value.cause.type == PLAINTEXT_REFUSED
    history = await handle.fetch_history()
    types = [e.event_type for e in history.events]
    assert types[-1] == HistoryEventType.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED
    assert HistoryEventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED not in types
    assert HistoryEventType.EVENT_TYPE_MARKER_RECORDED not in types  # no local activity ran
    await assert_nothing_happened(
        stack, provider, "/plaintext", stack.tenant_id, arg.idempotency_key
    )
