"""No raw secret at rest: each case runs one execution with secrets in play, then searches
every store a run touches for them: the HTTP answer, Postgres (its rows, and its files on
disk, WAL included), Temporal's history as the server hands it out and the server's
database file, the tenant's manifest folder, log records and JSON log lines, and every
exported span.

A new way for a secret to come in is one more ``Case`` in ``CASES``.
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import pytest_asyncio
from opentelemetry.sdk.trace import ReadableSpan
from sqlalchemy import text
from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryRequest
from temporalio.testing import WorkflowEnvironment

from moat.testing.evidence import captured_spans, files_under, span_texts
from schemas.capabilities import CapabilityCatalog
from schemas.redaction import REDACTED
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, local_temporal
from starter.devstack.providers import FakeGithub, FakeSlack
from starter.runtime.codec import data_converter
from starter.runtime.observability import JsonFormatter
from tests.support.fakes import Call, FakeProvider, Step
from tests.support.stack import ADMIN_KEY, NAMESPACE, Stack, StackFactory


def _unique(prefix: str) -> str:
    """A secret no other test (nor an earlier run) could have put anywhere."""
    return prefix + uuid.uuid4().hex


@dataclass(frozen=True)
class Case:
    """Secrets that reach Moat one way. ``request`` builds the ``http.request`` input from
    the provider's URL, ``answer`` the provider's reply; ``received`` proves the provider
    got the secrets (so they were in play); ``kept`` must still be in the manifest, since
    redaction keeps what is not secret."""

    id: str
    secrets: tuple[str, ...]
    request: Callable[[str], dict[str, Any]]
    received: Callable[[Call], bool]
    answer: Callable[[str], Step] = lambda url: Step(200)
    kept: tuple[str, ...] = field(default=())


TOKEN = _unique("sk-live-")
PASSWORD = _unique("correct-horse-")
API_KEY = _unique("apikey")
ACCESS_TOKEN = _unique("at")
NEXT_TOKEN = _unique("nt")
RELATIVE_KEY = _unique("rk")
RELATIVE_TOKEN = _unique("rt")

CASES = [
    Case(
        id="header-and-body",
        secrets=(TOKEN, PASSWORD),
        request=lambda url: {
            "method": "POST",
            "url": url,
            "headers": {"Authorization": f"Bearer {TOKEN}"},
            "json": {"user": "ada", "password": PASSWORD},
        },
        answer=lambda url: Step(200, {"echo_password": PASSWORD}),
        received=lambda call: (
            call.headers["authorization"] == f"Bearer {TOKEN}" and call.body["password"] == PASSWORD
        ),
        kept=('"user": "ada"',),
    ),
    Case(
        id="url-query",
        secrets=(API_KEY, ACCESS_TOKEN, NEXT_TOKEN),
        request=lambda url: {
            "method": "GET",
            "url": f"{url}?api_key={API_KEY}&access_token={ACCESS_TOKEN}&page=2",
        },
        # Providers' pagination links often carry the caller's token.
        answer=lambda url: Step(200, {"next": f"{url}?access_token={NEXT_TOKEN}&page=3"}),
        received=lambda call: call.query == f"api_key={API_KEY}&access_token={ACCESS_TOKEN}&page=2",
        kept=(
            f"?api_key={REDACTED}&access_token={REDACTED}&page=2",
            f"?access_token={REDACTED}&page=3",
        ),
    ),
    Case(
        id="relative-url",
        secrets=(RELATIVE_KEY, RELATIVE_TOKEN),
        request=lambda url: {"method": "GET", "url": f"{url}?api_key={RELATIVE_KEY}"},
        # A provider that echoes the path it was asked, and answers links without a host.
        answer=lambda url: Step(
            200,
            {
                "path": f"/secrets/relative-url?api_key={RELATIVE_KEY}",
                "next": f"/secrets/relative-url?page=2&access_token={RELATIVE_TOKEN}",
                "cursor": f"page=3&access_token={RELATIVE_TOKEN}",
                "more": f"?access_token={RELATIVE_TOKEN}",
            },
        ),
        received=lambda call: call.query == f"api_key={RELATIVE_KEY}",
        kept=(
            f"/secrets/relative-url?api_key={REDACTED}",
            f"/secrets/relative-url?page=2&access_token={REDACTED}",
            f"page=3&access_token={REDACTED}",
        ),
    ),
]

BUILTIN_HTTP = CapabilityCatalog().get("http.request")
assert BUILTIN_HTTP is not None


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def temporal_on_disk(
    base_settings: MoatSettings, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[WorkflowEnvironment, Path]]:
    """A dev server of this module's own that keeps its state in a database file (the
    session's keeps it in memory), and the folder of that file."""
    folder = tmp_path_factory.mktemp("temporal")
    converter = data_converter(base_settings)
    async with local_temporal(NAMESPACE, converter, folder / "temporal.db") as env:
        yield env, folder


