"""A worker killed in the middle of a provider call: the retry repeats no side effect."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from sqlalchemy import func, select

from schemas.capabilities import (
    BUILTIN_CAPABILITIES,
    CapabilityCatalog,
)
from schemas.events import RunStatus
from store import events as event_log
from store.models import ReceiptRow
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import Stack, StackFactory, http_variant, repo_root, worker_env

WAIT_0 = {"Prefer": "wait=0"}
SHORT = http_variant("test.short", timeout_seconds=2.0, max_retries=3, base_delay_seconds=0.1)


def spawn_worker(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "starter.cli", "worker"],
        cwd=repo_root(),
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


async def test_worker_killed_mid_call(make_stack: StackFactory, provider: FakeProvider) -> None:
    catalog = CapabilityCatalog((*BUILTIN_CAPABILITIES, SHORT))
    url = provider.script("/crash", Step(200, {"sent": True}, delay=1.0))
    async with make_stack(
        catalog=catalog, with_worker=False, http_allow_hosts=[provider.allow_entry]
    ) as stack:
        env = worker_env(stack, provider)
        first = spawn_worker(env)
        request = asyncio.create_task(
            stack.execute(
                "test.short", {"method": "POST", "url": url, "json": {"x": 1}}, key="crash"
            )
        )
        try:
            for _ in range(300):
                if provider.calls_to("/crash"):
                    break
                assert first.poll() is None, first.stderr.read() if first.stderr else ""
                await asyncio.sleep(0.05)
            assert provider.calls_to("/crash"), "the worker never called the provider"
            first.send_signal(signal.SIGKILL)  # mid-call: the provider is still answering
            first.wait(10)
            second = spawn_worker(env)
            try:
                response = await asyncio.wait_for(request, 60)
            finally:
                second.send_signal(signal.SIGTERM)
                assert second.wait(20) == 0
        finally:
            if first.poll() is None:
                first.kill()
        assert response.status_code == 200, response.text
        calls = provider.calls_to("/crash")
        assert len(calls) == 2  # the killed attempt, and the retry after its timeout
        assert len({c.headers["idempotency-key"] for c in calls}) == 1
        assert len(provider.effects_on("/crash")) == 1  # the provider deduped the retry
        async with stack.sessions() as session:
            n = (
                await session.execute(
                    select(func.count())
                    .select_from(ReceiptRow)
                    .filter_by(tenant_id=stack.tenant_id)
                )
            ).scalar_one()
        assert n == 1


async def test_terminated_run_is_resumed_without_a_second_effect(
    stack: Stack, provider: FakeProvider
) -> None:
    """Ops terminate a run while its provider call is in flight. The next request with the
    key resumes that execution: the same receipt id, hence the same downstream
    Idempotency-Key; the provider's 409 (original still in progress) is waited out, and the
    provider's dedupe leaves one effect."""
    url = provider.script("/terminated", Step(200, {"sent": True}, delay=5.0))
    body = {"method": "POST", "url": url, "json": {"x": 1}}
    first = await stack.execute("http.request", body, key="term", headers_extra=WAIT_0)
    assert first.status_code == 202, first.text
    receipt_id = first.json()["receipt_id"]
    for _ in range(200):
        if provider.calls_to("/terminated"):
            break
        await asyncio.sleep(0.05)
    handle = stack.client.get_workflow_handle(first.json()["workflow_id"])
    await handle.terminate("an operator stopped it")

    again = await stack.execute("http.request", body, key="term")
    assert again.status_code == 200, again.text
    assert again.json()["receipt_id"] == receipt_id
    assert again.json()["receipt"]["status"] == "success"
    calls = provider.calls_to("/terminated")
    assert len({c.headers["idempotency-key"] for c in calls}) == 1
    assert 409 in provider.statuses("/terminated")  # the resumed run met the original
    assert len(provider.effects_on("/terminated")) == 1
    polled = await stack.http.get(
        f"{stack.url}/v1/executions/{receipt_id}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert polled.status_code == 200
    async with stack.sessions() as session:
        receipts = (
            await session.execute(
                select(func.count()).select_from(ReceiptRow).filter_by(tenant_id=stack.tenant_id)
            )
        ).scalar_one()
        assert receipts == 1
        assert await event_log.verify(session, stack.tenant_id) == []
        run = await event_log.get_run(session, stack.tenant_id, receipt_id)
    assert run is not None and run.status == RunStatus.COMPLETED
