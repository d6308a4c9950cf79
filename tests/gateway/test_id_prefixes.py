"""Ids given as git takes commits: a prefix of 6 characters or more that starts exactly one
id of the caller's tenant stands for it; one that starts several is `id_ambiguous`, naming
them; one that starts none is the kind's not-found. For receipts, approvals and dead
letters through the gateway (and so the CLI), for probes through the service."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from starter.service import MoatError, probes
from store.models import ApprovalRow, DeadLetterRow, ProbeRow
from tests.gateway.test_policy import new_key, put_policy
from tests.support.stack import Stack


def bearer(stack: Stack, key: str | None = None) -> dict[str, str]:
    return {"Authorization": f"Bearer {key or stack.api_key}"}


async def get(stack: Stack, path: str, key: str | None = None) -> tuple[int, dict[str, Any]]:
    answer = await stack.http.get(f"{stack.url}{path}", headers=bearer(stack, key))
    return answer.status_code, answer.json()


def ambiguous(status: int, body: dict[str, Any], *ids: str) -> None:
    assert status == 400, body
    assert body["error"]["code"] == "id_ambiguous", body
    assert set(ids) <= set(body["error"]["details"]["candidates"]), body
    assert all(each in body["error"]["message"] for each in ids), body


async def test_receipts_by_prefix(stack: Stack) -> None:
    ids = []
    for n in range(2):
        answer = await stack.execute("demo.echo", {"n": n}, key=f"prefix-{n}")
        assert answer.status_code == 200, answer.text
        ids.append(answer.json()["receipt_id"])
    # uuid7: ids made within hours of each other share their first 6 characters.
    common = next(ids[0][:n] for n in range(len(ids[0]), 0, -1) if ids[1].startswith(ids[0][:n]))
    assert len(common) >= 6, ids

    status, body = await get(stack, f"/v1/receipts/{ids[0][:24]}")
    assert (status, body.get("id")) == (200, ids[0]), body
    ambiguous(*await get(stack, f"/v1/receipts/{common}"), *ids)
    status, body = await get(stack, "/v1/receipts/ffffffff-ff")
    assert (status, body["error"]["code"]) == (404, "receipt_not_found"), body
    status, body = await get(stack, f"/v1/receipts/{ids[0][:5]}")  # too short to stand for one
    assert (status, body["error"]["code"]) == (404, "receipt_not_found"), body


def approval_row(tenant_id: str, approval_id: str) -> ApprovalRow:
    now = datetime.now(UTC)
    return ApprovalRow(
        id=approval_id,
        tenant_id=tenant_id,
        receipt_id=str(uuid.uuid4()),
        workflow_id="exec/x/y",
        status="pending",
        capability_id="demo.echo",
        capability_version="1.0.0",
        input_hash="sha256:0",
        policy_version=1,
        requested_by="k",
        input_key_id="k",
        input_sealed=b"",
        requested_at=now,
        expires_at=now + timedelta(hours=1),
    )


async def test_approvals_by_prefix(stack: Stack) -> None:
    strict = {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]}
    await put_policy(stack, await new_key(stack, ["policy:write"]), strict)
    held = await stack.execute("demo.echo", {"to": "ops"}, key="prefix-held")
    assert held.status_code == 202, held.text
    approval_id = held.json()["approval"]["id"]

    status, body = await get(stack, f"/v1/approvals/{approval_id[:12]}")
    assert (status, body.get("id")) == (200, approval_id), body

    twins = ["apr_0000aa" + "0" * 18, "apr_0000aa" + "1" * 18]
    async with stack.sessions.begin() as session:
        session.add_all([approval_row(stack.tenant_id, each) for each in twins])
    ambiguous(*await get(stack, "/v1/approvals/apr_0000aa"), *twins)
    status, body = await get(stack, "/v1/approvals/apr_0000ff")
    assert (status, body["error"]["code"]) == (404, "approval_not_found"), body


async def test_dead_letters_by_prefix(stack: Stack) -> None:
    ids = ["0000aaaa-0000-7000-8000-" + "0" * 12, "0000aaaa-0000-7000-8000-" + "1" * 12]
    async with stack.sessions.begin() as session:
        for each in ids:
            session.add(
                DeadLetterRow(
                    id=each,
                    tenant_id=stack.tenant_id,
                    kind="delivery",
                    subject_id=str(uuid.uuid4()),
                    reason="out of attempts",
                    status="open",
                )
            )

    status, body = await get(stack, f"/v1/dead-letters/{ids[1][:28]}")
    assert (status, body.get("id")) == (200, ids[1]), body
    ambiguous(*await get(stack, "/v1/dead-letters/0000aaaa"), *ids)
    status, body = await get(stack, "/v1/dead-letters/0000ffff")
    assert (status, body["error"]["code"]) == (404, "dead_letter_not_found"), body


async def test_probes_by_prefix(stack: Stack) -> None:
    ids = ["prb_0000aa" + "0" * 10, "prb_0000aa" + "1" * 10]
    async with stack.sessions.begin() as session:
        for each in ids:
            session.add(
                ProbeRow(
                    id=each,
                    tenant_id=stack.tenant_id,
                    capability_id="demo.echo",
                    input={},
                    interval_seconds=300,
                )
            )
    async with stack.sessions() as session:
        found = await probes._probe(session, stack.tenant_id, ids[1][:12])
        assert found.id == ids[1]
        with pytest.raises(MoatError) as several:
            await probes._probe(session, stack.tenant_id, "prb_0000aa")
        assert several.value.code == "id_ambiguous"
        assert all(each in several.value.message for each in ids)
        with pytest.raises(MoatError) as none:
            await probes._probe(session, stack.tenant_id, "prb_0000ff")
        assert none.value.code == "probe_not_found"
