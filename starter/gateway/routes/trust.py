"""Trust scores (a tenant's own traffic; the platform's for the admin) and the tenant's
synthetic probes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from schemas.pages import ProbePage
from schemas.probes import ProbeCreate, ProbeInfo
from schemas.scopes import PROBES_WRITE
from schemas.trust import TrustReport, TrustWindow
from starter.gateway.access import needs
from starter.gateway.deps import Caller, TenantSession, deps_of, require_admin
from starter.gateway.errors import documented_errors
from starter.gateway.pages import DEFAULT_LIMIT, Cursor, Limit, by_creation
from starter.service import pages, probes, trust

router = APIRouter(tags=["trust"])
admin_router = APIRouter(
    prefix="/v1/admin",
    tags=["admin"],
    dependencies=[Depends(require_admin)],
    responses=documented_errors(400, 401, 403, 500),
)

Window = Annotated[TrustWindow, Query(description="How far back: 1h, 24h, 7d or 30d.")]
CapabilityId = Annotated[str, Path(max_length=200, pattern=r"^[A-Za-z0-9._-]+$")]
# Whoever sets a probe running lends it their authority: they must hold what executing it
# needs, and its runs carry their key and scopes.
CAPABILITY_SCOPES = "what executing the capability needs (`execute:<capability_id>`, its scopes)"
ProbeId = Annotated[str, Path(max_length=64, pattern=r"^prb_[0-9a-f]+$")]

SCORES = (
    "Success rate (success 1, `provider_rate_limited` 0.5, `gateway_error` and "
    "`policy_denied` left out, anything else 0), samples, latency p50/p95/p99, error mix, "
    "last success and failure, and the trend against the window before; real and "
    "synthetic (probe) traffic apart. Fewer counted outcomes than `MOAT_TRUST_MIN_SAMPLES` "
    "(20): `success_rate` null, with the `reason`. Read from the rollup, refreshed every "
    "minute (`refreshed_at`)."
)


@router.get(
    "/v1/capabilities/{capability_id}/trust",
    summary="Trust score of one capability (the caller's traffic)",
    response_model=TrustReport,
    responses=documented_errors(400, 401, 404, 500),
    description=SCORES,
)
async def capability_trust(
    request: Request,
    session: TenantSession,
    caller: Caller,
    capability_id: CapabilityId,
    window: Window = TrustWindow.H24,
) -> TrustReport:
    deps = deps_of(request)
    trust.check_capability(deps.catalog, capability_id)
    return await trust.tenant_report(
        session,
        caller.tenant_id,
        window,
        datetime.now(UTC),
        deps.settings.trust_min_samples,
        capability_id,
    )


@router.get(
    "/v1/trust",
    summary="Trust scores of every capability the caller used",
    response_model=TrustReport,
    responses=documented_errors(400, 401, 500),
    description=SCORES,
)
async def tenant_trust(
    request: Request, session: TenantSession, caller: Caller, window: Window = TrustWindow.H24
) -> TrustReport:
    min_samples = deps_of(request).settings.trust_min_samples
    return await trust.tenant_report(
        session, caller.tenant_id, window, datetime.now(UTC), min_samples
    )


@admin_router.get(
    "/trust",
    summary="Trust scores over every tenant's traffic",
    response_model=TrustReport,
    responses=documented_errors(404),
    description=SCORES,
)
async def platform_trust(
    request: Request,
    window: Window = TrustWindow.H24,
    capability_id: Annotated[str | None, Query(max_length=200)] = None,
) -> TrustReport:
    deps = deps_of(request)
    if capability_id is not None:
        trust.check_capability(deps.catalog, capability_id)
    # Every tenant is read in a transaction of its own, scoped to it (row-level security).
    return await trust.platform_report(
        deps.sessions, window, datetime.now(UTC), deps.settings.trust_min_samples, capability_id
    )


@router.post(
    "/v1/probes",
    status_code=201,
    summary="Probe a capability on a schedule (synthetic traffic)",
    response_model=ProbeInfo,
    responses=documented_errors(400, 401, 403, 404, 429, 500),
    dependencies=[needs(PROBES_WRITE, also=CAPABILITY_SCOPES)],
)
async def add_probe(
    request: Request, session: TenantSession, caller: Caller, body: ProbeCreate
) -> ProbeInfo:
    """Runs the capability through the normal execute path every `interval_seconds`, marked
    synthetic: no budget, no webhook, scored apart. Only capabilities whose catalog entry
    declares a safe probe (`GET /v1/capabilities`: `probe`), with an input its rule allows
    (`capability_not_probeable` otherwise). The key needs `probes:write` and what executing
    the capability needs (`403 scope_missing` names what it lacks); the probe's runs carry
    this key's id and scopes, are held to the policy like the key's own calls (approvals
    included) and stop when the key is revoked."""
    deps = deps_of(request)
    # The row commits with the request's transaction, so only once its schedule exists.
    return await probes.add_probe(
        session,
        deps.client,
        deps.settings,
        deps.catalog,
        caller.tenant_id,
        body,
        lender=probes.Lender(caller.key_id, caller.scopes),
    )


@router.get(
    "/v1/probes",
    summary="The caller's probes, oldest first",
    response_model=ProbePage,
    responses=documented_errors(400, 401, 500),
)
async def list_probes(
    session: TenantSession, caller: Caller, limit: Limit = DEFAULT_LIMIT, cursor: Cursor = None
) -> ProbePage:
    after = pages.after(cursor, (datetime, str))
    rows = await probes.list_probes(session, caller.tenant_id, after, limit + 1)
    return ProbePage(**pages.cut(rows, limit, by_creation))


@router.post(
    "/v1/probes/{probe_id}/pause",
    summary="Pause a probe",
    response_model=ProbeInfo,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[needs(PROBES_WRITE)],
)
async def pause_probe(
    request: Request, session: TenantSession, caller: Caller, probe_id: ProbeId
) -> ProbeInfo:
    client = deps_of(request).client
    return await probes.pause_probe(session, client, caller.tenant_id, probe_id)


@router.post(
    "/v1/probes/{probe_id}/resume",
    summary="Resume a paused probe",
    response_model=ProbeInfo,
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[needs(PROBES_WRITE, also=CAPABILITY_SCOPES)],
)
async def resume_probe(
    request: Request, session: TenantSession, caller: Caller, probe_id: ProbeId
) -> ProbeInfo:
    """From now on the probe's runs carry this key's authority (it needs what executing
    the capability needs)."""
    deps = deps_of(request)
    return await probes.resume_probe(
        session,
        deps.client,
        deps.catalog,
        caller.tenant_id,
        probe_id,
        lender=probes.Lender(caller.key_id, caller.scopes),
    )


@router.delete(
    "/v1/probes/{probe_id}",
    status_code=204,
    summary="Remove a probe and its schedule",
    responses=documented_errors(400, 401, 403, 404, 500),
    dependencies=[needs(PROBES_WRITE)],
)
async def remove_probe(
    request: Request, session: TenantSession, caller: Caller, probe_id: ProbeId
) -> Response:
    await probes.remove_probe(session, deps_of(request).client, caller.tenant_id, probe_id)
    return Response(status_code=204)
