"""A connection's secret goes only to the origins its connection names, and a provider that
echoes it back has it scrubbed from what Moat keeps.

Two local providers stand for the connection's own origin and another one the agent names;
both are allow-listed, so only the origin binding stands between the token and the other
one. Each counts the requests and ``Authorization`` headers it receives."""

from __future__ import annotations

import base64
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pydantic import ValidationError
from temporalio.exceptions import ApplicationError

from activities.adapters import (
    GithubAdapter,
    HostGuard,
    HttpAdapter,
    SlackAdapter,
    WebhookAdapter,
    http_client,
)
from activities.connections import Scrubber
from schemas.capabilities import CapabilityCatalog
from schemas.connections import ConnectionCreate, ConnectionType, Credential
from schemas.redaction import REDACTED
from schemas.run import AdapterInput
from starter.devstack.processes import serve_asgi
from tests.support.fakes import FakeProvider, Step

TOKEN = "tok-" + "0rigin" * 5 + "Z9/+="
WHSEC = "whsec_" + base64.b64encode(b"k" * 24).decode()


@pytest_asyncio.fixture(loop_scope="session")
async def other() -> AsyncIterator[FakeProvider]:
    """A second provider: an origin the connection does not name."""
    fake = FakeProvider()
    async with serve_asgi(fake) as url:
        fake.base_url = url
        yield fake


@pytest_asyncio.fixture
async def http() -> AsyncIterator[httpx.AsyncClient]:
    client = http_client()
    yield client
    await client.aclose()


def _input(capability_id: str, data: dict[str, Any], *allow: str) -> AdapterInput:
    spec = CapabilityCatalog().get(capability_id)
    assert spec is not None
    return AdapterInput(
        tenant_id="ten_test",
        capability=spec.model_copy(update={"timeout_seconds": 2.0}),
        input=data,
        idempotency_key=f"moat-origin-{uuid.uuid4().hex}",
        trace_id="0" * 32,
        http_allow_hosts=list(allow),
    )


def _bearer(config: dict[str, Any]) -> Credential:
    return Credential("con_origin", ConnectionType.HTTP_BEARER, TOKEN, config)


def _tokens_at(fake: FakeProvider) -> list[str]:
    return [v for c in fake.calls for k, v in c.raw_headers if k.lower() == "authorization"]


async def test_the_token_never_reaches_another_allow_listed_origin(
    provider: FakeProvider, other: FakeProvider, http: httpx.AsyncClient
) -> None:
    adapter = HttpAdapter(http, HostGuard([provider.allow_entry, other.allow_entry]))
    cred = _bearer({"base_url": f"{provider.base_url}/api"})
    stolen = other.script("/collect")
    with pytest.raises(ApplicationError) as refused:
        await adapter(_input("http.request", {"method": "GET", "url": stolen}), cred)
    assert refused.value.type == "connection_origin_mismatch"
    assert refused.value.non_retryable
    details = refused.value.details[0]
    assert details["origin"] == other.base_url
    assert details["allowed_origins"] == [provider.base_url]
    assert other.calls == [] and _tokens_at(other) == []
    # A port is part of the origin: the same host on another port is another origin.
    assert httpx.URL(other.base_url).host == httpx.URL(provider.base_url).host

    own = provider.script("/api/ok")
    done = await adapter(_input("http.request", {"method": "GET", "url": own}), cred)
    assert done.http_status == 200 and _tokens_at(provider) == [f"Bearer {TOKEN}"]


async def test_allowed_origins_admit_each_origin_named_and_no_other(
    provider: FakeProvider, other: FakeProvider, http: httpx.AsyncClient
) -> None:
    made = ConnectionCreate(
        type=ConnectionType.HTTP_BEARER,
        name="two",
        secret=TOKEN,
        config={"allowed_origins": [provider.base_url + "/", other.base_url.upper()]},
    )
    assert made.config["allowed_origins"] == [provider.base_url, other.base_url]
    adapter = HttpAdapter(http, HostGuard([provider.allow_entry, other.allow_entry]))
    cred = _bearer(made.config)
    for fake in (provider, other):
        url = fake.script("/two")
        done = await adapter(_input("http.request", {"method": "POST", "url": url}), cred)
        assert done.http_status == 200 and _tokens_at(fake) == [f"Bearer {TOKEN}"]
    https = _input(
        "http.request", {"method": "GET", "url": provider.base_url.replace("http:", "https:")}
    )
    with pytest.raises(ApplicationError) as refused:
        await adapter(https, cred)
    assert refused.value.type == "connection_origin_mismatch"


async def test_a_redirect_elsewhere_is_not_followed_with_the_token(
    provider: FakeProvider, other: FakeProvider, http: httpx.AsyncClient
) -> None:
    adapter = HttpAdapter(http, HostGuard([provider.allow_entry, other.allow_entry]))
    target = other.script("/landing")
    url = provider.script("/moved", Step(302, None, headers={"Location": target}))
    with pytest.raises(ApplicationError):
        await adapter(
            _input("http.request", {"method": "GET", "url": url}),
            _bearer({"base_url": provider.base_url}),
        )
    assert len(provider.calls_to("/moved")) == 1 and other.calls == []


