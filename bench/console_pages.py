"""The console's figures on this machine: the page weight of the approvals inbox (its HTML
and the assets it loads, in bytes) and its time to interactive in Chromium (Navigation
Timing: ``domInteractive`` and ``loadEventEnd``, from the start of the navigation), cold
(the browser's cache off) and warm (the content-hashed assets cached); and the inbox's
screenshot (docs/console-inbox.png).

    .venv/bin/python -m bench.console_pages --n 20

On the bench stack (bench/stack.py, everything in this process on loopback), the demo's
situation: a strict policy asking approval for ``demo.echo``, two calls waiting, an approver
key (not the key that made them) signed in. Chromium is the distribution's
(``apt-get install -y chromium``), headless. Prints a table and writes
bench/results/console_pages.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
from pathlib import Path
from typing import Any

from playwright.async_api import Browser, Page, async_playwright
from rich.console import Console
from rich.table import Table

from bench.stack import BenchStack, bench_stack
from store import api_keys, policy_versions, tenancy

CHROMIUM = "/usr/bin/chromium"
ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.0.0.1",
]
RULE = {"capability": "demo.echo", "requires_approval": True, "approval_ttl_seconds": 3600}
RESULTS = Path(__file__).parent / "results" / "console_pages.json"
SCREENSHOT = Path(__file__).parents[1] / "docs" / "console-inbox.png"
VIEWPORT: Any = {"width": 1280, "height": 900}
LOADED = "performance.getEntriesByType('navigation')[0].loadEventEnd > 0"
TIMING = """() => {
  const nav = performance.getEntriesByType('navigation')[0];
  const assets = performance.getEntriesByType('resource').map(r => ({
    name: r.name, transfer: r.transferSize, body: r.decodedBodySize}));
  return {interactive: nav.domInteractive, loaded: nav.loadEventEnd,
          html: nav.decodedBodySize, html_transfer: nav.transferSize, assets};
}"""


async def _setup(stack: BenchStack, url: str) -> str:
    """The policy, two waiting calls made with the stack's key, and the approver's key."""
    assert stack.sessions is not None
    async with stack.sessions.begin() as session:
        await tenancy.set_tenant(session, stack.tenant_id)
        await policy_versions.add(
            session, stack.tenant_id, "strict", {"mode": "strict", "rules": [RULE]}, "bench"
        )
        approver = await api_keys.create_api_key(
            session, stack.tenant_id, name="approver", scopes=["approvals:read", "approvals:write"]
        )
    for text in ("deploy the release notes", "announce the maintenance window"):
        asked = await stack.http.post(
            f"{url}/v1/executions",
            json={
                "schema_version": "1",
                "capability_id": "demo.echo",
                "input": {"text": text, "api_token": "not-for-your-eyes"},
            },
            headers={"Authorization": f"Bearer {stack.api_key}", "Prefer": "wait=0"},
        )
        assert asked.status_code == 202, asked.text
    return approver


async def _sign_in(page: Page, url: str, key: str) -> None:
    await page.goto(f"{url}/console/sign-in")
    await page.get_by_label("API key").fill(key)
    await page.get_by_role("button", name="Sign in").click()
    await page.wait_for_url(f"{url}/console")


async def _load(page: Page, url: str) -> dict[str, Any]:
    await page.goto(f"{url}/console/approvals", wait_until="load")
    await page.wait_for_function(LOADED)
    timing: dict[str, Any] = await page.evaluate(TIMING)
    return timing


async def _cold(browser: Browser, cookies: list[Any], url: str, n: int) -> list[dict[str, Any]]:
    """Each load in a fresh context (empty caches), signed in with the session's cookie."""
    found = []
    for _ in range(n):
        context = await browser.new_context(viewport=VIEWPORT)
        await context.add_cookies(cookies)
        found.append(await _load(await context.new_page(), url))
        await context.close()
    return found


def _summary(series: list[dict[str, Any]]) -> dict[str, float]:
    def p50(key: str) -> float:
        return round(statistics.median(s[key] for s in series), 1)

    return {"dom_interactive_ms_p50": p50("interactive"), "load_event_end_ms_p50": p50("loaded")}


async def measure(n: int, screenshot: Path | None) -> dict[str, Any]:
    async with bench_stack(tracing=False, temporal_file=False) as stack:
        url = stack.gateways[True]
        approver = await _setup(stack, url)
        async with async_playwright() as p:
            browser = await p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            context = await browser.new_context(viewport=VIEWPORT)
            page = await context.new_page()
            await _sign_in(page, url, approver)
            cold = await _cold(browser, await context.cookies(), url, n)
            await _load(page, url)  # the assets in this context's cache from here on
            warm = [await _load(page, url) for _ in range(n)]
            if screenshot is not None:
                await page.screenshot(path=str(screenshot), full_page=True)
            await browser.close()
    first = cold[0]
    assets = {a["name"].rsplit("/", 1)[1]: a["body"] for a in first["assets"]}
    return {
        "n": n,
        "html_bytes": first["html"],
        "asset_bytes": assets,
        "page_weight_bytes": first["html"] + sum(assets.values()),
        "transferred_bytes_cold": first["html_transfer"]
        + sum(a["transfer"] for a in first["assets"]),
        "cold": _summary(cold),
        "warm": _summary(warm),
    }


def _print(figures: dict[str, Any]) -> None:
    table = Table(title=f"Console: the approvals inbox ({figures['n']} loads per series)")
    table.add_column("figure")
    table.add_column("value", justify="right")
    table.add_row("HTML (bytes)", str(figures["html_bytes"]))
    for name, size in figures["asset_bytes"].items():
        table.add_row(f"{name} (bytes)", str(size))
    table.add_row("page weight (bytes)", str(figures["page_weight_bytes"]))
    table.add_row(
        "transferred, cold (bytes, headers included)", str(figures["transferred_bytes_cold"])
    )
    for series in ("cold", "warm"):
        for key, value in figures[series].items():
            table.add_row(f"{series}: {key}", f"{value}")
    Console().print(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="page loads per series")
    parser.add_argument("--no-screenshot", action="store_true", help="leave docs/ alone")
    args = parser.parse_args()
    figures = asyncio.run(measure(args.n, None if args.no_screenshot else SCREENSHOT))
    _print(figures)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps(figures, indent=2) + "\n")
    Console().print(json.dumps(figures))


if __name__ == "__main__":
    main()
