"""Ingest's connection rules that need no database: a capability the catalog marks
``connection_required`` is refused when a call names no connection, saying which types fit
and how to add one; one that can do without a connection is not."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from schemas.capabilities import CapabilityCatalog
from schemas.errors import ErrorCode
from starter.service.errors import MoatError
from starter.service.executions import ingest

CATALOG = CapabilityCatalog()
# Never touched: a call that names no connection is decided without a look-up.
NO_SESSION = cast(AsyncSession, object())


def _prepared(capability_id: str, value: dict[str, Any]) -> ingest.Prepared:
    body = {"schema_version": "1", "capability_id": capability_id, "input": value}
    return ingest.prepare(json.dumps(body).encode(), "a-key", CATALOG)


@pytest.mark.parametrize(
    ("capability_id", "value", "types"),
    [
        ("slack.post_message", {"channel": "C1", "text": "hi"}, ["slack"]),
        ("github.create_issue", {"owner": "o", "repo": "r", "title": "t"}, ["github"]),
        ("webhook.post", {"url": "https://example.com/", "event_type": "e"}, ["webhook"]),
        ("slack.auth_test", {}, ["slack"]),
        ("github.rate_limit", {}, ["github"]),
    ],
)
async def test_a_call_naming_no_connection_its_capability_needs_is_refused(
    capability_id: str, value: dict[str, Any], types: list[str]
) -> None:
    with pytest.raises(MoatError) as refused:
        await ingest.admit_connection(NO_SESSION, "t", _prepared(capability_id, value))
    err = refused.value
    assert err.code == ErrorCode.CONNECTION_REQUIRED
    assert err.details == {"capability_id": capability_id, "accepted_types": types}
    assert f"type {types[0]}" in err.message
    assert "POST /v1/connections" in err.message and "moat connection add" in err.message


async def test_a_capability_that_can_do_without_a_connection_is_admitted() -> None:
    for capability_id, value in (
        ("demo.echo", {"a": 1}),
        ("http.request", {"method": "GET", "url": "https://example.com/"}),
    ):
        prepared = _prepared(capability_id, value)
        assert await ingest.admit_connection(NO_SESSION, "t", prepared) is None
