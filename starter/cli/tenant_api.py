"""The CLI as a tenant's person: the gateway's tenant API with the API key ``identity``
chooses (``--api-key``, ``MOAT_API_KEY``, the profile's, else the demo tenant's key). A
refusal is the gateway's error code and message, said as every error is, with what to do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import typer

from schemas.settings import MoatSettings
from starter.cli import identity
from starter.cli.output import CONNECT_TIMEOUT, fail, gateway_unavailable, usage

if TYPE_CHECKING:
    import httpx

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
    "receipt_not_found": "see `moat receipts list`",
    "execution_not_found": "see `moat receipts list` for the receipts' ids",
    "approval_not_found": "see `moat approvals list`",
    "capability_not_found": "`moat capabilities` lists them",
    "webhook_url_not_allowed": "an operator can allow-list the host (MOAT_HTTP_ALLOW_HOSTS)",
    "plan_not_found": "give the plan id `moat plan run` printed",
    "plan_invalid": "fix the steps named: a reference names an earlier step's output, "
    "${steps.<id>.output.<path>}",
    "plan_not_resumable": "only a failed plan resumes; see it with `moat plan show ID`",
    "plan_finished": "nothing left to cancel; see it with `moat plan show ID`",
    "effect_statement_required": "check that the failed step's effect did not take place, "
    "then pass --effect-did-not-happen",
}


def key_of(settings: MoatSettings) -> identity.Chosen:
    """The API key to send, or the command ends: there is none to send."""
    key = identity.api_key(settings)
    if not key.value:
        raise usage(
            "no API key to act as a tenant with",
            "pass --api-key, set MOAT_API_KEY, save one with `moat profile set NAME "
            "--api-key KEY`, or run `moat up` to create the demo tenant's key",
            code="no_api_key",
        )
    return key


def refusal(
    code: str,
    message: str,
    details: dict[str, Any] | None,
    key: identity.Chosen,
    hints: Mapping[str, str] | None = None,
    **extra: Any,
) -> typer.Exit:
    """The gateway's refusal, said as every error is; a refused key says where it came
    from (the gateway's message names its prefix)."""
    hint = (hints or {}).get(code) or HINTS.get(code)
    if code == "unauthenticated":
        hint = f"the key came from {key.source}; see `moat whoami`, or pass another with --api-key"
    return fail(code, message, hint, details=details, **extra)


def request(
    settings: MoatSettings,
    method: str,
    path: str,
    body: Any = None,
    params: dict[str, Any] | None = None,
    hints: Mapping[str, str] | None = None,
) -> httpx.Response:
    """The gateway's answer, when it is not a refusal; a refusal or an unreachable gateway
    ends the command (its hint from ``hints``, else ``HINTS``). The query is ``params``
    alone: httpx drops a query written into ``path`` when it is given params."""
    import httpx

    if "?" in path:
        raise ValueError(f"pass the query of {path!r} as params")
    key = key_of(settings)
    url = identity.gateway_url(settings).value or settings.local_gateway_url
    try:
        answer = httpx.request(
            method,
            url + path,
            json=body,
            params={k: v for k, v in (params or {}).items() if v is not None},
            headers={"Authorization": f"Bearer {key.value}"},
            timeout=httpx.Timeout(60, connect=CONNECT_TIMEOUT),
        )
    except (httpx.ConnectError, httpx.ConnectTimeout):
        raise gateway_unavailable(url) from None
    except httpx.HTTPError as exc:
        raise fail(
            "gateway_error",
            f"no answer from the gateway at {url}: {type(exc).__name__} {exc}",
            "run the command again; `moat status` shows the local stack",
        ) from None
    if answer.status_code >= 400:
        try:
            data = answer.json()
        except ValueError:
            data = None
        envelope = data if isinstance(data, dict) else {}
        error = envelope.get("error") or {}
        raise refusal(
            error.get("code", str(answer.status_code)),
            error.get("message", answer.text[:200]),
            error.get("details"),
            key,
            hints,
            http_status=answer.status_code,
            trace_id=envelope.get("trace_id"),
        )
    return answer


def call(
    settings: MoatSettings,
    method: str,
    path: str,
    body: Any = None,
    params: dict[str, Any] | None = None,
    hints: Mapping[str, str] | None = None,
) -> Any:
    """The gateway's JSON answer (``request``)."""
    answer = request(settings, method, path, body, params, hints)
    return answer.json() if answer.content else None
