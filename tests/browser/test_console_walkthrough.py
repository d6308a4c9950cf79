"""docs/console.md's walk-through, as a new user follows it: ``moat up``, the console
opened in Chromium, signed in with the demo approver key the banner prints, a strict policy
stored on the Policy page, a call made by the agent's demo key from the CLI, approved in
the inbox with the keyboard, and its manifest shown verified by the browser, naming the
approver."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext

from tests.support.browser import SHOW_TIMEOUT_MS
from tests.support.console import open_signed_in
from tests.support.up import LocalStack, local_stack

POLICY = {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]}
INPUT = {"to": "ops", "api_token": "s3cret-walkthrough"}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with local_stack(tmp_path_factory.mktemp("walkthrough")) as stack:
        yield stack


def key_id(api_key: str) -> str:
    return api_key.split("_")[1]


def test_the_walkthrough_approves_in_the_browser_and_verifies_the_manifest(
    up: LocalStack, browser: BrowserContext
) -> None:
    gateway = up.url("gateway_port")
    assert f"{gateway}/console" in up.banner
    approver = Path(up.home, "demo_approver_key").read_text().strip()
    assert key_id(approver) in up.banner  # the banner folds the key at 80 columns
    page = open_signed_in(browser, gateway, approver, "/console/policy")
    try:
        # 2. A strict policy, stored on the Policy page.
        page.get_by_label("Policy document (JSON)").fill(json.dumps(POLICY))
        page.get_by_role("button", name="Store as a new version").click()
        page.get_by_text("Version 1 stored").wait_for(timeout=SHOW_TIMEOUT_MS)

        # 3. The agent's call, from the CLI with the demo key: held for a person.
        held = up.moat("execute", "demo.echo", "--input", json.dumps(INPUT), "--json")
        envelope = json.loads(held.stdout)
        assert envelope["status"] == "accepted", held.stdout + held.stderr
        approval_id = envelope["approval"]["id"]

        # 4. The inbox shows it, redacted; 5. approved with the keyboard alone.
        page.get_by_role("link", name="Approvals").click()
        card = page.locator(f"article#{approval_id}")
        card.wait_for(timeout=SHOW_TIMEOUT_MS)
        assert envelope["approval"]["input_hash"] in card.inner_text()
        assert INPUT["api_token"] not in page.content()
        page.locator(f"#comment-{approval_id}").focus()
        page.keyboard.type("walk-through")
        page.keyboard.press("Tab")
        page.keyboard.press("Enter")
        page.get_by_text(f"Approval {approval_id} approved.").wait_for(timeout=SHOW_TIMEOUT_MS)

        # 6. The execution's manifest, verified in the browser, names the approver.
        # The run finishes and writes its manifest moments after the decision.
        check = page.locator("[data-manifest-check]")
        deadline = time.monotonic() + SHOW_TIMEOUT_MS / 1000
        while True:
            page.goto(f"{gateway}/console/executions/{envelope['receipt_id']}")
            if check.count() or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        check.get_by_text("Signature verified").wait_for(timeout=SHOW_TIMEOUT_MS)
        signed = page.locator("[data-manifest-approvals]").inner_text()
        assert signed.startswith(f"key:{key_id(approver)} "), signed
        assert envelope["approval"]["input_hash"] in signed
    finally:
        page.close()
    receipts = up.moat("receipts", "list", "--json")
    assert envelope["receipt_id"] in receipts.stdout
