"""The gateway's OpenAPI document is a valid OpenAPI 3.1 document, generated from the code:
each capability's input schema in it is the catalog's, and the bodies that depend on the
catalog say what the server enforces (the running check is ``test_schemathesis``)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from schemas.capabilities import CapabilityCatalog
from schemas.hosts import ALLOW_ENTRY_PATTERN, parse_allow_entry
from schemas.settings import MoatSettings
from starter.gateway.app import create_app

Schema = dict[str, Any]
CATALOG = CapabilityCatalog()


@pytest.fixture(scope="module")
def openapi(tmp_path_factory: pytest.TempPathFactory) -> Schema:
    app = create_app(MoatSettings(home=tmp_path_factory.mktemp("home")))
    document: Schema = app.openapi()
    return document


def validator(openapi: Schema, component: str) -> Draft202012Validator:
    return Draft202012Validator(
        {"$ref": f"#/components/schemas/{component}", "components": openapi["components"]}
    )


def test_the_document_is_valid_openapi_3_1(openapi: Schema) -> None:
    errors = [e.message for e in OPENAPI_31_VALIDATOR.iter_errors(openapi)]
    assert not errors, errors[:5]
    for schema in openapi["components"]["schemas"].values():
        Draft202012Validator.check_schema(schema)
    assert "x-moat-json" not in json.dumps(openapi)
    assert "#/$defs/" not in json.dumps(openapi)


def test_each_capability_input_schema_is_the_catalogs(openapi: Schema) -> None:
    components = openapi["components"]["schemas"]
    for spec in CATALOG.all():
        # The catalog's schema stands alone (its definitions in `$defs`); the document's
        # definitions are components.
        text = json.dumps(CATALOG.input_schema(spec)).replace('"#/$defs/', '"#/components/schemas/')
        schema = json.loads(text)
        for name, definition in schema.pop("$defs", {}).items():
            assert components[name] == definition, name
        assert components[f"Input.{spec.id}.{spec.version}"] == schema, spec.id
        member = components[f"Execute.{spec.id}"]
        assert member["properties"]["capability_id"] == {"const": spec.id}
        ref = member["properties"]["input"]["$ref"]
        assert ref == f"#/components/schemas/Input.{spec.id}.{spec.version}"
    mapping = components["ExecuteRequest"]["discriminator"]["mapping"]
    assert set(mapping) == {s.id for s in CATALOG.all()}


def execute(capability_id: str, input: Any, **extra: Any) -> Schema:
    return {"schema_version": "1", "capability_id": capability_id, "input": input, **extra}


VALID = [
    execute("demo.echo", {"hello": "world", "n": 2**53 - 1}),
    execute("demo.echo", {}, capability_version="1.0.0", idempotency_key="k"),
    execute("http.request", {"method": "GET", "url": "https://example.com/x"}),
    execute("webhook.post", {"url": "https://e.com", "event_type": "a"}, connection_id="con_1"),
    execute("slack.auth_test", {}, connection_id="con_1"),
]
INVALID = [
    # The input is tied to its capability.
    execute("http.request", {"hello": "world"}),
    execute("demo.echo", {"deep": [{"n": 2**53}]}),  # RFC 8785 cannot canonicalize it
    execute("http.request", {"method": "GET", "url": "ftp://example.com"}),
    execute("no.such", {}),
    execute("demo.echo", {}, capability_version="9.9.9"),
    # A capability that needs a connection names one; one that takes none names none.
    execute("webhook.post", {"url": "https://e.com", "event_type": "a"}),
    execute("demo.echo", {}, connection_id="con_1"),
    execute("demo.echo", {}, idempotency_key="a\x00b"),
    execute("demo.echo", {}, schema_version="2"),
]


@pytest.mark.parametrize("body", VALID)
def test_the_execute_body_admits_what_the_server_admits(openapi: Schema, body: Schema) -> None:
    errors = [e.message for e in validator(openapi, "ExecuteRequest").iter_errors(body)]
    assert not errors, errors


@pytest.mark.parametrize("body", INVALID)
def test_the_execute_body_refuses_what_the_server_refuses(openapi: Schema, body: Schema) -> None:
    assert not validator(openapi, "ExecuteRequest").is_valid(body)


@pytest.mark.parametrize(
    ("component", "body", "valid"),
    [
        ("ProbeCreate", {"capability_id": "demo.echo"}, True),
        ("ProbeCreate", {"capability_id": "demo.echo", "input": {"a": "b"}}, True),
        ("ProbeCreate", {"capability_id": "webhook.post", "input": {}}, False),  # no probe
        ("ProbeCreate", {"capability_id": "http.request"}, False),  # no default input
        (
            "ProbeCreate",
            {"capability_id": "http.request", "input": {"method": "POST", "url": "https://e.c"}},
            False,  # only GET or HEAD
        ),
        ("ProbeCreate", {"capability_id": "demo.echo", "input": {"api_token": "x"}}, False),
        ("ProbeCreate", {"capability_id": "demo.echo", "input": {"a": "\x00"}}, False),
        ("ProbeCreate", {"capability_id": "demo.echo", "interval_seconds": 1}, False),
        ("WebhookCreate", {"url": "https://e.com/h", "events": ["execution.failed"]}, True),
        ("WebhookCreate", {"url": "ftp://e.com/h", "events": ["execution.failed"]}, False),
        ("ConnectionCreate", {"type": "webhook", "name": "n", "secret": "s"}, False),
        (
            "ConnectionCreate",
            {"type": "webhook", "name": "n", "secret": "s", "config": {"base_url": "https://e"}},
            True,
        ),
        ("ConnectionCreate", {"type": "slack", "name": "n", "secret": "s"}, True),
        (
            "ConnectionCreate",
            {"type": "slack", "name": "n", "secret": "s", "config": {"Password": "x"}},
            False,
        ),
        (
            "ConnectionCreate",
            {"type": "slack", "name": "n", "secret": "s", "config": {"a": ["\x00"]}},
            False,
        ),
        (
            "PolicyDocument",
            {"rules": [{"capability": "slack.*", "budget": {"limit": 1, "period": "day"}}]},
            False,  # a budget names one capability
        ),
        (
            "PolicyDocument",
            {"rules": [{"capability": "demo.echo", "budget": {"limit": 1, "period": "day"}}]},
            True,
        ),
        ("PolicyDocument", {"rules": [{"capability": "slack.*"}]}, True),
        ("ApprovalDecision", {"input_hash": "h", "policy_version": 1, "comment": "\x00"}, False),
    ],
)
def test_bodies_state_the_servers_rules(
    openapi: Schema, component: str, body: Schema, valid: bool
) -> None:
    assert validator(openapi, component).is_valid(body) is valid


def test_every_status_a_route_answers_is_documented(openapi: Schema) -> None:
    show = openapi["paths"]["/v1/connections/{connection_id}"]["get"]["responses"]
    assert "410" in show  # a revoked connection is gone
    listed = openapi["paths"]["/v1/receipts"]["get"]
    cursor = next(p for p in listed["parameters"] if p["name"] == "cursor")
    assert cursor["schema"]["anyOf"][0]["pattern"] == "^[A-Za-z0-9_-]+$"
    execute_answers = openapi["paths"]["/v1/executions"]["post"]["responses"]
    assert "Retry-After" in execute_answers["429"]["headers"]
    for path, operations in openapi["paths"].items():
        for method, operation in operations.items():
            assert "503" in operation["responses"], f"{method} {path}"


ENTRY = re.compile(ALLOW_ENTRY_PATTERN)


def _entry_admitted(text: str) -> bool:
    try:
        parse_allow_entry(text)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize(
    "text",
    ["a", "0", "Example.COM.", "1.2.3.4:80", "1.2.3.999", "[::1]:443", "fd00::5", "a:0",
     "a:65536", "a:00080", " a ", "a..", "a/b", "*.a", "x" * 253, "x" * 254, "127.1",
     "[::ffff:1.2.3.4]:1", ":80", "fe80::1%eth0", "22e :6", "a:1:2"],
)  # fmt: skip
def test_the_allow_entry_pattern_is_the_parsers_rule(text: str) -> None:
    assert bool(ENTRY.match(text)) is _entry_admitted(text)


@given(st.from_regex(ENTRY))
@settings(max_examples=300, deadline=None)
def test_every_entry_the_pattern_admits_is_admitted(text: str) -> None:
    assert _entry_admitted(text)


@given(st.text(alphabet="0123456789abcdefx.:[]_- ", max_size=24))
@settings(max_examples=500, deadline=None)
def test_every_entry_admitted_matches_the_pattern(text: str) -> None:
    assert ENTRY.match(text) or not _entry_admitted(text)
