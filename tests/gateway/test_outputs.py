"""The output in the envelope: the adapter's redacted result, checkable against the
receipt's ``output_hash`` from the envelope alone; kept sealed in Postgres for the key's
window, so a replay answers the same bytes without Temporal; gone after the window."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import rfc8785
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from schemas.names import REPLAYED_HEADER, RETENTION_WORKFLOW
from schemas.retention import RetentionInput, RetentionReport
from schemas.run import ExecuteResult
from starter.devstack import free_port, serve_asgi
from starter.gateway.app import create_app
from starter.runtime.codec import data_converter
from store import outputs, tenancy
from store.keyrings.codec import OutputSealer
from store.models import ExecutionOutputRow
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import CATALOG, Stack, StackFactory

TOKEN = "ghp_" + "a" * 36  # a GitHub token's format: redacted wherever it appears


def _checks_against_its_receipt(envelope: dict[str, Any]) -> None:
    """What anyone holding only the envelope can check."""
    digest = hashlib.sha256(rfc8785.dumps(envelope["output"])).hexdigest()
    assert envelope["receipt"]["output_hash"] == f"sha256:{digest}"


def _raw_output(response: httpx.Response) -> str:
    """The JSON text of ``output`` exactly as the gateway sent it."""
    text = response.text
    start = text.index('"output":') + len('"output":')
    decoder = json.JSONDecoder()
    _, end = decoder.raw_decode(text, start)
    return text[start:end]


async def test_echo_answers_its_input_redacted(stack: Stack) -> None:
    response = await stack.execute("demo.echo", {"hello": "world", "api_key": "s3cret", "t": TOKEN})
    assert response.status_code == 200, response.text
    envelope = response.json()
    assert envelope["status"] == "executed"
    assert envelope["output"] == {"hello": "world", "api_key": "[REDACTED]", "t": "[REDACTED]"}
    assert envelope["output_expired"] is False
    _checks_against_its_receipt(envelope)


async def test_http_json_answer_with_selected_headers(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script(
        "/issues",
        Step(
            201,
            body={"number": 7, "token": TOKEN},
            headers={"Location": "/issues/7", "Set-Cookie": "sid=1", "X-Request-Id": "r-1"},
        ),
    )
    response = await stack.execute("http.request", {"method": "POST", "url": url})
    assert response.status_code == 200, response.text
    envelope = response.json()
    output = envelope["output"]
    assert output["status"] == 201
    assert output["body"] == {"number": 7, "token": "[REDACTED]"}
    assert output["headers"]["location"] == "/issues/7"
    assert output["headers"]["x-request-id"] == "r-1"
    assert output["headers"]["content-type"] == "application/json"
    assert "set-cookie" not in output["headers"]
    assert "truncated" not in output
    _checks_against_its_receipt(envelope)


async def test_http_text_answer_is_text_redacted(stack: Stack, provider: FakeProvider) -> None:
    url = provider.script("/page", Step(200, raw=f"<p>hi {TOKEN}</p>".encode()))
    envelope = (await stack.execute("http.request", {"method": "GET", "url": url})).json()
    assert envelope["output"]["body"] == "<p>hi [REDACTED]</p>"
    _checks_against_its_receipt(envelope)


async def test_a_refusal_carries_what_the_provider_said(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script(
        "/refused",
        Step(422, body={"error": "invalid_blocks", "errors": [{"field": "title"}], "t": TOKEN}),
    )
    response = await stack.execute("http.request", {"method": "POST", "url": url})
    assert response.status_code == 502, response.text
    envelope = response.json()
    assert envelope["status"] == "failed" and envelope["output"] is None
    details = envelope["error"]["details"]
    assert details["provider_status"] == 422
    assert details["provider_response"] == {
        "error": "invalid_blocks",
        "errors": [{"field": "title"}],
        "t": "[REDACTED]",
    }
    # The polled envelope says the same.
    polled = await stack.http.get(
        f"{stack.url}/v1/executions/{envelope['receipt_id']}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert polled.json()["error"] == envelope["error"]


async def test_replay_is_the_same_output_from_postgres_without_temporal(
    stack: Stack,
    provider: FakeProvider,
    app_sessions: async_sessionmaker[AsyncSession],
) -> None:
    url = provider.script("/created", Step(200, body={"ts": "1700000000.000100", "n": 1.5}))
    payload = {"method": "POST", "url": url}
    first = await stack.execute("http.request", payload, key="replay-bytes")
    assert first.status_code == 200, first.text

    # A gateway whose Temporal is a closed port: only Postgres can answer.
    dead = await Client.connect(
        f"127.0.0.1:{free_port()}",
        namespace="nowhere",
        data_converter=data_converter(stack.settings),
        lazy=True,
    )
    app = create_app(stack.settings, client=dead, sessions=app_sessions, catalog=CATALOG)
    async with serve_asgi(app) as url_without_temporal:
        again = await stack.http.post(
            f"{url_without_temporal}/v1/executions",
            json={"schema_version": "1", "capability_id": "http.request", "input": payload},
            headers={"Authorization": f"Bearer {stack.api_key}", "Idempotency-Key": "replay-bytes"},
        )
    assert again.status_code == 200, again.text
    assert again.headers[REPLAYED_HEADER] == "true"
    assert _raw_output(again) == _raw_output(first)
    assert len(provider.calls_to("/created")) == 1


async def test_the_run_hands_the_gateway_the_answer_it_kept(
    stack: Stack, provider: FakeProvider, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    """The fresh answer comes with the run's result, not from a read of Postgres: it is the
    very ``KeptOutput`` sealed in ``execution_outputs``, which a replay unseals."""
    url = provider.script("/kept", Step(201, body={"id": 7, "token": TOKEN, "x": 0.1}))
    first = await stack.execute("http.request", {"method": "POST", "url": url}, key="kept")
    assert first.status_code == 200, first.text
    envelope = first.json()
    handle = stack.client.get_workflow_handle(envelope["workflow_id"], result_type=ExecuteResult)
    result = await handle.result()
    assert result.kept is not None
    assert result.kept.output == envelope["output"]
    assert result.kept.output["body"] == {"id": 7, "token": "[REDACTED]", "x": 0.1}
    async with app_sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        stored = await outputs.find(
            session,
            OutputSealer.from_settings(stack.settings),
            stack.tenant_id,
            envelope["receipt_id"],
            datetime.now(UTC),
        )
    assert stored == result.kept


async def test_the_output_is_sealed_and_goes_with_its_window(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    async with make_stack(idempotency_ttl_seconds=60) as stack:
        envelope = (await stack.execute("demo.echo", {"visible": "only to its tenant"})).json()
        receipt_id = envelope["receipt_id"]
        async with stack.sessions() as s:
            row = (
                await s.execute(select(ExecutionOutputRow).filter_by(receipt_id=receipt_id))
            ).scalar_one()
        assert b"only to its tenant" not in row.sealed
        assert row.expires_at <= datetime.now(UTC) + timedelta(seconds=61)

        as_of = datetime.now(UTC) + timedelta(minutes=5)
        report = await stack.client.execute_workflow(
            RETENTION_WORKFLOW,
            RetentionInput(as_of=as_of),
            id=f"retention-outputs-{as_of:%s%f}",
            task_queue=stack.settings.task_queue,
            result_type=RetentionReport,
        )
        assert report.outputs_deleted >= 1
        async with stack.sessions() as s:
            gone = (
                await s.execute(select(ExecutionOutputRow).filter_by(receipt_id=receipt_id))
            ).scalar_one_or_none()
        assert gone is None

        polled = await stack.http.get(
            f"{stack.url}/v1/executions/{receipt_id}",
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
        body = polled.json()
        assert body["status"] == "executed"
        assert body["output"] is None and body["output_expired"] is True
        assert body["receipt"]["output_hash"] == envelope["receipt"]["output_hash"]


async def test_outputs_expire_even_for_a_tenant_without_manifests(
    make_stack: StackFactory,
) -> None:
    """Retention finds the tenants whose outputs it deletes in the database, not from the
    manifest folders: a run whose manifest was never written still had its output kept."""
    async with make_stack(idempotency_ttl_seconds=60) as stack:
        envelope = (await stack.execute("demo.echo", {"kept": "for a minute"})).json()
        receipt_id = envelope["receipt_id"]
        await asyncio.to_thread(shutil.rmtree, stack.settings.manifests_dir / stack.tenant_id)

        as_of = datetime.now(UTC) + timedelta(minutes=5)
        await stack.client.execute_workflow(
            RETENTION_WORKFLOW,
            RetentionInput(as_of=as_of),
            id=f"retention-no-manifests-{as_of:%s%f}",
            task_queue=stack.settings.task_queue,
            result_type=RetentionReport,
        )
        async with stack.sessions() as s:
            gone = (
                await s.execute(select(ExecutionOutputRow).filter_by(receipt_id=receipt_id))
            ).scalar_one_or_none()
        assert gone is None
