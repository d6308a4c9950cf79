"""Who may call each route: the one place a route says so, and the table made from it.

A tenant route declares the scope it needs in its decorator, ``dependencies=[needs(X)]``;
the tenant key's bearer dependency reads the matched route's declaration and hands it to
``deps.authenticate``, which refuses a key without it (``403 scope_missing``). So the scope
a route enforces and the scope its documentation names are the same object. What a route
needs beyond a fixed scope (executing a capability needs that capability's scopes) is
checked where the capability is known and declared here as ``also``, for the table.

``python -m starter.gateway routes`` prints the Markdown table of every route (method,
path, what it needs), as docs/security.md holds it (``make docs`` writes it there).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from fastapi import Depends, FastAPI
from fastapi.dependencies.models import Dependant
from fastapi.params import Depends as DependsParam
from fastapi.routing import APIRoute, iter_route_contexts
from starlette.routing import BaseRoute

ADMIN = "admin key"
PUBLIC = "none (public)"
ANY_KEY = "any key of the tenant"
ROUTES_START = "<!-- routes:start -->"
ROUTES_END = "<!-- routes:end -->"


@dataclass(frozen=True)
class Needs:
    """A route's declaration (a no-op dependency: ``authenticate`` enforces ``scopes``).

    ``scopes``: fixed scopes every call needs. ``also``: what a call needs besides, checked
    where it is known (a capability's scopes), in words for the table. ``public``: why a
    route takes no credential at all (nothing else may leave a write without a scope)."""

    scopes: tuple[str, ...] = ()
    also: str = ""
    public: str = ""

    async def __call__(self) -> None:
        return None

    def describe(self) -> str:
        if self.public:
            return f"{PUBLIC}: {self.public}"
        parts = [f"`{s}`" for s in self.scopes]
        if self.also:
            parts.append(self.also)
        return " + ".join(parts)


def needs(*scopes: str, also: str = "") -> DependsParam:
    """``dependencies=[needs("webhooks:write")]``: a key calling the route must hold
    ``scopes``; ``also`` documents what the route checks besides."""
    declared: DependsParam = Depends(Needs(tuple(scopes), also))
    return declared


def public(why: str) -> DependsParam:
    """An explicit statement that a route takes no credential, and why."""
    declared: DependsParam = Depends(Needs(public=why))
    return declared


def _declared(dependencies: Sequence[DependsParam]) -> Needs | None:
    for dep in dependencies:
        if isinstance(dep.dependency, Needs):
            return dep.dependency
    return None


def route_needs(route: BaseRoute | None) -> tuple[str, ...]:
    """The fixed scopes the matched route declares (none for an undeclared route)."""
    if not isinstance(route, APIRoute):
        return ()
    declared = _declared(route.dependencies)
    return declared.scopes if declared is not None else ()


def _calls(dependant: Dependant) -> Iterator[Callable[..., object]]:
    for sub in dependant.dependencies:
        if sub.call is not None:
            yield sub.call
        yield from _calls(sub)


def access_of(route: APIRoute) -> str:
    """What calling ``route`` takes, in words: its scope(s), ``admin key``, the codec UI
    token, ``any key of the tenant`` or ``none (public)``."""
    # Imported here: deps imports this module (its bearer reads declarations).
    from starter.gateway.deps import require_admin, tenant_bearer
    from starter.gateway.routes.codec import require_ui_token

    calls = list(_calls(route.dependant))
    if require_admin in calls:
        return ADMIN
    if require_ui_token in calls:
        return "codec UI token (in the path)"
    declared = _declared(route.dependencies)
    if declared is not None and (declared.scopes or declared.also or declared.public):
        return declared.describe()
    if tenant_bearer in calls:
        return ANY_KEY
    return PUBLIC


def api_routes(app: FastAPI) -> Iterator[tuple[str, APIRoute]]:
    """Every API route the app serves, with its full path, in the app's order."""
    for context in iter_route_contexts(app.routes):
        route = context.original_route
        if isinstance(route, APIRoute):
            yield context.path_format or route.path, route


def undeclared_writes(app: FastAPI) -> list[str]:
    """Every route that changes something (not GET/HEAD) and names neither a scope nor
    the admin key nor the codec door, nor says why it is public: should be none."""
    return [
        f"{','.join(sorted(route.methods or ()))} {path}"
        for path, route in api_routes(app)
        if not (route.methods or set()) <= {"GET", "HEAD"} and access_of(route) in (ANY_KEY, PUBLIC)
    ]


def routes_table(app: FastAPI) -> str:
    """The Markdown table of the app's documented routes, in the app's order."""
    lines = ["| Method | Path | Needs |", "|---|---|---|"]
    for path, route in api_routes(app):
        if route.include_in_schema:
            for method in sorted((route.methods or set()) - {"HEAD"}):
                lines.append(f"| {method} | `{path}` | {access_of(route)} |")
    return "\n".join(lines) + "\n"


def gateway_table() -> str:
    """The table of the full gateway (admin routes included), built without connecting."""
    from schemas.settings import MoatSettings
    from starter.gateway.app import create_app

    return routes_table(create_app(MoatSettings(admin_port=None)))
