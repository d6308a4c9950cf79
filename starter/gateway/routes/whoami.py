"""``GET /v1/whoami``: who a request acts as, by its API key (the CLI's ``moat whoami``)."""

from __future__ import annotations

from fastapi import APIRouter

from schemas.api import WhoAmI
from starter.gateway.deps import Caller, TenantSession
from starter.gateway.errors import documented_errors
from starter.service import tenants

router = APIRouter(tags=["whoami"])


@router.get(
    "/v1/whoami",
    summary="Who the API key acts as",
    response_model=WhoAmI,
    responses=documented_errors(401, 500),
)
async def whoami(session: TenantSession, caller: Caller) -> WhoAmI:
    """The key's tenant (id and name), the key's id and public prefix (never its secret),
    and the scopes it holds. Any key of the tenant may ask."""
    return await tenants.whoami(session, caller)
