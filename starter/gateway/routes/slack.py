"""Approvals in Slack: the tenant's approvals channel (``/v1/approvals/channel``) and the
route Slack's Interactivity Request URL names (``/v1/slack/interactions/{tenant_id}``).

Setting or clearing the channel needs ``policy:write``: it decides where every approval's
call summary is shown and whose authority the announcements run with, which is the
tenant's approval policy, not a decision on one approval (``approvals:write``); the key
setting it must also be able to execute ``slack.post_message`` and
``slack.update_message`` itself. Reading it needs ``approvals:read``. The signing secret is
never shown.

Slack presents no bearer: the interaction route is public and authenticated by Slack's
request signature alone, checked over the raw body (capped) before anything parses it.
Slack waits three seconds for an answer: the decision is awaited for
``ANSWER_WITHIN_SECONDS`` and otherwise continues in the background. A decided approval's
message is replaced with the outcome by the run itself (``slack.update_message``, once per
decision); a refused press changes nothing, and the person is told why through the
interaction's ``response_url`` (an ephemeral answer only they see).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any

import httpx
from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from schemas.errors import ErrorCode
from schemas.scopes import APPROVALS_READ, POLICY_WRITE
from schemas.settings import MoatSettings
from schemas.slack_approvals import ApprovalChannel, ApprovalChannelSet
from starter.gateway.access import needs, public
from starter.gateway.deps import Caller, TenantSession, deps_of, sealer_of
from starter.gateway.errors import EnvelopeJSONResponse as JSONResponse
from starter.gateway.errors import documented_errors
from starter.service import MoatError, approval_channels
from starter.service import slack_interactions as slack

log = logging.getLogger("moat.slack")

router = APIRouter(tags=["approvals"])

ANSWER_WITHIN_SECONDS = 2.0
RESPONSE_TIMEOUT_SECONDS = 5.0
TenantId = Annotated[str, Path(max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")]
# Decisions still running after Slack was answered (kept referenced until they end).
_continuing: set[asyncio.Task[Any]] = set()


@router.put(
    "/v1/approvals/channel",
    summary="Post new approvals to a Slack channel",
    response_model=ApprovalChannel,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[
        needs(
            POLICY_WRITE, also="the scopes to execute slack.post_message and slack.update_message"
        )
    ],
)
async def set_channel(
    request: Request, body: ApprovalChannelSet, session: TenantSession, caller: Caller
) -> ApprovalChannel:
    """Each new approval is posted to `channel` through the Slack connection
    `connection_id`, with Approve / Reject buttons; set the Slack app's Interactivity
    Request URL to the gateway's `interactivity_path`. The announcements run with this
    key's id and scopes. `signing_secret` is never shown again."""
    deps = deps_of(request)
    return await approval_channels.set_channel(session, sealer_of(deps), deps.catalog, caller, body)


@router.get(
    "/v1/approvals/channel",
    summary="The tenant's approvals channel",
    response_model=ApprovalChannel,
    responses=documented_errors(401, 403, 404, 500),
    dependencies=[needs(APPROVALS_READ)],
)
async def show_channel(session: TenantSession, caller: Caller) -> ApprovalChannel:
    return await approval_channels.show(session, caller.tenant_id)


@router.delete(
    "/v1/approvals/channel",
    summary="Stop posting approvals to Slack",
    status_code=204,
    responses=documented_errors(401, 403, 404, 500),
    dependencies=[needs(POLICY_WRITE)],
)
async def clear_channel(session: TenantSession, caller: Caller) -> Response:
    await approval_channels.clear(session, caller.tenant_id)
    return Response(status_code=204)


@router.post(
    "/v1/slack/interactions/{tenant_id}",
    summary="A press of an approval's button in Slack",
    responses=documented_errors(400, 401, 413),
    dependencies=[
        public(
            "Slack sends no bearer; authenticated by Slack's request signature with the "
            "tenant's signing secret"
        )
    ],
)
async def interaction(request: Request, tenant_id: TenantId) -> JSONResponse:
    """Slack's `block_actions` payload, signed (`X-Slack-Signature`,
    `X-Slack-Request-Timestamp`): `401 unauthenticated` unless the signature is the
    tenant's and at most five minutes old. The press decides as the person mapped to the
    Slack user, binding the digest and policy version its button carries."""
    body = await request.body()
    if len(body) > slack.MAX_BODY_BYTES:
        raise MoatError(ErrorCode.PAYLOAD_TOO_LARGE, "Not a Slack interaction: too large.")
    deps = deps_of(request)
    secret = await slack.secret_of(deps.sessions, sealer_of(deps), tenant_id)
    refusal = slack.signature_refusal(
        secret,
        request.headers.get("x-slack-request-timestamp"),
        request.headers.get("x-slack-signature"),
        body,
        time.time(),
    )
    if refusal is not None:
        raise MoatError(ErrorCode.UNAUTHENTICATED, f"Not a request from Slack: {refusal}.")
    press = slack.parse_press(body)
    services = slack.Services(
        deps.sessions, deps.client, sealer_of(deps), deps.executions.start_keys
    )
    task = asyncio.create_task(_decide(services, tenant_id, press, deps.settings))
    done, _ = await asyncio.wait({task}, timeout=ANSWER_WITHIN_SECONDS)
    if not done:
        _keep(task)
        return JSONResponse({"ok": True, "outcome": "deciding"})
    return JSONResponse({"ok": True, **task.result()})


def _keep(task: asyncio.Task[Any]) -> None:
    _continuing.add(task)
    task.add_done_callback(_continuing.discard)


async def _decide(
    services: slack.Services, tenant_id: str, press: slack.Press, settings: MoatSettings
) -> dict[str, str]:
    try:
        said = await slack.decide(services, tenant_id, press)
    except MoatError as err:
        text = f"Not decided ({err.code}): {err.message}"
        _keep(asyncio.create_task(_tell(press, text, settings.slack_response_url_prefix)))
        return {"outcome": "refused", "code": err.code, "message": err.message}
    return {"outcome": "decided", "message": said}


async def _tell(press: slack.Press, text: str, prefix: str) -> None:
    """An ephemeral answer to the person who pressed, through the interaction's
    ``response_url`` (only one under Slack's, ``slack_response_url_prefix``)."""
    url = press.response_url
    if not url or not prefix or not url.startswith(prefix):
        return
    answer = {"response_type": "ephemeral", "replace_original": False, "text": text}
    try:
        async with httpx.AsyncClient(
            timeout=RESPONSE_TIMEOUT_SECONDS, follow_redirects=False
        ) as http:
            await http.post(url, json=answer)
    except httpx.HTTPError as err:
        log.warning("could not answer a Slack press through its response_url: %s", err)
