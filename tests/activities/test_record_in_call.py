"""A successful adapter attempt records its receipt, manifest and completion itself
(``AdapterInput.record``, ``RecordStep.recorded``), and when it cannot, the run's record
step does, without calling the provider again. A manifest an attempt stored and never
indexed (it died before its commit) is replaced by the one the receipt is recorded with."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select
from temporalio import activity
from temporalio.api.enums.v1 import EventType

from activities.execute import adapter as adapter_module
from activities.execute.adapter import AdapterStep
from activities.execute.record import RecordStep, _receipt
from schemas.canonical import sha256_digest
from schemas.names import CALL_ADAPTER, RECORD_RUN
from schemas.run import RecordedRun, RecordRunInput
from store.models import ManifestRow, ReceiptRow
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory


def _count_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The adapter's calls, by attempt."""
    calls: list[int] = []
    original = AdapterStep._call

    async def counted(self: AdapterStep, adapter: Any, inp: Any, credential: Any) -> Any:
        calls.append(inp.attempt)
        return await original(self, adapter, inp, credential)

    monkeypatch.setattr(AdapterStep, "_call", counted)
    return calls


def _in_attempt(
    monkeypatch: pytest.MonkeyPatch,
    before: Callable[[RecordStep, RecordRunInput], Awaitable[None]],
) -> list[str]:
    """``before`` run ahead of each record the adapter attempt makes itself; the activity
    types that recorded, in order."""
    recorders: list[str] = []
    original = RecordStep.recorded

    async def wrapped(self: RecordStep, inp: RecordRunInput) -> RecordedRun:
        recorders.append(activity.info().activity_type)
        if activity.info().activity_type == CALL_ADAPTER:
            await before(self, inp)
        return await original(self, inp)

    monkeypatch.setattr(RecordStep, "recorded", wrapped)
    return recorders


@dataclass
class Executed:
    """A demo.echo execution's answer, what its run scheduled, its manifest as indexed and
    the latency its receipt recorded."""

    body: dict[str, Any]
    scheduled: list[str]  # the activities scheduled
    local: int  # local activities' markers
    manifest: dict[str, Any]
    latency_ms: int


async def _execute(make_stack: StackFactory, payload: dict[str, Any]) -> Executed:
    async with make_stack() as stack:
        resp = await stack.execute("demo.echo", payload)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        scheduled, local = await _history_steps(stack, body["workflow_id"])
        manifest, _ = await _manifest_of(stack, body["receipt_id"])
        async with stack.sessions() as session:
            receipt = (
                await session.execute(select(ReceiptRow).filter_by(id=body["receipt_id"]))
            ).scalar_one()
    return Executed(body, scheduled, local, manifest, receipt.latency_ms)


async def _history_steps(stack: Any, workflow_id: str) -> tuple[list[str], int]:
    """The run's scheduled activities and its local activities' markers."""
    events = (await stack.client.get_workflow_handle(workflow_id).fetch_history()).events
    scheduled = [
        e.activity_task_scheduled_event_attributes.activity_type.name
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    ]
    local = sum(
        1
        for e in events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
        and e.marker_recorded_event_attributes.marker_name == "core_local_activity"
    )
    return scheduled, local


async def _manifest_of(stack: Any, receipt_id: str) -> tuple[dict[str, Any], ManifestRow]:
    async with stack.sessions() as session:
        row = (
            await session.execute(select(ManifestRow).filter_by(receipt_id=receipt_id))
        ).scalar_one()
    data = await asyncio.to_thread(Path(row.path).read_bytes)
    assert sha256_digest(data) == row.sha256  # the bytes its index row hashed
    return json.loads(data), row


