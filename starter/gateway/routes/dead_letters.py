"""Dead-letter routes: one list of what needs a person (deliveries out of attempts,
executions whose effect dead-lettered), requeue and resolve; and the compensating-action
records dead-lettered runs' manifests point at."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from schemas.scopes import DEAD_LETTERS_WRITE
from schemas.webhooks import (
    CompensatingAction,
    DeadLetter,
    DeadLetterList,
    DeadLetterStatus,
    RequeueRequest,
    ResolveRequest,
)
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of
from starter.gateway.errors import documented_errors
from starter.gateway.pages import Cursor, by_creation
from starter.service import dead_letters, pages

router = APIRouter()


@router.get(
    "/v1/dead-letters",
    tags=["dead-letters"],
    summary="Dead letters, newest first",
    response_model=DeadLetterList,
    responses=documented_errors(400, 401, 500),
)
async def list_dead_letters(
    session: TenantSession,
    caller: Caller,
    status: DeadLetterStatus | None = DeadLetterStatus.OPEN,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    cursor: Cursor = None,
) -> DeadLetterList:
    after = pages.after(cursor, (datetime, str))
    rows = await dead_letters.list_open(session, caller.tenant_id, status, limit + 1, after)
    return DeadLetterList(**pages.cut(rows, limit, by_creation))


@router.get(
    "/v1/dead-letters/{dead_letter_id}",
    tags=["dead-letters"],
    summary="One dead letter",
    response_model=DeadLetter,
    responses=documented_errors(400, 401, 404, 500),
)
async def get_dead_letter(
    dead_letter_id: str, session: TenantSession, caller: Caller
) -> DeadLetter:
    return await dead_letters.show(session, caller.tenant_id, dead_letter_id)


@router.post(
    "/v1/dead-letters/{dead_letter_id}/requeue",
    tags=["dead-letters"],
    summary="Try again",
    response_model=DeadLetter,
    responses=documented_errors(400, 401, 403, 404, 409, 500),
    dependencies=[
        needs(DEAD_LETTERS_WRITE, also="for an execution, what executing its capability needs")
    ],
)
async def requeue_dead_letter(
    request: Request,
    dead_letter_id: str,
    body: RequeueRequest,
    session: TenantSession,
    caller: Caller,
) -> DeadLetter:
    """A delivery goes again with its attempts reset and the same `webhook-id`. An
    execution only with `effect_did_not_happen: true`: a new execution under a new key,
    made for this API key (its scopes must cover the capability's, and an approval it
    waits for is this key's request, so another key must decide it)."""
    # The letter stays locked in the request's transaction while its run is started again
    # (Temporal calls answered at once, no wait for the run): a second requeue waits for
    # the lock and finds the letter closed.
    return await dead_letters.requeue(
        session,
        caller.tenant_id,
        dead_letter_id,
        body,
        key_id=caller.key_id,
        restart=deps_of(request).executions.restart,
        scopes=caller.scopes,
    )


@router.post(
    "/v1/dead-letters/{dead_letter_id}/resolve",
    tags=["dead-letters"],
    summary="Close by hand, with a note",
    response_model=DeadLetter,
    responses=documented_errors(400, 401, 403, 404, 409, 500),
    dependencies=[needs(DEAD_LETTERS_WRITE)],
)
async def resolve_dead_letter(
    dead_letter_id: str, body: ResolveRequest, session: TenantSession, caller: Caller
) -> DeadLetter:
    return await dead_letters.resolve(
        session, caller.tenant_id, dead_letter_id, body.note, key_id=caller.key_id
    )


@router.get(
    "/v1/compensating-actions/{action_id}",
    tags=["dead-letters"],
    summary="A dead-lettered run's compensating-action record",
    response_model=CompensatingAction,
    responses=documented_errors(401, 404, 500),
)
async def get_compensating_action(
    action_id: str, session: TenantSession, caller: Caller
) -> CompensatingAction:
    """What was attempted, what is known of the effect, what operators did."""
    return await dead_letters.compensating_action(session, caller.tenant_id, action_id)
