"""Real servers for tests of Moat and of adapters: a migrated PostgreSQL and the Temporal
dev server, one of each per pytest session, and a Moat stack (gateway + worker on a fresh
task queue, a fresh tenant) per test.

The fixtures are named ``moat_*`` so they clash with no fixture of an adapter's own suite;
Moat's suite (``tests/support/stack.py``) names them as it always has.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
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
from schemas.capabilities import CapabilityCatalog, CapabilitySpec
from schemas.ids import uuid7
from schemas.names import EXECUTE_WORKFLOW
from schemas.run import ExecuteResult, ExecuteWorkflowInput, workflow_id_for
from schemas.scopes import DEFAULT_SCOPES
from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, local_temporal, serve_asgi
from starter.gateway.app import create_app
from starter.runtime import observability
from starter.runtime.codec import data_converter
from starter.service.executions.wait import failed_answer
from store import api_keys, make_engine, make_sessionmaker, tenants, upgrade
from store.keyrings.start import StartKeyring

NAMESPACE = "moat"
ADMIN_KEY = "moat_admin_" + "test" * 10


@pytest.fixture(scope="session")
def moat_postgres_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedPostgres]:
    """The session's PostgreSQL, migrated; its ``data_dir`` is what it keeps on disk."""
    pg = EmbeddedPostgres(tmp_path_factory.mktemp("pg") / "data", free_port(), fast=True)
    url = pg.start()
    upgrade(MoatSettings(database_url=url).sqlalchemy_url)
    yield pg
    pg.stop()


@pytest.fixture(scope="session")
def moat_settings(
    moat_postgres_server: EmbeddedPostgres, tmp_path_factory: pytest.TempPathFactory
) -> MoatSettings:
    """The settings every stack starts from (each overrides its task queue and more)."""
    return MoatSettings(
        home=tmp_path_factory.mktemp("home"),
        database_url=moat_postgres_server.url,
        temporal_namespace=NAMESPACE,
        wait_seconds=30.0,
        admin_api_key=SecretStr(ADMIN_KEY),
        # Every run of the suite in Temporal's sandbox (production runs without it).
        workflow_sandbox=True,
    )


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def moat_temporal(moat_settings: MoatSettings) -> AsyncIterator[WorkflowEnvironment]:
    """The session's Temporal dev server, with Moat's namespace and codec."""
    async with local_temporal(NAMESPACE, data_converter(moat_settings)) as env:
        yield env


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def moat_engine(moat_settings: MoatSettings) -> AsyncIterator[AsyncEngine]:
    eng = make_engine(moat_settings.sqlalchemy_url)
    yield eng
    await eng.dispose()


@pytest.fixture(scope="session")
def moat_sessions(moat_engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    """As the owner (a superuser here, so past row-level security): set-up and checks."""
    return make_sessionmaker(moat_engine)


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def moat_app_sessions(
    moat_settings: MoatSettings,
) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    """As the application role ``moat_app``, like the gateway and worker: row-level security
    holds, so every transaction names its tenant."""
    eng = make_engine(moat_settings.app_sqlalchemy_url)
    yield make_sessionmaker(eng)
    await eng.dispose()


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


def direct_start(
    tenant_id: str, key: str, capability: CapabilitySpec, input: dict[str, Any]
) -> ExecuteWorkflowInput:
    """The input of a run started past the gateway (unsigned: sign it with the start keyring
    to act as a gateway would)."""
    # The flat shape: the model reads its identity fields into ``ref``.
    return ExecuteWorkflowInput.model_validate(
        {
            "receipt_id": str(uuid7()),
            "tenant_id": tenant_id,
            "idempotency_key": key,
            "input_hash": "sha256:" + "0" * 64,
            "capability": capability,
            "input": input,
            "request_id": str(uuid7()),
            "trace_id": "0" * 32,
            "submitted_at": datetime.now(UTC),
        }
    )


StackFactory = Callable[..., Any]


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield


@pytest_asyncio.fixture(loop_scope="session")
async def moat_make_stack(
    moat_settings: MoatSettings,
    moat_temporal: WorkflowEnvironment,
    moat_sessions: async_sessionmaker[AsyncSession],
    moat_app_sessions: async_sessionmaker[AsyncSession],
) -> AsyncIterator[StackFactory]:
    """``async with moat_make_stack(**settings) as stack`` — settings override the defaults;
    ``temporal_env`` runs it on another Temporal server than the session's; ``catalog`` is
    what the gateway serves, ``worker_catalog`` what the worker makes adapters for (the
    installed capabilities when None)."""

    @asynccontextmanager
    async def factory(
        catalog: CapabilityCatalog | None = None,
        *,
        with_worker: bool = True,
        temporal_env: WorkflowEnvironment | None = None,
        adapters: Mapping[str, Adapter] | None = None,
        worker_catalog: CapabilityCatalog | None = None,
        **overrides: Any,
    ) -> AsyncIterator[Stack]:
        settings = moat_settings.model_copy(
            update={"task_queue": f"tq-{uuid.uuid4().hex}", **overrides}
        )
        # As in production (starter.runtime.temporal.connect): traced through Temporal.
        env = temporal_env or moat_temporal
        config: dict[str, Any] = {
            **env.client.config(),
            "interceptors": observability.temporal_interceptors(),
        }
        client = Client(**config)
        async with worker_module.activity_deps(settings) as (wsessions, http_out):
            worker = (
                worker_module.build_worker(
                    client, settings, wsessions, http_out, adapters=adapters, catalog=worker_catalog
                )
                if with_worker
                else _nothing()
            )
            delivering = (
                worker_module.delivery_worker(
                    client, settings, wsessions, adapters=adapters, catalog=worker_catalog
                )
                if with_worker
                else _nothing()
            )
            async with worker, delivering:
                app = create_app(
                    settings,
                    client=client,
                    sessions=moat_app_sessions,
                    owner_sessions=moat_sessions,
                    catalog=catalog,
                )
                async with serve_asgi(app) as url, httpx.AsyncClient(timeout=60) as http:
                    stack = Stack(settings, url, client, moat_sessions, "", "", http)
                    stack.tenant_id, stack.api_key = await stack.new_tenant()
                    yield stack

    yield factory