async def test_a_success_is_recorded_by_its_attempt(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _count_calls(monkeypatch)

    async def nothing(step: RecordStep, inp: RecordRunInput) -> None:
        return None

    recorders = _in_attempt(monkeypatch, nothing)
    ran = await _execute(make_stack, {"recorded": "in the call"})
    assert ran.body["status"] == "executed" and ran.body["receipt"]["status"] == "success"
    assert calls == [1] and recorders == [CALL_ADAPTER]
    assert (ran.scheduled, ran.local) == ([CALL_ADAPTER], 1)  # the policy check's alone
    assert ran.manifest["correlation_id"] == ran.body["receipt_id"]


async def test_a_record_the_attempt_cannot_finish_is_the_runs_to_make(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The attempt's record fails after its manifest was stored (its transaction never
    commits): the run's record step records the receipt, without a second call, and the
    manifest it indexes is the one its receipt was recorded with."""
    calls = _count_calls(monkeypatch)

    async def failing(step: RecordStep, inp: RecordRunInput) -> None:
        stored = inp.manifest.input_for(_receipt(inp.record, inp.recorded_at), inp.run_id)
        assert step._manifests is not None
        await step._manifests.stored_or_written(stored)
        raise ConnectionResetError("the database went away before the commit")

    recorders = _in_attempt(monkeypatch, failing)
    ran = await _execute(make_stack, {"recorded": "by the run"})
    assert ran.body["receipt"]["status"] == "success" and calls == [1]
    assert recorders == [CALL_ADAPTER, RECORD_RUN]
    assert (ran.scheduled, ran.local) == ([CALL_ADAPTER], 2)  # the policy check and the record
    assert ran.manifest["metadata"]["execution_duration_ms"] == ran.latency_ms


async def test_a_manifest_left_by_an_attempt_that_died_is_replaced(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A manifest stored for the run that describes another attempt (one that died between
    storing it and its commit): the receipt's own replaces it, and is the one indexed."""

    async def plant(step: RecordStep, inp: RecordRunInput) -> None:
        assert inp.manifest.tool is not None
        other = inp.manifest.model_copy(
            update={"tool": inp.manifest.tool.model_copy(update={"attempts": 7})}
        )
        receipt = _receipt(inp.record, inp.recorded_at)
        assert step._manifests is not None
        await step._manifests.stored_or_written(other.input_for(receipt, inp.run_id))

    _in_attempt(monkeypatch, plant)
    ran = await _execute(make_stack, {"recorded": "over a dead attempt's"})
    assert ran.manifest["attempt"] == 0  # this attempt's, not the planted one's 6
    assert (ran.scheduled, ran.local) == ([CALL_ADAPTER], 1)


async def test_an_attempt_short_of_time_leaves_the_record_to_the_run(
    make_stack: StackFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt with less time left than a record takes does not start one: the run's
    record step records the receipt."""
    calls = _count_calls(monkeypatch)
    monkeypatch.setattr(adapter_module, "RECORD_TIME_NEEDED", 10_000.0)
    ran = await _execute(make_stack, {"recorded": "later"})
    assert ran.body["receipt"]["status"] == "success" and calls == [1]
    assert (ran.scheduled, ran.local) == ([CALL_ADAPTER], 2)


async def test_an_attempt_after_a_recorded_one_answers_its_receipt(
    stack: Stack, provider: FakeProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An attempt recorded the receipt, then its report was lost (its worker died): the
    next attempt finds the receipt and answers it, without calling the provider again. By
    then a caller may have been answered with the receipt and undone the effect, which a
    look-up before a repeat would not see."""
    original = AdapterStep._record_success
    lost: list[int] = []

    async def recorded_then_died(
        self: AdapterStep, inp: Any, out: Any, info: Any
    ) -> RecordedRun | None:
        recorded = await original(self, inp, out, info)
        assert recorded is not None
        if not lost:
            lost.append(info.attempt)
            raise RuntimeError("the worker died before it reported")
        return recorded

    monkeypatch.setattr(AdapterStep, "_record_success", recorded_then_died)
    url = provider.script("/recorded-then-lost", Step(201, body={"id": "made once"}))
    resp = await stack.execute("http.request", {"method": "POST", "url": url})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    events = (await stack.client.get_workflow_handle(body["workflow_id"]).fetch_history()).events
    attempts = [
        e.activity_task_started_event_attributes.attempt
        for e in events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED
    ]
    async with stack.sessions() as session:
        manifests = (
            await session.execute(select(ManifestRow).filter_by(receipt_id=body["receipt_id"]))
        ).all()
    assert lost == [1] and attempts == [2]  # the second attempt reported
    assert len(provider.calls_to("/recorded-then-lost")) == 1  # not even a replayed one
    assert body["status"] == "executed" and body["receipt"]["status"] == "success"
    assert body["output"]["body"] == {"id": "made once"}  # kept with the receipt, read back
    assert len(manifests) == 1
