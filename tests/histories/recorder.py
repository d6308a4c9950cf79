"""The stack the recorded paths run on: embedded PostgreSQL, the Temporal dev server, the
worker and two gateways (local and regular bookkeeping activities), the fake provider, all
with the corpus' codec key. Built as the test suite builds its stack."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client, WorkflowFailureError

import worker as worker_module
from schemas.capabilities import (
    BUILTIN_CAPABILITIES,
    CapabilityCatalog,
    CapabilitySpec,
    RetrySettings,
)
from schemas.names import EXECUTE_WORKFLOW
from schemas.run import ExecuteResult, workflow_id_for
from schemas.settings import MoatSettings
from starter.devstack import (
    EmbeddedPostgres,
    free_port,
    local_temporal,
    serve_asgi,
    temporal_binary,
)
from starter.gateway.app import create_app
from starter.runtime import observability
from starter.runtime.codec import data_converter
from store import api_keys, make_engine, make_sessionmaker, tenants, upgrade
from store.keyrings.start import StartKeyring
from tests.histories.corpus import KEYRING
from tests.support.fakes import FakeProvider
from tests.support.stack import direct_start

NAMESPACE = "moat"


def _http_variant(capability_id: str, max_retries: int) -> CapabilitySpec:
    """``http.request`` under another id, with retries short enough to record quickly."""
    builtin = CapabilityCatalog().get("http.request")
    assert builtin is not None
    return builtin.model_copy(
        update={
            "id": capability_id,
            "timeout_seconds": 1.0,
            "retry": RetrySettings(max_retries=max_retries, base_delay_seconds=0.05),
        }
    )


FAST_HTTP = _http_variant("test.http", max_retries=2)
CATALOG = CapabilityCatalog((*BUILTIN_CAPABILITIES, FAST_HTTP))


@dataclass(frozen=True)
class Run:
    workflow_type: str
    workflow_id: str
    run_id: str


@dataclass
class Gateway:
    url: str
    tenant_id: str
    api_key: str


@dataclass
class Recorder:
    """The running stack the paths are driven on."""

    settings: MoatSettings
    client: Client
    sessions: async_sessionmaker[AsyncSession]
    provider: FakeProvider
    http: httpx.AsyncClient
    gateways: dict[bool, str] = field(default_factory=dict)  # by local_activities

    async def gateway(self, *, local_activities: bool = True) -> Gateway:
        """The gateway whose runs use local (or regular) bookkeeping activities, with a
        tenant of the path's own."""
        async with self.sessions.begin() as session:
            tenant = await tenants.create_tenant(session, f"histories-{uuid.uuid4().hex[:12]}")
            key = await api_keys.create_api_key(session, tenant.id)
        return Gateway(self.gateways[local_activities], tenant.id, key)

    async def execute(
        self,
        gw: Gateway,
        capability_id: str,
        input: dict[str, Any],
        key: str,
        *,
        wait: int | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {gw.api_key}", "Idempotency-Key": key}
        if wait is not None:
            headers["Prefer"] = f"wait={wait}"
        body = {"schema_version": "1", "capability_id": capability_id, "input": input, **extra}
        response = await self.http.post(f"{gw.url}/v1/executions", json=body, headers=headers)
        answer: dict[str, Any] = response.json()
        return answer

    async def latest(self, answer: dict[str, Any]) -> Run:
        """The current run of the execution an answer names, once it has closed."""
        workflow_id = answer["workflow_id"]
        handle = self.client.get_workflow_handle(workflow_id)
        with suppress(WorkflowFailureError):  # a run that fails is a path too
            await handle.result()
        description = await handle.describe()
        return Run(EXECUTE_WORKFLOW, workflow_id, description.run_id)

    async def only_run_of(self, tenant_id: str) -> Run:
        """The one run of a tenant, found by its search attribute."""
        for _ in range(200):
            runs = [r async for r in self.client.list_workflows(f'MoatTenant = "{tenant_id}"')]
            if runs:
                (run,) = runs
                return Run(run.workflow_type, run.id, run.run_id)
            await asyncio.sleep(0.05)
        raise AssertionError(f"no run of tenant {tenant_id} is visible")

    async def start_direct(
        self, gw: Gateway, capability_id: str, input: dict[str, Any], key: str, *, sign: bool
    ) -> Run:
        """A run started past the gateway, signed with the start keyring as a gateway signs
        (or not at all, as someone without that keyring would)."""
        capability = CATALOG.get(capability_id)
        assert capability is not None
        workflow_id = workflow_id_for(gw.tenant_id, key)
        request = direct_start(gw.tenant_id, key, capability, input)
        if sign:
            request = StartKeyring.from_settings(self.settings).signed(request, workflow_id)
        handle = await self.client.start_workflow(
            EXECUTE_WORKFLOW,
            request,
            id=workflow_id,
            task_queue=self.settings.task_queue,
            result_type=ExecuteResult,
        )
        with suppress(WorkflowFailureError):
            await handle.result()
        return Run(EXECUTE_WORKFLOW, workflow_id, handle.result_run_id or "")

    async def reset(self, run: Run, kind: str) -> Run:
        """``temporal workflow reset`` of a closed run, as ops replay one; the new run once
        it has closed."""
        proc = await asyncio.to_thread(
            subprocess.run,
            [
                str(temporal_binary()),
                "workflow",
                "reset",
                "--address",
                self.client.service_client.config.target_host,
                "--namespace",
                NAMESPACE,
                "--workflow-id",
                run.workflow_id,
                "--run-id",
                run.run_id,
                "--type",
                kind,
                "--reason",
                "recording the reset path",
            ],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        handle = self.client.get_workflow_handle(run.workflow_id)
        for _ in range(200):
            new_run = (await handle.describe()).run_id
            if new_run and new_run != run.run_id:
                break
            await asyncio.sleep(0.05)
        assert new_run != run.run_id, "the reset made no new run"
        await self.client.get_workflow_handle(run.workflow_id, run_id=new_run).result()
        return Run(run.workflow_type, run.workflow_id, new_run)


@asynccontextmanager
async def stack(home: Path) -> AsyncIterator[Recorder]:
    """Everything a path runs on, as the test suite builds it (tests/conftest.py), with the
    corpus' codec key."""
    pg = EmbeddedPostgres(home / "pg" / "data", free_port(), fast=True)
    database_url = pg.start()
    try:
        upgrade(MoatSettings(database_url=database_url).sqlalchemy_url)
        provider = FakeProvider()
        async with serve_asgi(provider) as provider_url:
            provider.base_url = provider_url
            settings = MoatSettings(
                home=home / "home",
                database_url=database_url,
                temporal_namespace=NAMESPACE,
                task_queue="moat-histories",
                codec_keyring=KEYRING,
                http_allow_hosts=[provider.allow_entry],
                wait_seconds=30.0,
            )
            async with local_temporal(NAMESPACE, data_converter(settings)) as env:
                client = await Client.connect(
                    env.client.service_client.config.target_host,
                    namespace=NAMESPACE,
                    data_converter=data_converter(settings),
                    interceptors=observability.temporal_interceptors(),
                    # Fixed: the default identity names the recording machine in every event.
                    identity="moat-histories-recorder",
                )
                owner = make_engine(settings.sqlalchemy_url)
                app_engine = make_engine(settings.app_sqlalchemy_url)
                try:
                    async with (
                        worker_module.activity_deps(settings) as (wsessions, http_out),
                        worker_module.build_worker(client, settings, wsessions, http_out),
                        httpx.AsyncClient(timeout=60) as http,
                    ):
                        rec = Recorder(settings, client, make_sessionmaker(owner), provider, http)
                        async with _gateways(rec, make_sessionmaker(app_engine)):
                            yield rec
                finally:
                    await app_engine.dispose()
                    await owner.dispose()
    finally:
        pg.stop()


@asynccontextmanager
async def _gateways(
    rec: Recorder, app_sessions: async_sessionmaker[AsyncSession]
) -> AsyncIterator[None]:
    apps = {
        local: create_app(
            rec.settings.model_copy(update={"local_activities": local}),
            client=rec.client,
            sessions=app_sessions,
            owner_sessions=rec.sessions,
            catalog=CATALOG,
        )
        for local in (True, False)
    }
    async with serve_asgi(apps[True]) as local_url, serve_asgi(apps[False]) as regular_url:
        rec.gateways = {True: local_url, False: regular_url}
        yield
