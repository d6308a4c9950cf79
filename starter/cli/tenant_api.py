"""The CLI as a tenant admin: the gateway's tenant routes with the tenant's API key (as
``moat receipts`` uses it), a refusal said in one line with what to do."""

from __future__ import annotations

from typing import Any

import httpx

from schemas.settings import MoatSettings
from starter.cli.output import fail
from starter.devstack.home import demo_api_key

HINTS = {
    "webhook_not_found": "see `moat webhook list`",
    "dead_letter_not_found": "see `moat dlq list`",
    "webhook_url_not_allowed": "an operator can allow-list the host (MOAT_HTTP_ALLOW_HOSTS)",
}


def call(settings: MoatSettings, method: str, path: str, body: Any = None) -> Any:
    """The gateway's JSON answer; exit 1 with its error line on a refusal."""
    api_key = settings.api_key or demo_api_key(settings)
    if not api_key:
        raise fail(
            "no API key",
            "set MOAT_API_KEY, or run `moat up` to create the demo tenant's key",
            code=2,
        )
    url = settings.local_gateway_url + path
    try:
        response = httpx.request(
            method, url, json=body, headers={"Authorization": f"Bearer {api_key}"}, timeout=60
        )
    except httpx.HTTPError as exc:
        raise fail(
            f"cannot reach the gateway at {settings.local_gateway_url}: {type(exc).__name__}",
            "start it with `make up` (or set MOAT_GATEWAY_URL)",
        ) from None
    if response.status_code == 204:
        return None
    answer = response.json()
    if response.is_error:
        error = answer.get("error") or {}
        code = str(error.get("code", ""))
        raise fail(f"{error.get('message', response.status_code)} ({code})", HINTS.get(code))
    return answer
