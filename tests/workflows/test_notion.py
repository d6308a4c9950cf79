"""Notion pages exactly once, end to end: gateway, workflow, the real activities and
Postgres, and the fake Notion.

``notion.create_page`` (reconcile): a page whose answer is lost is found by its mark on
the retry (one page, ``reconciled: true``); a reset of the finished run creates nothing
more; a rate limit is waited out as ``Retry-After`` says. A connection without a mark
property ends ``outcome_unknown`` at once, the page made once. ``notion.update_page``
(natural): an update whose answer is lost, sent again, leaves the same page."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest_asyncio

from schemas.capabilities import BUILTIN_CAPABILITIES, CapabilityCatalog, RetrySettings
from schemas.events import EffectOrigin, EventType, effect_origin
from schemas.notion import CREATE_PAGE, UPDATE_PAGE
from starter.devstack.providers import FakeNotion, Misbehaviour
from store import events as event_log
from store import tenancy
from tests.plans.support import post_plan
from tests.support.notion import PROPERTIES, connection_config
from tests.support.stack import Stack, StackFactory
from tests.workflows.test_replay import manifest_path, reset

RETRY = RetrySettings(max_retries=1, base_delay_seconds=0.05)
CATALOG = CapabilityCatalog(
    (
        *BUILTIN_CAPABILITIES,
        *(
            s.model_copy(update={"timeout_seconds": 2.0, "retry": RETRY})
            for s in (CREATE_PAGE, UPDATE_PAGE)
        ),
    )
)


@pytest_asyncio.fixture(loop_scope="session")
async def stack(make_stack: StackFactory, notion: FakeNotion) -> AsyncIterator[Stack]:
    async with make_stack(catalog=CATALOG, http_allow_hosts=[notion.allow_entry]) as s:
        yield s


async def _connection(stack: Stack, notion: FakeNotion, **config: Any) -> str:
    return await stack.add_connection(
        "notion", "ntn_e2e_token", config=connection_config(notion, **config)
    )


async def _events(stack: Stack, receipt_id: str) -> list[Any]:
    async with stack.sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        return await event_log.events_of(session, stack.tenant_id, receipt_id)


async def test_a_lost_answer_leaves_one_page(stack: Stack, notion: FakeNotion) -> None:
    con = await _connection(stack, notion)
    db = notion.add_database(PROPERTIES)
    notion.fail_next(1, Misbehaviour.DROP)
    r = await stack.execute(
        "notion.create_page", {"database_id": db, "title": "Launch"}, connection_id=con
    )
    assert r.status_code == 200, r.text
    envelope = r.json()
    [page] = notion.pages_in(db)
    assert envelope["status"] == "executed"
    assert envelope["output"] == {"page_id": page["id"], "url": page["url"], "reconciled": True}
    events = await _events(stack, envelope["receipt_id"])
    types = [e.event_type for e in events]
    assert types.count(EventType.TOOL_FAILED) == 1 and types.count(EventType.TOOL_COMPLETED) == 1
    [found] = [e for e in events if e.event_type == EventType.EFFECT_RECONCILED]
    assert found.event_data["found"] is True
    assert effect_origin(events) == EffectOrigin.RECONCILED
    # Once, without a lost answer: a page of its own, looked for by nobody.
    fresh = await stack.execute(
        "notion.create_page", {"database_id": db, "title": "Two"}, connection_id=con
    )
    assert fresh.json()["output"]["reconciled"] is False
    assert len(notion.pages_in(db)) == 2


async def test_a_reset_creates_nothing_more(stack: Stack, notion: FakeNotion) -> None:
    con = await _connection(stack, notion, version="2022-06-28")
    db = notion.add_database(PROPERTIES)
    notion.fail_next(1)
    data = {"database_id": db, "title": "Reset me"}
    first = (await stack.execute("notion.create_page", data, key=db, connection_id=con)).json()
    assert first["status"] == "executed", first
    for kind in ("FirstWorkflowTask", "LastWorkflowTask"):
        run = (await stack.client.get_workflow_handle(first["workflow_id"]).describe()).run_id
        await reset(stack, first["workflow_id"], run, kind)
        assert len(notion.pages_in(db)) == 1
    again = await stack.execute("notion.create_page", data, key=db, connection_id=con)
    assert again.json()["output"]["page_id"] == notion.pages_in(db)[0]["id"]


async def test_without_a_mark_a_lost_answer_is_outcome_unknown(
    stack: Stack, notion: FakeNotion
) -> None:
    con = await _connection(stack, notion, mark=None)
    db = notion.add_database(PROPERTIES)
    notion.fail_next(1)
    posted = len(notion.create_times)
    r = await stack.execute(
        "notion.create_page", {"database_id": db, "title": "?"}, connection_id=con
    )
    envelope = r.json()
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == "outcome_unknown"
    assert len(notion.pages_in(db)) == 1  # made once, never again
    assert len(notion.create_times) == posted + 1
    events = await _events(stack, envelope["receipt_id"])
    assert [e.event_type for e in events].count(EventType.TOOL_CALLED) == 1
    assert effect_origin(events) == EffectOrigin.OUTCOME_UNKNOWN
    manifest = manifest_path(stack, stack.tenant_id, envelope["run_id"]).read_text()
    assert '"outcome_unknown": true' in manifest


async def test_a_rate_limit_waits_for_retry_after(stack: Stack, notion: FakeNotion) -> None:
    con = await _connection(stack, notion)
    db = notion.add_database(PROPERTIES)
    notion.rate_limit(1, 2)  # the first call: the look-up of the database's data source
    started = time.monotonic()
    r = await stack.execute(
        "notion.create_page", {"database_id": db, "title": "Later"}, connection_id=con
    )
    assert r.status_code == 200, r.text
    assert r.json()["output"]["reconciled"] is False
    calls = [c for c in notion.answered if c[0] >= started]
    assert [c[3] for c in calls] == [429, 200, 200, 200, 200]  # GET; GET, query; GET, POST
    assert calls[1][0] - calls[0][0] >= 2.0
    assert len(notion.pages_in(db)) == 1


async def test_an_update_twice_leaves_the_same_page(stack: Stack, notion: FakeNotion) -> None:
    con = await _connection(stack, notion)
    db = notion.add_database(PROPERTIES)
    made = await stack.execute(
        "notion.create_page", {"database_id": db, "title": "T"}, connection_id=con
    )
    page_id = made.json()["output"]["page_id"]
    change = {"page_id": page_id, "properties": {"Status": {"select": {"name": "Done"}}}}
    notion.fail_next(1)
    first = await stack.execute("notion.update_page", change, key=f"a-{db}", connection_id=con)
    second = await stack.execute("notion.update_page", change, key=f"b-{db}", connection_id=con)
    assert first.status_code == second.status_code == 200, first.text
    assert first.json()["receipt_id"] != second.json()["receipt_id"]
    assert first.json()["output"] == second.json()["output"]
    assert first.json()["output"]["archived"] is False
    [page] = notion.pages_in(db)
    assert page["properties"]["Status"]["select"] == {"name": "Done"}
    patches = [c for c in notion.answered if c[1] == "PATCH" and page_id in c[2]]
    assert len(patches) == 3  # the lost one, its retry, the second execution


async def test_capabilities_show_the_notion_strategies(stack: Stack) -> None:
    caps = (await stack.http.get(f"{stack.url}/v1/capabilities")).json()
    shown = {c["id"]: (c["idempotency"], c["connection_types"], c["effect_type"]) for c in caps}
    assert shown["notion.create_page"] == ("reconcile", ["notion"], "SOR_UPDATE")
    assert shown["notion.update_page"] == ("natural", ["notion"], "SOR_UPDATE")


async def test_without_a_mark_a_rate_limit_is_final_and_creates_nothing(
    stack: Stack, notion: FakeNotion
) -> None:
    con = await _connection(stack, notion, mark=None, version="2022-06-28")
    db = notion.add_database(PROPERTIES)
    notion.rate_limit(1, 30)
    r = await stack.execute(
        "notion.create_page", {"database_id": db, "title": "Later"}, connection_id=con
    )
    assert r.status_code == 502, r.text
    error = r.json()["error"]
    assert error["code"] == "provider_rate_limited"
    said = error["details"]["provider_response"]
    assert said["code"] == "rate_limited" and said["retry_after_seconds"] == 30
    assert notion.pages_in(db) == []
    events = await _events(stack, r.json()["receipt_id"])
    assert [e.event_type for e in events].count(EventType.TOOL_CALLED) == 1


async def test_a_plan_undoes_its_page_by_moving_it_to_the_trash(
    stack: Stack, notion: FakeNotion
) -> None:
    """``notion.update_page`` with ``archived: true`` as ``notion.create_page``'s
    compensation, the page's id taken from the step's output (the page's answer lost)."""
    con = await _connection(stack, notion)
    db = notion.add_database(PROPERTIES)
    plan = {
        "on_failure": "compensate",
        "steps": [
            {
                "id": "page",
                "capability_id": "notion.create_page",
                "connection_id": con,
                "input": {"database_id": db, "title": "Draft", "content": ["Body"]},
                "compensate": {
                    "capability_id": "notion.update_page",
                    "connection_id": con,
                    "input": {"page_id": "${steps.page.output.page_id}", "archived": True},
                },
            },
            {
                "id": "status",
                "capability_id": "notion.update_page",
                "connection_id": con,
                "input": {
                    "page_id": "${steps.page.output.page_id}",
                    "properties": {"Nope": {"rich_text": []}},  # refused, for good
                },
            },
        ],
    }
    notion.fail_next(1)  # the page's answer is lost; the retry finds it
    answer = await post_plan(stack, plan, key=f"plan-{db}")
    body = answer.json()
    assert body["status"] == "failed", answer.text
    assert [s["status"] for s in body["steps"]] == ["compensated", "failed"]
    [page] = notion.pages_in(db)
    assert page["in_trash"] is True
    assert body["steps"][0]["output"]["page_id"] == page["id"]
