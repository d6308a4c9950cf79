"""Signing in to the console (``/console``) in tests: over HTTP with httpx (``sign_in``),
and in a real browser (``open_signed_in``), as a person does, through the sign-in form.

The browser needs a gateway that answers while the test's Playwright holds the main
thread: ``console_stack`` (module-scoped) runs a whole Moat stack (gateway + worker, the
session's Postgres and Temporal) on an event loop of its own, in a thread, and
``ThreadStack.run(coro)`` runs a coroutine there (set-up, checks)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the first form of a console page."""
    found = CSRF.search(html)
    assert found is not None, html[:2000]
    return found.group(1)


async def sign_in(http: httpx.AsyncClient, base_url: str, api_key: str) -> str:
    """Sign ``http`` (which keeps cookies) in with ``api_key`` through the sign-in form, as
    a browser would; the CSRF token of the session's forms."""
    form = await http.get(f"{base_url}/console/sign-in")
    assert form.status_code == 200, form.text
    signed = await http.post(
        f"{base_url}/console/sign-in",
        data={"csrf_token": csrf_of(form.text), "api_key": api_key, "next": "/console"},
    )
    assert signed.status_code == 303, signed.text
    home = await http.get(f"{base_url}/console")
    assert home.status_code == 200, home.text
    return csrf_of(home.text)


def open_signed_in(context: BrowserContext, base_url: str, api_key: str, path: str = "") -> Page:
    """A new tab of ``context`` signed in to the console with ``api_key`` through the
    sign-in form (typed, as a person does), then at ``path`` (``/console/...``) if given."""
    page = context.new_page()
    page.goto(f"{base_url}/console/sign-in")
    page.get_by_label("API key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/console")
    if path:
        page.goto(f"{base_url}{path}")
    return page
