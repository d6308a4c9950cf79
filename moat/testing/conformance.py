"""The conformance kit's checks: what every adapter must hold to, driven through a real
Moat stack (gateway, worker, PostgreSQL, Temporal) against a fake of its provider.

An adapter author gives a ``Conformance``; each check is a coroutine over a ``KitRun`` that
raises ``AssertionError`` naming the property broken, or ``pytest.skip`` with the reason the
check does not apply.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx
import pytest
from temporalio.client import WorkflowExecution
from temporalio.exceptions import ActivityError, ApplicationError

from moat.testing import evidence
from moat.testing.stack import Stack
from schemas.capabilities import (
    Capability,
    CapabilityCatalog,
    EffectType,
    RetrySettings,
)
from schemas.connections import ConnectionType
from schemas.names import CALL_ADAPTER
from schemas.records import OUTCOME_UNKNOWN, ErrorTaxonomy
from starter.devstack import temporal_binary

# The kit's retries: short, so that a check takes seconds, and shorter than any wait a
# provider asks for, so that a Retry-After honoured is told from a backoff.
KIT_RETRY = RetrySettings(max_retries=2, base_delay_seconds=0.2, max_delay_seconds=5.0)
KIT_TIMEOUT_SECONDS = 10.0
STORM = 20
RETRY_AFTER_SECONDS = 2


@runtime_checkable
class ProviderFake(Protocol):
    """A fake of the adapter's provider, as the kit drives it."""

    @property
    def allow_entry(self) -> str:
        """The host-guard entry that admits the fake (``127.0.0.1:port``). A fake that
        listens on more than one port (SMTP and IMAP) also has ``allow_entries``, every
        entry the adapter needs."""
        ...

    def effects(self) -> int:
        """Effects the provider holds now (messages sent, records created...)."""
        ...

    def lose_answers(self, count: int) -> None:
        """The next ``count`` calls that perform an effect perform it, then drop the
        connection without answering."""
        ...

    def rate_limit(self, count: int, retry_after_seconds: int) -> bool:
        """The next ``count`` calls are refused as the provider's rate limit, with no effect;
        False when the provider has no rate limit with a wait the adapter can honour."""
        ...

    def call_times(self) -> list[float]:
        """``time.monotonic()`` of every call that reached the effect endpoint."""
        ...


@dataclass(frozen=True)
class ConnectionSpec:
    """The connection the adapter is called with: stored through the admin API as an
    operator would. The kit searches every store for ``secret``: make it one no other test
    uses."""

    type: ConnectionType | str
    secret: str
    config: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Conformance:
    """What the kit needs to check an adapter (the ``moat_conformance`` fixture's value).

    ``capability``: the declaration, or the id of an installed one. ``input``: the
    capability's input, or a callable that makes a fresh one for each check (for an effect
    that needs something of its own to act on, e.g. an issue to close). ``refuse``:
    optional, ``refuse(count)`` makes the next ``count`` calls fail as the provider's server
    error (``refuse(0)`` ends that), for the check of failures' wording."""

    capability: Capability | str
    input: Mapping[str, Any] | Callable[[], Mapping[str, Any]]
    fake: ProviderFake
    connection: ConnectionSpec | None = None
    refuse: Callable[[int], None] | None = None
    storm: int = STORM


def kit_declaration(conformance: Conformance) -> Capability:
    """The capability as the kit runs it: the kit's short retries and timeout, and no
    approval to wait for."""
    declared = conformance.capability
    if isinstance(declared, str):
        catalog = CapabilityCatalog()
        spec = catalog.get(declared)
        assert spec is not None, f"no installed capability {declared!r}: is its package installed?"
        declared = catalog.declaration(spec.adapter)
    spec = declared.spec.model_copy(
        update={
            "retry": KIT_RETRY,
            "timeout_seconds": min(declared.spec.timeout_seconds, KIT_TIMEOUT_SECONDS),
            "requires_approval": False,
        }
    )
    return dataclasses.replace(declared, spec=spec)


