"""Ingest errors, authentication, tenant isolation and write-once records."""

from __future__ import annotations

import json
from typing import Any

import pytest
from sqlalchemy import delete, text, update
from sqlalchemy.exc import DBAPIError

from store.models import OutcomeEventRow, PolicyDecisionRow, ReceiptRow
from tests.support.stack import Stack


async def raw_post(
    stack: Stack,
    body: bytes | str,
    headers: dict[str, str] | None = None,
    api_key: str | None = None,
) -> Any:
    h = {
        "Authorization": f"Bearer {api_key or stack.api_key}",
        "Content-Type": "application/json",
        **(headers or {}),
    }
    return await stack.http.post(f"{stack.url}/v1/executions", content=body, headers=h)


def valid(**over: Any) -> dict[str, Any]:
    return {"schema_version": "1", "capability_id": "demo.echo", "input": {"a": 1}, **over}


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ("{not json", 400, "bad_json"),
        ("", 400, "bad_json"),
        ("[1, 2]", 400, "schema_validation_failed"),
        (json.dumps({"capability_id": "demo.echo", "input": {}}), 400, "schema_validation_failed"),
        (json.dumps(valid(input="text")), 400, "schema_validation_failed"),
        (json.dumps(valid(unknown_field=1)), 400, "schema_validation_failed"),
        (json.dumps(valid(schema_version="2")), 400, "unsupported_schema_version"),
        (json.dumps(valid(capability_id="nope.nothing")), 404, "capability_not_found"),
        (json.dumps(valid(capability_version="9.9.9")), 404, "capability_not_found"),
        (
            json.dumps(valid(capability_id="http.request", input={"method": "GET"})),
            400,
            "schema_validation_failed",
        ),
        (json.dumps(valid(input={"n": 2**60})), 400, "schema_validation_failed"),
        (json.dumps(valid(idempotency_key="")), 400, "idempotency_key_invalid"),
        (json.dumps(valid(idempotency_key="k" * 257)), 400, "idempotency_key_invalid"),
        (json.dumps(valid(idempotency_key=7)), 400, "schema_validation_failed"),
        ("[" * 5000 + "]" * 5000, 400, "bad_json"),
    ],
)
async def test_bad_requests_get_the_envelope(
    stack: Stack, body: str, status: int, code: str
) -> None:
    response = await raw_post(stack, body)
    assert response.status_code == status, response.text
    envelope = response.json()
    assert envelope["status"] == "failed"
    assert envelope["error"]["code"] == code
    assert envelope["error"]["message"]
    assert len(envelope["trace_id"]) == 32


async def test_schema_errors_name_the_fields(stack: Stack) -> None:
    body = valid(capability_id="http.request", input={"method": "FETCH", "url": "nope"})
    response = await raw_post(stack, json.dumps(body))
    locs = [e["loc"] for e in response.json()["error"]["details"]["errors"]]
    assert ["input", "method"] in locs and ["input", "url"] in locs


HEADER_SECRET = "k9Zp" + "5b1e" * 8  # matches no redaction format: only not echoing hides it
NAME_REFUSED = "header_name_invalid"


@pytest.mark.parametrize(
    ("headers", "loc", "type_"),
    [
        ({"X-Api-Key": HEADER_SECRET + "\n"}, ["input", "headers", "X-Api-Key"], None),
        (
            {"X-Api-Key": HEADER_SECRET + "\r\nX-Injected: 1"},
            ["input", "headers", "X-Api-Key"],
            None,
        ),
        ({"X-Api-Key": "\x00" + HEADER_SECRET}, ["input", "headers", "X-Api-Key"], None),
        ({"X-Api-Key": " " + HEADER_SECRET}, ["input", "headers", "X-Api-Key"], None),
        ({"X-Api-Key": HEADER_SECRET + "\u00e9"}, ["input", "headers", "X-Api-Key"], None),
        ({"X-Api-Key: " + HEADER_SECRET: "v"}, ["input", "headers"], NAME_REFUSED),
        ({"Authorization " + HEADER_SECRET: "\n"}, ["input", "headers"], NAME_REFUSED),
    ],
)
async def test_header_names_and_values_are_checked_without_echoing_them(
    stack: Stack, headers: dict[str, str], loc: list[str], type_: str | None
) -> None:
    body = valid(
        capability_id="http.request",
        input={"method": "GET", "url": "http://127.0.0.1:9/", "headers": headers},
    )
    response = await raw_post(stack, json.dumps(body))
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == "schema_validation_failed"
    assert [(e["loc"], e["type"]) for e in error["details"]["errors"]] == [
        (loc, type_ or "header_value_invalid")
    ]
    assert HEADER_SECRET not in response.text


