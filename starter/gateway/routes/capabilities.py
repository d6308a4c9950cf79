"""The capability list: what this gateway executes, with retry settings and input schemas."""

from __future__ import annotations

from fastapi import APIRouter, Request

from schemas.api import CapabilityInfo
from schemas.scopes import capability_scopes
from starter.gateway.deps import deps_of
from starter.gateway.errors import documented_errors

router = APIRouter()


@router.get(
    "/v1/capabilities",
    tags=["capabilities"],
    summary="The capabilities this gateway executes",
    response_model=list[CapabilityInfo],
    responses=documented_errors(500),
)
async def capabilities(request: Request) -> list[CapabilityInfo]:
    """Every capability and version, with retry settings and input JSON Schema."""
    catalog = deps_of(request).catalog
    return [
        CapabilityInfo(
            **spec.model_dump(exclude={"retry", "required_scopes"}),
            # Every scope a key needs to execute it, its execute scope included.
            required_scopes=capability_scopes(spec.id, spec.required_scopes),
            retry=spec.retry_settings,
            input_schema=catalog.input_schema(spec),
        )
        for spec in catalog.all()
    ]
