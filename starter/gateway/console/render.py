"""Server-rendered pages: Jinja2 templates of ``templates/`` with autoescape on (every
value is escaped unless a template says otherwise, and none does with data), rendered with
what the base template needs (the navigation the principal's scopes open, the asset URLs
and integrity hashes, the CSRF field), answered ``no-store``."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from jinja2 import Environment, PackageLoader, StrictUndefined, pass_context
from jinja2.runtime import Context
from markupsafe import Markup, escape

from starter.gateway.console.assets import Asset
from starter.gateway.console.nav import NavEntry, visible
from starter.service.console_sessions import Principal

CSRF_FIELD = "csrf_token"


@dataclass
class Console:
    """What the console's pages share (``request.app.state.console``)."""

    templates: Environment
    assets: dict[str, Asset]
    nav: list[NavEntry] = field(default_factory=list)


@pass_context
def csrf_input(context: Context) -> Markup:
    """``{{ csrf_input() }}``: the hidden field carrying the session's CSRF token, for
    every form that posts."""
    token = context.get(CSRF_FIELD) or ""
    return Markup('<input type="hidden" name="{}" value="{}">').format(CSRF_FIELD, escape(token))


def when(value: datetime | None) -> str:
    """A time as people read it, in UTC."""
    if value is None:
        return ""
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def time_left(until: datetime | None, now: datetime | None = None) -> str:
    """``4 min 10 s left`` / ``expired``."""
    if until is None:
        return ""
    seconds = int((until - (now or datetime.now(UTC))).total_seconds())
    if seconds <= 0:
        return "expired"
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min left"
    return f"{minutes} min {secs} s left" if minutes else f"{secs} s left"


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("starter.gateway.console", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.globals["csrf_input"] = csrf_input
    env.filters["when"] = when
    env.filters["time_left"] = time_left
    return env


def console_of(request: Request) -> Console:
    console: Console = request.app.state.console
    return console


def page(
    request: Request,
    template: str,
    principal: Principal | None = None,
    *,
    status_code: int = 200,
    title: str = "",
    **context: Any,
) -> HTMLResponse:
    """The page ``template`` rendered for ``principal`` (None on the sign-in page): the
    base template's navigation, who is signed in, the assets and the CSRF token come with
    it."""
    console = console_of(request)
    held = principal.scopes if principal is not None else ()
    csrf = context.pop(CSRF_FIELD, principal.csrf_token if principal is not None else "")
    html = console.templates.get_template(template).render(
        request_path=request.url.path,
        principal=principal,
        nav=visible(console.nav, held) if principal is not None else [],
        asset=console.assets.__getitem__,
        title=title,
        **{CSRF_FIELD: csrf},
        **context,
    )
    return HTMLResponse(html, status_code=status_code, headers={"Cache-Control": "no-store"})
