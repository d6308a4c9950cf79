"""The CLI as a tenant's person: the gateway's tenant API with an API key (``--api-key``,
else ``MOAT_API_KEY``, else the demo tenant's key ``moat up`` created). A refusal is the
gateway's error code and message on one line, with what to do."""

from __future__ import annotations

from typing import Any

import httpx
import typer

from schemas.settings import MoatSettings
from starter.cli.output import CONNECT_TIMEOUT, fail, gateway_unavailable
from starter.devstack.home import demo_api_key

HINTS = {
    "scope_missing": "use a key with that scope: moat api-key create TENANT --scope SCOPE, "
    "then pass it with --api-key or MOAT_API_KEY",
    "self_approval_forbidden": "another person's key (scope approvals:write) must approve it",
    "approval_stale": "the agent must make the call again under the current policy",
    "approval_mismatch": "read the approval again with `moat approvals show ID`",
    "bypass_not_allowed": "an operator allows it: PATCH /v1/admin/tenants/{id} "
    '{"allow_bypass": true}',
    "webhook_not_found": "see `moat webhook list`",
    "dead_letter_not_found": "see `moat dlq list`",
    "webhook_url_not_allowed": "an operator can allow-list the host (MOAT_HTTP_ALLOW_HOSTS)",
}


def call(
    settings: MoatSettings,
    method: str,
    path: str,
    api_key: str | None = None,
    body: Any = None,
    params: dict[str, Any] | None = None,
) -> Any:
    """The gateway's JSON answer; a refusal or an unreachable gateway ends the command.
    The query is ``params`` alone: httpx drops a query written into ``path`` when it is
    given params."""
    if "?" in path:
        raise ValueError(f"pass the query of {path!r} as params")
    key = api_key or settings.api_key or demo_api_key(settings)
    if not key:
        raise fail(
            "no API key",
            "pass --api-key, set MOAT_API_KEY, or run `moat up` to create the demo tenant's key",
            code=2,
        )
    try:
        answer = httpx.request(
            method,
            settings.local_gateway_url + path,
            json=body,
            params={k: v for k, v in (params or {}).items() if v is not None},
            headers={"Authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(60, connect=CONNECT_TIMEOUT),
        )
    except (httpx.ConnectError, httpx.ConnectTimeout):
        raise gateway_unavailable(settings.local_gateway_url) from None
    except httpx.HTTPError as exc:
        raise fail(
            f"cannot reach the gateway at {settings.local_gateway_url}: {exc}",
            "start it with `make up` (or set MOAT_GATEWAY_URL)",
        ) from None
    data = answer.json() if answer.content else None
    if answer.status_code >= 400:
        error = (data or {}).get("error") or {}
        code = error.get("code", str(answer.status_code))
        raise fail(f"{code}: {error.get('message', answer.text)}", HINTS.get(code))
    return data


ApiKeyOption = typer.Option(
    "--api-key", help="The tenant's API key to act with (else MOAT_API_KEY, else the demo key)."
)
