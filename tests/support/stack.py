"""Session-wide real servers (PostgreSQL, Temporal dev server) and a per-test Moat stack.

Each test gets a fresh task queue and its own tenant; third-party providers are the only
fakes (``tests.support.fakes.FakeProvider``, served over real HTTP on loopback). The root
``conftest.py`` registers these fixtures for every test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
from pydantic import SecretStr
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowFailureError
from temporalio.testing import WorkflowEnvironment

import worker as worker_module
from activities import Adapter
from schemas.capabilities import (
    BUILTIN_CAPABILITIES,
    CapabilityCatalog,
    CapabilitySpec,
    RetrySettings,
)
from schemas.identity import ExecutionRef
from schemas.ids import uuid7
from schemas.names import EXECUTE_WORKFLOW
from schemas.run import ExecuteResult, ExecuteWorkflowInput, PolicyInput, workflow_id_for
from schemas.scopes import DEFAULT_SCOPES
from schemas.settings import MoatSettings
from schemas.start import input_digest
from starter.devstack import EmbeddedPostgres, free_port, local_temporal, serve_asgi
from starter.devstack.providers import FakeGithub, FakeSlack
from starter.gateway.app import create_app
from starter.runtime import observability
from starter.runtime.codec import data_converter
from starter.service.executions.wait import failed_answer
from store import api_keys, make_engine, make_sessionmaker, tenants, upgrade
from store.keyrings.start import StartKeyring
from tests.support.fakes import FakeProvider

NAMESPACE = "moat"
ADMIN_KEY = "moat_admin_" + "test" * 10


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """The session's PostgreSQL, migrated; its ``data_dir`` is what it keeps on disk."""
    pg = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data", free_port(), fast=True)
    url = pg.start()
    upgrade(MoatSettings(database_url=url).sqlalchemy_url)
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def postgres(postgres_server: EmbeddedPostgres) -> str:
    """The owner's URL of the session's PostgreSQL."""
    return postgres_server.url


