"""``moat webhook listen --forward-to URL``: a temporary webhook to a loopback listener,
each signed delivery verified, printed and forwarded (body and ``webhook-*`` headers) to the
developer's URL, the webhook removed on Ctrl-C; a gateway that refuses loopback says what
allows it."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator

import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from starter.devstack import free_port, serve_asgi
from starter.runtime.outbox_relay import OutboxRelay
from tests.support.stack import Stack, StackFactory, repo_root
from tests.support.webhook_endpoint import WebhookEndpoint


@pytest_asyncio.fixture(loop_scope="session")
async def endpoint() -> AsyncIterator[WebhookEndpoint]:
    app = WebhookEndpoint()
    async with serve_asgi(app) as url:
        app.base_url = url
        yield app


def spawn_listen(stack: Stack, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "MOAT_GATEWAY_URL": stack.url, "MOAT_API_KEY": stack.api_key}
    return subprocess.Popen(
        [sys.executable, "-m", "starter.cli", "webhook", "listen", *args],
        cwd=repo_root(),
        env={**env, "COLUMNS": "300"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


async def first_line(proc: subprocess.Popen[str]) -> str:
    assert proc.stdout is not None
    line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
    assert line, proc.stderr.read() if proc.stderr else ""
    return line


async def webhooks_of(stack: Stack) -> list[dict[str, object]]:
    listed = await stack.http.get(
        f"{stack.url}/v1/webhooks", headers={"Authorization": f"Bearer {stack.api_key}"}
    )
    items: list[dict[str, object]] = listed.json()["items"]
    return items


async def test_listen_verifies_prints_and_forwards(
    make_stack: StackFactory,
    app_sessions: async_sessionmaker[AsyncSession],
    endpoint: WebhookEndpoint,
) -> None:
    port = free_port()
    async with make_stack(http_allow_hosts=[f"127.0.0.1:{port}"]) as stack:
        relay = OutboxRelay.from_settings(
            stack.client, app_sessions, stack.settings, tenant_id=stack.tenant_id
        )
        async with relay.running():
            developer = endpoint.script("/dev", 200)
            proc = spawn_listen(stack, "--port", str(port), "--forward-to", developer)
            try:
                ready = await first_line(proc)
                assert ready.startswith(f"listening on http://127.0.0.1:{port}/ for "), ready
                [hook] = await webhooks_of(stack)
                assert hook["url"] == f"http://127.0.0.1:{port}/"

                done = (await stack.execute("demo.echo", {"listen": 1}, key="listen-1")).json()
                [got] = await endpoint.wait_for("/dev", 1)
                assert got.json["type"] == "execution.completed"
                assert got.json["data"]["id"] == done["receipt_id"]
                assert got.headers["webhook-signature"].startswith("v1,")
                assert {"webhook-id", "webhook-timestamp"} <= got.headers.keys()

                # Not Moat's: refused, said, and not forwarded.
                forged = await stack.http.post(
                    f"http://127.0.0.1:{port}/",
                    content=b'{"type":"execution.completed"}',
                    headers={
                        "webhook-id": "msg_forged",
                        "webhook-timestamp": str(int(time.time())),
                        "webhook-signature": "v1,AAAA",
                    },
                )
                assert forged.status_code == 400
            finally:
                proc.send_signal(signal.SIGINT)
                output, errors = await asyncio.to_thread(proc.communicate, timeout=60)
        assert await webhooks_of(stack) == []  # removed on Ctrl-C
    assert proc.returncode == 0, errors
    lines = output.splitlines()
    delivered = next(line for line in lines if got.webhook_id in line)
    assert "execution.completed" in delivered and "signature ok" in delivered
    assert f"→ {developer} 200" in delivered
    assert any("msg_forged" in line and "signature invalid" in line for line in lines)
    assert len(endpoint.to("/dev")) == 1
    assert lines[-1] == f"removed webhook {hook['id']}"


async def test_a_gateway_refusing_loopback_says_what_allows_it(stack: Stack) -> None:
    port = free_port()
    proc = spawn_listen(stack, "--port", str(port))
    _, errors = await asyncio.to_thread(proc.communicate, timeout=60)
    assert proc.returncode == 1
    flat = " ".join(errors.split())
    assert "webhook_url_not_allowed" in flat
    assert f"MOAT_HTTP_ALLOW_HOSTS=127.0.0.1:{port}" in flat and "moat up allows" in flat
    assert await webhooks_of(stack) == []
