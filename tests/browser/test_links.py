"""Every link Moat prints or serves, opened in Chromium on a stack started as a newcomer
starts it (``moat up --fake-providers``): each page shows the thing the link names, never a
"not found" page.

The links: the ``moat up`` banner's and ``moat status``'s (gateway, API docs, Temporal UI,
the provider fakes); the ``run:`` link of ``moat execute``, for a finished run and for one
held for approval; the ``Location`` of a ``202``; the pages and documents the gateway serves
(``/docs``, ``/redoc``, ``/openapi.json``, ``/.well-known/jwks.json``, a manifest); and the
codec address, which the Temporal UI calls to show a run's decoded input."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlsplit

import httpx
import pytest
from playwright.sync_api import BrowserContext

from tests.support.browser import shows
from tests.support.up import LocalStack, local_stack

LINK = re.compile(r"https?://[^\s│┃]+")
# What the Temporal UI shows for a route it cannot resolve.
NOT_FOUND = ("Not Found", "Uh oh")
# What each address names: texts its page shows.
EXPECTED = {
    "gateway": ("Moat API", "/v1/executions"),
    "API docs": ("Moat API", "/v1/executions"),
    "console": ("Sign in to the Moat console",),
    "Temporal UI": ("ExecuteCapability",),
    "fake slack": ("not_authed",),
    "fake github": ("Bad credentials",),
    "fake webhook": ("POST only",),
    "fake notion": ("Notion-Version",),
}


@pytest.fixture(scope="module")
def up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with local_stack(tmp_path_factory.mktemp("up")) as stack:
        yield stack


@pytest.fixture(scope="module")
def first_run(up: LocalStack) -> str:
    """The workflow id of a run made first: the Temporal UI's list shows it."""
    done = up.moat("execute", "demo.echo", "--input", '{"hello":"browser"}', "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    workflow_id: str = json.loads(done.stdout)["workflow_id"]
    return workflow_id


def labelled_links(text: str) -> dict[str, str]:
    """The links of a banner or table, by the label on their line."""
    found: dict[str, str] = {}
    for line in text.splitlines():
        link = LINK.search(line)
        if link:
            label = line[: link.start()].strip(" │┃").split("│")[0].strip()
            found[label] = link.group(0)
    return found


def check(browser: BrowserContext, label: str, url: str, *more: str) -> str:
    page = shows(browser, url, *EXPECTED[label], *more)
    assert not any(marker in page for marker in NOT_FOUND), (url, page)
    return page


def test_the_banner_links_open(up: LocalStack, first_run: str, browser: BrowserContext) -> None:
    links = labelled_links(up.banner)
    assert set(links) == set(EXPECTED), up.banner
    for label, url in links.items():
        check(browser, label, url, *([first_run] if label == "Temporal UI" else []))


def test_the_status_links_open(up: LocalStack, first_run: str, browser: BrowserContext) -> None:
    # Wide enough that each name stays on one line for the parser (at 80 columns the names
    # fold; the addresses are whole at any width: tests/cli/test_tables.py).
    status = up.moat("status", columns=200)
    assert status.returncode == 0, status.stdout + status.stderr
    links = labelled_links(status.stdout)
    assert set(links) == set(EXPECTED), status.stdout
    for label, url in links.items():
        check(browser, label, url, *([first_run] if label == "Temporal UI" else []))


def run_link(output: str) -> str:
    [line] = [x for x in output.splitlines() if x.startswith("run: ")]
    return line.removeprefix("run: ")


def test_the_run_link_shows_the_run(up: LocalStack, browser: BrowserContext) -> None:
    done = up.moat("execute", "demo.echo", "--input", '{"hello":"run link"}', "--json")
    envelope = json.loads(done.stdout)
    printed = up.moat("execute", "demo.echo", "--input", '{"hello":"run link"}')
    link = run_link(printed.stdout)
    workflow_id, run_id = envelope["workflow_id"], envelope["run_id"]
    # The run's page: its id, its status, its run id, and its input decoded through the
    # gateway's codec (the banner's "payload codec"): the receipt id is inside it.
    page = shows(browser, link, workflow_id, "COMPLETED", run_id, envelope["receipt_id"])
    assert not any(marker in page for marker in NOT_FOUND), page
    # The same link with the id's slashes left raw is a page the UI cannot find: what the
    # check above tells apart.
    raw = link.replace(urlsplit(link).path.split("/")[4], workflow_id)
    assert unquote(raw) == unquote(link)
    shows(browser, raw, "Not Found")


def test_a_held_run_link_shows_it_running(
    up: LocalStack, first_run: str, browser: BrowserContext
) -> None:
    tenant_id = first_run.split("/")[1]
    hold = {"mode": "strict", "rules": [{"capability": "demo.echo", "requires_approval": True}]}
    put_policy(up, tenant_id, hold)
    try:
        held = up.moat("execute", "demo.echo", "--input", '{"hello":"held"}')
        assert held.stdout.startswith("accepted"), held.stdout + held.stderr
        link = run_link(held.stdout)
        workflow_id = unquote(urlsplit(link).path.split("/")[4])
        page = shows(browser, link, workflow_id, "RUNNING")
        assert not any(marker in page for marker in NOT_FOUND), page
    finally:
        put_policy(up, tenant_id, {"mode": "standard", "rules": []})


def put_policy(up: LocalStack, tenant_id: str, document: dict[str, object]) -> None:
    """The tenant's policy, set as an operator sets it (the admin key of the stack)."""
    admin = (up.home / "admin_api_key").read_text().strip()
    answer = httpx.put(
        f"{up.url('gateway_port')}/v1/admin/tenants/{tenant_id}/policy",
        json=document,
        headers={"Authorization": f"Bearer {admin}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text


def test_the_location_of_a_202_shows_the_execution(up: LocalStack, browser: BrowserContext) -> None:
    gateway = up.url("gateway_port")
    auth = {"Authorization": f"Bearer {demo_key(up.home)}"}
    body = {"schema_version": "1", "capability_id": "demo.echo", "input": {"hello": "202"}}
    answer = httpx.post(
        f"{gateway}/v1/executions", json=body, headers={**auth, "Prefer": "wait=0"}, timeout=30
    )
    assert answer.status_code == 202, answer.text
    receipt_id = answer.json()["receipt_id"]
    location = httpx.URL(gateway).join(answer.headers["Location"])
    page = shows(browser, str(location), receipt_id, headers=auth)
    assert json.loads(page)["receipt_id"] == receipt_id
    # The execution's manifest, which `moat manifest verify` reads, at the same address, once
    # the run has written it (a 202 answers before: on a loaded machine, well before).
    _written(f"{location}/manifest", auth)
    manifest = shows(browser, f"{location}/manifest", receipt_id, headers=auth)
    assert json.loads(manifest)["correlation_id"] == receipt_id


def _written(url: str, headers: dict[str, str], seconds: float = 60.0) -> None:
    deadline = time.monotonic() + seconds
    while (answer := httpx.get(url, headers=headers, timeout=30)).status_code != 200:
        assert time.monotonic() < deadline, answer.text
        time.sleep(0.2)


def test_the_served_documents_open(up: LocalStack, browser: BrowserContext) -> None:
    gateway = up.url("gateway_port")
    shows(browser, f"{gateway}/docs", "Moat API", "/v1/executions", "/v1/receipts")
    shows(browser, f"{gateway}/redoc", "Moat API", "Authentication")
    openapi = shows(browser, f"{gateway}/openapi.json", '"openapi"')
    assert json.loads(openapi)["info"]["title"] == "Moat"
    # The keys `moat manifest verify --jwks` is pointed at: the stack's signing key.
    jwks = json.loads(shows(browser, f"{gateway}/.well-known/jwks.json", '"keys"'))
    kept = json.loads((up.home / "jwks.json").read_text())
    assert {k["kid"] for k in kept["keys"]} <= {k["kid"] for k in jwks["keys"]}


def demo_key(home: Path) -> str:
    return (home / "demo_api_key").read_text().strip()
