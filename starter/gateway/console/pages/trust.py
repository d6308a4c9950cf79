"""The console's trust page: each capability version's scores over a window as
``GET /v1/trust`` answers them (success rate, latency percentiles, error mix, the trend
against the window before), real and synthetic traffic apart, and a line of the success
rate over the window's parts, drawn on the server."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from schemas.trust import TrustScore, TrustWindow
from starter.gateway.access import needs
from starter.gateway.console.auth import ConsoleSession, SignedIn
from starter.gateway.console.nav import NavEntry
from starter.gateway.console.render import page
from starter.gateway.console.trust_chart import Trend, trend
from starter.gateway.deps import deps_of
from starter.service import trust

router = APIRouter(prefix="/console/trust")
NAV = NavEntry("Trust", "/console/trust", order=60)


@dataclass(frozen=True)
class Row:
    capability_id: str
    capability_version: str
    traffic: str
    score: TrustScore
    trend: Trend


@router.get("", dependencies=[needs(also="a console session")])
async def trust_page(
    request: Request,
    principal: SignedIn,
    session: ConsoleSession,
    window: Annotated[TrustWindow, Query()] = TrustWindow.H24,
) -> Response:
    now = datetime.now(UTC)
    min_samples = deps_of(request).settings.trust_min_samples
    found = await trust.tenant_report(session, principal.tenant_id, window, now, min_samples)
    (since, until), slices, parts = await trust.tenant_series(
        session, principal.tenant_id, window, now
    )
    rows = [
        Row(
            s.capability_id,
            s.capability_version,
            traffic,
            score,
            trend(
                (
                    p
                    for p in parts
                    if (p.capability_id, p.capability_version, p.is_synthetic)
                    == (s.capability_id, s.capability_version, synthetic)
                ),
                slices,
                since,
                until,
            ),
        )
        for s in found.scores
        for traffic, synthetic, score in (("real", False, s.real), ("synthetic", True, s.synthetic))
    ]
    return page(
        request,
        "trust.html",
        principal,
        title="Trust",
        report=found,
        rows=rows,
        windows=list(TrustWindow),
        slices=slices,
    )
