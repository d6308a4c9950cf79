"""Signing in to the console with OpenID Connect (when ``console_oidc_issuer`` is set).

``/console/oidc/start`` sends the browser to the provider with a fresh ``state``, ``nonce``
and PKCE verifier, which the browser keeps meanwhile in a signed, short-lived, HttpOnly
cookie. That cookie is ``SameSite=Lax``: the provider sends the browser back with a
cross-site navigation, on which a ``Strict`` cookie is not sent. ``/console/oidc/callback``
checks the answer (``starter.service.oidc``) and opens a console session for the tenant's
person the provider's subject names, with that person's scopes.

Both answer a small page that moves on by itself (``<meta http-equiv="refresh">``, with a
link for whoever has it off) rather than a redirect: the sign-in page's CSP allows forms to
post to the gateway only (a redirect elsewhere after a form counts), and the new session's
``Strict`` cookie is not sent on a redirect that is still part of the provider's cross-site
navigation."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.responses import Response

from schemas.errors import ErrorCode
from schemas.settings import MoatSettings
from starter.gateway.access import public
from starter.gateway.console.auth import (
    COOKIE_PATH,
    SESSION_COOKIE,
    clear_cookie,
    safe_next,
    secure,
    set_cookie,
)
from starter.gateway.console.render import Console, page
from starter.gateway.deps import deps_of
from starter.gateway.errors import STATUS
from starter.service import MoatError, console_sessions
from starter.service.oidc import TRANSIENT_SECONDS, RelyingParty

router = APIRouter(prefix="/console/oidc")
NAV = None

TRANSIENT_COOKIE = "moat_console_oidc"
CALLBACK_PATH = "/console/oidc/callback"
_TENANT = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
# An OAuth error code (RFC 6749 4.1.2.1); anything else the provider's answer says is not shown.
_ERROR = re.compile(r"^[a-z_]{1,40}$")


def configure(app: FastAPI, settings: MoatSettings) -> None:
    """Turn OpenID Connect sign-in on for ``app`` when the settings name an issuer: the
    relying party, and the sign-in page's button."""
    app.state.console_oidc = RelyingParty.of(settings)
    console: Console = app.state.console
    console.templates.globals["oidc_issuer"] = settings.console_oidc_issuer or ""


def _party(request: Request) -> RelyingParty:
    party: RelyingParty | None = getattr(request.app.state, "console_oidc", None)
    if party is None:
        raise MoatError(ErrorCode.NOT_FOUND, "Sign-in with OpenID Connect is not configured here.")
    return party


def _refused(request: Request, message: str, status_code: int = 401) -> Response:
    answer = page(
        request,
        "oidc_refused.html",
        status_code=status_code,
        title="Sign-in refused",
        message=message,
    )
    answer.delete_cookie(TRANSIENT_COOKIE, path=f"{COOKIE_PATH}/oidc", httponly=True)
    return answer


def _callback_url(request: Request) -> str:
    """The redirect URI registered at the provider: this gateway's callback, over HTTPS
    when a proxy ends TLS in front of it."""
    url = request.url.replace(path=CALLBACK_PATH, query="")
    return str(url.replace(scheme="https") if secure(request) else url)


@router.get("/start", dependencies=[public("starts an OpenID Connect sign-in")])
async def start(
    request: Request,
    tenant: Annotated[str, Query(max_length=64)] = "",
    next: Annotated[str | None, Query(max_length=500)] = None,
) -> Response:
    party = _party(request)
    tenant = tenant.strip()
    if not _TENANT.fullmatch(tenant):
        return _refused(request, "Name your tenant (its id, e.g. ten_…) to sign in.", 400)
    try:
        target, sealed = await party.begin(tenant, _callback_url(request), safe_next(next))
    except MoatError as err:
        return _refused(request, err.message, STATUS.get(err.code, 401))
    # A browser holds one session: the one it may still hold ends here, where its Strict
    # cookie is still sent (it is not on the provider's way back).
    await console_sessions.revoke(deps_of(request).sessions, request.cookies.get(SESSION_COOKIE))
    answer = page(
        request, "oidc_continue.html", title="Signing in", target=target, where=party.issuer
    )
    clear_cookie(answer, request, SESSION_COOKIE)
    # Lax, not Strict: the provider sends the browser back cross-site (see the docstring).
    answer.set_cookie(
        TRANSIENT_COOKIE,
        sealed,
        max_age=TRANSIENT_SECONDS,
        path=f"{COOKIE_PATH}/oidc",
        secure=secure(request),
        httponly=True,
        samesite="lax",
    )
    return answer


@router.get("/callback", dependencies=[public("the OpenID provider's answer, checked")])
async def callback(
    request: Request,
    state: Annotated[str, Query(max_length=200)] = "",
    code: Annotated[str, Query(max_length=2000)] = "",
    error: Annotated[str, Query(max_length=200)] = "",
) -> Response:
    party = _party(request)
    deps = deps_of(request)
    try:
        transient = party.unseal(request.cookies.get(TRANSIENT_COOKIE))
        if error:
            said = error if _ERROR.fullmatch(error) else "an error"
            return _refused(request, f"The OpenID provider did not sign you in ({said}).")
        claims = await party.finish(transient, state, code, _callback_url(request))
        person = await party.person(deps.sessions, transient.tenant_id, claims)
        opened = await console_sessions.open_for_person(
            deps.sessions,
            tenant_id=person.tenant_id,
            handle=person.handle,
            scopes=person.scopes,
            lifetime_seconds=deps.settings.console_session_seconds,
        )
    except MoatError as err:
        return _refused(request, err.message, STATUS.get(err.code, 401))
    answer = page(
        request, "oidc_continue.html", title="Signed in", target=transient.next_path, where=""
    )
    set_cookie(
        answer, request, SESSION_COOKIE, opened.cookie, deps.settings.console_session_seconds
    )
    answer.delete_cookie(TRANSIENT_COOKIE, path=f"{COOKIE_PATH}/oidc", httponly=True)
    return answer
