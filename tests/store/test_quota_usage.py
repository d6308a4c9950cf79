"""The pending-approvals quota counts a waiting call exactly once, whichever moment its
approval row commits: the policy step counts under the quota's lock, but the approval row
is written by the next step, which takes no lock, so the count must not be able to miss a
call whose row commits while it is being taken."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.approvals import approval_id_for
from schemas.quotas import Quota
from store import quotas, tenancy, tenants

DECISION = """
INSERT INTO policy_decisions (id, tenant_id, receipt_id, capability_id, idempotency_key, mode,
  decision, rule_hit, reason, is_synthetic, policy_version)
VALUES (:id, :tenant, :receipt, 'demo.echo', :key, 'strict', 'allow', 'APPROVAL_REQUIRED', '',
  false, 1)
"""
CLAIM = """
INSERT INTO idempotency_keys (tenant_id, idempotency_key, receipt_id, input_hash, workflow_id,
  first_seen_at, expires_at)
VALUES (:tenant, :key, :receipt, 'sha256:x', 'exec/x', :now, :later)
"""
APPROVAL = """
INSERT INTO approvals (id, tenant_id, receipt_id, workflow_id, status, capability_id,
  capability_version, input_hash, policy_version, requested_by, input_key_id, input_sealed,
  requested_at, expires_at)
VALUES (:id, :tenant, :receipt, 'exec/x', 'pending', 'demo.echo', '1', 'sha256:x', 1, 'key:x',
  'k', '\\x00', :now, :later)
"""


async def test_a_waiting_call_is_counted_while_its_approval_row_commits(
    sessions: async_sessionmaker[AsyncSession],
) -> None:
    now = datetime.now(UTC)
    async with sessions.begin() as s:
        tenant = await tenants.create_tenant(s, f"quota-usage-{uuid.uuid4().hex[:8]}")
        receipt = str(uuid.uuid4())
        values = {
            "id": f"pd-{receipt}",
            "tenant": tenant.id,
            "receipt": receipt,
            "key": "waiting",
            "now": now,
            "later": now + timedelta(hours=1),
        }
        await s.execute(text(DECISION), values)
        await s.execute(text(CLAIM), values)

    async def approval_row_commits() -> None:
        async with sessions.begin() as other:
            await tenancy.set_tenant(other, tenant.id)
            await other.execute(text(APPROVAL), values | {"id": approval_id_for(receipt)})

    async with sessions.begin() as s:
        await tenancy.set_tenant(s, tenant.id)
        before = await quotas.usage(s, tenant.id, Quota.PENDING_APPROVALS, now, "another")
        assert before == 1  # reserved by its decision

        # The call's approval row commits right after the count's first statement.
        execute = s.execute
        statements = 0

        async def execute_then_commit_the_row(*args: Any, **kwargs: Any) -> Any:
            nonlocal statements
            answer = await execute(*args, **kwargs)
            statements += 1
            if statements == 1:
                await approval_row_commits()
            return answer

        s.execute = execute_then_commit_the_row  # type: ignore[method-assign]
        during = await quotas.usage(s, tenant.id, Quota.PENDING_APPROVALS, now, "another")
        s.execute = execute  # type: ignore[method-assign]
        assert during == 1, "a call whose approval row committed mid-count was not counted"
        after = await quotas.usage(s, tenant.id, Quota.PENDING_APPROVALS, now, "another")
        assert after == 1  # now counted by its approval row, and only by it
