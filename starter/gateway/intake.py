"""Bodies are worked on only for callers who showed a valid credential, and only as JSON
the canonical form can represent.

FastAPI parses and validates a route's body before any of the route's dependencies run, so
an unauthenticated caller could make the gateway parse whatever it sends. Every route that
takes a body is wrapped here: its credential (a tenant's API key, the admin key, the codec
door's token) is checked first, then the body is read for what FastAPI's parser lets pass
(a member named twice: ``bad_json``, ``service.json_body``), and only then does FastAPI
take it. ``POST /v1/executions`` reads its body itself, and its service verifies the key
before any work on it (``service.executions.auth``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any

from fastapi import APIRouter
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import Scope

from starter.gateway.deps import (
    admin_bearer,
    deps_of,
    require_admin,
    tenant_bearer,
    verified_key,
)
from starter.gateway.routes.codec import require_ui_token
from starter.service import INLINE_BODY_BYTES, json_body

Check = Callable[[Request], Awaitable[None]]


async def _tenant(request: Request) -> None:
    await verified_key(deps_of(request), await tenant_bearer(request))


async def _admin(request: Request) -> None:
    await require_admin(request, await admin_bearer(request))


async def _ui_token(request: Request) -> None:
    await require_ui_token(request, str(request.path_params.get("token", "")))


async def _nobody(request: Request) -> None:
    return None


def _calls(dependant: Dependant) -> Iterator[object]:
    for dep in dependant.dependencies:
        yield dep.call
        yield from _calls(dep)


def _check_of(route: APIRoute) -> Check:
    """How the route's caller proves who they are, strongest door first."""
    calls = set(_calls(route.dependant))
    if require_admin in calls:
        return _admin
    if require_ui_token in calls:
        return _ui_token
    if tenant_bearer in calls:
        return _tenant
    return _nobody


def _json_body(scope: Scope) -> bool:
    """Whether FastAPI will parse the body as JSON (no Content-Type, or a JSON one)."""
    for name, value in scope.get("headers", []):
        if name == b"content-type":
            media: bytes = value.split(b";", 1)[0].strip().lower()
            return media == b"application/json" or (
                media.startswith(b"application/") and media.endswith(b"+json")
            )
    return True


async def _refuse_duplicates(body: bytes) -> None:
    """``bad_json`` for a member named twice; any other fault is FastAPI's to answer, as
    before."""
    try:
        if len(body) <= INLINE_BODY_BYTES:
            json_body.loads(body)
        else:
            await asyncio.to_thread(json_body.loads, body)
    except json_body.DuplicateMember as dup:
        raise json_body.duplicate_member(body, dup.member) from dup
    except (ValueError, RecursionError):
        return


def guard_bodies(router: APIRouter) -> None:
    """Put every body-taking route of ``router`` behind its credential check and the JSON
    check. The route's handler is what FastAPI builds for every app that includes the route
    (``APIRoute.get_route_handler``, the hook FastAPI offers custom routes), so each route
    is guarded once, whichever apps include it."""
    for route in router.routes:
        if not isinstance(route, APIRoute) or route.body_field is None:
            continue
        if getattr(route.get_route_handler, _GUARDED, False):
            continue
        route.get_route_handler = _guarded(route.get_route_handler, _check_of(route))  # type: ignore[method-assign]


_GUARDED = "moat_guarded"
Handler = Callable[[Request], Coroutine[Any, Any, Response]]


def _guarded(build: Callable[[], Handler], check: Check) -> Callable[[], Handler]:
    def get_route_handler() -> Handler:
        handler = build()

        async def guarded(request: Request) -> Response:
            await check(request)
            body = await request.body()  # kept by the request: FastAPI reads it from there
            if body and _json_body(request.scope):
                await _refuse_duplicates(body)
            return await handler(request)

        return guarded

    setattr(get_route_handler, _GUARDED, True)
    return get_route_handler
