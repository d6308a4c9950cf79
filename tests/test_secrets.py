"""No raw secret at rest: searched for in every store a run touches."""

from __future__ import annotations

import asyncio
import logging

import pytest
from sqlalchemy import text
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest

from tests.conftest import Stack
from tests.fakes import FakeProvider, Step

TOKEN = "sk-live-" + "Q7x9" * 8
PASSWORD = "correct-horse-battery-staple-42"


async def test_secrets_never_reach_any_store(
    stack: Stack, provider: FakeProvider, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    url = provider.script("/with-secrets", Step(200, {"echo_password": PASSWORD}))
    payload = {
        "method": "POST",
        "url": url,
        "headers": {"Authorization": f"Bearer {TOKEN}"},
        "json": {"user": "ada", "password": PASSWORD},
    }
    response = await stack.execute("http.request", payload, key="secret-run")
    assert response.status_code == 200, response.text
    # The provider really got the secrets: they were in play.
    call = provider.calls_to("/with-secrets")[0]
    assert call.headers["authorization"] == f"Bearer {TOKEN}"
    assert call.body["password"] == PASSWORD
    body = response.json()

    # The HTTP answer.
    assert TOKEN not in response.text and PASSWORD not in response.text

    # Every table in Postgres, every row, as text.
    async with stack.sessions() as s:
        tables = (
            (await s.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")))
            .scalars()
            .all()
        )
        assert "receipts" in tables
        for table in tables:
            rows = (await s.execute(text(f'SELECT t::text FROM "{table}" t'))).scalars().all()
            for row in rows:
                assert TOKEN not in row and PASSWORD not in row, table

    # Temporal's stored history, as the server holds it (no codec applied).
    history = await stack.client.workflow_service.get_workflow_execution_history(
        GetWorkflowExecutionHistoryRequest(
            namespace=stack.settings.temporal_namespace,
            execution={"workflow_id": body["workflow_id"], "run_id": body["run_id"]},
        )
    )
    raw = history.SerializeToString()
    assert len(history.history.events) > 5
    assert TOKEN.encode() not in raw and PASSWORD.encode() not in raw
    assert b"binary/encrypted" in raw

    # The run manifest (kept for years): tool parameters and outputs are redacted.
    manifest = stack.settings.manifests_dir / stack.tenant_id / body["run_id"] / "manifest.json"
    text_of_manifest = await asyncio.to_thread(manifest.read_text)
    assert TOKEN not in text_of_manifest and PASSWORD not in text_of_manifest
    assert '"user": "ada"' in text_of_manifest  # what is not secret is kept

    # Logs of gateway, worker and activities in this process.
    assert TOKEN not in caplog.text and PASSWORD not in caplog.text
