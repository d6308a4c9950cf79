"""Every id a next command takes is printed whole in `moat`'s list tables, at 80 and at 150
columns: the other columns wrap or shorten instead. Each command runs with its source of
rows replaced (the gateway's page, the operators' database)."""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import nullcontext
from datetime import UTC, datetime
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import typer
from moat_client import PlanEnvelope, PlanResult
from moat_client.models import Receipt, ReceiptPage
from rich.console import Console

from schemas.connections import ConnectionInfo
from schemas.probes import ProbeInfo
from starter.cli import (
    approvals,
    connections,
    dead_letters,
    people,
    plans,
    receipts,
    status,
    trust,
    webhooks,
)

RECEIPT = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"
OTHER_RECEIPT = "0193a1b2-c3d4-7e5f-8a9b-ffffffffffff"
APPROVAL = "apr_0123456789abcdef01234567"
DEAD_LETTER = "0193a1b2-dddd-7e5f-8a9b-0c1d2e3f4a5b"
DELIVERY = "0193a1b2-eeee-7e5f-8a9b-0c1d2e3f4a5b"
PROBE = "prb_0123456789abcdef"
CONNECTION = "con_ABCDEFGHJKMNPQRSTVWX"
PERSON = "person:ada.lovelace-approver"
LONG = "a rather long piece of text that has to wrap or be shortened, not the ids " * 2


NOW = datetime(2026, 11, 26, 23, 0, tzinfo=UTC)


def receipt(receipt_id: str) -> Receipt:
    return Receipt(
        id=receipt_id,
        capability_id="github.create_issue_comment",
        capability_version="1.0.0",
        adapter_id="github",
        tenant_id="ten_0123456789abcdef",
        connection_id=CONNECTION,
        request_id="req",
        timestamp=NOW,
        latency_ms=1234,
        idempotency_key="agent-run-7f3a/step-12/" + "k" * 40,
        input_hash="h",
        status="policy_denied",
        error_code="provider_rate_limited",
        policy_decision_id="p",
        workflow_id="exec/ten_0123456789abcdef/" + "0" * 32,
        run_id="r",
        trace_id="t",
    )


def list_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    page = ReceiptPage(items=[receipt(RECEIPT), receipt(OTHER_RECEIPT)], next_cursor=None)
    client = SimpleNamespace(list_receipts=lambda **_: page)
    monkeypatch.setattr(receipts, "agent_client", lambda _: client)
    monkeypatch.setattr(receipts, "gateway_answers", lambda _: nullcontext())
    receipts.list_receipts(status=None, capability=None, limit=20, as_json=False)


def gateway_page(monkeypatch: pytest.MonkeyPatch, module: ModuleType, item: dict[str, Any]) -> None:
    monkeypatch.setattr(module, "call", lambda *_, **__: {"items": [item], "next_cursor": None})


def list_approvals(monkeypatch: pytest.MonkeyPatch) -> None:
    approval = {
        "id": APPROVAL,
        "receipt_id": RECEIPT,
        "status": "pending",
        "capability_id": "github.create_issue_comment",
        "capability_version": "1.0.0",
        "requested_by": "key_0123456789abcdef (agent on the nightly triage run)",
        "expires_at": "2026-11-27T23:00:00Z",
    }
    gateway_page(monkeypatch, approvals, approval)
    approvals.list_(status=None, limit=50, cursor=None, as_json=False)


def list_dead_letters(monkeypatch: pytest.MonkeyPatch) -> None:
    letter = {
        "id": DEAD_LETTER,
        "subject_id": DELIVERY,
        "created_at": "2026-11-26T23:00:00Z",
        "kind": "webhook_delivery",
        "error_code": "webhook_delivery_failed",
        "status": "open",
        "reason": LONG,
    }
    gateway_page(monkeypatch, dead_letters, letter)
    dead_letters.list_dead_letters(status="open", limit=50, as_json=False)


def list_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    probe = ProbeInfo(
        id=PROBE,
        tenant_id="ten_0123456789abcdef",
        capability_id="github.create_issue_comment",
        capability_version="1.0.0",
        input={"text": LONG},
        connection_id=CONNECTION,
        interval_seconds=300,
        paused=False,
        schedule_id="s",
        created_at=NOW,
    )

    async def rows(*_: Any) -> list[ProbeInfo]:
        return [probe]

    monkeypatch.setattr(trust, "_list", rows)
    trust.list_(tenant="demo", as_json=False)


WEBHOOK = "0193a1b2-ffff-7e5f-8a9b-0c1d2e3f4a5b"


def list_webhooks(monkeypatch: pytest.MonkeyPatch) -> None:
    hook = {
        "id": WEBHOOK,
        "url": "https://hooks.example.com/moat/" + "x" * 60,
        "events": ["execution.succeeded", "execution.failed", "approval.requested"],
        "status": "disabled",
        "disabled_reason": "too many failed deliveries in a row",
        "max_retries": 8,
        "retry_base_seconds": 30.0,
        "previous_secret_expires_at": "2026-11-27T23:00:00Z",
    }
    gateway_page(monkeypatch, webhooks, hook)
    webhooks.list_webhooks(as_json=False)