@pytest_asyncio.fixture(loop_scope="session")
async def stack(
    make_stack: StackFactory,
    provider: FakeProvider,
    slack: FakeSlack,
    github: FakeGithub,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
) -> AsyncIterator[Stack]:
    allowed = [provider.allow_entry, slack.allow_entry, github.allow_entry]
    async with make_stack(http_allow_hosts=allowed, temporal_env=temporal_on_disk[0]) as s:
        yield s


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
async def test_secrets_never_reach_any_store(
    stack: Stack,
    provider: FakeProvider,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
    case: Case,
) -> None:
    path = f"/secrets/{case.id}"
    url = provider.script(path, case.answer(provider.base_url + path))
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        response = await stack.execute("http.request", case.request(url), key=f"s-{case.id}")
    assert response.status_code == 200, response.text
    (call,) = provider.calls_to(path)
    assert case.received(call), call
    # Both log captures saw the provider call's request line, which names the URL.
    assert "HTTP Request:" in caplog.text and "HTTP Request:" in json_lines.getvalue()

    body = response.json()
    await assert_nowhere_at_rest(
        case.secrets,
        answer=response,
        stack=stack,
        workflows=[(body["workflow_id"], body["run_id"])],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )
    manifest = await asyncio.to_thread(
        (
            stack.settings.manifests_dir / stack.tenant_id / body["run_id"] / "manifest.json"
        ).read_text
    )
    for kept in case.kept:
        assert kept in manifest


CONNECTION_SECRET = _unique("con-secret-")
ROTATED_SECRET = _unique("con-rotated-")


