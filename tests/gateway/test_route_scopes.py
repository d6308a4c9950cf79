"""Every route says what calling it needs (``starter.gateway.access``), the table in
docs/security.md is generated from those declarations, a key writes and reads only what its
scopes say, and a requeued execution acts for the key that requeued it."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from sqlalchemy import select

from schemas.settings import MoatSettings
from starter.gateway.access import (
    ROUTES_END,
    ROUTES_START,
    gateway_table,
    routes_table,
    undeclared_writes,
)
from starter.gateway.app import create_app
from store.models import ApprovalRow
from tests.activities.test_outcomes import post
from tests.gateway.test_policy import bearer, new_key, put_policy
from tests.support.fakes import FakeProvider, Step
from tests.support.stack import CATALOG, Stack, StackFactory, repo_root


def test_every_write_names_what_it_needs(base_settings: MoatSettings) -> None:
    app = create_app(base_settings.model_copy(update={"admin_port": None}))
    assert undeclared_writes(app) == []
    table = routes_table(app)
    for row in (
        "| POST | `/v1/webhooks` | `webhooks:write` |",
        "| DELETE | `/v1/webhooks/{webhook_id}` | `webhooks:write` |",
        "| POST | `/v1/dead-letters/{dead_letter_id}/resolve` | `dead_letters:write` |",
        "| POST | `/v1/probes/{probe_id}/pause` | `probes:write` |",
        "| GET | `/v1/approvals/{approval_id}` | `approvals:read` |",
        "| GET | `/v1/executions/{receipt_id}` | `outputs:read` |",
        "| PUT | `/v1/policy` | `policy:write` |",
        "| POST | `/v1/admin/tenants` | admin key |",
        "| GET | `/v1/receipts` | any key of the tenant |",
    ):
        assert row in table, row


def test_the_readme_route_table_is_the_generated_one() -> None:
    readme = (repo_root() / "docs" / "security.md").read_text()
    if ROUTES_START not in readme or ROUTES_END not in readme:
        pytest.skip(
            f"docs/security.md has no {ROUTES_START} / {ROUTES_END} markers yet: put the "
            "output of `python -m starter.gateway routes` between them"
        )
    written = readme.split(ROUTES_START, 1)[1].split(ROUTES_END, 1)[0]
    assert written.strip() == gateway_table().strip(), (
        "docs/security.md's route table is out of date: run `make docs`"
    )


async def test_a_key_writes_and_reads_only_what_its_scopes_say(stack: Stack) -> None:
    """The reproduction's key (``execute:demo.echo`` only) is refused every write it has no
    scope for, and the reads that expose outputs or approval inputs."""
    narrow = await new_key(stack, ["execute:demo.echo"])
    ran = await stack.execute("demo.echo", {"n": 1}, api_key=narrow)
    assert ran.status_code == 200, ran.text
    receipt_id = ran.json()["receipt_id"]
    some = str(uuid.uuid4())
    hook = {"url": "https://hooks.example.com/in", "events": ["execution.completed"]}
    probe = {"capability_id": "demo.echo", "interval_seconds": 60}
    calls: list[tuple[str, str, dict[str, Any] | None, str]] = [
        ("POST", "/v1/webhooks", hook, "webhooks:write"),
        ("DELETE", "/v1/webhooks/wh_0", None, "webhooks:write"),
        ("POST", "/v1/webhooks/wh_0/rotate-secret", None, "webhooks:write"),
        ("POST", f"/v1/dead-letters/{some}/requeue", {}, "dead_letters:write"),
        ("POST", f"/v1/dead-letters/{some}/resolve", {"note": "n"}, "dead_letters:write"),
        ("POST", "/v1/probes", probe, "probes:write"),
        ("POST", "/v1/probes/prb_00/pause", None, "probes:write"),
        ("POST", "/v1/probes/prb_00/resume", None, "probes:write"),
        ("DELETE", "/v1/probes/prb_00", None, "probes:write"),
        ("GET", "/v1/approvals", None, "approvals:read"),
        ("GET", "/v1/approvals/apr_00", None, "approvals:read"),
        ("GET", f"/v1/executions/{receipt_id}", None, "outputs:read"),
        ("GET", f"/v1/executions/{receipt_id}/manifest", None, "outputs:read"),
    ]
    for method, path, body, scope in calls:
        answer = await stack.http.request(
            method, stack.url + path, json=body, headers=bearer(narrow)
        )
        assert answer.status_code == 403, (method, path, answer.text)
        error = answer.json()["error"]
        assert error["code"] == "scope_missing", (method, path)
        assert error["details"]["missing_scopes"] == [scope], (method, path)
    hooks = await stack.http.get(f"{stack.url}/v1/webhooks", headers=bearer(narrow))
    assert hooks.json()["items"] == []
    # With the read scope, the same key reads its output.
    reader = await new_key(stack, ["execute:demo.echo", "outputs:read"])
    read = await stack.http.get(f"{stack.url}/v1/executions/{receipt_id}", headers=bearer(reader))
    assert read.status_code == 200, read.text


async def _dead_letter(stack: Stack) -> dict[str, Any]:
    for _ in range(300):
        listed = await stack.http.get(f"{stack.url}/v1/dead-letters", headers=bearer(stack.api_key))
        items: list[dict[str, Any]] = listed.json()["items"]
        if items:
            return items[0]
        await asyncio.sleep(0.1)
    raise AssertionError("no dead letter")


async def _approval_of(stack: Stack, receipt_id: str) -> ApprovalRow:
    for _ in range(300):
        async with stack.sessions() as s:
            row = (
                await s.execute(select(ApprovalRow).filter_by(receipt_id=receipt_id))
            ).scalar_one_or_none()
        if row is not None:
            return row
        await asyncio.sleep(0.1)
    raise AssertionError(f"no approval for {receipt_id}")


async def test_a_requeue_acts_for_the_requeuer(
    make_stack: StackFactory, provider: FakeProvider
) -> None:
    """Key B requeues key A's dead-lettered call: B must hold the capability's scopes, the
    new run is B's request, so B cannot approve it itself; another approver can."""
    async with make_stack(catalog=CATALOG, http_allow_hosts=[provider.allow_entry]) as stack:
        target = provider.script("/down", Step(500))
        failed = await stack.execute("test.http", post(target), key="dead")
        assert failed.json()["status"] == "failed", failed.text
        letter = await _dead_letter(stack)
        path = f"{stack.url}/v1/dead-letters/{letter['id']}/requeue"
        statement = {"effect_did_not_happen": True, "note": "checked"}
        writer = await new_key(stack, ["policy:write"])
        await put_policy(
            stack,
            writer,
            {"mode": "strict", "rules": [{"capability": "test.http", "requires_approval": True}]},
        )
        provider.script("/down", Step(201, {"ok": True}))

        narrow = await new_key(stack, ["dead_letters:write", "execute:demo.echo"])
        refused = await stack.http.post(path, json=statement, headers=bearer(narrow))
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["details"]["missing_scopes"] == ["execute:test.http"]

        requeuer = await new_key(stack, ["dead_letters:write", "execute:*", "approvals:write"])
        requeued = await stack.http.post(path, json=statement, headers=bearer(requeuer))
        assert requeued.status_code == 200, requeued.text
        approval = await _approval_of(stack, requeued.json()["requeued_as"])
        assert approval.requested_by == f"key:{requeuer.split('_')[1]}"
        decision = {"input_hash": approval.input_hash, "policy_version": approval.policy_version}
        decide = f"{stack.url}/v1/approvals/{approval.id}/approve"
        own = await stack.http.post(decide, json=decision, headers=bearer(requeuer))
        assert own.status_code == 403, own.text
        assert own.json()["error"]["code"] == "self_approval_forbidden"
        assert len(provider.calls_to("/down")) == 3  # the original attempts only
        other = await new_key(stack, ["approvals:write"])
        approved = await stack.http.post(decide, json=decision, headers=bearer(other))
        assert approved.status_code == 200, approved.text
