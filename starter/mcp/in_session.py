"""Approval in the requester's own MCP session: for a person working with their own
assistant, where the tenant's rule says ``approve_in_session``.

A call that comes back ``accepted``, waiting for such an approval, is put to the person
through MCP elicitation: a form with the call's summary (capability, redacted input,
digest, policy version, expiry). Accept approves, decline rejects, both bound to the digest
and policy version the form showed; cancel leaves the approval pending.

The decision is the requesting key's own, the one exception to separation of duties, so it
must be impossible through any other door: it is marked ``in_session`` and signed with the
start keyring, which this door holds as a gateway does, and the run's activity accepts an
``in_session`` decision only from the requesting key under a rule with
``approve_in_session``. An agent holding the same API key, or a person with ``curl``, has
no keyring: the HTTP routes never mark a decision ``in_session``. So this door exists only
in an MCP server run beside the gateway, with the gateway's settings
(``moat mcp --approve-in-session``); without it, the call answers ``accepted`` with the
approval id, as for a client without elicitation.

The requesting key needs no ``approvals:write`` here: the person assents to their own call,
the rule allows exactly that, and the key could not decide anyone else's call this way.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Literal

import mcp_types as types
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client

from schemas.approvals import Approval, ApprovalDecision, key_actor
from schemas.settings import MoatSettings
from starter.service import approvals
from store import api_keys
from store.db import make_engine, make_sessionmaker
from store.keyrings.codec import OutputSealer
from store.keyrings.start import StartKeyring

# The form: the summary is in its message; the one field is an optional comment.
FORM_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "comment": {
            "type": "string",
            "title": "Comment (optional)",
            "description": "Recorded with your decision.",
            "maxLength": 1000,
        }
    },
}
INPUT_KEY = "moat_approval"
# The most of the redacted input the form shows.
FORM_INPUT_CHARS = 4000
Elicit = Callable[[types.ElicitRequestFormParams], Awaitable[types.ElicitResult]]
Outcome = Literal["approved", "rejected", "pending"]


@dataclass(frozen=True)
class InSessionApprovals:
    """What a gateway holds to decide: Postgres (the application role), Temporal, the
    output sealer (to show the redacted input) and the start keyring (to sign)."""

    sessions: async_sessionmaker[AsyncSession]
    client: Client
    sealer: OutputSealer
    start_keys: StartKeyring

    @classmethod
    @asynccontextmanager
    async def connected(
        cls, settings: MoatSettings, client: Client | None = None
    ) -> AsyncIterator[InSessionApprovals]:
        """The door on the configured Postgres, and on ``client`` or the configured
        Temporal."""
        from starter.runtime.temporal import connect

        engine = make_engine(settings.app_sqlalchemy_url)
        try:
            yield cls(
                make_sessionmaker(engine),
                client or await connect(settings),
                OutputSealer.from_settings(settings),
                StartKeyring.from_settings(settings),
            )
        finally:
            await engine.dispose()

    async def pending(self, api_key: str, approval_id: str) -> Asked | None:
        """The approval to put to the person when it is the presented key's own call's,
        pending, under a rule with ``approve_in_session``; None otherwise."""
        async with self.sessions.begin() as session:
            caller = await api_keys.authenticate(session, api_key, scope=True)
            if caller is None:
                return None
            actor = key_actor(caller.key_id)
            approval = await approvals.in_session_ask(
                session, self.sealer, caller.tenant_id, approval_id, actor
            )
        return None if approval is None else Asked(caller.tenant_id, actor, approval)

    async def decide(self, asked: Asked, answer: types.ElicitResult) -> Outcome:
        """The person's answer to the form, recorded: accept approves, decline rejects,
        bound to the digest and policy version the form showed; cancel leaves it pending.
        A refusal is the service's ``MoatError`` (e.g. ``approval_not_pending``)."""
        if answer.action == "cancel":
            return "pending"
        comment = (answer.content or {}).get("comment")
        action: approvals.Action = "approve" if answer.action == "accept" else "reject"
        decision = ApprovalDecision(
            input_hash=asked.approval.input_hash,
            policy_version=asked.approval.policy_version,
            comment=comment[:1000] if isinstance(comment, str) and comment else None,
        )
        await approvals.decide(
            self.sessions,
            self.client,
            self.sealer,
            self.start_keys,
            tenant_id=asked.tenant_id,
            approval_id=asked.approval.id,
            action=action,
            decision=decision,
            actor=asked.actor,
            in_session=True,
        )
        return "approved" if action == "approve" else "rejected"


@dataclass(frozen=True)
class Asked:
    """An approval this session may decide, as the form shows it."""

    tenant_id: str
    actor: str
    approval: Approval

    def form(self) -> types.ElicitRequestFormParams:
        return types.ElicitRequestFormParams(
            message=form_message(self.approval), requested_schema=FORM_SCHEMA
        )

    def state(self) -> str:
        """What the form showed, echoed by a client that answers it in a later request: an
        answer counts only for the call and digest it was given on."""
        return json.dumps([self.approval.id, self.approval.input_hash])


@dataclass(frozen=True)
class Asking:
    """How one tool call may ask its person: at once over the session's back-channel
    (``elicit``, protocol versions up to 2025-11-25), or (2026-07-28) by answering
    ``input_required`` with the form and reading the person's answer from the retried call
    (``responses``, ``state``)."""

    elicit: Elicit | None = None
    responses: Mapping[str, Any] | None = None
    state: str | None = None

    def answer(self, asked: Asked) -> types.ElicitResult | None:
        """The answer the retried call carries for this form, if any."""
        if self.responses is None or self.state != asked.state():
            return None
        given = self.responses.get(INPUT_KEY)
        try:
            dumped = given.model_dump() if isinstance(given, BaseModel) else given
            return types.ElicitResult.model_validate(dumped)
        except ValidationError:
            return None


def form_message(approval: Approval) -> str:
    """The summary the person decides on."""
    shown = json.dumps(approval.input, ensure_ascii=False, indent=1, sort_keys=True)
    if len(shown) > FORM_INPUT_CHARS:
        # Said plainly: the person decides knowing they did not see all of it.
        shown = (
            f"{shown[:FORM_INPUT_CHARS]}\n… (cut: the input is {len(shown)} characters; "
            f"the first {FORM_INPUT_CHARS} are shown)"
        )
    return (
        f"Your assistant asks to run {approval.capability_id} "
        f"{approval.capability_version}. Your policy asks you to approve it first.\n\n"
        f"Input (secrets hidden as [REDACTED]):\n{shown}\n\n"
        f"Digest: {approval.input_hash}\nPolicy version: {approval.policy_version}\n"
        f"Expires: {approval.expires_at.isoformat()}\n\n"
        "Accept to approve this exact call (it then runs once); decline to reject it; "
        "cancel to leave it waiting."
    )
