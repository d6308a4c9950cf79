"""No Notion token at rest: a ``notion`` connection used by a page created (its answer
lost, so the retry's look-up runs too), an update and a refused call: the fake Notion alone
gets the token; no store a run touches holds it (``tests/system/test_secrets.py`` searches
them all: the answers, Postgres rows and files, Temporal's history and its database file,
manifests, logs and spans)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.testing import WorkflowEnvironment

from starter.devstack import EmbeddedPostgres
from starter.devstack.providers import FakeNotion
from tests.support.notion import PROPERTIES, connection_config
from tests.support.stack import ADMIN_KEY, Stack, StackFactory
from tests.system.test_secrets import (
    assert_nowhere_at_rest,
    captured_logs,
    captured_spans,
    temporal_on_disk,
)

__all__ = ["temporal_on_disk"]  # the fixture, shared with the search of every store

NOTION_TOKEN = "ntn_" + uuid.uuid4().hex + uuid.uuid4().hex[:10]


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory,
    notion: FakeNotion,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
) -> AsyncIterator[Stack]:
    allowed = [notion.allow_entry]
    async with make_stack(http_allow_hosts=allowed, temporal_env=temporal_on_disk[0]) as s:
        yield s


async def test_a_notion_token_reaches_no_store(
    stack: Stack,
    notion: FakeNotion,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys",
        json={"scopes": ["execute:*", "connections:write"]},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    writer = {"Authorization": f"Bearer {made.json()['api_key']}"}
    db = notion.add_database(PROPERTIES)
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        created = await stack.http.post(
            f"{stack.url}/v1/connections",
            json={
                "type": "notion",
                "name": "notion",
                "secret": NOTION_TOKEN,
                "config": connection_config(notion),
            },
            headers=writer,
        )
        con = created.json()["id"]
        notion.fail_next(1)
        page = await stack.execute(
            "notion.create_page", {"database_id": db, "title": "Secret-free"}, connection_id=con
        )
        page_id = page.json()["output"]["page_id"]
        update = {"page_id": page_id, "properties": {"Done": {"checkbox": True}}}
        updated = await stack.execute("notion.update_page", update, connection_id=con)
        notion.unshared.add(db)
        refused = await stack.execute(
            "notion.create_page", {"database_id": db, "title": "Not shared"}, connection_id=con
        )
    runs = [page, updated, refused]
    assert created.status_code == 201, created.text
    assert [r.status_code for r in runs] == [200, 200, 502], [r.text for r in runs]
    assert page.json()["output"]["reconciled"] is True
    assert refused.json()["error"]["code"] == "provider_not_found"
    # The token was in play: Notion got it on every call, the look-up's query included.
    sent = {r.headers.get("authorization") for r in notion.requests if r.path.startswith("/v1")}
    assert sent == {f"Bearer {NOTION_TOKEN}"}
    assert any(r.path.endswith("/query") for r in notion.requests)
    for answer in (created, *runs):
        assert NOTION_TOKEN not in answer.text

    await assert_nowhere_at_rest(
        (NOTION_TOKEN,),
        answer=page,
        stack=stack,
        workflows=[(r.json()["workflow_id"], r.json()["run_id"]) for r in runs],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )
