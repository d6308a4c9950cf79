"""The domain rules of floor 3, used by the gateway, the CLI and the MCP server alike.
Services take the caller's session (the caller owns the transaction), return outcomes and
raise ``MoatError(code)``; they know nothing of HTTP.

This module is the face the rooms above use (an import contract holds them to it): the
execute path's front door and what the gateway wires around it, the refusal type, and one
module per topic (``tenants``, ``approvals``, ``webhooks``...), whose functions are the
topic's rules. The execute path's stages (``executions/``) and the helpers below the topics
(``errors``, ``scopes``, ``ratelimit``) are reached through this face only.
"""

from starter.service import (
    alert_routes,
    approval_channels,
    approvals,
    budgets,
    connections,
    console_sessions,
    dead_letters,
    evidence,
    inbox,
    json_body,
    oauth_connect,
    oidc,
    pages,
    people,
    policy,
    prefixes,
    probes,
    quotas,
    slack_interactions,
    tenants,
    translog,
    trust,
    webhooks,
)
from starter.service.errors import MoatError, field_errors
from starter.service.executions.call import AnswerCopy, Call, Outcome
from starter.service.executions.flights import Flights
from starter.service.executions.front import Executions, Shared
from starter.service.executions.hits import HitLedger
from starter.service.executions.ingest import INLINE_BODY_BYTES
from starter.service.executions.keycache import KeyCache
from starter.service.executions.memory import render
from starter.service.executions.status import recorded
from starter.service.plans import PlanAnswer, Plans
from starter.service.ratelimit import RateLimits
from starter.service.scopes import require_scope

__all__ = [
    "INLINE_BODY_BYTES",
    "AnswerCopy",
    "Call",
    "Executions",
    "Flights",
    "HitLedger",
    "KeyCache",
    "MoatError",
    "Outcome",
    "PlanAnswer",
    "Plans",
    "RateLimits",
    "Shared",
    "alert_routes",
    "approval_channels",
    "approvals",
    "budgets",
    "connections",
    "console_sessions",
    "dead_letters",
    "evidence",
    "field_errors",
    "inbox",
    "json_body",
    "oauth_connect",
    "oidc",
    "pages",
    "people",
    "policy",
    "prefixes",
    "probes",
    "quotas",
    "recorded",
    "render",
    "require_scope",
    "slack_interactions",
    "tenants",
    "translog",
    "trust",
    "webhooks",
]
