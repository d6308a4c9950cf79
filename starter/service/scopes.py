"""The one rule for what a tenant's API key may do: a route or command that needs a scope
asks ``require_scope`` (``schemas.scopes`` says how scopes match)."""

from __future__ import annotations

from collections.abc import Iterable

from schemas.errors import ErrorCode
from schemas.scopes import missing_scopes
from starter.service.errors import MoatError


def require_scope(granted: Iterable[str], *required: str) -> None:
    """``MoatError("scope_missing")`` unless ``granted`` covers every ``required`` scope."""
    held = list(granted)
    missing = missing_scopes(held, required)
    if missing:
        raise MoatError(
            ErrorCode.SCOPE_MISSING,
            f"This API key lacks the scope {' and '.join(missing)}: create a key with it "
            f"(`moat api-key create <tenant> --scope {missing[0]}`).",
            {"missing_scopes": missing, "key_scopes": held},
        )
