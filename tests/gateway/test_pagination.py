"""Every list of the API is read in pages: walking a list with a small `limit` and each
page's `next_cursor` yields every item once, in the list's order, the last page says null;
a `limit` over the list's maximum is refused, and so is a cursor the API did not give."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from store import tenancy
from store.models import ApprovalRow, DeadLetterRow, OutboxRow, WebhookDeliveryRow
from tests.gateway.test_policy import ADMIN, bearer, new_key
from tests.support.stack import Stack

SEEDED = 5


async def every_page(http: httpx.AsyncClient, url: str, headers: dict[str, str]) -> list[Any]:
    """Every item of a paginated list, read page by page in the largest pages."""
    items: list[Any] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 200} | ({"cursor": cursor} if cursor else {})
        answer = await http.get(url, params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        items += answer.json()["items"]
        if (cursor := answer.json()["next_cursor"]) is None:
            return items


@dataclass
class Listing:
    """A list route: how to seed it with `SEEDED` items (returns the path to list and the
    ids in the order the list gives them), and its largest `limit`."""

    name: str
    seed: Callable[[Stack, str], Awaitable[tuple[str, list[str]]]]
    max_limit: int = 200
    admin: bool = False
    id_field: str = "id"


async def _created(stack: Stack, key: str, path: str, bodies: list[dict[str, Any]]) -> list[str]:
    ids = []
    for body in bodies:
        made = await stack.http.post(f"{stack.url}{path}", json=body, headers=bearer(key))
        assert made.status_code == 201, made.text
        ids.append(made.json()["id"])
    return ids


async def seed_webhooks(stack: Stack, key: str) -> tuple[str, list[str]]:
    bodies = [
        {"url": f"https://hooks.example.com/{n}", "events": ["execution.failed"]}
        for n in range(SEEDED)
    ]
    return "/v1/webhooks", await _created(stack, key, "/v1/webhooks", bodies)


async def seed_deliveries(stack: Stack, key: str) -> tuple[str, list[str]]:
    [subscription] = await _created(
        stack,
        key,
        "/v1/webhooks",
        [{"url": "https://hooks.example.com/d", "events": ["execution.failed"]}],
    )
    # One instant for all: the id alone orders them, as a tie would.
    at = datetime.now(UTC)
    ids = [f"dlv_{n:02d}_{uuid.uuid4().hex[:8]}" for n in range(SEEDED)]
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        outbox = OutboxRow(
            id=f"obx_{uuid.uuid4().hex}",
            tenant_id=stack.tenant_id,
            subscription_id=subscription,
            event_id="evt",
            event_type="execution.failed",
            aggregate_id="agg",
            payload={},
            occurred_at=at,
            status="delivered",
        )
        s.add(outbox)
        await s.flush()
        for n, delivery_id in enumerate(ids):
            s.add(
                WebhookDeliveryRow(
                    id=delivery_id,
                    tenant_id=stack.tenant_id,
                    outbox_id=outbox.id,
                    subscription_id=subscription,
                    webhook_id="msg",
                    event_type="execution.failed",
                    attempt=n + 1,
                    attempted_at=at,
                    latency_ms=1,
                    outcome="failed",
                )
            )
    return f"/v1/webhooks/{subscription}/deliveries", sorted(ids, reverse=True)


async def seed_dead_letters(stack: Stack, key: str) -> tuple[str, list[str]]:
    ids = [f"dl_{n:02d}_{uuid.uuid4().hex[:8]}" for n in range(SEEDED)]
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        for dl_id in ids:
            s.add(
                DeadLetterRow(
                    id=dl_id,
                    tenant_id=stack.tenant_id,
                    kind="delivery",
                    subject_id="obx",
                    reason="out of attempts",
                )
            )
    return "/v1/dead-letters", sorted(ids, reverse=True)


async def seed_probes(stack: Stack, key: str) -> tuple[str, list[str]]:
    bodies = [{"capability_id": "demo.echo", "interval_seconds": 3600}] * SEEDED
    return "/v1/probes", await _created(stack, key, "/v1/probes", bodies)


async def seed_connections(stack: Stack, key: str) -> tuple[str, list[str]]:
    ids = [
        await stack.add_connection(
            "http_bearer", f"secret-{n}", config={"base_url": "https://api.example.com"}
        )
        for n in range(SEEDED)
    ]
    return "/v1/connections", ids


async def seed_admin_connections(stack: Stack, key: str) -> tuple[str, list[str]]:
    _, ids = await seed_connections(stack, key)
    return f"/v1/admin/tenants/{stack.tenant_id}/connections", ids


async def seed_approvals(stack: Stack, key: str) -> tuple[str, list[str]]:
    now = datetime.now(UTC)
    rows = []
    async with stack.sessions.begin() as s:
        await tenancy.set_tenant(s, stack.tenant_id)
        for n in range(SEEDED):
            # Two share an instant: the id orders them.
            at = now + timedelta(seconds=min(n, 3))
            rows.append((at, f"apr_{uuid.uuid4().hex[:24]}"))
            s.add(
                ApprovalRow(
                    id=rows[-1][1],
                    tenant_id=stack.tenant_id,
                    receipt_id=str(uuid.uuid4()),
                    workflow_id="wf",
                    status="pending",
                    capability_id="demo.echo",
                    capability_version="1.0.0",
                    input_hash="sha256:" + "0" * 64,
                    policy_version=0,
                    requested_by="key:x",
                    input_key_id="k",
                    input_sealed=b"x",
                    requested_at=at,
                    expires_at=at + timedelta(hours=1),
                )
            )
    return "/v1/approvals", [i for _, i in sorted(rows, reverse=True)]


async def seed_policy_versions(stack: Stack, key: str) -> tuple[str, list[str]]:
    for _ in range(SEEDED):
        put = await stack.http.put(
            f"{stack.url}/v1/policy", json={"mode": "standard"}, headers=bearer(key)
        )
        assert put.status_code == 200, put.text
    return "/v1/policy/versions", [str(v) for v in range(SEEDED, 0, -1)]


async def seed_keys(stack: Stack, key: str) -> tuple[str, list[str]]:
    for _ in range(SEEDED - 2):  # besides the stack's key and the test's
        await new_key(stack, ["execute:*"])
    listed = await stack.http.get(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys?limit=200", headers=ADMIN
    )
    ids = [k["id"] for k in listed.json()["items"]]
    assert len(ids) == SEEDED
    return f"/v1/admin/tenants/{stack.tenant_id}/keys", ids


async def seed_tenants(stack: Stack, key: str) -> tuple[str, list[str]]:
    for _ in range(SEEDED):
        await stack.new_tenant()
    # Every tenant of the database, read in the largest pages: the small ones must agree.
    every = await every_page(stack.http, f"{stack.url}/v1/admin/tenants", ADMIN)
    return "/v1/admin/tenants", [t["id"] for t in every]


LISTINGS = [
    Listing("webhooks", seed_webhooks),
    Listing("deliveries", seed_deliveries, max_limit=500),
    Listing("dead_letters", seed_dead_letters, max_limit=500),
    Listing("probes", seed_probes),
    Listing("connections", seed_connections),
    Listing("admin_connections", seed_admin_connections, admin=True),
    Listing("approvals", seed_approvals),
    Listing("policy_versions", seed_policy_versions, id_field="version"),
    Listing("admin_keys", seed_keys, admin=True),
    Listing("admin_tenants", seed_tenants, admin=True),
]


@pytest.mark.parametrize("listing", LISTINGS, ids=[item.name for item in LISTINGS])
async def test_walking_every_list_in_pages(stack: Stack, listing: Listing) -> None:
    key = await new_key(stack, ["*"])
    path, expected = await listing.seed(stack, key)
    headers = ADMIN if listing.admin else bearer(key)
    url = f"{stack.url}{path}"

    walked: list[str] = []
    sizes: list[int] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        answer = await stack.http.get(url, params=params, headers=headers)
        assert answer.status_code == 200, answer.text
        page = answer.json()
        walked += [str(item[listing.id_field]) for item in page["items"]]
        sizes.append(len(page["items"]))
        cursor = page["next_cursor"]
        if cursor is None:
            break
        assert len(sizes) < 1000
    assert walked == expected
    assert all(size == 2 for size in sizes[:-1]) and 1 <= sizes[-1] <= 2

    over = await stack.http.get(url, params={"limit": listing.max_limit + 1}, headers=headers)
    assert over.status_code == 400, over.text
    assert over.json()["error"]["code"] == "schema_validation_failed"
    for bad in ("not-a-cursor", "W3t9XQ", "W251bGwsbnVsbF0"):
        refused = await stack.http.get(url, params={"cursor": bad}, headers=headers)
        assert refused.status_code == 400, (bad, refused.text)
        assert refused.json()["error"]["code"] == "invalid_cursor"
