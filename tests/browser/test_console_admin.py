"""The tenant-admin pages in Chromium, as a tenant admin uses them: set a strict policy
(the API then answers it), add a connection with a secret that no page shows again,
requeue a dead letter with a statement (the API records it), and every admin page passes
axe-core without a serious or critical violation."""

from __future__ import annotations

from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext, Page

from tests.console.admin_seed import delivery_dead_letter, trust_minutes
from tests.support.console import ThreadStack, open_signed_in

SECRET = "br0wser-Secret-Never-Shown-7e6d5c4b"
SCOPES = ["policy:write", "connections:write", "dead_letters:write", "webhooks:write"]


def api(console: ThreadStack, method: str, path: str, key: str, **body: Any) -> Any:
    answer = console.run(
        console.stack.http.request(
            method, f"{console.url}{path}", headers={"Authorization": f"Bearer {key}"}, **body
        )
    )
    assert answer.status_code < 300, answer.text
    return answer.json()


def assert_accessible(page: Page) -> None:
    violations = Axe().run(page).response["violations"]
    bad = [v for v in violations if v["impact"] in ("serious", "critical")]
    assert not bad, (page.url, [(v["id"], v["impact"], v["nodes"][:2]) for v in bad])


@pytest.fixture(scope="module")
def admin_page(browser: BrowserContext, console_stack: ThreadStack) -> Any:
    key = console_stack.new_key(SCOPES)
    page = open_signed_in(browser, console_stack.url, key, "/console/policy")
    yield key, page
    page.close()


def test_a_strict_policy_set_in_the_console(console_stack: ThreadStack, admin_page: Any) -> None:
    key, page = admin_page
    assert_accessible(page)
    page.get_by_label("Mode").select_option("strict")
    page.get_by_role("button", name="Set the mode").click()
    page.get_by_text("Version 1 stored").wait_for()
    policy = api(console_stack, "GET", "/v1/policy", key)
    assert (policy["mode"], policy["version"]) == ("strict", 1)
    assert policy["created_by"] == f"key:{key.split('_')[1]}"
    assert_accessible(page)  # with the diff of versions 0 and 1


def test_a_connection_secret_never_shown(console_stack: ThreadStack, admin_page: Any) -> None:
    key, page = admin_page
    page.goto(f"{console_stack.url}/console/connections")
    assert_accessible(page)
    page.get_by_label("Type").select_option("http_bearer")
    page.get_by_role("button", name="Next: its settings").click()
    page.get_by_label("Name").fill("billing")
    page.get_by_label("Secret").fill(SECRET)
    page.get_by_role("button", name="Add the connection").click()  # no origin: refused
    page.get_by_text("must name where its secret may be sent").wait_for()
    assert SECRET not in page.content() and page.get_by_label("Secret").input_value() == ""
    assert_accessible(page)
    page.get_by_label("Secret").fill(SECRET)
    page.get_by_label("base_url").fill("https://billing.example.com/api")
    page.get_by_role("button", name="Add the connection").click()
    page.get_by_text("added.").wait_for()
    assert SECRET not in page.content() and SECRET not in page.url
    [made] = api(console_stack, "GET", "/v1/connections", key)["items"]
    assert made["name"] == "billing" and made["fingerprint"] in page.content()


def test_requeue_a_dead_letter_with_a_statement(
    console_stack: ThreadStack, admin_page: Any
) -> None:
    key, page = admin_page
    stack = console_stack.stack
    hook = api(
        console_stack,
        "POST",
        "/v1/webhooks",
        key,
        json={"url": "https://hooks.example.com/x", "events": ["execution.failed"]},
    )
    letter = console_stack.run(delivery_dead_letter(stack, hook["id"]))
    page.goto(f"{console_stack.url}/console/dead-letters")
    assert_accessible(page)
    statement = "The endpoint is fixed; checked its log."
    page.get_by_label("Your statement (required)").fill(statement)
    page.get_by_role("button", name="Requeue").click()
    page.get_by_text(f"Dead letter {letter} requeued").wait_for()
    shown = api(console_stack, "GET", f"/v1/dead-letters/{letter}", key)
    assert (shown["status"], shown["note"]) == ("requeued", statement)


def test_webhooks_and_trust_pages(console_stack: ThreadStack, admin_page: Any) -> None:
    _, page = admin_page
    console_stack.run(trust_minutes(console_stack.stack, "demo.echo", [1.0, 0.5, 0.9]))
    for path, shows in (("/console/webhooks", "Webhooks"), ("/console/trust", "demo.echo")):
        page.goto(f"{console_stack.url}{path}")
        page.get_by_text(shows).first.wait_for()
        assert_accessible(page)
