"""The rules the gateway enforces that no JSON Schema can state, taught to schemathesis'
positive generation (its ``filter_case`` hook): a request that breaks one is not valid data,
though the document admits it, so it is not sent as valid data. Every other rule is in the
OpenAPI document; each one here says why a schema cannot say it. The document names the
status each answers (``400`` with its code, in the route's description).
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

import schemathesis

from schemas.canonical import json_depth
from schemas.capabilities import CapabilityCatalog
from schemas.connections import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    PEM_PREFIX,
    check_secret,
    checked_origins,
)
from schemas.hosts import is_public, literal_address
from schemas.plans import PlanRequest
from schemas.redaction import redact
from starter.service import MoatError
from starter.service.plans import check
from store.db import storable


def _idempotency_keys_differ(case: Any) -> bool:
    """`Idempotency-Key` header and `idempotency_key` field must agree when both are sent:
    one value in two places of a request (a header and a body member), and JSON Schema
    describes each place on its own, never one against the other."""
    header = (case.headers or {}).get("Idempotency-Key")
    body = case.body if isinstance(case.body, dict) else {}
    field = body.get("idempotency_key")
    return header is not None and field is not None and header != field


def _private_webhook_host(case: Any) -> bool:
    """A webhook URL whose host is an address literal must be public (or allow-listed):
    which addresses are public is a list of ranges a resolver reads in many spellings
    (``2130706433``, ``0x7f.1``, ``[::ffff:7f00:1]``), with exceptions the tenant's and the
    worker's allow-lists add at the time of the call."""
    body = case.body if isinstance(case.body, dict) else {}
    url = body.get("url")
    if not isinstance(url, str):
        return False
    try:
        host = urlsplit(url).hostname or ""
    except ValueError:
        return False
    address = literal_address(host)
    return address is not None and not is_public(address)


def _unstorable(value: Any) -> bool:
    """Text Postgres cannot hold (a NUL, a lone surrogate) anywhere in a JSON value."""
    if isinstance(value, str):
        return not storable(value)
    if isinstance(value, dict):
        return any(_unstorable(k) or _unstorable(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_unstorable(v) for v in value)
    return False


def _config_refused(case: Any) -> bool:
    """A connection's config: its JSON text at most ``MAX_CONFIG_BYTES`` (a length of the
    serialized document, which JSON Schema does not measure), nested at most
    ``MAX_CONFIG_DEPTH`` levels (JSON Schema has no depth, short of spelling out every level),
    no text Postgres cannot store under any key at any depth (``config_unstorable``: a free
    form's every string, keys included), ``base_url``'s origin among ``allowed_origins``
    (one value against another), and no value of a well-known credential format (a search
    by sixteen patterns, some looking behind, under every key at every depth)."""
    body = case.body if isinstance(case.body, dict) else {}
    config = body.get("config")
    if not isinstance(config, dict):
        return False
    if json_depth(config) > MAX_CONFIG_DEPTH or len(json.dumps(config)) > MAX_CONFIG_BYTES:
        return True
    if _unstorable(config):
        return True
    if redact(config) != config:
        return True
    try:
        checked_origins(str(body.get("type", "slack")), config)
    except ValueError:
        return True
    return False


def _secret_refused(case: Any) -> bool:
    """A connection's secret may be a PEM private key (spaces, line breaks) only for a GitHub
    App connection, and must then load as an RSA key: the shape the secret may take depends
    on the type and the config beside it (and, on a rotation, on the stored connection's),
    and whether text is a key is for a key parser to say, not a pattern."""
    body = case.body if isinstance(case.body, dict) else {}
    secret = body.get("secret")
    if not isinstance(secret, str):
        return False
    if "type" not in body:  # a rotation: the stored connection decides
        return secret.startswith(PEM_PREFIX)
    config = body.get("config")
    try:
        check_secret(str(body["type"]), config if isinstance(config, dict) else {}, secret)
    except ValueError:
        return True
    return False


def _connection_refused(case: Any) -> bool:
    return _config_refused(case) or _secret_refused(case)


def _probe_input_refused(case: Any) -> bool:
    """A probe's input names no secret by a value of a well-known credential format (as
    for a connection's config; secret key names are in the document)."""
    body = case.body if isinstance(case.body, dict) else {}
    value = body.get("input")
    return value is not None and redact(value) != value


def _plan_refused(case: Any) -> bool:
    """A plan's steps named by value: ids unique, ``when`` and references naming steps
    before it, and paths its capability's output has (an order and one member against
    another, across items of a list: JSON Schema checks each item on its own). The rules
    are the ingest's own (``service.plans.check``), applied to the generated plan."""
    if _idempotency_keys_differ(case):
        return True
    try:
        request = PlanRequest.model_validate(case.body)
        return bool(check(request, CapabilityCatalog()))
    except (ValueError, MoatError):
        return True


RULES = {
    ("POST", "/v1/plans"): _plan_refused,
    ("POST", "/v1/executions"): _idempotency_keys_differ,
    ("POST", "/v1/webhooks"): _private_webhook_host,
    ("POST", "/v1/connections"): _connection_refused,
    ("POST", "/v1/admin/tenants/{tenant_id}/connections"): _connection_refused,
    ("POST", "/v1/connections/{connection_id}/rotate"): _secret_refused,
    ("POST", "/v1/admin/tenants/{tenant_id}/connections/{connection_id}/rotate"): _secret_refused,
    ("POST", "/v1/probes"): _probe_input_refused,
}


@schemathesis.hook
def filter_case(context: Any, case: Any) -> bool:
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive:
        return True
    rule = RULES.get((case.operation.method.upper(), case.operation.path))
    return rule is None or not rule(case)


@schemathesis.hook
def map_case(context: Any, case: Any) -> Any:
    """A positive case starts its list at the first page: a `cursor` is a position only the
    server mints (its `next_cursor`); the document states its alphabet and length, and which
    strings of them name a position no schema can say (`400 invalid_cursor`)."""
    meta = case.meta
    if meta is not None and meta.generation.mode.is_positive and case.query:
        case.query.pop("cursor", None)
    return _plan_previewed(case)


def _plan_previewed(case: Any) -> Any:
    """A generated plan of more than two steps is sent as a dry run: checked at ingest and
    previewed as any plan is, without running its steps, so a run's worker is not busy
    with plans of twenty steps (each a child run) for the minutes the run lasts. Plans that
    run are covered by ``tests/plans``."""
    body = case.body
    if (
        case.operation.path == "/v1/plans"
        and isinstance(body, dict)
        and isinstance(body.get("steps"), list)
        and len(body["steps"]) > 2
    ):
        body["dry_run"] = True
    return case
