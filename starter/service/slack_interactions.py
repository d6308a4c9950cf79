"""A press of an approval's Approve / Reject button in Slack, for the gateway's interaction
route: check Slack's request signature, read the button, find the person behind the Slack
user, and decide through ``approvals.decide`` like every other door.

Slack signs each request with the app's signing secret: ``X-Slack-Signature`` is ``v0=``
and the hex HMAC-SHA256 of ``v0:{X-Slack-Request-Timestamp}:{raw body}``; a timestamp more
than five minutes away is refused (a replay), and the comparison is constant-time. The
decision binds the digest and policy version the button carries, the ones the person was
shown: they are never read again and substituted. The Slack user decides as the tenant's
person mapped to it (``people.slack_user_id``), with that person's scopes; an unmapped or
disabled user, or one without ``approvals:write``, decides nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from pydantic import ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from schemas.approvals import ApprovalDecision
from schemas.errors import ErrorCode
from schemas.scopes import APPROVALS_WRITE, missing_scopes
from schemas.slack_approvals import APPROVE_ACTION, REJECT_ACTION, ButtonValue
from starter.service import approvals, people
from starter.service.errors import MoatError
from store import approval_channels, tenancy
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring

# Slack's own bound on a request's age.
MAX_AGE_SECONDS = 300
# An interaction payload is a few kilobytes; anything much larger is not Slack's.
MAX_BODY_BYTES = 64 * 1024
_ACTIONS: dict[str, approvals.Action] = {APPROVE_ACTION: "approve", REJECT_ACTION: "reject"}


def signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """Slack's ``v0`` signature of a request."""
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret, base, hashlib.sha256).hexdigest()


def signature_refusal(
    secret: bytes | None, timestamp: str | None, presented: str | None, body: bytes, now: float
) -> str | None:
    """Why the request is not Slack's (None: it is). Without a secret (no approvals
    channel) every signature is a mismatch, so the answer tells nobody which tenants have
    one."""
    if not timestamp or not presented:
        return "the request carries no Slack signature"
    try:
        sent = int(timestamp)
    except ValueError:
        return "the request's Slack timestamp is not a number"
    if abs(now - sent) > MAX_AGE_SECONDS:
        return "the request's Slack timestamp is more than five minutes away"
    expected = signature(secret or b"", timestamp, body)
    if secret is None or not hmac.compare_digest(expected.encode(), presented.encode()):
        return "the request's Slack signature does not match"
    return None


async def secret_of(
    sessions: async_sessionmaker[AsyncSession], sealer: OutputSealer, tenant_id: str
) -> bytes | None:
    """The tenant's Slack signing secret, or None without an approvals channel."""
    async with tenancy.tenant_transaction(sessions, tenant_id) as session:
        row = await approval_channels.get(session, tenant_id)
        return None if row is None else approval_channels.signing_secret(sealer, row)


@dataclass(frozen=True)
class Press:
    """One button press: who, which decision, on what, and where to answer."""

    slack_user_id: str
    action: approvals.Action
    button: ButtonValue
    response_url: str | None


def parse_press(body: bytes) -> Press:
    """The press a signed ``block_actions`` payload holds (``bad_request`` otherwise)."""
    try:
        form = parse_qs(body.decode(), strict_parsing=True, max_num_fields=10)
        payload: Any = json.loads(form["payload"][0])
        if payload.get("type") != "block_actions":
            raise ValueError("not a block_actions payload")
        pressed = payload["actions"][0]
        action = _ACTIONS[pressed["action_id"]]
        button = ButtonValue.model_validate_json(pressed["value"])
        user = str(payload["user"]["id"])
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, ValidationError) as err:
        raise MoatError(
            ErrorCode.BAD_REQUEST, "Not a press of a Moat approval button in Slack."
        ) from err
    url = payload.get("response_url")
    return Press(user, action, button, url if isinstance(url, str) else None)


@dataclass(frozen=True)
class Services:
    sessions: async_sessionmaker[AsyncSession]
    client: Client
    sealer: OutputSealer
    start_keys: StartKeyring


async def decide(services: Services, tenant_id: str, press: Press) -> str:
    """Decide as the person the Slack user is; what to tell them. Refusals raise
    ``MoatError`` with the API's code and words."""
    async with tenancy.tenant_transaction(services.sessions, tenant_id) as session:
        person = await people.find_by_slack_user(session, tenant_id, press.slack_user_id)
    if person is None:
        raise MoatError(
            ErrorCode.FORBIDDEN,
            "Your Slack user is not one of this tenant's people, or that person is "
            "disabled: ask a tenant admin to give your person your Slack user id.",
        )
    if missing_scopes(person.scopes, [APPROVALS_WRITE]):
        raise MoatError(
            ErrorCode.SCOPE_MISSING,
            f"{person.actor} does not hold approvals:write, so cannot decide approvals.",
        )
    decided = await approvals.decide(
        services.sessions,
        services.client,
        services.sealer,
        services.start_keys,
        tenant_id=tenant_id,
        approval_id=press.button.approval_id,
        action=press.action,
        decision=ApprovalDecision(
            input_hash=press.button.input_hash,
            policy_version=press.button.policy_version,
            comment="decided in Slack",
        ),
        actor=person.actor,
        actor_scopes=person.scopes,
    )
    return f"{decided.status.value} by {person.actor}"
