"""Who is signed in to the console, and the checks every page and form goes through.

- ``SignedIn``: the principal of the request's console session (``console_sessions``),
  holding the scopes the route declares with ``access.needs`` (403 ``scope_missing``, as
  the API answers, otherwise). No live session: the browser is sent to the sign-in page,
  which says why (signed out, expired, key revoked, person disabled).
- ``CheckedForm``: a POST's form, read only once the session is known and accepted only
  with the session's CSRF token in its ``csrf_token`` field (403 otherwise; nothing is
  changed).
- ``ConsoleSession``: the request's database transaction, scoped to the principal's
  tenant, committed when the page has been rendered.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Request, Response
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.datastructures import FormData

from schemas.errors import ErrorCode
from starter.gateway.access import route_needs
from starter.gateway.deps import deps_of
from starter.service import MoatError, console_sessions, require_scope
from starter.service.console_sessions import Ended, Principal
from store import tenancy

SESSION_COOKIE = "moat_console"
SIGNIN_COOKIE = "moat_console_signin"
COOKIE_PATH = "/console"
CSRF_FIELD = "csrf_token"
SIGN_IN_PATH = "/console/sign-in"
HOME_PATH = "/console"
_NEXT = re.compile(r"^/console(/[A-Za-z0-9._~/-]*)?(\?[A-Za-z0-9._~=&%+-]*)?$")


class SignInNeeded(Exception):
    """No live console session: answered with a redirect to the sign-in page saying
    ``why``, which then leads back to ``next_path``."""

    def __init__(self, why: Ended, next_path: str) -> None:
        super().__init__(why.value)
        self.why = why
        self.next_path = next_path


def safe_next(path: str | None) -> str:
    """``path`` when it is a console page of this gateway, else the console's home (never
    another site: an open redirect would send a person anywhere)."""
    if path and len(path) <= 500 and "//" not in path and ".." not in path and _NEXT.match(path):
        return path
    return HOME_PATH


def secure(request: Request) -> bool:
    """Whether the console's cookies are ``Secure``: the request came over TLS, or the
    settings say a proxy ends TLS in front of the gateway."""
    return request.url.scheme == "https" or deps_of(request).settings.console_behind_tls


def set_cookie(
    response: Response, request: Request, name: str, value: str, max_age: int | None
) -> None:
    """A console cookie: ``HttpOnly``, ``SameSite=Strict``, ``Path=/console``, ``Secure``
    behind TLS."""
    response.set_cookie(
        name,
        value,
        max_age=max_age,
        path=COOKIE_PATH,
        secure=secure(request),
        httponly=True,
        samesite="strict",
    )


def clear_cookie(response: Response, request: Request, name: str) -> None:
    response.delete_cookie(
        name, path=COOKIE_PATH, secure=secure(request), httponly=True, samesite="strict"
    )


async def signed_in(request: Request) -> Principal:
    found = await console_sessions.resolve(
        deps_of(request).sessions, request.cookies.get(SESSION_COOKIE)
    )
    if isinstance(found, Ended):
        back = request.url.path if request.method == "GET" else HOME_PATH
        if request.method == "GET" and request.url.query:
            back += "?" + request.url.query
        raise SignInNeeded(found, safe_next(back))
    request.state.console_principal = found  # the refusal page shows the navigation
    require_scope(found.scopes, *route_needs(request.scope.get("route")))
    return found


SignedIn = Annotated[Principal, Depends(signed_in)]


def csrf_refused() -> MoatError:
    return MoatError(
        ErrorCode.FORBIDDEN,
        "The form's security token is missing or is not this session's, so nothing was "
        "changed. Open the page again and send the form from there.",
        {"reason": "csrf_token"},
    )


async def checked_form(request: Request, principal: SignedIn) -> FormData:
    form = await request.form(max_files=0, max_fields=50)
    presented = form.get(CSRF_FIELD)
    if not isinstance(presented, str) or not console_sessions.same_token(
        presented, principal.csrf_token
    ):
        raise csrf_refused()
    return form


CheckedForm = Annotated[FormData, Depends(checked_form)]


async def _transaction(request: Request, principal: SignedIn) -> AsyncIterator[AsyncSession]:
    async with tenancy.tenant_transaction(deps_of(request).sessions, principal.tenant_id) as s:
        yield s


ConsoleSession = Annotated[AsyncSession, Depends(_transaction, scope="function")]


def field(form: FormData, name: str, max_length: int = 1000) -> str:
    """A text field of a form ('' when absent), cut to ``max_length``."""
    value = form.get(name)
    return value[:max_length] if isinstance(value, str) else ""
