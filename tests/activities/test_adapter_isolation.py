"""Adapters keep nothing between calls, and their failures are worded by Moat: a third-party
exception's text (which may quote a header value, a secret) reaches no log, no Temporal
history and no manifest."""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

import pytest
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.exceptions import ApplicationError

from activities import HostGuard, HttpAdapter, http_client
from schemas.capabilities import CapabilitySpec, EffectType, RetrySettings
from schemas.run import (
    AdapterInput,
    AdapterOutput,
)
from tests.support.fakes import FakeProvider, RawProvider, Step
from tests.support.stack import CATALOG, FAST_HTTP, Stack, StackFactory

# Matches none of the redaction's secret formats: only never writing it keeps it out.
SECRET = "k9Zp" + uuid.uuid4().hex


async def test_no_cookie_is_kept_between_calls_or_tenants(
    stack: Stack, provider: FakeProvider
) -> None:
    url = provider.script(
        "/sets-cookie", Step(200, {"ok": True}, headers={"Set-Cookie": f"session={SECRET}"})
    )
    payload = {"method": "GET", "url": url}
    first = await stack.execute("http.request", payload, key="cookie-1")
    assert first.status_code == 200, first.text
    same_tenant = await stack.execute("http.request", payload, key="cookie-2")
    assert same_tenant.status_code == 200, same_tenant.text
    _, other_key = await stack.new_tenant()
    other_tenant = await stack.execute("http.request", payload, key="cookie-1", api_key=other_key)
    assert other_tenant.status_code == 200, other_tenant.text

    calls = provider.calls_to("/sets-cookie")
    assert len(calls) == 3
    assert [c.headers.get("cookie") for c in calls] == [None, None, None]


def _adapter_input(capability: CapabilitySpec, input: dict[str, Any]) -> AdapterInput:
    return AdapterInput(
        tenant_id="ten_test",
        capability=capability,
        input=input,
        idempotency_key="moat-test-key",
        trace_id="0" * 32,
    )


def _assert_secret_absent(err: ApplicationError) -> None:
    assert SECRET not in str(err) and SECRET not in err.message
    assert SECRET not in repr(err.details)
    assert err.__cause__ is None  # Temporal would record a cause's text too


async def test_a_header_value_with_a_newline_is_refused_without_repeating_it(
    provider: FakeProvider,
) -> None:
    url = provider.script("/newline-direct", Step(200, {"ok": True}))
    inp = _adapter_input(
        FAST_HTTP, {"method": "GET", "url": url, "headers": {"X-Api-Key": SECRET + "\n"}}
    )
    async with http_client() as client:
        with pytest.raises(ApplicationError) as caught:
            await HttpAdapter(client, HostGuard([provider.allow_entry]))(inp)
    _assert_secret_absent(caught.value)
    assert caught.value.type == "schema_validation_failed"
    assert caught.value.non_retryable
    assert "headers.X-Api-Key" in caught.value.message
    assert provider.calls_to("/newline-direct") == []


async def test_an_http_library_error_is_reported_by_type_only() -> None:
    # The provider answers a header line HTTP does not allow; the library's error quotes it.
    answer = f"HTTP/1.1 200 OK\r\nX-Debug: {SECRET}\x00\r\nContent-Length: 0\r\n\r\n".encode()
    async with RawProvider(answer) as raw, http_client() as client:
        with pytest.raises(ApplicationError) as caught:
            await HttpAdapter(client, HostGuard([raw.url.removeprefix("http://")]))(
                _adapter_input(FAST_HTTP, {"method": "GET", "url": f"{raw.url}/debug"})
            )
    assert raw.requests == 1
    _assert_secret_absent(caught.value)
    assert caught.value.type == "network_error"
    assert "RemoteProtocolError" in caught.value.message


async def _history(stack: Stack, workflow_id: str, run_id: str) -> bytes:
    history = await stack.client.workflow_service.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(
            namespace=stack.settings.temporal_namespace,
            execution={"workflow_id": workflow_id, "run_id": run_id},
        )
    )
    assert len(history.history.events) > 5
    return history.SerializeToString()


async def _assert_nowhere(stack: Stack, workflow_id: str, run_id: str, caplog: Any) -> None:
    """Not in Temporal's history as the server stores it, nor the manifest, nor a log."""
    assert SECRET.encode() not in await _history(stack, workflow_id, run_id)
    manifest = stack.settings.manifests_dir / stack.tenant_id / run_id / "manifest.json"
    assert SECRET not in await asyncio.to_thread(manifest.read_text)
    assert SECRET not in caplog.text


async def test_a_newline_header_past_the_gateway_leaves_no_secret(
    fast: Stack, provider: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = provider.script("/newline", Step(200, {"ok": True}))
    result = await fast.start_direct(
        FAST_HTTP, {"method": "GET", "url": url, "headers": {"X-Api-Key": SECRET + "\n"}}
    )
    receipt = result.receipt
    assert receipt is not None
    assert receipt.status == "failure" and receipt.error_code == "schema_validation_failed"
    assert provider.calls_to("/newline") == []
    await _assert_nowhere(fast, receipt.workflow_id, receipt.run_id, caplog)


async def test_a_provider_answer_outside_http_leaves_no_secret(
    make_stack: StackFactory, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    answer = f"HTTP/1.1 200 OK\r\nX-Debug: {SECRET}\x00\r\nContent-Length: 0\r\n\r\n".encode()
    async with RawProvider(answer) as raw:
        allow = [raw.url.removeprefix("http://")]
        async with make_stack(catalog=CATALOG, http_allow_hosts=allow) as fast:
            response = await fast.execute("test.http", {"method": "GET", "url": f"{raw.url}/x"})
            assert response.status_code == 502, response.text
            body = response.json()
            assert body["error"]["code"] == "network_error"
            assert raw.requests == FAST_HTTP.retry_settings.max_retries + 1  # retried, as before
            assert SECRET not in response.text
            await _assert_nowhere(fast, body["workflow_id"], body["run_id"], caplog)


BOOM = CapabilitySpec(
    id="test.boom",
    version="1.0.0",
    adapter="boom",
    adapter_id="boom-adapter-v1",
    effect_type=EffectType.API_CALL,
    timeout_seconds=5.0,
    retry=RetrySettings(max_retries=1, base_delay_seconds=0.05),
)


async def test_an_unexpected_adapter_fault_is_classified_and_worded_by_moat(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    attempts = 0

    async def boom(inp: AdapterInput, credential: object = None) -> AdapterOutput:
        nonlocal attempts
        attempts += 1
        raise RuntimeError(f"the provider said {SECRET}")

    async with make_stack(adapters={"boom": boom}) as stack:
        result = await stack.start_direct(BOOM, {"anything": 1})
        receipt = result.receipt
        assert receipt is not None
        assert receipt.status == "failure" and receipt.error_code == "unknown"
        assert attempts == 2  # retried per the capability's policy, like a provider fault
        await _assert_nowhere(stack, receipt.workflow_id, receipt.run_id, caplog)
        assert "RuntimeError" in caplog.text  # the worker log names the fault's type
