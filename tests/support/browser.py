"""A real browser for tests: the system's Chromium driven by Playwright, headless, with a
fresh profile, reaching loopback only. Tests that use the ``browser`` fixture open a link
as a person would and read what the page shows once its scripts have run.

Chromium is the distribution's package (``apt-get install -y chromium``), never a browser
Playwright downloads. Without it the browser tests are skipped, and the run says so plainly
(its header, and each skip's reason, name the command that installs it); where
``MOAT_BROWSER_TESTS=required`` (CI: ``.ci/run`` installs Chromium and sets it) they fail
instead. Leave them out on purpose with ``-m "not browser"``."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:  # Playwright is imported by the tests that open a browser, not by all.
    from playwright.sync_api import BrowserContext, Page

CHROMIUM = Path("/usr/bin/chromium")
INSTALL = "apt-get install -y chromium"
ARGS = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # Every host name but loopback's resolves to nothing: a page cannot reach out.
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
)
# How long a page may take to show what a test waits for (the Temporal UI loads its data
# after the page itself, from its API).
SHOW_TIMEOUT_MS = 20_000


def missing_chromium() -> str | None:
    """Why the browser tests cannot run here, with the command that fixes it; None when
    Chromium is installed."""
    if CHROMIUM.exists():
        return None
    return (
        f"Chromium is not installed ({CHROMIUM} is missing): the browser tests open Moat's "
        f"links in it. Install it with `sudo {INSTALL}` (Debian, Ubuntu), or leave these "
        "tests out with `pytest -m 'not browser'`."
    )


def browser_tests_required() -> bool:
    """Whether a missing Chromium fails the browser tests instead of skipping them."""
    return os.environ.get("MOAT_BROWSER_TESTS") == "required"


def pytest_report_header() -> str:
    reason = missing_chromium()
    if reason is None:
        return f"browser tests: in {CHROMIUM}"
    verdict = "FAIL" if browser_tests_required() else "are SKIPPED"
    return f"browser tests {verdict}: {reason}"


@pytest.fixture(scope="module")
def browser() -> Iterator[BrowserContext]:
    """Chromium with a fresh profile, for one test module (each test opens its pages).

    Not for the session: Playwright's sync API keeps an event loop running on the main
    thread while it is started, and the suite's async tests need that thread's loop free,
    so the browser stops with the module that used it."""
    reason = missing_chromium()
    if reason is not None:
        if browser_tests_required():
            pytest.fail(reason, pytrace=False)
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="moat-chromium-") as profile, sync_playwright() as p:
        context = p.chromium.launch_persistent_context(
            profile,
            executable_path=str(CHROMIUM),
            headless=True,
            args=list(ARGS),
        )
        try:
            yield context
        finally:
            context.close()


def shows(
    context: BrowserContext,
    url: str,
    *texts: str,
    headers: Mapping[str, str] | None = None,
) -> str:
    """Open ``url`` in a new tab and wait until its page shows every one of ``texts``; the
    page's text. Fails naming the link, its HTTP status and what the page showed instead."""
    page = context.new_page()
    try:
        if headers:
            page.set_extra_http_headers(dict(headers))
        answer = page.goto(url, wait_until="load")
        status = answer.status if answer is not None else None
        for text in texts:
            try:
                page.get_by_text(text, exact=False).first.wait_for(timeout=SHOW_TIMEOUT_MS)
            except Exception:
                raise AssertionError(
                    f"{url} (HTTP {status}) does not show {text!r}; it shows:\n{_body(page)}"
                ) from None
        return _body(page)
    finally:
        page.close()


def _body(page: Page) -> str:
    try:
        return page.inner_text("body")
    except Exception as exc:
        return f"(no page text: {exc})"
