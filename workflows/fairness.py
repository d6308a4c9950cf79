"""The task-queue fairness of a tenant's work: one helper for every workflow start and
activity call Moat schedules, so one tenant's backlog never queues another's behind it.

Temporal dispatches backlogged tasks of a task queue round-robin by fairness key, in
proportion to each key's weight (``temporalio.common.Priority``); the key is the tenant.
Activities and child workflows inherit the fields their workflow was started with; setting
the key on each call as well covers runs started without one (a schedule's, an older
gateway's). The weight is left to the start (``MOAT_FAIRNESS_WEIGHT`` and its per-tenant
overrides), which the calls then inherit. Pure: importable in the workflow sandbox.
"""

from __future__ import annotations

import hashlib

from temporalio.common import Priority

# Temporal takes fairness keys of up to 64 bytes.
MAX_FAIRNESS_KEY_BYTES = 64


def fairness_key(tenant_id: str) -> str:
    """The tenant's fairness key: its id, or a digest of an id too long to be one."""
    if len(tenant_id.encode()) <= MAX_FAIRNESS_KEY_BYTES:
        return tenant_id
    return "sha256:" + hashlib.sha256(tenant_id.encode()).hexdigest()[:57]


def tenant_priority(tenant_id: str, weight: float | None = None) -> Priority:
    """The priority of a tenant's workflow or activity: its fairness key, and ``weight``
    when given (None inherits the workflow's, or the server's default of 1.0)."""
    return Priority(fairness_key=fairness_key(tenant_id), fairness_weight=weight)