async def test_connection_secrets_reach_no_store(
    stack: Stack,
    provider: FakeProvider,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A connection's secret, stored, rotated and used by a run: sealed in Postgres, never in
    Temporal, a log, a span, a manifest or any API answer (the provider alone gets it)."""
    url = provider.script("/secrets/connection", Step(200))
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys",
        json={"scopes": ["execute:*", "connections:write"]},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    writer = {"Authorization": f"Bearer {made.json()['api_key']}"}
    base = f"{stack.url}/v1/connections"
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        created = await stack.http.post(
            base,
            json={
                "type": "http_bearer",
                "name": "crm",
                "secret": CONNECTION_SECRET,
                "config": {"base_url": provider.base_url},
            },
            headers=writer,
        )
        connection_id = created.json()["id"]
        answers = [
            created,
            await stack.http.post(
                f"{base}/{connection_id}/rotate", json={"secret": ROTATED_SECRET}, headers=writer
            ),
            await stack.http.get(base, headers=writer),
            await stack.http.get(f"{base}/{connection_id}", headers=writer),
        ]
        response = await stack.execute(
            "http.request", {"method": "POST", "url": url}, connection_id=connection_id
        )
    assert [a.status_code for a in answers] == [201, 200, 200, 200]
    assert response.status_code == 200, response.text
    (call,) = provider.calls_to("/secrets/connection")
    assert call.headers["authorization"] == f"Bearer {ROTATED_SECRET}"
    for answer in answers:
        assert CONNECTION_SECRET not in answer.text and ROTATED_SECRET not in answer.text

    body = response.json()
    await assert_nowhere_at_rest(
        (CONNECTION_SECRET, ROTATED_SECRET),
        answer=response,
        stack=stack,
        workflows=[(body["workflow_id"], body["run_id"])],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )


ECHOED_SECRET = _unique("con-echoed-")


async def test_a_connection_secret_a_provider_echoes_reaches_no_store(
    stack: Stack,
    provider: FakeProvider,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A provider that echoes the connection's token (the request's Authorization header in
    its body and a link, a basic-auth encoding of it, an error quoting it): the token is
    scrubbed before the answer becomes an output, a failure's details, events or a manifest."""
    basic = base64.b64encode(f"api:{ECHOED_SECRET}".encode()).decode()
    echo = {"authorization": f"Bearer {ECHOED_SECRET}", "basic": f"Basic {basic}", "n": 1}
    link = {"Link": f"<{provider.base_url}/next?token={ECHOED_SECRET}>; rel=next"}
    ok_url = provider.script("/secrets/echo", Step(200, echo, headers=link))
    bad_url = provider.script(
        "/secrets/echo-refused", Step(401, {"message": f"token {ECHOED_SECRET} is not valid"})
    )
    connection_id = await stack.add_connection(
        "http_bearer", ECHOED_SECRET, config={"base_url": provider.base_url}
    )
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        echoed = await stack.execute(
            "http.request", {"method": "GET", "url": ok_url}, connection_id=connection_id
        )
        refused = await stack.execute(
            "http.request", {"method": "GET", "url": bad_url}, connection_id=connection_id
        )
    assert echoed.status_code == 200, echoed.text
    assert refused.status_code == 502, refused.text
    sent = [c.headers["authorization"] for c in provider.calls if c.path.startswith("/secrets/e")]
    assert sent == [f"Bearer {ECHOED_SECRET}"] * 2  # the token was in play
    output = echoed.json()["output"]
    assert output["body"]["n"] == 1 and REDACTED in output["body"]["authorization"]
    assert REDACTED in output["headers"]["link"]
    assert ECHOED_SECRET not in refused.text and basic[8:40] not in echoed.text

    runs = [(r.json()["workflow_id"], r.json()["run_id"]) for r in (echoed, refused)]
    async with stack.sessions() as s:
        events = (
            (
                await s.execute(
                    text("SELECT t::text FROM orchestration_events t WHERE tenant_id = :t"),
                    {"t": stack.tenant_id},
                )
            )
            .scalars()
            .all()
        )
    assert events and not any(ECHOED_SECRET in e for e in events)
    await assert_nowhere_at_rest(
        (ECHOED_SECRET, basic[8:40]),
        answer=echoed,
        stack=stack,
        workflows=runs,
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )
    manifests = [
        await asyncio.to_thread(
            (stack.settings.manifests_dir / stack.tenant_id / run_id / "manifest.json").read_text
        )
        for _, run_id in runs
    ]
    assert REDACTED in manifests[0]  # the echoed output is kept, scrubbed
    assert not any(ECHOED_SECRET in m for m in manifests)


SLACK_TOKEN = _unique("xoxb-")
GITHUB_TOKEN = _unique("ghp_")


async def test_slack_and_github_tokens_reach_no_store(
    stack: Stack,
    slack: FakeSlack,
    github: FakeGithub,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A Slack bot token and a GitHub token, each a connection used by its provider's write
    and its probe read: the provider alone gets them, no store Moat writes holds them."""
    made = await stack.http.post(
        f"{stack.url}/v1/admin/tenants/{stack.tenant_id}/keys",
        json={"scopes": ["execute:*", "connections:write"]},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    writer = {"Authorization": f"Bearer {made.json()['api_key']}"}
    base = f"{stack.url}/v1/connections"
    channel = "C" + uuid.uuid4().hex[:10].upper()
    repo = f"r-{uuid.uuid4().hex[:8]}"
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        answers = [
            await stack.http.post(
                base,
                json={
                    "type": "slack",
                    "name": "slack",
                    "secret": SLACK_TOKEN,
                    "config": {"base_url": f"{slack.base_url}/api"},
                },
                headers=writer,
            ),
            await stack.http.post(
                base,
                json={
                    "type": "github",
                    "name": "github",
                    "secret": GITHUB_TOKEN,
                    "config": {"base_url": github.base_url},
                },
                headers=writer,
            ),
        ]
        slack_id, github_id = (a.json()["id"] for a in answers)
        answers.append(await stack.http.get(base, headers=writer))
        runs = [
            await stack.execute(
                "slack.post_message",
                {"channel": channel, "text": "deployed"},
                connection_id=slack_id,
            ),
            await stack.execute(
                "github.create_issue",
                {"owner": "moat", "repo": repo, "title": "deployed", "body": "ok"},
                connection_id=github_id,
            ),
            await stack.execute("slack.auth_test", {}, connection_id=slack_id),
            await stack.execute("github.rate_limit", {}, connection_id=github_id),
        ]
    assert [a.status_code for a in answers] == [201, 201, 200]
    assert [r.status_code for r in runs] == [200] * 4, [r.text for r in runs]
    # The tokens were in play: each provider got its own, and acted.
    assert len(slack.posted(channel)) == 1 and len(github.issues_of("moat", repo)) == 1
    sent = [r.headers.get("authorization") for r in slack.requests + github.requests]
    assert f"Bearer {SLACK_TOKEN}" in sent and f"Bearer {GITHUB_TOKEN}" in sent
    for answer in answers + runs[1:]:
        absent = SLACK_TOKEN not in answer.text and GITHUB_TOKEN not in answer.text
        assert absent, "a token is in an API answer"

    await assert_nowhere_at_rest(
        (SLACK_TOKEN, GITHUB_TOKEN),
        answer=runs[0],
        stack=stack,
        workflows=[(r.json()["workflow_id"], r.json()["run_id"]) for r in runs],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )


NEWLINE_KEY = _unique("nl-")


async def test_a_header_secret_with_a_newline_reaches_no_store(
    stack: Stack,
    provider: FakeProvider,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A pasted header value with a trailing newline: the gateway refuses it without
    repeating it, and a run that carries it anyway (started past the gateway's checks, as an
    older gateway would) fails worded by Moat, so the HTTP library's error, which quotes the
    value, is stored nowhere."""
    url = provider.script("/secrets/newline", Step(200))
    request = {"method": "GET", "url": url, "headers": {"X-Api-Key": NEWLINE_KEY + "\n"}}
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        refused = await stack.execute("http.request", request, key="s-newline")
        result = await stack.start_direct(BUILTIN_HTTP, request)
    assert refused.status_code == 400, refused.text
    assert refused.json()["error"]["code"] == "schema_validation_failed"
    assert result.receipt is not None and result.receipt.status == "failure"
    assert provider.calls_to("/secrets/newline") == []
    await assert_nowhere_at_rest(
        (NEWLINE_KEY,),
        answer=refused,
        stack=stack,
        workflows=[(result.receipt.workflow_id, result.receipt.run_id)],
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )


async def assert_nowhere_at_rest(
    secrets: tuple[str, ...],
    *,
    answer: httpx.Response,
    stack: Stack,
    workflows: list[tuple[str, str]],
    data_dir: Path,
    temporal_dir: Path,
    logs: str,
    spans: tuple[ReadableSpan, ...],
) -> None:
    """Fails, naming the store, when any of ``secrets`` is in any of them."""

    def absent(where: str, haystack: str | bytes) -> None:
        data = haystack if isinstance(haystack, bytes) else haystack.encode()
        for secret in secrets:
            assert secret.encode() not in data, f"a secret is in {where}"

    absent("the HTTP answer", answer.text)

    # Every row of every table, as text.
    async with stack.sessions() as s:
        tables = (
            (await s.execute(text("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")))
            .scalars()
            .all()
        )
        assert "receipts" in tables
        for table in tables:
            rows = (await s.execute(text(f'SELECT t::text FROM "{table}" t'))).scalars().all()
            absent(f"Postgres table {table}", "\n".join(rows))

    # What Postgres keeps on disk (tables, indexes, WAL, its log), once written out.
    await asyncio.to_thread(_checkpoint, stack.settings.sqlalchemy_url)
    files = await asyncio.to_thread(lambda: dict(files_under(data_dir)))
    assert any("pg_wal" in str(p) for p in files) and any("base" in str(p) for p in files)
    for file, data in files.items():
        absent(f"Postgres file {file.relative_to(data_dir)}", data)

    # Temporal's history, as the server stores it (no codec applied).
    for workflow_id, run_id in workflows:
        history = await stack.client.workflow_service.get_workflow_execution_history(
            GetWorkflowExecutionHistoryRequest(
                namespace=stack.settings.temporal_namespace,
                execution={"workflow_id": workflow_id, "run_id": run_id},
            )
        )
        assert len(history.history.events) > 5
        raw = history.SerializeToString()
        assert b"binary/encrypted" in raw
        absent(f"Temporal's history of {workflow_id}", raw)
    # The server's own database file (and its write-ahead log): the runs are there.
    stored = await asyncio.to_thread(lambda: dict(files_under(temporal_dir)))
    for workflow_id, _ in workflows:
        assert any(workflow_id.encode() in data for data in stored.values())
    for file, data in stored.items():
        absent(f"Temporal's file {file.name}", data)

    # Everything under the tenant's manifest folder (kept for years).
    tenant_folder = stack.settings.manifests_dir / stack.tenant_id
    manifests = await asyncio.to_thread(lambda: dict(files_under(tenant_folder)))
    assert any(p.name == "manifest.json" for p in manifests)
    for file, data in manifests.items():
        absent(f"manifest file {file.relative_to(tenant_folder)}", data)

    absent("the logs", logs)

    names = {span.name for span in spans}
    assert "RunActivity:moat.call_adapter" in names, names
    for span in spans:
        absent(f"span {span.name}", "\n".join(span_texts(span)))


def _checkpoint(url: str) -> None:
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
        conn.execute("CHECKPOINT")


@contextmanager
def captured_logs(caplog: pytest.LogCaptureFixture) -> Iterator[io.StringIO]:
    """Every record at DEBUG in ``caplog`` (the HTTP client's request lines included), and
    the same records through the JSON formatter the services use."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(JsonFormatter("moat-test"))
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="httpx")
    logging.getLogger().addHandler(handler)
    try:
        yield out
    finally:
        logging.getLogger().removeHandler(handler)


PLAN_TOKEN = _unique("sk-plan-")
PLAN_PASSWORD = _unique("plan-horse-")


async def test_a_plans_secrets_reach_no_store(
    stack: Stack,
    provider: FakeProvider,
    postgres_server: EmbeddedPostgres,
    temporal_on_disk: tuple[WorkflowEnvironment, Path],
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plan carries its steps' raw inputs (the plan's row keeps them redacted, its
    workflow input is sealed by the codec) and a step's answer flows into the next one's
    input through a reference: no secret at rest anywhere, the plan's stores included."""
    path = "/secrets/plan"
    url = provider.script(path, Step(200, {"password": PLAN_PASSWORD, "id": 4}))
    plan = {
        "schema_version": "1",
        "steps": [
            {
                "id": "login",
                "capability_id": "http.request",
                "input": {
                    "method": "POST",
                    "url": url,
                    "headers": {"Authorization": f"Bearer {PLAN_TOKEN}"},
                    "json": {"password": PLAN_PASSWORD},
                },
            },
            {
                "id": "use",
                "capability_id": "http.request",
                "input": {
                    "method": "POST",
                    "url": url,
                    "json": {"id": "${steps.login.output.body.id}", "password": PLAN_PASSWORD},
                },
            },
        ],
    }
    headers = {"Authorization": f"Bearer {stack.api_key}", "Idempotency-Key": "secret-plan"}
    with captured_logs(caplog) as json_lines, captured_spans() as spans:
        response = await stack.http.post(f"{stack.url}/v1/plans", json=plan, headers=headers)
    assert response.status_code == 200, response.text
    calls = provider.calls_to(path)
    assert [c.body["password"] for c in calls] == [PLAN_PASSWORD] * 2
    body = response.json()
    plan_run = (await stack.client.get_workflow_handle(body["workflow_id"]).describe()).run_id
    workflows = [(body["workflow_id"], plan_run or "")]
    for step in body["steps"]:
        shown = await stack.http.get(
            f"{stack.url}/v1/executions/{step['receipt_id']}",
            headers={"Authorization": f"Bearer {stack.api_key}"},
        )
        workflows.append((shown.json()["workflow_id"], shown.json()["run_id"]))
    await assert_nowhere_at_rest(
        (PLAN_TOKEN, PLAN_PASSWORD),
        answer=response,
        stack=stack,
        workflows=workflows,
        data_dir=postgres_server.data_dir,
        temporal_dir=temporal_on_disk[1],
        logs=caplog.text + json_lines.getvalue(),
        spans=spans.get_finished_spans(),
    )
