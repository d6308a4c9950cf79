"""The client against the gateway's published contract (its /openapi.json, generated from
the app): every answer the client reads fits its models, and every request it makes is one
the gateway documents. A field renamed or retyped on one side fails here, named."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from moat_client import (
    REPLAYED_HEADER,
    AsyncMoatClient,
    CapabilityInfo,
    Envelope,
    PlanEnvelope,
    Receipt,
    ReceiptPage,
)
from moat_client.models import ErrorEnvelope
from pydantic import TypeAdapter

from schemas.settings import MoatSettings
from starter.gateway.app import create_app
from tests.client.schema_compat import Reads, Schema

# What the client reads from each route it calls, and on which statuses; every other
# documented answer of those routes is a refusal, which the client reads as an ErrorEnvelope.
READS: list[tuple[str, str, Any, set[str]]] = [
    ("post", "/v1/executions", Envelope, {"200", "202", "403", "502"}),
    ("get", "/v1/executions/{receipt_id}", Envelope, {"200", "202", "403", "502"}),
    ("get", "/v1/receipts/{receipt_id}", Receipt, {"200"}),
    ("get", "/v1/receipts", ReceiptPage, {"200"}),
    ("get", "/v1/capabilities", list[CapabilityInfo], {"200"}),
    ("post", "/v1/plans", PlanEnvelope, {"200", "202", "403", "409", "502"}),
    ("get", "/v1/plans/{plan_id}", PlanEnvelope, {"200", "202"}),
    ("post", "/v1/plans/{plan_id}/resume", PlanEnvelope, {"200", "202"}),
    ("post", "/v1/plans/{plan_id}/cancel", PlanEnvelope, {"200", "202"}),
]

# Headers every HTTP client sends by itself; the rest are the client's choice, and must be
# documented parameters of the route.
TRANSPORT_HEADERS = {
    "host",
    "accept",
    "accept-encoding",
    "connection",
    "user-agent",
    "content-length",
    "content-type",
}


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    app = create_app(MoatSettings(home=tmp_path_factory.mktemp("home")))
    return app.openapi()


def client_schema(model: Any) -> Schema:
    return TypeAdapter(model).json_schema(ref_template="#/$defs/{model}")


def answers(openapi: Schema, method: str, path: str) -> dict[str, Schema]:
    """The JSON schema of each documented answer of a route, by status."""
    responses = openapi["paths"][path][method]["responses"]
    return {
        status: response["content"]["application/json"]["schema"]
        for status, response in responses.items()
        if "application/json" in response.get("content", {})
    }


def read_problems(openapi: Schema) -> list[str]:
    found = []
    for method, path, model, statuses in READS:
        documented = answers(openapi, method, path)
        missing = statuses - set(documented)
        if missing:
            found.append(f"{method.upper()} {path}: no documented answer {sorted(missing)}")
        for status, schema in documented.items():
            read_as = model if status in statuses else ErrorEnvelope
            mine = client_schema(read_as)
            reads = Reads(mine, openapi)
            name = repr(read_as).replace("moat_client.models.", "")
            if isinstance(read_as, type):
                name = read_as.__name__
            where = f"{method.upper()} {path} {status}: {name}"
            found += reads.problems(mine, schema, where)
    return found


def test_the_client_reads_every_answer_of_the_routes_it_calls(openapi: Schema) -> None:
    problems = read_problems(openapi)
    assert not problems, "\n".join(problems)


def renamed(openapi: Schema, component: str, field: str, new: str) -> Schema:
    changed = copy.deepcopy(openapi)
    schema = changed["components"]["schemas"][component]
    schema["properties"][new] = schema["properties"].pop(field)
    schema["required"] = [new if name == field else name for name in schema.get("required", ())]
    return changed


def test_a_renamed_or_retyped_server_field_is_named(openapi: Schema) -> None:
    """The comparison is not vacuous: it fails on the changes that would break a client."""
    problems = read_problems(renamed(openapi, "Receipt", "idempotency_key", "idem_key"))
    assert any("Receipt.idempotency_key: the client reads it" in p for p in problems), problems
    assert any(".receipt.idempotency_key" in p for p in problems), problems  # inside envelopes

    problems = read_problems(renamed(openapi, "ErrorBody", "code", "error_code"))
    assert any("Envelope.error.code" in p for p in problems), problems

    retyped = copy.deepcopy(openapi)
    retyped["components"]["schemas"]["Receipt"]["properties"]["latency_ms"] = {"type": "string"}
    assert any(
        "Receipt.latency_ms: the gateway sends ['string']" in p for p in read_problems(retyped)
    )

    optional = copy.deepcopy(openapi)
    optional["components"]["schemas"]["Envelope"]["required"].remove("trace_id")
    assert any("Envelope.trace_id: the client requires it" in p for p in read_problems(optional))

    # The newer parts an agent reads: the approval a run waits for, and how a capability
    # keeps repeats from a second effect.
    problems = read_problems(renamed(openapi, "ApprovalRef", "input_hash", "digest"))
    assert any("Envelope.approval.input_hash: the client reads it" in p for p in problems)
    retyped = copy.deepcopy(openapi)
    retyped["components"]["schemas"]["ApprovalRef"]["properties"]["policy_version"] = {
        "type": "string"
    }
    assert any("approval.policy_version: the gateway sends" in p for p in read_problems(retyped))
    problems = read_problems(renamed(openapi, "CapabilityInfo", "idempotency", "dedupe"))
    assert any("[CapabilityInfo][].idempotency: the client reads it" in p for p in problems)
    problems = read_problems(renamed(openapi, "CapabilityInfo", "connection_types", "conns"))
    assert any("connection_types: the client reads it" in p for p in problems)

    widened = copy.deepcopy(openapi)
    widened["components"]["schemas"]["EnvelopeStatus"]["enum"].append("paused")
    assert any("['paused'], unknown to the client" in p for p in read_problems(widened))


class Sent(Exception):
    """Stops a request at the transport, carrying it."""


async def sent(call: Callable[[AsyncMoatClient], Awaitable[Any]]) -> httpx.Request:
    def stop(request: httpx.Request) -> httpx.Response:
        raise Sent(request)

    async with AsyncMoatClient(
        "http://gateway.test", "moat_x_y", transport=httpx.MockTransport(stop)
    ) as c:
        with pytest.raises(Sent) as stopped:
            await call(c)
    request: httpx.Request = stopped.value.args[0]
    return request


def route(openapi: Schema, request: httpx.Request) -> tuple[str, Schema]:
    for path, operations in openapi["paths"].items():
        pattern = re.sub(r"\{[^}]+\}", "[^/]+", path)
        if re.fullmatch(pattern, request.url.path) and request.method.lower() in operations:
            return path, operations[request.method.lower()]
    raise AssertionError(f"{request.method} {request.url.path}: no such route in /openapi.json")


def fits(openapi: Schema, value: Any, schema: Schema) -> bool:
    """Whether a JSON value has a type the schema allows (types only, no bounds)."""
    while "$ref" in schema:
        schema = openapi["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
    if "anyOf" in schema:
        return any(fits(openapi, value, option) for option in schema["anyOf"])
    if "enum" in schema and value not in schema["enum"]:
        return False
    kind = {
        type(None): "null",
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        dict: "object",
        list: "array",
    }[type(value)]
    wanted = schema.get("type")
    return wanted is None or wanted == kind or (wanted == "number" and kind == "integer")


CALLS: dict[str, Callable[[AsyncMoatClient], Awaitable[Any]]] = {
    "execute": lambda c: c.execute(
        "demo.echo",
        {"hello": "world"},
        idempotency_key="k-1",
        capability_version="1.0.0",
        connection_id="conn-1",
        wait_seconds=2,
        dry_run=True,
    ),
    "get_execution": lambda c: c.get_execution("r-1"),
    "get_receipt": lambda c: c.get_receipt("r-1"),
    "list_receipts": lambda c: c.list_receipts(
        capability_id="demo.echo",
        status="success",
        idempotency_key="k-1",
        since=datetime.now(UTC) - timedelta(hours=1),
        until=datetime.now(UTC),
        limit=10,
        cursor="c-1",
    ),
    "capabilities": lambda c: c.capabilities(),
    "run_plan": lambda c: c.run_plan(
        {"steps": [{"id": "a", "capability_id": "demo.echo", "input": {}}], "on_failure": "stop"},
        idempotency_key="k-1",
        wait_seconds=2,
        dry_run=True,
    ),
    "get_plan": lambda c: c.get_plan("p-1"),
    "resume_plan": lambda c: c.resume_plan("p-1", effect_did_not_happen=True, note="n"),
    "cancel_plan": lambda c: c.cancel_plan("p-1", note="n"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
async def test_every_request_is_a_documented_one(openapi: Schema, name: str) -> None:
    request = await sent(CALLS[name])
    path, operation = route(openapi, request)
    where = f"{name}: {request.method} {path}"
    parameters = {(p["in"], p["name"].lower()): p for p in operation.get("parameters", ())}
    for param in request.url.params:
        assert ("query", param.lower()) in parameters, f"{where}: query {param} not documented"
    for header in request.headers:
        if header in TRANSPORT_HEADERS:
            continue
        if header == "authorization":
            schemes = openapi["components"]["securitySchemes"]
            used = [scheme for need in operation.get("security", ()) for scheme in need]
            assert all(schemes[s]["scheme"] == "bearer" for s in used), where
            continue
        assert ("header", header) in parameters, f"{where}: header {header} not documented"
    if request.content:
        body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
        if "$ref" in body_schema:  # a component, or the schema itself inline
            body_schema = openapi["components"]["schemas"][body_schema["$ref"].rsplit("/", 1)[1]]
        body = json.loads(request.content)
        fields = body_schema["properties"]
        assert set(body) <= set(fields), f"{where}: body fields {set(body) - set(fields)} unknown"
        required = set(body_schema.get("required", ()))
        assert required <= set(body), f"{where}: a required field is missing"
        for field, value in body.items():
            assert fits(openapi, value, fields[field]), f"{where}: body field {field} mistyped"


def test_the_replayed_header_is_the_documented_one(openapi: Schema) -> None:
    headers = openapi["paths"]["/v1/executions"]["post"]["responses"]["200"]["headers"]
    assert REPLAYED_HEADER.lower() in {name.lower() for name in headers}


@pytest.mark.parametrize(
    ("receipt_id", "path"),
    [
        ("../../v1/connections", "/v1/executions/..%2F..%2Fv1%2Fconnections"),
        ("a?b#c", "/v1/executions/a%3Fb%23c"),
        ("%2e%2e", "/v1/executions/%252e%252e"),
    ],
)
async def test_an_id_is_one_path_segment_whatever_it_holds(receipt_id: str, path: str) -> None:
    request = await sent(lambda c: c.get_execution(receipt_id))
    assert request.url.raw_path.decode() == path
    request = await sent(lambda c: c.get_receipt(receipt_id))
    assert request.url.raw_path.decode() == path.replace("/executions/", "/receipts/")


@pytest.mark.parametrize("receipt_id", ["", ".", ".."])
async def test_an_id_that_is_a_dot_segment_is_refused_before_sending(receipt_id: str) -> None:
    def stop(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"a request was sent: {request.method} {request.url.path}")

    async with AsyncMoatClient(
        "http://gateway.test", "moat_x_y", transport=httpx.MockTransport(stop)
    ) as c:
        with pytest.raises(ValueError, match="receipt_id must be an id"):
            await c.get_execution(receipt_id)
        with pytest.raises(ValueError, match="receipt_id must be an id"):
            await c.wait(receipt_id)
