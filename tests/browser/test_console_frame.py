"""The console's frame in Chromium: a person signs in with an API key by typing it,
the pages pass axe-core without a serious or critical violation, and a session signed out
elsewhere lands on the sign-in page saying so."""

from __future__ import annotations

from playwright.sync_api import BrowserContext

from tests.support.console import ThreadStack, open_signed_in


def test_sign_in_with_a_key(browser: BrowserContext, console_stack: ThreadStack) -> None:
    page = open_signed_in(browser, console_stack.url, console_stack.stack.api_key)
    try:
        assert console_stack.stack.tenant_id in page.inner_text("body")
    finally:
        page.close()