@dataclass
class KitRun:
    """One check's stack, with the capability and its connection in place."""

    conformance: Conformance
    declaration: Capability
    stack: Stack
    connection_id: str | None

    @property
    def fake(self) -> ProviderFake:
        return self.conformance.fake

    @property
    def capability_id(self) -> str:
        return self.declaration.spec.id

    def input(self) -> dict[str, Any]:
        made = self.conformance.input
        return dict(made() if callable(made) else made)

    async def execute(self, input: dict[str, Any], key: str | None = None) -> httpx.Response:
        extra: dict[str, Any] = {"connection_id": self.connection_id} if self.connection_id else {}
        key = key or f"kit-{uuid.uuid4().hex}"
        return await self.stack.execute(self.capability_id, input, key=key, **extra)


def _effects(run: KitRun) -> bool:
    return run.declaration.spec.effect_type != EffectType.NONE


def _status(response: httpx.Response) -> str:
    body = response.json()
    return str(body.get("status") or body.get("error", {}).get("code") or response.status_code)


def _needs_effect(run: KitRun) -> None:
    if not _effects(run):
        pytest.skip(f"{run.capability_id} has no side effect (effect type NONE)")


async def duplicate_storm(run: KitRun) -> None:
    """``storm`` concurrent requests with one key: one effect, one receipt for all."""
    _needs_effect(run)
    before = run.fake.effects()
    payload, key = run.input(), f"storm-{uuid.uuid4().hex}"
    answers = await asyncio.gather(
        *(run.execute(payload, key) for _ in range(run.conformance.storm))
    )
    failed = [a.text for a in answers if a.status_code != 200]
    assert not failed, f"requests of the storm were not answered the receipt: {failed[:3]}"
    receipts = {a.json()["receipt_id"] for a in answers}
    assert len(receipts) == 1, f"one key was answered {len(receipts)} receipts"
    statuses = {_status(a) for a in answers}
    assert statuses == {"executed"}, f"the storm's answers: {statuses}"
    made = run.fake.effects() - before
    assert made == 1, f"{run.conformance.storm} requests with one key made {made} effects"


async def lost_answer(run: KitRun) -> None:
    """An effect performed and its answer lost: one effect and ``executed``, or
    ``outcome_unknown``; never two effects."""
    _needs_effect(run)
    before = run.fake.effects()
    payload = run.input()
    run.fake.lose_answers(1)
    try:
        answer = await run.execute(payload)
    finally:
        run.fake.lose_answers(0)
    made = run.fake.effects() - before
    assert made <= 1, f"an answer lost made {made} effects: the retry repeated the effect"
    body = answer.json()
    if body.get("status") == "executed":
        assert made == 1, f"executed with {made} effects at the provider"
        return
    code = (body.get("error") or {}).get("code")
    assert code == OUTCOME_UNKNOWN, (
        f"an answer lost ended {body.get('status')} ({code}), neither executed nor "
        f"{OUTCOME_UNKNOWN}: {answer.text[:500]}"
    )


