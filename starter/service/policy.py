"""A tenant's policy document: read it, replace it (a new version each time), read its
history. For the tenant's own API, the admin API and the CLI alike.

``bypass`` is refused unless the operators allowed it for the tenant. A rule's budget sets
the tenant's budget of the capability it names, in the same transaction as the version, so
a rule with a budget names one capability exactly (a pattern would name budgets not yet
known).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.errors import ErrorCode
from schemas.pages import Key
from schemas.policy import PATTERN_CHARS, PolicyDocument, PolicyVersion
from schemas.quotas import Quota, QuotaLimits
from schemas.records import PolicyMode
from starter.service import quotas
from starter.service.errors import MoatError
from store import budgets, policy_versions
from store.held import HeldReads
from store.models import Tenant


async def current(session: AsyncSession, tenant: Tenant) -> PolicyVersion:
    """The tenant's policy in force (version 0 before its first document)."""
    return await policy_versions.current(session, tenant.id, tenant)


async def is_strict(session: AsyncSession, tenant_id: str, legacy_mode: str) -> bool:
    """Whether the tenant's policy in force is ``strict`` (``legacy_mode``: its mode before
    it had a document)."""
    row = await policy_versions.latest(session, tenant_id)
    return (row.mode if row is not None else legacy_mode) == PolicyMode.STRICT.value


async def is_strict_held(reads: HeldReads, tenant_id: str, legacy_mode: str) -> bool | None:
    """``is_strict`` in one statement on a held connection (``store.held``); None when it
    was not read there (no held connection free)."""
    read = await policy_versions.latest_mode_held(reads, tenant_id)
    if read is None:
        return None
    (mode,) = read
    return (mode if mode is not None else legacy_mode) == PolicyMode.STRICT.value


async def version(session: AsyncSession, tenant: Tenant, number: int) -> PolicyVersion:
    if number == 0:
        return PolicyVersion(mode=PolicyMode(tenant.policy_mode), version=0)
    row = await policy_versions.get(session, tenant.id, number)
    if row is None:
        raise MoatError(
            ErrorCode.POLICY_VERSION_NOT_FOUND,
            f"The tenant has no policy version {number}; see GET /v1/policy/versions.",
        )
    return policy_versions.to_version(row)


async def history(
    session: AsyncSession, tenant: Tenant, after: Key | None = None, limit: int | None = None
) -> list[PolicyVersion]:
    """The stored versions, newest first."""
    rows = await policy_versions.history(session, tenant.id, after, limit)
    return [policy_versions.to_version(r) for r in rows]


async def replace(
    session: AsyncSession,
    tenant: Tenant,
    document: PolicyDocument,
    created_by: str,
    limits: QuotaLimits | None = None,
) -> PolicyVersion:
    """Store ``document`` as the tenant's next version; it applies to executions checked
    from now on, and makes approvals still pending under an older version stale."""
    if document.mode == PolicyMode.BYPASS and not tenant.allow_bypass:
        raise MoatError(
            ErrorCode.BYPASS_NOT_ALLOWED,
            "This tenant may not use mode 'bypass': an operator must allow it first "
            '(PATCH /v1/admin/tenants/{id} with {"allow_bypass": true}).',
        )
    for index, rule in enumerate(document.rules):
        if rule.budget is not None and PATTERN_CHARS & set(rule.capability):
            raise MoatError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                "A rule with a budget must name one capability, not a pattern.",
                {
                    "errors": [
                        {
                            "loc": ["rules", str(index), "capability"],
                            "msg": "a pattern cannot carry a budget",
                            "type": "value_error",
                        }
                    ]
                },
            )
    await quotas.guard(session, limits, tenant.id, Quota.POLICY_VERSIONS)
    row = await policy_versions.add(
        session, tenant.id, document.mode.value, document.model_dump(mode="json"), created_by
    )
    for rule in document.rules:
        if rule.budget is not None:
            await budgets.set_budget(
                session, tenant.id, rule.capability, rule.budget.limit, rule.budget.period
            )
    return policy_versions.to_version(row)


@dataclass(frozen=True)
class DiffLine:
    """One line of a diff between two versions' documents: ``change`` is ``same``,
    ``added`` or ``removed``; ``old``/``new`` its line numbers on each side (None where it
    is absent)."""

    change: str
    old: int | None
    new: int | None
    text: str


def canonical_text(version: PolicyVersion) -> str:
    """A version's document (mode and rules, every field) as pretty JSON with sorted keys:
    the same document always reads the same, so a diff shows only what changed."""
    document = PolicyDocument.model_validate(version.model_dump(include={"mode", "rules"}))
    return json.dumps(document.model_dump(mode="json"), indent=2, sort_keys=True)


def diff(old: PolicyVersion, new: PolicyVersion) -> list[DiffLine]:
    """The line diff of two versions' canonical texts, every line kept (unchanged ones
    too), in order."""
    a, b = canonical_text(old).splitlines(), canonical_text(new).splitlines()
    lines: list[DiffLine] = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag == "equal":
            lines += [
                DiffLine("same", i + 1, j + 1, a[i])
                for i, j in zip(range(i1, i2), range(j1, j2), strict=True)
            ]
            continue
        lines += [DiffLine("removed", i + 1, None, a[i]) for i in range(i1, i2)]
        lines += [DiffLine("added", None, j + 1, b[j]) for j in range(j1, j2)]
    return lines
