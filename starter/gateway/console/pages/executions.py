"""``/console/executions``: the tenant's executions (their receipts, newest first, filtered
by capability, status, time and idempotency key, as ``GET /v1/receipts`` lists them) and
one execution's page: its receipt, its events as their causal tree, its output and its
signed manifest. Output and manifest need ``outputs:read``, as in the API.

The page never says whether the manifest's signature holds: ``manifest-verify.js`` checks
it in the browser from the manifest's bytes (``.../manifest.json``) and the gateway's JWKS.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schemas.errors import ErrorCode
from schemas.names import MANIFEST_SHA256_HEADER, RUN_ID_HEADER
from schemas.records import ExecutionStatus
from schemas.scopes import OUTPUTS_READ
from starter.gateway.access import needs
from starter.gateway.console.auth import ConsoleSession, SignedIn
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.render import page
from starter.gateway.deps import deps_of, sealer_of
from starter.service import MoatError, runs_view
from store import db
from store.manifests import ManifestStore
from store.receipts import ReceiptFilter

router = APIRouter(prefix="/console/executions")
NAV = NavEntry("Executions", "/console/executions", order=20)
SESSION = "a console session"

Text = Annotated[str, Query(max_length=256)]
_LOCAL = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(?::\d{2})?$")
_OFFSET = re.compile(
    r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:[Zz]|[+-]\d{2}:\d{2})$"
)


def _time(name: str, value: str) -> datetime | None:
    """A time filter: the form's ``YYYY-MM-DDTHH:MM`` (read as UTC) or RFC 3339."""
    if not value:
        return None
    if _LOCAL.match(value):
        return datetime.fromisoformat(value).replace(tzinfo=UTC)
    if _OFFSET.match(value):
        return datetime.fromisoformat(value.upper().replace("Z", "+00:00"))
    raise MoatError(
        ErrorCode.SCHEMA_VALIDATION_FAILED,
        f"{name} must be a date and time such as 2026-11-25T10:00 (UTC) or an RFC 3339 time.",
    )


def _status(value: str) -> ExecutionStatus | None:
    if not value:
        return None
    try:
        return ExecutionStatus(value)
    except ValueError:
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            f"status must be one of {', '.join(s.value for s in ExecutionStatus)}.",
        ) from None


def _text(value: str) -> str | None:
    if value and not db.storable(value):
        raise MoatError(
            ErrorCode.SCHEMA_VALIDATION_FAILED,
            "Text may not hold NUL characters or lone surrogates.",
        )
    return value or None


@router.get("", dependencies=[needs(also=SESSION)])
async def listing(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    capability_id: Text = "",
    status: Annotated[str, Query(max_length=40)] = "",
    idempotency_key: Text = "",
    since: Annotated[str, Query(max_length=40)] = "",
    until: Annotated[str, Query(max_length=40)] = "",
    cursor: Annotated[str, Query(max_length=400)] = "",
) -> Response:
    filters = {
        "capability_id": capability_id,
        "status": status,
        "idempotency_key": idempotency_key,
        "since": since,
        "until": until,
    }
    where = ReceiptFilter(
        capability_id=_text(capability_id),
        status=(chosen.value if (chosen := _status(status)) else None),
        idempotency_key=_text(idempotency_key),
        since=_time("since", since),
        until=_time("until", until),
    )
    found = await runs_view.receipt_page(session, principal.tenant_id, where, cursor or None)
    kept = {k: v for k, v in filters.items() if v}
    return page(
        request,
        "executions.html",
        principal,
        title="Executions",
        receipts=found.items,
        filters=filters,
        statuses=[s.value for s in ExecutionStatus],
        filtered=bool(kept),
        next_link=(
            f"/console/executions?{urlencode({**kept, 'cursor': found.next_cursor})}"
            if found.next_cursor
            else ""
        ),
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


@router.get(
    "/{receipt_id}",
    dependencies=[needs(also=f"{SESSION}; its output and manifest with `{OUTPUTS_READ}`")],
)
async def detail(
    request: Request, principal: SignedIn, session: ConsoleSession, receipt_id: str
) -> Response:
    deps = deps_of(request)
    view = await runs_view.execution_view(
        session,
        sealer_of(deps),
        ManifestStore(deps.settings.manifests_dir),
        principal.tenant_id,
        receipt_id,
        principal.scopes,
    )
    return page(
        request,
        "execution.html",
        principal,
        title=f"Execution {receipt_id}",
        view=view,
        output_text=_pretty(view.output) if view.output_kept else "",
        manifest_text=view.manifest.data.decode("utf-8", "replace") if view.manifest else "",
        manifest_url=f"/console/executions/{receipt_id}/manifest.json",
        jwks_url="/.well-known/jwks.json",
        pretty=_pretty,
    )


@router.get("/{receipt_id}/manifest.json", dependencies=[needs(OUTPUTS_READ, also=SESSION)])
async def manifest(
    request: Request, principal: SignedIn, session: ConsoleSession, receipt_id: str
) -> Response:
    """The manifest file byte for byte, as ``GET /v1/executions/{id}/manifest`` answers it:
    what the page's script verifies."""
    stored = await runs_view.manifest_bytes(
        session,
        ManifestStore(deps_of(request).settings.manifests_dir),
        principal.tenant_id,
        receipt_id,
    )
    return Response(
        stored.data,
        media_type="application/json",
        headers={MANIFEST_SHA256_HEADER: stored.sha256, RUN_ID_HEADER: stored.run_id},
    )