async def temporal_reset(stack: Stack, workflow_id: str, run_id: str) -> str:
    """``temporal workflow reset --type FirstWorkflowTask`` of a finished run, as an operator
    types it; the new run's id once it has closed."""
    proc = await asyncio.to_thread(
        subprocess.run,
        [
            str(temporal_binary()),
            "workflow",
            "reset",
            "--address",
            stack.client.service_client.config.target_host,
            "--namespace",
            stack.settings.temporal_namespace,
            "--workflow-id",
            workflow_id,
            "--run-id",
            run_id,
            "--type",
            "FirstWorkflowTask",
            "--reason",
            "conformance kit: reset",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, f"temporal workflow reset failed: {proc.stderr}"
    handle = stack.client.get_workflow_handle(workflow_id)
    for _ in range(400):
        described = await handle.describe()
        if described.run_id != run_id and described.close_time is not None:
            return described.run_id or ""
        await asyncio.sleep(0.05)
    raise AssertionError("the reset run did not finish within 20 s")


async def reset(run: KitRun) -> None:
    """A finished run reset to its first workflow task runs again and does nothing more."""
    _needs_effect(run)
    before = run.fake.effects()
    payload, key = run.input(), f"reset-{uuid.uuid4().hex}"
    first = await run.execute(payload, key)
    assert _status(first) == "executed", first.text
    assert run.fake.effects() - before == 1
    body = first.json()
    await temporal_reset(run.stack, body["workflow_id"], body["run_id"])
    made = run.fake.effects() - before
    assert made == 1, f"a reset of the finished run left {made} effects"
    again = await run.execute(payload, key)
    assert again.json()["receipt_id"] == body["receipt_id"]
    assert run.fake.effects() - before == 1


async def retry_after(run: KitRun) -> None:
    """A rate limit with ``Retry-After: 2``: the next call comes at least 2 s later, and the
    execution ends executed."""
    payload = run.input()
    if not run.fake.rate_limit(1, RETRY_AFTER_SECONDS):
        pytest.skip("the provider's fake has no rate limit with a wait to honour")
    seen = len(run.fake.call_times())
    try:
        answer = await run.execute(payload)
    finally:
        run.fake.rate_limit(0, RETRY_AFTER_SECONDS)
    times = run.fake.call_times()[seen:]
    assert _status(answer) == "executed", answer.text
    assert len(times) >= 2, f"{len(times)} call(s) reached the provider: no retry after the limit"
    waited = times[1] - times[0]
    assert waited >= RETRY_AFTER_SECONDS, (
        f"the call after a Retry-After of {RETRY_AFTER_SECONDS} s came {waited:.2f} s later"
    )


# What a library's exception looks like in a message: a traceback, a class repr, an OS
# error number, a library's module path.
LIBRARY_TEXT = (
    re.compile(r"Traceback \(most recent call last\)"),
    re.compile(r"<class '"),
    re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception|Timeout|Warning)\("),
    re.compile(r"\[Errno -?\d+\]"),
    re.compile(r"\b(?:httpx|httpcore|urllib3|aiohttp|requests|smtplib|ssl|socket)\.[A-Za-z]"),
)
STABLE_CODE = re.compile(r"^[a-z][a-z0-9_]*(?:\.[a-z0-9_]+)*$")
TAXONOMY = frozenset(t.value for t in ErrorTaxonomy)


def wording_problem(code: object, message: object) -> str | None:
    """Why a failure's code and message are not the adapter's own wording (None: they are)."""
    if not isinstance(code, str) or not (code in TAXONOMY or STABLE_CODE.fullmatch(code)):
        return f"the error code {code!r} is neither an ErrorTaxonomy value nor a stable code"
    if not isinstance(message, str) or not message.strip():
        return "the failure has no message"
    for pattern in LIBRARY_TEXT:
        if pattern.search(message):
            return f"the message holds a library's exception text: {message[:300]!r}"
    return None


async def failures_worded(run: KitRun, how: str) -> None:
    """The provider refuses every attempt (``how``: ``server_error`` through ``refuse``, or
    ``rate_limited``): the execution fails with a stable code and the adapter's words."""
    payload = run.input()
    start: Callable[[], object]
    stop: Callable[[], object]
    if how == "server_error":
        refuse = run.conformance.refuse
        if refuse is None:
            pytest.skip("the conformance gives no refuse(count) for the provider's fake")
        start, stop = (lambda: refuse(100)), (lambda: refuse(0))
    else:
        fake = run.fake
        if not fake.rate_limit(0, 1):
            pytest.skip("the provider's fake has no rate limit")
        start, stop = (lambda: fake.rate_limit(100, 1)), (lambda: fake.rate_limit(0, 1))
    start()
    try:
        answer = await run.execute(payload)
    finally:
        stop()
    body = answer.json()
    assert body.get("status") != "executed", f"the provider refused, yet: {answer.text[:300]}"
    error = body.get("error") or {}
    worded = [(error.get("code"), error.get("message"))]
    worded += await adapter_failures(run.stack, body["workflow_id"], body["run_id"])
    assert len(worded) > 1, "no attempt of the adapter failed"
    for code, message in worded:
        problem = wording_problem(code, message)
        assert problem is None, problem


async def adapter_failures(stack: Stack, workflow_id: str, run_id: str) -> list[tuple[str, str]]:
    """Each failed attempt of the run's adapter step as the adapter raised it: its type
    (the error code) and message, decoded from Temporal's history."""
    handle = stack.client.get_workflow_handle(workflow_id, run_id=run_id)
    history = await handle.fetch_history()
    adapter_steps = {
        e.event_id
        for e in history.events
        if e.HasField("activity_task_scheduled_event_attributes")
        and e.activity_task_scheduled_event_attributes.activity_type.name == CALL_ADAPTER
    }
    out: list[tuple[str, str]] = []
    for event in history.events:
        if not event.HasField("activity_task_failed_event_attributes"):
            continue
        failed = event.activity_task_failed_event_attributes
        if failed.scheduled_event_id not in adapter_steps:
            continue
        err: BaseException | None = await stack.client.data_converter.decode_failure(failed.failure)
        while isinstance(err, ActivityError):
            err = err.cause
        if isinstance(err, ApplicationError):
            out.append((err.type or "", err.message))
        else:
            out.append((type(err).__name__, str(err)))
    return out


async def no_secret_at_rest(run: KitRun) -> None:
    """The connection's secret reaches the provider alone: no Postgres row, Temporal
    history, manifest file, log record or span holds it."""
    connection = run.conformance.connection
    if connection is None:
        pytest.skip("the capability is called without a connection: no secret in play")
    secret = connection.secret
    with evidence.captured_logs() as logs, evidence.captured_spans() as spans:
        answer = await run.execute(run.input())
    assert answer.status_code < 500 or answer.json().get("status"), answer.text
    assert secret not in answer.text, "the secret is in the execution's answer"
    body = answer.json()
    ran = (str(body["workflow_id"]), str(body["run_id"]))
    await _nowhere(run.stack, secret, ran, logs.getvalue(), spans.get_finished_spans())


async def _nowhere(stack: Stack, secret: str, ran: tuple[str, str], logs: str, spans: Any) -> None:
    found: list[str] = []
    for table, rows in (await evidence.table_texts(stack)).items():
        if secret in rows:
            found.append(f"Postgres table {table}")
    # The execution's run, and any other the stack's task queue ran (e.g. a child).
    runs = {ran} | {(wf.id, wf.run_id or "") async for wf in _workflows(stack)}
    for name, raw in (await evidence.histories(stack, runs)).items():
        if secret.encode() in raw:
            found.append(f"Temporal's history of {name}")
    manifests = await evidence.manifest_files(stack)
    assert any(p.name == "manifest.json" for p in manifests), "no manifest was written"
    found += [f"manifest file {p.name}" for p, data in manifests.items() if secret.encode() in data]
    if secret in logs:
        found.append("the logs")
    found += [f"span {s.name}" for s in spans if secret in "\n".join(evidence.span_texts(s))]
    assert not found, f"the connection's secret is in {', '.join(found)}"


async def _workflows(stack: Stack) -> AsyncIterator[WorkflowExecution]:
    """The workflows of the stack's task queue, once visibility lists them (within 1 s)."""
    query = f"TaskQueue = '{stack.settings.task_queue}'"
    for _ in range(20):
        listed = [wf async for wf in stack.client.list_workflows(query)]
        if listed:
            for wf in listed:
                yield wf
            return
        await asyncio.sleep(0.05)


def allow_entries(fake: ProviderFake) -> list[str]:
    """The host-guard entries a run needs for ``fake``: its ``allow_entries`` when it has
    them, else its ``allow_entry``."""
    entries = getattr(fake, "allow_entries", None)
    return list(entries) if entries else [fake.allow_entry]
