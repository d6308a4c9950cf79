"""Signing in and out of the console, and its home page.

Signing in exchanges an API key once for a short session (``console_sessions``): the key
is not kept by the browser, only the session's cookie. The sign-in form is guarded against
cross-site posts like every form, by a token it carries that must equal the one in a
pre-session cookie (double submit), since there is no session yet to derive one from.
"""

from __future__ import annotations

import secrets
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response

from starter.gateway.access import needs, public
from starter.gateway.console.auth import (
    CSRF_FIELD,
    SESSION_COOKIE,
    SIGN_IN_PATH,
    SIGNIN_COOKIE,
    CheckedForm,
    SignedIn,
    clear_cookie,
    field,
    safe_next,
    set_cookie,
)
from starter.gateway.console.render import page
from starter.gateway.deps import deps_of
from starter.service import MoatError, console_sessions
from starter.service.console_sessions import Ended

router = APIRouter(prefix="/console")
NAV = None

WHY = {
    Ended.SIGNED_OUT.value: "You are signed out: this session was signed out (here or in "
    "another tab). Sign in again to continue.",
    Ended.EXPIRED.value: "Your session expired. Sign in again to continue.",
    Ended.KEY_REVOKED.value: "The API key this session was opened with has been revoked, "
    "so the session ended. Sign in with a key that is valid.",
    Ended.PERSON_DISABLED.value: "Your access to this tenant was disabled, so the session ended.",
    Ended.UNKNOWN.value: "This browser's session is not known here. Sign in again.",
}
SIGNIN_TOKEN_SECONDS = 3600


def _sign_in_page(
    request: Request, next_path: str, why: str, error: str = "", status_code: int = 200
) -> Response:
    token = request.cookies.get(SIGNIN_COOKIE) or ""
    if len(token) != 43:  # token_urlsafe(32)
        token = secrets.token_urlsafe(32)
    answer = page(
        request,
        "signin.html",
        status_code=status_code,
        title="Sign in",
        csrf_token=token,
        next_path=next_path,
        why=WHY.get(why, ""),
        error=error,
    )
    set_cookie(answer, request, SIGNIN_COOKIE, token, SIGNIN_TOKEN_SECONDS)
    return answer


@router.get("/sign-in", dependencies=[public("the sign-in form")])
async def sign_in_form(
    request: Request,
    next: Annotated[str | None, Query(max_length=500)] = None,
    why: Annotated[str | None, Query(max_length=40)] = None,
) -> Response:
    return _sign_in_page(request, safe_next(next), why or "")


@router.post(
    "/sign-in",
    dependencies=[public("exchanges an API key for a console session; double-submit CSRF")],
)
async def sign_in(request: Request) -> Response:
    form = await request.form(max_files=0, max_fields=10)
    next_path = safe_next(field(form, "next", 500))
    expected = request.cookies.get(SIGNIN_COOKIE)
    if not expected or not console_sessions.same_token(field(form, CSRF_FIELD, 100), expected):
        return _sign_in_page(
            request,
            next_path,
            "",
            "The form's security token is missing or does not match this browser's, so you "
            "were not signed in. Send the form again from this page.",
            status_code=403,
        )
    deps = deps_of(request)
    try:
        opened = await console_sessions.open_for_key(
            deps.sessions, field(form, "api_key", 300), deps.settings.console_session_seconds
        )
    except MoatError as err:
        return _sign_in_page(request, next_path, "", err.message, status_code=401)
    # A browser holds one session: the one it may still hold ends here.
    await console_sessions.revoke(deps.sessions, request.cookies.get(SESSION_COOKIE))
    answer = RedirectResponse(next_path, status_code=303)
    set_cookie(
        answer, request, SESSION_COOKIE, opened.cookie, deps.settings.console_session_seconds
    )
    clear_cookie(answer, request, SIGNIN_COOKIE)
    return answer


@router.post("/sign-out", dependencies=[needs(also="a console session and its form token (CSRF)")])
async def sign_out(request: Request, form: CheckedForm) -> Response:
    await console_sessions.revoke(deps_of(request).sessions, request.cookies.get(SESSION_COOKIE))
    answer = RedirectResponse(f"{SIGN_IN_PATH}?why={Ended.SIGNED_OUT.value}", status_code=303)
    clear_cookie(answer, request, SESSION_COOKIE)
    return answer


@router.get("", dependencies=[needs(also="a console session")])
async def home(request: Request, principal: SignedIn) -> Response:
    return page(request, "home.html", principal, title="Home")