def list_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    connection = ConnectionInfo(
        id=CONNECTION,
        tenant_id="ten_0123456789abcdef",
        type="github",
        name="the organisation's GitHub app for the triage agent",
        config={},
        fingerprint="hmac:0123456789abcdef",
        last4="abcd",
        key_id="c-01234567",
        created_at=NOW,
        revoked_at=NOW,
    )

    async def rows(*_: Any) -> list[ConnectionInfo]:
        return [connection]

    monkeypatch.setattr(connections, "_list", rows)
    connections.list_(tenant="demo", as_json=False)


def show_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan's steps (its run link, a soft-wrapped line as `moat execute`'s, is left out)."""
    error = {"code": "provider_rate_limited", "message": LONG, "details": {}}
    steps = [
        {"id": "open-the-issue", "status": "compensated", "receipt_id": RECEIPT,
         "compensation_receipt_id": OTHER_RECEIPT},
        {"id": "tell-the-channel-about-it", "status": "failed", "receipt_id": DELIVERY,
         "error": error},
        {"id": "tell-the-customer", "status": "skipped"},
    ]  # fmt: skip
    envelope = PlanEnvelope.model_validate(
        {
            "plan_id": PLAN,
            "status": "failed",
            "steps": [{"capability_id": "github.create_issue_comment", **s} for s in steps],
            "trace_id": "t",
            "error": error,
        }
    )
    client = SimpleNamespace(get_plan=lambda _: PlanResult(502, envelope, False))
    monkeypatch.setattr(plans, "agent_client", lambda _: client)
    monkeypatch.setattr(plans, "gateway_answers", lambda _: nullcontext())
    plans.show(PLAN, as_json=False)


PLAN = "pln_0123456789abcdef0123456789"
UI_LINK = "http://127.0.0.1:8233/namespaces/moat/workflows"


def list_people(monkeypatch: pytest.MonkeyPatch) -> None:
    person = {
        "actor": PERSON,
        "display_name": LONG,
        "scopes": ["approvals:read", "approvals:write", "people:read"],
        "oidc_issuer": "https://login.example.com/realms/" + "r" * 40,
        "oidc_subject": "0123456789abcdef" * 3,
        "slack_user_id": "U0123456789",
        "disabled_at": None,
    }
    gateway_page(monkeypatch, people, person)
    people.list_(as_json=False)


def stack_status(monkeypatch: pytest.MonkeyPatch) -> None:
    from starter.devstack.status import Member, StackStatus

    members = [
        Member(name="postgres", pid=4242421, alive=True, url="postgresql://127.0.0.1:55432/moat"),
        Member(name="Temporal UI", pid=4242422, alive=True, url=UI_LINK, port=8233),
        Member(name="fake webhook", pid=4242423, alive=False, url="http://127.0.0.1:8703"),
    ]
    report = StackStatus(home="/home/someone/projects/moat/.moat", running=True, members=members)
    monkeypatch.setattr(status, "stack_status", lambda _: report)
    with pytest.raises(typer.Exit):
        status.status(as_json=False)


COMMANDS: dict[str, tuple[ModuleType, Callable[[pytest.MonkeyPatch], None], list[str]]] = {
    "status": (status, stack_status, [UI_LINK, "postgresql://127.0.0.1:55432/moat"]),
    "receipts list": (receipts, list_receipts, [RECEIPT, OTHER_RECEIPT]),
    "approvals list": (approvals, list_approvals, [APPROVAL, RECEIPT]),
    "dlq list": (dead_letters, list_dead_letters, [DEAD_LETTER, DELIVERY]),
    "probe list": (trust, list_probes, [PROBE, CONNECTION]),
    "webhook list": (webhooks, list_webhooks, [WEBHOOK]),
    "connection list": (connections, list_connections, [CONNECTION]),
    "people list": (people, list_people, [PERSON]),
    "plan show": (plans, show_plan, [PLAN, RECEIPT, OTHER_RECEIPT, DELIVERY]),
}


@pytest.mark.parametrize("width", [80, 150])
@pytest.mark.parametrize("command", COMMANDS)
def test_ids_print_whole(monkeypatch: pytest.MonkeyPatch, command: str, width: int) -> None:
    module, run, ids = COMMANDS[command]
    buffer = io.StringIO()
    monkeypatch.setattr(module, "out", Console(file=buffer, width=width, color_system=None))
    run(monkeypatch)
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= width, text
    for each in ids:
        assert each in text, f"`moat {command}` at {width} columns cut {each}:\n{text}"


def test_the_consoles_follow_columns_set_after_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tables are drawn at the width of the moment, not the one the module was imported
    with: tests that set COLUMNS must not depend on which test imported the CLI first."""
    from starter.cli.output import err, out

    monkeypatch.setenv("COLUMNS", "61")
    assert (out.width, err.width) == (61, 61)
    monkeypatch.setenv("COLUMNS", "137")
    assert (out.width, err.width) == (137, 137)