@pytest.fixture(scope="session")
def base_settings(postgres: str, tmp_path_factory: pytest.TempPathFactory) -> MoatSettings:
    return MoatSettings(
        home=tmp_path_factory.mktemp("home"),
        database_url=postgres,
        temporal_namespace=NAMESPACE,
        wait_seconds=30.0,
        admin_api_key=SecretStr(ADMIN_KEY),
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def temporal(base_settings: MoatSettings) -> AsyncIterator[WorkflowEnvironment]:
    async with local_temporal(NAMESPACE, data_converter(base_settings)) as env:
        yield env


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def engine(base_settings: MoatSettings) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(base_settings.sqlalchemy_url)
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
def sessions(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """As the owner (a superuser here, so past row-level security): set-up and checks."""
    return make_sessionmaker(engine)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def app_sessions(
    base_settings: MoatSettings,
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """As the application role ``moat_app``, like the gateway and worker: row-level security
    holds, so every transaction names its tenant."""
    eng = make_engine(base_settings.app_sqlalchemy_url)
    yield make_sessionmaker(eng)
    await eng.dispose()


@pytest_asyncio.fixture(loop_scope="session")
async def provider() -> AsyncIterator[FakeProvider]:
    fake = FakeProvider()
    async with serve_asgi(fake) as url:
        fake.base_url = url
        yield fake


# Slack's Web API and GitHub's issues API as they answer (``starter.devstack.providers``),
# one of each per test module.
@pytest.fixture(scope="module")
def slack() -> Iterator[FakeSlack]:
    with FakeSlack() as fake:
        yield fake


@pytest.fixture(scope="module")
def github() -> Iterator[FakeGithub]:
    with FakeGithub() as fake:
        yield fake


# The tenant key tests use by default: the default scopes and the writes and reads of
# webhooks, dead letters, probes, plans and approvals' inputs (never policy, connections or
# approvals:write, which tests that check them grant themselves).
STACK_KEY_SCOPES = (
    *DEFAULT_SCOPES,
    "webhooks:write",
    "dead_letters:write",
    "probes:write",
    "plans:write",
    "approvals:read",
)


@dataclass
class Stack:
    """A running gateway + worker on a fresh task queue, and a fresh tenant."""

    settings: MoatSettings
    url: str
    client: Client
    sessions: async_sessionmaker[AsyncSession]
    tenant_id: str
    api_key: str
    http: httpx.AsyncClient

    async def execute(
        self,
        capability_id: str,
        input: dict[str, Any],
        *,
        key: str | None = None,
        api_key: str | None = None,
        headers_extra: dict[str, str] | None = None,
        **extra: Any,
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {api_key or self.api_key}", **(headers_extra or {})}
        if key is not None:
            headers["Idempotency-Key"] = key
        body = {"schema_version": "1", "capability_id": capability_id, "input": input, **extra}
        return await self.http.post(f"{self.url}/v1/executions", json=body, headers=headers)

    async def add_connection(
        self,
        type: str,
        secret: str,
        *,
        config: dict[str, Any] | None = None,
        tenant_id: str | None = None,
        name: str = "test",
    ) -> str:
        """A connection of the stack's tenant (or ``tenant_id``'s), stored through the admin
        API as an operator would; its id."""
        made = await self.http.post(
            f"{self.url}/v1/admin/tenants/{tenant_id or self.tenant_id}/connections",
            json={"type": type, "name": name, "secret": secret, "config": config or {}},
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        )
        assert made.status_code == 201, made.text
        connection_id: str = made.json()["id"]
        return connection_id

    async def new_tenant(self, name: str | None = None) -> tuple[str, str]:
        async with self.sessions.begin() as session:
            tenant = await tenants.create_tenant(
                session,
                name or f"t-{uuid.uuid4().hex[:12]}",
                idempotency_ttl_seconds=self.settings.idempotency_ttl_seconds,
            )
            key = await api_keys.create_api_key(session, tenant.id, scopes=STACK_KEY_SCOPES)
        return tenant.id, key

    async def start_direct(
        self, capability: CapabilitySpec, input: dict[str, Any], connection_id: str | None = None
    ) -> ExecuteResult:
        """Start a run directly in Temporal, past the gateway's checks but signed with the
        start keyring (as an older gateway without those checks would)."""
        key = f"direct-{uuid.uuid4().hex}"
        workflow_id = workflow_id_for(self.tenant_id, key)
        request = direct_start(self.tenant_id, key, capability, input)
        ref = request.ref.model_copy(update={"connection_id": connection_id})
        request = request.model_copy(update={"ref": ref})
        return await run_answer(
            self.client.execute_workflow(
                EXECUTE_WORKFLOW,
                StartKeyring.from_settings(self.settings).signed(request, workflow_id),
                id=workflow_id,
                task_queue=self.settings.task_queue,
                result_type=ExecuteResult,
            )
        )


async def run_answer(result: Awaitable[ExecuteResult]) -> ExecuteResult:
    """An ``ExecuteCapability`` run's answer: its result, or the ``ExecuteResult`` a run
    whose execution failed carries in its failure."""
    try:
        return await result
    except WorkflowFailureError as err:
        answer = failed_answer(err)
        if answer is None:
            raise
        return answer


def policy_input(req: ExecuteWorkflowInput) -> PolicyInput:
    """What the run's policy step is given for ``req`` started as ``wf``."""
    ref = ExecutionRef(
        receipt_id=req.ref.receipt_id,
        tenant_id=req.ref.tenant_id,
        idempotency_key=req.ref.idempotency_key,
        input_hash=req.ref.input_hash,
        workflow_id="wf",
        run_id="r",
    )
    return PolicyInput(
        ref=ref,
        capability=req.capability,
        idempotency_ttl_seconds=req.idempotency_ttl_seconds,
        input_digest=input_digest(req.input),
        start_signature=req.start_signature,
        scopes=req.scopes,
        api_key_id=req.api_key_id,
    )


def direct_start(
    tenant_id: str, key: str, capability: CapabilitySpec, input: dict[str, Any]
) -> ExecuteWorkflowInput:
    """The input of a run started past the gateway (unsigned: sign it with the start keyring
    to act as a gateway would)."""
    return ExecuteWorkflowInput(
        receipt_id=str(uuid7()),
        tenant_id=tenant_id,
        idempotency_key=key,
        input_hash="sha256:" + "0" * 64,
        capability=capability,
        input=input,
        request_id=str(uuid7()),
        trace_id="0" * 32,
        submitted_at=datetime.now(UTC),
    )


StackFactory = Callable[..., Any]


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


@pytest_asyncio.fixture(loop_scope="session")
async def make_stack(
    base_settings: MoatSettings,
    temporal: WorkflowEnvironment,
    sessions: async_sessionmaker[AsyncSession],
    app_sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[StackFactory]:
    """``async with make_stack(**settings) as stack`` — settings override the defaults;
    ``temporal_env`` runs it on another Temporal server than the session's."""

    @asynccontextmanager
    async def factory(
        catalog: CapabilityCatalog | None = None,
        *,
        with_worker: bool = True,
        temporal_env: WorkflowEnvironment | None = None,
        adapters: Mapping[str, Adapter] | None = None,
        **overrides: Any,
    ) -> AsyncIterator[Stack]:
        settings = base_settings.model_copy(
            update={"task_queue": f"tq-{uuid.uuid4().hex}", **overrides}
        )
        # As in production (starter.runtime.temporal.connect): traced through Temporal.
        env = temporal_env or temporal
        client = Client(
            **{**env.client.config(), "interceptors": observability.temporal_interceptors()}
        )
        async with worker_module.activity_deps(settings) as (wsessions, http_out):
            worker = (
                worker_module.build_worker(client, settings, wsessions, http_out, adapters=adapters)
                if with_worker
                else _nothing()
            )
            delivering = (
                worker_module.delivery_worker(client, settings, wsessions, adapters=adapters)
                if with_worker
                else _nothing()
            )
            async with worker, delivering:
                app = create_app(
                    settings,
                    client=client,
                    sessions=app_sessions,
                    owner_sessions=sessions,
                    catalog=catalog,
                )
                async with serve_asgi(app) as url, httpx.AsyncClient(timeout=60) as http:
                    stack = Stack(settings, url, client, sessions, "", "", http)
                    stack.tenant_id, stack.api_key = await stack.new_tenant()
                    yield stack

    yield factory


@pytest_asyncio.fixture(loop_scope="session")
async def stack(make_stack: StackFactory, provider: FakeProvider) -> AsyncIterator[Stack]:
    """The default stack: the fake provider's loopback address and port allowed."""
    async with make_stack(http_allow_hosts=[provider.allow_entry]) as s:
        yield s


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def http_variant(
    capability_id: str, timeout_seconds: float, max_retries: int, base_delay_seconds: float
) -> CapabilitySpec:
    """The built-in ``http.request`` under another id, with a test-sized timeout and retries."""
    builtin = CapabilityCatalog().get("http.request")
    assert builtin is not None
    return builtin.model_copy(
        update={
            "id": capability_id,
            "timeout_seconds": timeout_seconds,
            "retry": RetrySettings(max_retries=max_retries, base_delay_seconds=base_delay_seconds),
        }
    )


# Same adapter as http.request, with retries and timeout short enough for a test.
FAST_HTTP = http_variant("test.http", timeout_seconds=1.0, max_retries=2, base_delay_seconds=0.05)
# The same with enough retries to outlast a provider that is still working on a timed-out call.
PATIENT_HTTP = http_variant(
    "test.http.patient", timeout_seconds=1.0, max_retries=5, base_delay_seconds=0.05
)
CATALOG = CapabilityCatalog((*BUILTIN_CAPABILITIES, FAST_HTTP, PATIENT_HTTP))


@pytest_asyncio.fixture(loop_scope="session")
async def fast(make_stack: StackFactory, provider: FakeProvider) -> AsyncIterator[Stack]:
    async with make_stack(catalog=CATALOG, http_allow_hosts=[provider.allow_entry]) as s:
        yield s


def worker_env(stack: Stack, provider: FakeProvider) -> dict[str, str]:
    """The environment of a ``moat worker`` process on ``stack``'s task queue (tests that
    kill a worker run it as a process of its own)."""
    s = stack.settings
    return {
        "MOAT_DATABASE_URL": s.database_url or "",
        "MOAT_TEMPORAL_ADDRESS": stack.client.service_client.config.target_host,
        "MOAT_TEMPORAL_NAMESPACE": s.temporal_namespace,
        "MOAT_TASK_QUEUE": s.task_queue,
        "MOAT_HTTP_ALLOW_HOSTS": provider.allow_entry,
        "MOAT_HOME": str(s.home),
    }