async def test_every_adapter_with_a_secret_checks_the_origin(
    provider: FakeProvider, other: FakeProvider, http: httpx.AsyncClient
) -> None:
    """webhook.post names its URL in the input; Slack and GitHub send to ``base_url``, which
    a row written before origins were checked may have outside ``allowed_origins``."""
    guard = HostGuard([provider.allow_entry, other.allow_entry])
    elsewhere = {"base_url": other.base_url, "allowed_origins": [provider.base_url]}
    cases: list[tuple[Any, str, dict[str, Any], Credential]] = [
        (
            WebhookAdapter(http, guard),
            "webhook.post",
            {"url": other.script("/hook"), "event_type": "e", "payload": {}},
            Credential("con_w", ConnectionType.WEBHOOK, WHSEC, {"base_url": provider.base_url}),
        ),
        (
            SlackAdapter(http, guard),
            "slack.post_message",
            {"channel": "C1", "text": "hi"},
            Credential("con_s", ConnectionType.SLACK, TOKEN, elsewhere),
        ),
        (
            GithubAdapter(http, guard),
            "github.create_issue",
            {"owner": "moat", "repo": "r", "title": "t"},
            Credential("con_g", ConnectionType.GITHUB, TOKEN, elsewhere),
        ),
        (
            # No base_url, no allowed_origins: a webhook connection bound to nothing.
            WebhookAdapter(http, guard),
            "webhook.post",
            {"url": provider.script("/hook"), "event_type": "e", "payload": {}},
            Credential("con_n", ConnectionType.WEBHOOK, WHSEC),
        ),
    ]
    for adapter, capability_id, data, cred in cases:
        with pytest.raises(ApplicationError) as refused:
            await adapter(_input(capability_id, data), cred)
        assert refused.value.type == "connection_origin_mismatch", capability_id
    assert other.calls == [] and provider.calls == []


def _contains_token(value: Any) -> bool:
    text = json.dumps(value) if not isinstance(value, str) else value
    encoded = base64.b64encode(TOKEN.encode()).decode()
    return TOKEN in text or TOKEN[:12] in text or encoded[4:20] in text


async def test_an_echoed_token_is_scrubbed_from_outputs_and_failures(
    provider: FakeProvider, http: httpx.AsyncClient
) -> None:
    adapter = HttpAdapter(http, HostGuard([provider.allow_entry]))
    cred = _bearer({"base_url": provider.base_url})
    basic = base64.b64encode(f"user:{TOKEN}".encode()).decode()
    echo = {
        "authorization": f"Bearer {TOKEN}",
        "escaped": json.dumps(TOKEN),
        "quoted": httpx.QueryParams({"t": TOKEN}).__str__(),
        "basic": f"Basic {basic}",
        "keep": "hello",
    }
    url = provider.script(
        "/echo", Step(200, echo, headers={"Link": f"<{provider.base_url}/p?t={TOKEN}>; rel=next"})
    )
    out = await adapter(_input("http.request", {"method": "GET", "url": url}), cred)
    assert not _contains_token(out.output), out.output
    assert out.output["body"]["keep"] == "hello"
    assert REDACTED in out.output["body"]["authorization"]
    assert REDACTED in out.output["headers"]["link"]

    refused_url = provider.script("/refused", Step(401, {"message": f"bad token {TOKEN}"}))
    with pytest.raises(ApplicationError) as refused:
        await adapter(_input("http.request", {"method": "GET", "url": refused_url}), cred)
    assert not _contains_token(refused.value.details[0]) and TOKEN not in refused.value.message


def test_a_cut_answer_loses_the_head_of_the_token_too() -> None:
    scrub = Scrubber(TOKEN)
    assert scrub.bytes(b"abc " + TOKEN.encode()[:9], cut=True) == b"abc " + REDACTED.encode()
    assert scrub.bytes(b"abc " + TOKEN.encode()[:9]) == b"abc " + TOKEN.encode()[:9]
    for shift in ("", "a", "ab"):
        blob = base64.b64encode(f"{shift}:{TOKEN}:tail".encode())
        assert base64.b64encode(TOKEN.encode()[3:12]) not in scrub.bytes(blob)
        assert REDACTED.encode() in scrub.bytes(blob)


@pytest.mark.parametrize(
    ("type", "config", "why"),
    [
        ("http_bearer", {}, "must name where its secret may be sent"),
        ("webhook", {"team": "ops"}, "must name where its secret may be sent"),
        ("http_bearer", {"base_url": "ftp://x.example"}, "absolute http"),
        ("http_bearer", {"base_url": "https://u:p@x.example"}, "user name or password"),
        ("http_bearer", {"allowed_origins": ["https://x.example/api"]}, "without a path"),
        ("http_bearer", {"allowed_origins": ["https://x.example?a=1"]}, "query"),
        ("http_bearer", {"allowed_origins": ["x.example"]}, "absolute http"),
        ("http_bearer", {"allowed_origins": ["https://*.example"]}, "no valid host"),
        ("http_bearer", {"allowed_origins": []}, "1 to 20"),
        ("http_bearer", {"allowed_origins": "https://x.example"}, "1 to 20"),
        (
            "github",
            {"base_url": "https://a.example/api", "allowed_origins": ["https://b.example"]},
            "not in config.allowed_origins",
        ),
    ],
)
def test_origins_are_checked_when_a_connection_is_created(
    type: str, config: dict[str, Any], why: str
) -> None:
    with pytest.raises(ValidationError, match=why):
        ConnectionCreate.model_validate(
            {"type": type, "name": "x", "secret": TOKEN, "config": config}
        )


def test_a_provider_connection_defaults_to_the_providers_origin() -> None:
    slack = Credential("c", ConnectionType.SLACK, TOKEN)
    assert [str(o) for o in slack.origins] == ["https://slack.com"]
    ghe = Credential(
        "c", ConnectionType.GITHUB, TOKEN, {"base_url": "https://GHE.example:443/api/v3"}
    )
    assert [str(o) for o in ghe.origins] == ["https://ghe.example"]
    assert Credential("c", ConnectionType.HTTP_BEARER, TOKEN).origins == ()
