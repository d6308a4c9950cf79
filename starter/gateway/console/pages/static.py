"""``/console/static/<hash>/<name>``: the console's locked assets (``console.assets``),
each at a URL naming its content, so it is cached for good (``immutable``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Request
from fastapi.responses import Response

from schemas.errors import ErrorCode
from starter.gateway.access import public
from starter.gateway.console.assets import IMMUTABLE, PREFIX
from starter.gateway.console.render import console_of
from starter.service import MoatError

router = APIRouter(prefix=PREFIX)
NAV = None


@router.get(
    "/{digest}/{name:path}",
    dependencies=[public("the console's scripts and styles, the same for everyone")],
)
async def asset(
    request: Request,
    digest: Annotated[str, Path(max_length=64, pattern=r"^[0-9a-f]+$")],
    name: Annotated[str, Path(max_length=200)],
) -> Response:
    found = console_of(request).assets.get(name)
    if found is None or not found.sha256.startswith(digest) or len(digest) < 20:
        raise MoatError(ErrorCode.NOT_FOUND, "There is no such asset.")
    return Response(found.body, media_type=found.media_type, headers={"Cache-Control": IMMUTABLE})
