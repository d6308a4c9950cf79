"""An execution's page in Chromium: the manifest's signature is checked by the page's own
script (WebCrypto, against the gateway's JWKS) and shown verified for an ES256 and an
RS256 key; a manifest edited on disk, its signature kept, is shown failing; the script's
RFC 8785 bytes equal Python's ``rfc8785``; the pages pass axe-core."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import rfc8785
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import BrowserContext, Page
from temporalio.testing import WorkflowEnvironment

from moat.testing.stack import ADMIN_KEY
from schemas.settings import MoatSettings
from store.keyrings.signing import Keyring
from store.manifests import ManifestStore
from tests.support.browser import SHOW_TIMEOUT_MS
from tests.support.console import ThreadStack, open_signed_in, thread_stack

OUTCOME = "[data-manifest-check][data-outcome='verified'], [data-outcome='failed']"


@pytest.fixture(scope="module")
def runs_stack(
    moat_settings: MoatSettings,
    moat_temporal: WorkflowEnvironment,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ThreadStack]:
    """A stack signing with a keyring of its own (ES256 first), so the test can rotate it
    to RS256 without touching the session's."""
    keys = tmp_path_factory.mktemp("signing")
    ring, jwks = keys / "signing-keys.json", keys / "jwks.json"
    Keyring.load_or_create(ring, "ES256", jwks_path=jwks)
    with thread_stack(moat_settings, moat_temporal, signing_keyring=ring, jwks_path=jwks) as s:
        yield s


def execute(runs: ThreadStack, input: dict[str, Any]) -> tuple[str, str]:
    """The receipt id and run id of a finished execution."""
    answer = runs.run(runs.stack.execute("demo.echo", input))
    assert answer.status_code == 200, answer.text
    return answer.json()["receipt_id"], answer.json()["run_id"]


@pytest.fixture(scope="module")
def executions(runs_stack: ThreadStack) -> dict[str, tuple[str, str]]:
    """Receipt and run ids by the algorithm their manifest is signed with."""
    made = {"ES256": execute(runs_stack, {"said": "ünïcødé ✓", "n": 0.1})}
    settings = runs_stack.stack.settings
    assert settings.signing_keyring is not None
    Keyring.load(settings.signing_keyring, settings.jwks_path).rotate("RS256")
    made["RS256"] = execute(runs_stack, {"said": "after rotation"})
    made["approved"] = runs_stack.run(approved_execution(runs_stack))
    return made


async def approved_execution(runs: ThreadStack) -> tuple[str, str]:
    """An execution a policy held for approval and another key approved; its receipt id
    and the approver's actor."""
    stack = runs.stack
    admin = {"Authorization": f"Bearer {ADMIN_KEY}"}
    keys = []
    for scopes in (["policy:write"], ["approvals:read", "approvals:write"]):
        made = await stack.http.post(
            f"{runs.url}/v1/admin/tenants/{stack.tenant_id}/keys",
            json={"scopes": scopes},
            headers=admin,
        )
        keys.append((made.json()["api_key"], made.json()["id"]))
    (writer, _), (approver, approver_id) = keys
    rule = {"capability": "demo.echo", "requires_approval": True}
    policy = {"mode": "strict", "rules": [rule]}
    put = await stack.http.put(f"{runs.url}/v1/policy", json=policy, headers=bearer(writer))
    assert put.status_code == 200, put.text
    held = await stack.execute("demo.echo", {"held": True})
    assert held.status_code == 202, held.text
    approval = held.json()["approval"]
    body = {"input_hash": approval["input_hash"], "policy_version": approval["policy_version"]}
    decided = await stack.http.post(
        f"{runs.url}/v1/approvals/{approval['id']}/approve", json=body, headers=bearer(approver)
    )
    assert decided.status_code == 200, decided.text
    receipt_id = held.json()["receipt_id"]
    await stack.client.get_workflow_handle(held.json()["workflow_id"]).result()
    return receipt_id, f"key:{approver_id}"


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def check_outcome(page: Page) -> str:
    region = page.locator(OUTCOME)
    region.wait_for(timeout=SHOW_TIMEOUT_MS)
    return region.inner_text()


def serious(page: Page) -> list[str]:
    found = Axe().run(page).response["violations"]
    return [f"{v['id']}: {v['help']}" for v in found if v["impact"] in ("serious", "critical")]


def kid_of(runs: ThreadStack, alg: str) -> str:
    jwks = runs.run(runs.stack.http.get(f"{runs.url}/.well-known/jwks.json")).json()
    [kid] = [k["kid"] for k in jwks["keys"] if k["alg"] == alg]
    return str(kid)


