"""The console's connections page: the tenant's connections as ``GET /v1/connections``
lists them (never a secret: a fingerprint and at most the last 4 characters), and adding,
rotating and revoking one through the same service, with ``connections:write``.

A submitted secret goes to the service and nowhere else: a refused form is shown again
with its other fields and an empty secret field, a success is a redirect naming the
connection's id only."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated
from urllib.parse import urlsplit

import httpx
from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import ValidationError
from starlette.datastructures import FormData

from schemas.connections import (
    CONNECTION_ID_PATTERN,
    CONNECTION_TYPE_PATTERN,
    ConnectionKind,
    ConnectionRotate,
    bound_origins,
)
from schemas.errors import ErrorCode
from schemas.registry import connection_kinds
from schemas.scopes import CONNECTIONS_WRITE
from starter.gateway.access import needs
from starter.gateway.console.auth import CheckedForm, ConsoleSession, SignedIn, field
from starter.gateway.console.connection_form import creation, fields_of
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.problems import Problems, problems_of
from starter.gateway.console.render import page
from starter.gateway.deps import deps_of
from starter.gateway.errors import STATUS
from starter.service import MoatError, connections, oauth_connect
from starter.service.console_sessions import Principal
from store.keyrings.connections import ConnectionCipher

router = APIRouter(prefix="/console/connections")
NAV = NavEntry("Connections", "/console/connections", order=40)

READ = needs(also="a console session")
WRITE = needs(CONNECTIONS_WRITE, also="a console session and its form token (CSRF)")
WRITE_FORM = needs(CONNECTIONS_WRITE, also="a console session")
LISTED = 200
ConnectionId = Annotated[str, Path(max_length=64, pattern=CONNECTION_ID_PATTERN)]
KindName = Annotated[str, Query(max_length=40, pattern=CONNECTION_TYPE_PATTERN)]


def _cipher(request: Request) -> ConnectionCipher:
    cipher = deps_of(request).connection_cipher
    if cipher is None:
        raise MoatError(ErrorCode.GATEWAY_ERROR, "This gateway has no connection keyring.")
    return cipher


def _kind(name: str) -> ConnectionKind:
    kind = connection_kinds().get(name)
    if kind is None:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"No connection type {name!r} is installed; the types are "
            f"{', '.join(sorted(connection_kinds()))}.",
        )
    return kind


@router.get("", dependencies=[READ])
async def list_page(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    added: Annotated[str | None, Query(max_length=64, pattern=CONNECTION_ID_PATTERN)] = None,
    rotated: Annotated[str | None, Query(max_length=64, pattern=CONNECTION_ID_PATTERN)] = None,
    revoked: Annotated[str | None, Query(max_length=64, pattern=CONNECTION_ID_PATTERN)] = None,
    connected: Annotated[str | None, Query(max_length=64, pattern=CONNECTION_ID_PATTERN)] = None,
) -> Response:
    rows = await connections.list_all(session, principal.tenant_id, None, LISTED + 1)
    return page(
        request,
        "connections.html",
        principal,
        title="Connections",
        connections=rows[:LISTED],
        origins={c.id: [str(o) for o in bound_origins(c.type, c.config)] for c in rows},
        more=len(rows) > LISTED,
        kinds=sorted(connection_kinds().values(), key=lambda k: k.name),
        can_write=CONNECTIONS_WRITE in principal.scopes,
        done={"added": added, "rotated": rotated, "revoked": revoked, "connected": connected},
    )


def _form_page(
    request: Request,
    principal: Principal,
    kind: ConnectionKind,
    form: FormData | None = None,
    problems: Problems | None = None,
) -> Response:
    # The secret is never put back: only the name and config fields are.
    values = {} if form is None else {k: v for k, v in form.items() if k != "secret"}
    return page(
        request,
        "connection_new.html",
        principal,
        status_code=STATUS.get(problems.code, 400) if problems else 200,
        title=f"Add a connection: {kind.name}",
        kind=kind,
        fields=fields_of(kind),
        values=values,
        problems=problems,
    )


@router.get("/new", dependencies=[WRITE_FORM])
async def new_page(request: Request, principal: SignedIn, type: KindName) -> Response:
    return _form_page(request, principal, _kind(type))


@router.post("", dependencies=[WRITE])
async def add(
    request: Request, principal: SignedIn, session: ConsoleSession, form: CheckedForm
) -> Response:
    kind = _kind(field(form, "type", 40))
    try:
        body = creation(kind, {k: v for k, v in form.items() if isinstance(v, str)})
        async with session.begin_nested():
            made = await connections.add(
                session,
                _cipher(request),
                principal.tenant_id,
                body,
                deps_of(request).settings.quota_limits,
            )
    except (ValidationError, MoatError) as err:
        return _form_page(request, principal, kind, form, problems_of(err))
    return RedirectResponse(f"/console/connections?added={made.id}", status_code=303)


@router.get("/{connection_id}/rotate", dependencies=[WRITE_FORM])
async def rotate_page(
    request: Request, principal: SignedIn, session: ConsoleSession, connection_id: ConnectionId
) -> Response:
    shown = await connections.show(session, principal.tenant_id, connection_id, revoked_too=False)
    return page(
        request,
        "connection_rotate.html",
        principal,
        title="Rotate a secret",
        connection=shown,
        problems=None,
    )


@router.post("/{connection_id}/rotate", dependencies=[WRITE])
async def rotate(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    form: CheckedForm,
    connection_id: ConnectionId,
) -> Response:
    try:
        body = ConnectionRotate.model_validate({"secret": field(form, "secret", 10_000)})
        async with session.begin_nested():
            await connections.rotate(
                session,
                _cipher(request),
                principal.tenant_id,
                connection_id,
                body.secret,
                datetime.now(UTC),
            )
    except (ValidationError, MoatError) as err:
        problems = problems_of(err)
        shown = await connections.show(session, principal.tenant_id, connection_id)
        return page(
            request,
            "connection_rotate.html",
            principal,
            status_code=STATUS.get(problems.code, 400),
            title="Rotate a secret",
            connection=shown,
            problems=problems,
        )
    return RedirectResponse(f"/console/connections?rotated={connection_id}", status_code=303)


@router.get("/{connection_id}/revoke", dependencies=[WRITE_FORM])
async def revoke_page(
    request: Request, principal: SignedIn, session: ConsoleSession, connection_id: ConnectionId
) -> Response:
    """A revocation is final: the form that does it is a page of its own, to confirm."""
    shown = await connections.show(session, principal.tenant_id, connection_id, revoked_too=False)
    return page(
        request, "connection_revoke.html", principal, title="Revoke a connection", connection=shown
    )


@router.post("/{connection_id}/revoke", dependencies=[WRITE])
async def revoke(
    principal: SignedIn, session: ConsoleSession, form: CheckedForm, connection_id: ConnectionId
) -> Response:
    await connections.revoke(session, principal.tenant_id, connection_id, datetime.now(UTC))
    return RedirectResponse(f"/console/connections?revoked={connection_id}", status_code=303)


@router.post("/{connection_id}/connect", dependencies=[WRITE])
async def connect(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    form: CheckedForm,
    connection_id: ConnectionId,
) -> Response:
    """Starts the authorization code flow `moat connection connect` starts, from the
    console: a page that moves on to the provider by itself (the console's CSP lets a form
    lead to the gateway only), and the callback leads back here."""
    settings = deps_of(request).settings
    shown = await connections.show(session, principal.tenant_id, connection_id, revoked_too=False)
    async with httpx.AsyncClient(follow_redirects=False) as http:
        found = await oauth_connect.metadata(
            http, dict(shown.config), list(settings.http_allow_hosts)
        )
    target = await oauth_connect.begin(
        session,
        _cipher(request),
        principal.tenant_id,
        connection_id,
        redirect_uri=oauth_connect.redirect_uri(settings),
        found=found,
        console=True,
    )
    parts = urlsplit(target)
    return page(
        request,
        "oidc_continue.html",
        principal,
        title="Connecting",
        target=target,
        where=f"{parts.scheme}://{parts.netloc}",
    )
