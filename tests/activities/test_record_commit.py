"""The record step's transaction: its manifest index and events go with its COMMIT; when
that cannot be, nothing of it is written and it is made again statement by statement."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from sqlalchemy import select

from activities.execute.record import RecordStep
from activities.manifest import _MANIFEST_NAMESPACE
from schemas.events import EventType
from store import manifests
from store.models import ManifestRow, OrchestrationEvent, ReceiptRow
from tests.support.stack import StackFactory


async def test_an_index_there_already_is_left_and_the_receipt_recorded(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The index row of the run's manifest written before the record step commits (it
    cannot be, but if it were): the committing transaction fails as a whole and the step
    records the receipt again without it, leaving the row there and announcing no
    manifest it did not index."""
    attempts: list[bool] = []
    original = RecordStep._record_once

    async def planted(self: RecordStep, inp: Any, *args: Any, committing: bool) -> Any:
        attempts.append(committing)
        if committing:
            receipt_id, run_id = inp.ref.receipt_id, inp.ref.run_id
            async with stack.sessions.begin() as session:
                await manifests.index(
                    session,
                    id=str(uuid.uuid5(_MANIFEST_NAMESPACE, f"{receipt_id}|{run_id}")),
                    tenant_id=inp.ref.tenant_id,
                    receipt_id=receipt_id,
                    run_id=run_id,
                    path="planted",
                    sha256="sha256:" + "0" * 64,
                    kid="planted",
                    alg="ES256",
                    replayed=False,
                    outcome="success",
                )
        return await original(self, inp, *args, committing=committing)

    monkeypatch.setattr(RecordStep, "_record_once", planted)
    async with make_stack() as stack:
        resp = await stack.execute("demo.echo", {"planted": True})
        assert resp.status_code == 200, resp.text
        body = resp.json()
        receipt_id = body["receipt_id"]
        async with stack.sessions() as session:
            receipts = (await session.execute(select(ReceiptRow.id).filter_by(id=receipt_id))).all()
            index = (
                await session.execute(select(ManifestRow).filter_by(receipt_id=receipt_id))
            ).scalar_one()
            events = (
                (
                    await session.execute(
                        select(OrchestrationEvent.event_type).filter_by(correlation_id=receipt_id)
                    )
                )
                .scalars()
                .all()
            )
    assert attempts == [True, False]
    assert body["status"] == "executed" and len(receipts) == 1
    assert index.path == "planted"  # left as it was
    assert EventType.MANIFEST_WRITTEN.value not in events
    assert events.count(EventType.RUN_COMPLETED.value) == 1  # written once, by the second