async def test_well_formed_headers_pass_ingest(stack: Stack) -> None:
    body = valid(
        capability_id="http.request",
        input={
            "method": "GET",
            "url": "http://127.0.0.1:9/",
            "headers": {"X-Api-Key": "a b\tc!~", "X-Empty": "", "x-custom_#1": "v"},
        },
        dry_run=True,
    )
    response = await raw_post(stack, json.dumps(body))
    assert response.status_code == 200, response.text
    assert response.json()["status"] == "planned"


@pytest.mark.parametrize("key", ["", "k" * 257])
async def test_bad_idempotency_key_header(stack: Stack, key: str) -> None:
    response = await raw_post(stack, json.dumps(valid()), {"Idempotency-Key": key})
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "idempotency_key_invalid"


async def test_body_too_large(stack: Stack) -> None:
    body = json.dumps(valid(input={"blob": "x" * 300_000}))
    response = await raw_post(stack, body)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "payload_too_large"


@pytest.mark.parametrize(
    "auth", [None, "Basic abc", "Bearer", "Bearer moat_nope_nope", "Bearer not-a-key"]
)
async def test_unauthenticated(stack: Stack, auth: str | None) -> None:
    headers = {"Authorization": auth} if auth else {}
    response = await stack.http.post(f"{stack.url}/v1/executions", json=valid(), headers=headers)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "unauthenticated"


async def test_wrong_secret_for_a_real_key_id(stack: Stack) -> None:
    forged = "_".join(stack.api_key.split("_", 2)[:2]) + "_" + "A" * 43
    assert forged != stack.api_key
    response = await raw_post(stack, json.dumps(valid()), api_key=forged)
    assert response.status_code == 401


async def test_receipts_are_tenant_scoped(stack: Stack) -> None:
    mine = (await stack.execute("demo.echo", {"secret_plan": 1}, key="iso")).json()
    _, other_key = await stack.new_tenant()
    auth = {"Authorization": f"Bearer {other_key}"}
    for path in (f"/v1/receipts/{mine['receipt_id']}", f"/v1/executions/{mine['receipt_id']}"):
        response = await stack.http.get(stack.url + path, headers=auth)
        assert response.status_code == 404, path
        assert mine["receipt"]["input_hash"] not in response.text
        assert mine["workflow_id"] not in response.text
    # The same key in another tenant is another execution.
    theirs = await stack.execute("demo.echo", {"secret_plan": 1}, key="iso", api_key=other_key)
    assert theirs.status_code == 200
    assert "x-moat-idempotent-replayed" not in theirs.headers
    assert theirs.json()["receipt_id"] != mine["receipt_id"]
    own = await stack.http.get(
        f"{stack.url}/v1/receipts/{mine['receipt_id']}",
        headers={"Authorization": f"Bearer {stack.api_key}"},
    )
    assert own.status_code == 200 and own.json() == mine["receipt"]


@pytest.mark.parametrize("model", [ReceiptRow, OutcomeEventRow, PolicyDecisionRow])
async def test_records_are_write_once_in_the_database(stack: Stack, model: Any) -> None:
    await stack.execute("demo.echo", {"immutable": True}, key="imm")
    async with stack.sessions() as s:
        with pytest.raises(DBAPIError, match="write-once"):
            await s.execute(
                update(model).filter_by(tenant_id=stack.tenant_id).values(tenant_id=stack.tenant_id)
            )
        await s.rollback()
        with pytest.raises(DBAPIError, match="write-once"):
            await s.execute(delete(model).filter_by(tenant_id=stack.tenant_id))
        await s.rollback()
        if model is not PolicyDecisionRow:
            with pytest.raises(DBAPIError, match="write-once"):
                await s.execute(text(f"TRUNCATE {model.__tablename__} CASCADE"))
            await s.rollback()


async def test_healthz_and_capabilities(stack: Stack) -> None:
    assert (await stack.http.get(f"{stack.url}/healthz")).json() == {"status": "ok"}
    caps = (await stack.http.get(f"{stack.url}/v1/capabilities")).json()
    ids = {c["id"] for c in caps}
    assert {"demo.echo", "http.request"} <= ids
    http = next(c for c in caps if c["id"] == "http.request")
    assert http["retry"]["max_retries"] == 5 and http["effect_type"] == "API_CALL"
    assert "url" in http["input_schema"]["properties"]