def test_the_manifest_is_verified_in_the_browser(
    browser: BrowserContext,
    runs_stack: ThreadStack,
    executions: dict[str, tuple[str, str]],
    tmp_path: Path,
) -> None:
    page = open_signed_in(
        browser,
        runs_stack.url,
        runs_stack.stack.api_key,
        f"/console/executions/{executions['ES256'][0]}",
    )
    try:
        shown = check_outcome(page)
        assert shown == f"Signature verified (key {kid_of(runs_stack, 'ES256')}, ES256)", shown
        assert page.locator("[data-manifest-check]").get_attribute("aria-live") == "polite"
        receipt_id, approver = executions["approved"]
        page.goto(f"{runs_stack.url}/console/executions/{receipt_id}")
        shown = check_outcome(page)
        assert shown == f"Signature verified (key {kid_of(runs_stack, 'RS256')}, RS256)", shown
        signed = page.locator("[data-manifest-approvals]").inner_text()
        assert signed.startswith(f"{approver} (manual) at "), signed
        page.screenshot(path=str(tmp_path / "console-execution.png"), full_page=True)
        assert serious(page) == []
    finally:
        page.close()


def test_a_tampered_manifest_is_shown_failing(
    browser: BrowserContext, runs_stack: ThreadStack, executions: dict[str, tuple[str, str]]
) -> None:
    receipt_id, run_id = executions["RS256"]
    stack = runs_stack.stack
    path = ManifestStore(stack.settings.manifests_dir).path_for(stack.tenant_id, run_id)
    original = path.read_bytes()
    edited = original.replace(b'"after rotation"', b'"after rotatiom"', 1)
    assert edited != original
    path.write_bytes(edited)  # the signature is kept; what it signed is not
    page = open_signed_in(
        browser, runs_stack.url, stack.api_key, f"/console/executions/{receipt_id}"
    )
    try:
        shown = check_outcome(page)
        kid = kid_of(runs_stack, "RS256")
        assert shown == (
            f"Signature does NOT verify: signature 0 by key {kid} does not match the manifest"
        ), shown
        assert "rotatiom" in (page.text_content("[data-manifest-text]") or "")
    finally:
        path.write_bytes(original)
        page.close()


# Values whose RFC 8785 form trips implementations: escapes, non-BMP text, member order by
# UTF-16 code units, numbers in ECMAScript's shortest form.
CASES: list[Any] = [
    "a\u2028b\u2029c\u007f",
    '\u0000\u0008\t\n\u000b\f\r\u001f"\\/',
    "é😀\ue000",
    {"é": 1, "\ue000": 2, "😀": 3, "a": 4, "\u0080": 5, "": 6, "A": 7},
    [1e21, 1e-7, 0.1, -0.0, 5e-324, 1.7976931348623157e308, 123456789012345680000.0],
    [9007199254740991, -9007199254740991, 0, -1, 1e20, 2.5e-5, 100.0],
    {"nested": [True, False, None, {"z": [], "b": {}}]},
]


def test_the_script_canonicalizes_as_python_does(
    browser: BrowserContext, runs_stack: ThreadStack, executions: dict[str, tuple[str, str]]
) -> None:
    page = open_signed_in(
        browser,
        runs_stack.url,
        runs_stack.stack.api_key,
        f"/console/executions/{executions['ES256'][0]}",
    )
    try:
        check_outcome(page)
        module = page.locator("script[type=module]").get_attribute("src")
        texts = [json.dumps(case, ensure_ascii=False) for case in CASES]
        got = page.evaluate(
            """async ([module, texts]) => {
                const m = await import(module);
                const utf8 = (t) => new TextEncoder().encode(m.canonicalize(m.parseStrict(t)));
                const bytes = (t) => Array.from(utf8(t));
                const refused = [];
                for (const t of ['{"a":1,"a":2}', "9007199254740993", '"\\ud800"']) {
                  try { m.canonicalize(m.parseStrict(t)); } catch (e) { refused.push(t); }
                }
                return { bytes: texts.map(bytes), refused };
            }""",
            [module, texts],
        )
        for case, made in zip(CASES, got["bytes"], strict=True):
            assert bytes(made) == rfc8785.dumps(case), case
        assert len(got["refused"]) == 3, got  # duplicates, unsafe integers, lone surrogates
    finally:
        page.close()


def test_the_list_reads_without_javascript_and_passes_axe(
    browser: BrowserContext, runs_stack: ThreadStack, executions: dict[str, tuple[str, str]]
) -> None:
    receipt_id = executions["ES256"][0]
    page = open_signed_in(browser, runs_stack.url, runs_stack.stack.api_key, "/console/executions")
    try:
        assert receipt_id in page.inner_text("main")
        assert serious(page) == []
        page.route("**/manifest-verify.js", lambda route: route.abort())
        page.get_by_role("link", name=receipt_id).click()
        region = page.locator("[data-manifest-check]")
        assert "needs JavaScript" in region.inner_text()
        assert page.get_by_role("link", name="Raw manifest (JSON)").count() == 1
        assert page.get_by_role("link", name="Public keys (JWKS)").count() == 1
    finally:
        page.close()
