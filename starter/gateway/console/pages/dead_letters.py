"""The console's dead-letters page: what needs a person, as ``GET /v1/dead-letters`` lists
it (kind, age, the last error), and requeue and resolve through the same service with
``dead_letters:write``. A requeue here carries the operator's statement, required, recorded
as the API records its ``note``; an execution is requeued only on the explicit statement
that its effect did not happen (the API's ``effect_did_not_happen``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError

from schemas.errors import ErrorCode
from schemas.scopes import DEAD_LETTERS_WRITE
from schemas.webhooks import DeadLetterStatus, RequeueRequest, ResolveRequest
from starter.gateway.access import needs
from starter.gateway.console.auth import CheckedForm, ConsoleSession, SignedIn, field
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.problems import Problems, problems_of
from starter.gateway.console.render import page
from starter.gateway.deps import deps_of
from starter.gateway.errors import STATUS
from starter.service import MoatError, dead_letters
from starter.service.console_sessions import Principal

router = APIRouter(prefix="/console/dead-letters")
NAV = NavEntry("Dead letters", "/console/dead-letters", order=55)

REQUEUE = needs(
    DEAD_LETTERS_WRITE,
    also="a console session and its form token (CSRF); for an execution, what executing "
    "its capability needs",
)
RESOLVE = needs(DEAD_LETTERS_WRITE, also="a console session and its form token (CSRF)")
LISTED = 200
LetterId = Annotated[str, Path(max_length=80, pattern=r"^[0-9a-f-]{4,36}$")]
Shown = Annotated[str, Query(max_length=10, pattern=r"^(open|requeued|resolved|all)$")]


def age(created_at: datetime, now: datetime) -> str:
    """How long ago, in the largest whole unit."""
    seconds = max(0, int((now - created_at).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


async def _page(
    request: Request,
    principal: Principal,
    session: ConsoleSession,
    shown: str,
    *,
    problems: Problems | None = None,
    failed: str | None = None,
    done: str = "",
) -> Response:
    status = None if shown == "all" else DeadLetterStatus(shown)
    rows = await dead_letters.list_open(session, principal.tenant_id, status, LISTED + 1)
    now = datetime.now(UTC)
    return page(
        request,
        "dead_letters.html",
        principal,
        status_code=STATUS.get(problems.code, 400) if problems else 200,
        title="Dead letters",
        letters=[(d, age(d.created_at, now)) for d in rows[:LISTED]],
        more=len(rows) > LISTED,
        shown=shown,
        can_write=DEAD_LETTERS_WRITE in principal.scopes,
        problems=problems,
        failed=failed,
        done=done,
    )


@router.get("", dependencies=[needs(also="a console session")])
async def list_page(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    status: Shown = "open",
    done: Annotated[str, Query(max_length=80, pattern=r"^[a-z]+ [0-9a-f-]+$")] = "",
) -> Response:
    return await _page(request, principal, session, status, done=done)


def _key_of(principal: Principal) -> str:
    """Requeues and resolutions are recorded with the API key that made them (and a
    requeued execution runs for that key): a session opened with a key is needed."""
    if principal.key_id is None:
        raise MoatError(
            ErrorCode.FORBIDDEN,
            "Requeueing and resolving dead letters is recorded against an API key, and a "
            "requeued execution runs for that key: sign in with an API key to do it.",
        )
    return principal.key_id


@router.post("/{letter_id}/requeue", dependencies=[REQUEUE])
async def requeue(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    form: CheckedForm,
    letter_id: LetterId,
) -> Response:
    statement = field(form, "note", 2000).strip()
    try:
        if not statement:
            raise MoatError(
                ErrorCode.SCHEMA_VALIDATION_FAILED,
                "Say what you checked before requeueing: the statement is recorded with the "
                "requeue.",
                {"errors": [{"loc": ["note"], "msg": "a statement is required"}]},
            )
        body = RequeueRequest(
            note=statement, effect_did_not_happen=field(form, "effect_did_not_happen") == "yes"
        )
        async with session.begin_nested():
            await dead_letters.requeue(
                session,
                principal.tenant_id,
                letter_id,
                body,
                key_id=_key_of(principal),
                restart=deps_of(request).executions.restart,
                scopes=principal.scopes,
            )
    except (ValidationError, MoatError) as err:
        return await _page(
            request, principal, session, "open", problems=problems_of(err), failed=letter_id
        )
    return RedirectResponse(f"/console/dead-letters?done=requeued+{letter_id}", status_code=303)


@router.post("/{letter_id}/resolve", dependencies=[RESOLVE])
async def resolve(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    form: CheckedForm,
    letter_id: LetterId,
) -> Response:
    try:
        body = ResolveRequest(note=field(form, "note", 2000).strip())
        async with session.begin_nested():
            await dead_letters.resolve(
                session, principal.tenant_id, letter_id, body.note, key_id=_key_of(principal)
            )
    except (ValidationError, MoatError) as err:
        return await _page(
            request, principal, session, "open", problems=problems_of(err), failed=letter_id
        )
    return RedirectResponse(f"/console/dead-letters?done=resolved+{letter_id}", status_code=303)
