"""People routes: a tenant's approvers and admins who are not keys (``person:<handle>``).

Reading needs `people:read`; adding, changing and disabling need `people:write`, and a key
gives a person only scopes it holds itself."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path

from schemas.approvals import PERSON_HANDLE_PATTERN, key_actor
from schemas.people import Person, PersonPage, PersonSet
from schemas.scopes import PEOPLE_READ, PEOPLE_WRITE
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession
from starter.gateway.errors import documented_errors
from starter.service import people

router = APIRouter(prefix="/v1/people", tags=["people"])

Handle = Annotated[str, Path(max_length=64, pattern=PERSON_HANDLE_PATTERN)]


@router.get(
    "",
    summary="List the tenant's people, disabled ones included, by handle",
    response_model=PersonPage,
    responses=documented_errors(401, 403, 500),
    dependencies=[needs(PEOPLE_READ)],
)
async def list_people(session: TenantSession, caller: Caller) -> PersonPage:
    """Each person with their scopes and how they are recognised. Needs `people:read`."""
    return PersonPage(items=await people.list_all(session, caller.tenant_id))


@router.put(
    "/{handle}",
    summary="Add a person, or set one's scopes and identities",
    response_model=Person,
    responses=documented_errors(400, 401, 403, 409, 500),
    dependencies=[needs(PEOPLE_WRITE)],
)
async def put_person(
    session: TenantSession, caller: Caller, handle: Handle, body: PersonSet
) -> Person:
    """The key must hold every scope it gives, and every scope a person it changes holds
    (`403 scope_missing`). An OpenID subject or Slack user names one person (`409
    conflict`). A changed person's console sessions end; a disabled one is enabled again.
    Needs `people:write`."""
    return await people.put(
        session,
        caller.tenant_id,
        handle,
        body,
        actor=key_actor(caller.key_id),
        granting=caller.scopes,
        now=datetime.now(UTC),
    )


@router.post(
    "/{handle}/disable",
    summary="Disable a person: sign-in and decisions refused, console sessions ended",
    response_model=Person,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[needs(PEOPLE_WRITE)],
)
async def disable_person(session: TenantSession, caller: Caller, handle: Handle) -> Person:
    """Disabling twice keeps the first time; `PUT` enables the person again. Needs
    `people:write`."""
    return await people.disable(session, caller.tenant_id, handle, datetime.now(UTC))
