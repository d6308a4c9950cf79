"""The approvals inbox, as a person reads it: the calls waiting for a decision with their
redacted input and what redaction hid in it, the policy version now in force, a plan's
steps, and the approvals decided lately. Deciding goes through ``approvals.decide``, like
every door.

Reading needs ``approvals:read``, as the API's reads do (the caller checks it)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from schemas.approvals import Approval, ApprovalStatus
from schemas.planrun import PLAN_CAPABILITY
from schemas.redaction import REDACTED
from store import approvals, plans, policy_versions
from store.keyrings.codec import OutputSealer

PENDING_LIMIT = 50
DECIDED_LIMIT = 20


@dataclass(frozen=True)
class Hidden:
    """A place in an input where redaction hid something: the whole value, or a part of a
    text (a secret inside a URL, a token inside a sentence)."""

    path: str
    whole: bool


@dataclass(frozen=True)
class PlanStepShown:
    id: str
    capability_id: str
    status: str
    input: str  # the step's redacted input, as indented JSON


@dataclass(frozen=True)
class Waiting:
    """A pending approval as the inbox shows it."""

    approval: Approval
    input_json: str
    hidden: list[Hidden]
    plan_steps: list[PlanStepShown] = field(default_factory=list)
    is_plan: bool = False


@dataclass(frozen=True)
class Inbox:
    waiting: list[Waiting]
    decided: list[Approval]
    policy_version: int  # the tenant's policy version now in force


def hidden_paths(value: Any, path: str = "") -> Iterator[Hidden]:
    """Every place in ``value`` where redaction left its mark (``[REDACTED]``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from hidden_paths(item, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from hidden_paths(item, f"{path}[{index}]")
    elif isinstance(value, str) and REDACTED in value:
        yield Hidden(path or "(the whole input)", whole=value == REDACTED)


def shown_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


async def _plan_steps(session: AsyncSession, tenant_id: str, plan_id: str) -> list[PlanStepShown]:
    row = await plans.get(session, tenant_id, plan_id)
    if row is None:
        return []
    inputs = {s.get("id"): s.get("input") for s in (row.document or {}).get("steps", [])}
    return [
        PlanStepShown(
            id=str(step.get("id", "")),
            capability_id=str(step.get("capability_id", "")),
            status=str(step.get("status", "")),
            input=shown_json(inputs.get(step.get("id"))),
        )
        for step in row.steps
    ]


async def read(session: AsyncSession, sealer: OutputSealer, tenant_id: str) -> Inbox:
    """The tenant's pending approvals (newest first) and those decided lately."""
    pending = await approvals.listing(
        session, tenant_id, ApprovalStatus.PENDING.value, PENDING_LIMIT
    )
    shown = []
    for row in pending:
        approval = approvals.to_approval(row, sealer)
        steps: list[PlanStepShown] = []
        if approval.capability_id == PLAN_CAPABILITY:
            steps = await _plan_steps(session, tenant_id, approval.receipt_id)
        shown.append(
            Waiting(
                approval=approval,
                input_json=shown_json(approval.input),
                hidden=list(hidden_paths(approval.input)),
                plan_steps=steps,
                is_plan=approval.capability_id == PLAN_CAPABILITY,
            )
        )
    decided: list[Approval] = []
    for status in (ApprovalStatus.APPROVED, ApprovalStatus.REJECTED, ApprovalStatus.EXPIRED):
        rows = await approvals.listing(session, tenant_id, status.value, DECIDED_LIMIT)
        decided += [approvals.to_approval(r) for r in rows]
    decided.sort(key=lambda a: a.decided_at or a.requested_at, reverse=True)
    return Inbox(
        waiting=shown,
        decided=decided[:DECIDED_LIMIT],
        policy_version=await policy_versions.latest_version(session, tenant_id),
    )
