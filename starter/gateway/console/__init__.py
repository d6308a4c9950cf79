"""The web console (``/console``): server-rendered pages for the people who approve agents'
calls and administer a tenant, served by the gateway and bound to the same rules as the API.

- A page module is a file of ``pages/`` with its ``router`` and ``NAV`` entry
  (``pages.discover``); its templates extend ``templates/base.html``.
- A person signs in with an API key (or OpenID Connect) for a short session held in an
  ``HttpOnly``, ``SameSite=Strict`` cookie (``auth``); every form carries the session's
  CSRF token; every page needs the scopes its route declares, as the API's route does.
- Every answer carries a strict Content-Security-Policy (``headers``); scripts and styles
  are the locked, content-hashed files of ``static/`` (``assets``), nothing from elsewhere.
- Refusals (a service's ``MoatError``, a 404) under ``/console`` are pages saying them in
  words, with the API's status and code.
"""

from __future__ import annotations

import inspect
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import RedirectResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from schemas.errors import ErrorCode
from starter.gateway.console import assets, pages
from starter.gateway.console.auth import SESSION_COOKIE, SIGN_IN_PATH, SignInNeeded, clear_cookie
from starter.gateway.console.headers import ConsoleHeaders, is_console
from starter.gateway.console.render import Console, environment, page
from starter.gateway.errors import STATUS
from starter.service import MoatError
from starter.service.console_sessions import Ended

__all__ = ["install"]

_STATUS_WORDS = {
    400: "The request was not understood.",
    404: "There is no such page in the console.",
    405: "This page does not take that method.",
}

_CODES = {404: ErrorCode.NOT_FOUND, 405: ErrorCode.METHOD_NOT_ALLOWED}


def _refused(request: Request, status: int, code: str, message: str) -> Response:
    return page(
        request,
        "refused.html",
        getattr(request.state, "console_principal", None),
        status_code=status,
        title="Refused",
        code=code,
        message=message,
    )


def _sign_in_redirect(request: Request, exc: SignInNeeded) -> Response:
    query = {"next": exc.next_path}
    if exc.why is not Ended.NONE:
        query["why"] = exc.why.value
    answer = RedirectResponse(f"{SIGN_IN_PATH}?{urlencode(query)}", status_code=303)
    clear_cookie(answer, request, SESSION_COOKIE)
    return answer


def _wrap(app: FastAPI, exc_type: Any) -> None:
    """The app's handler of ``exc_type``, answering a refusal page under ``/console``."""
    api_handler = app.exception_handlers[exc_type]

    async def handler(request: Request, exc: Exception) -> Response:
        if not is_console(request.url.path):
            answer = api_handler(request, exc)
            return await answer if inspect.isawaitable(answer) else answer
        if isinstance(exc, MoatError):
            return _refused(request, STATUS.get(exc.code, 500), exc.code, exc.message)
        if isinstance(exc, StarletteHTTPException):
            words = _STATUS_WORDS.get(exc.status_code, "The request was refused.")
            code = _CODES.get(exc.status_code, ErrorCode.BAD_REQUEST)
            return _refused(request, exc.status_code, code, words)
        return _refused(request, 400, ErrorCode.BAD_REQUEST, _STATUS_WORDS[400])

    app.add_exception_handler(exc_type, handler)


def install(app: FastAPI) -> None:
    """Serve the console on ``app``: its pages, assets, headers and refusal pages."""
    found = pages.discover()
    app.state.console = Console(
        templates=environment(),
        assets=assets.load(),
        nav=[p.nav for p in found if p.nav is not None],
    )
    for exc_type in (MoatError, StarletteHTTPException, RequestValidationError):
        _wrap(app, exc_type)

    async def sign_in_needed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInNeeded)
        return _sign_in_redirect(request, exc)

    app.add_exception_handler(SignInNeeded, sign_in_needed)
    for found_page in found:
        app.include_router(found_page.router, include_in_schema=False)
    app.add_middleware(ConsoleHeaders)
