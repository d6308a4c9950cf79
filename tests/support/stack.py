"""Session-wide real servers (PostgreSQL, Temporal dev server) and a per-test Moat stack.

The servers and the stack are the conformance kit's (``moat.testing.stack``), named here as
the suite has always named them. Each test gets a fresh task queue and its own tenant;
third-party providers are the only fakes (``tests.support.fakes.FakeProvider``, served over
real HTTP on loopback). The root ``conftest.py`` registers these fixtures for every test.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import pytest_asyncio
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker
from temporalio.testing import WorkflowEnvironment

from moat.testing.stack import (
    ADMIN_KEY,
    NAMESPACE,
    STACK_KEY_SCOPES,
    Stack,
    StackFactory,
    direct_start,
    moat_app_sessions,
    moat_engine,
    moat_make_stack,
    moat_postgres_server,
    moat_sessions,
    moat_settings,
    moat_temporal,
    run_answer,
)
from schemas.capabilities import (
    BUILTIN_CAPABILITIES,
    CapabilityCatalog,
    CapabilitySpec,
    RetrySettings,
)
from schemas.identity import ExecutionRef
from schemas.run import ExecuteWorkflowInput, PolicyInput
from schemas.settings import MoatSettings
from schemas.start import input_digest
from starter.devstack import EmbeddedPostgres, serve_asgi
from starter.devstack.providers import FakeGithub, FakeSlack
from tests.support.fakes import FakeProvider

__all__ = [
    "ADMIN_KEY",
    "CATALOG",
    "FAST_HTTP",
    "NAMESPACE",
    "PATIENT_HTTP",
    "STACK_KEY_SCOPES",
    "Stack",
    "StackFactory",
    "direct_start",
    "http_variant",
    "moat_app_sessions",
    "moat_engine",
    "moat_make_stack",
    "moat_postgres_server",
    "moat_sessions",
    "moat_settings",
    "moat_temporal",
    "policy_input",
    "repo_root",
    "run_answer",
    "worker_env",
]


# The kit's servers under the names the suite uses (the same session-wide servers).
@pytest.fixture(scope="session")
def postgres_server(moat_postgres_server: EmbeddedPostgres) -> EmbeddedPostgres:
    """The session's PostgreSQL, migrated; its ``data_dir`` is what it keeps on disk."""
    return moat_postgres_server


@pytest.fixture(scope="session")
def postgres(postgres_server: EmbeddedPostgres) -> str:
    """The owner's URL of the session's PostgreSQL."""
    return postgres_server.url


@pytest.fixture(scope="session")
def base_settings(moat_settings: MoatSettings) -> MoatSettings:
    return moat_settings


@pytest.fixture(scope="session")
def temporal(moat_temporal: WorkflowEnvironment) -> WorkflowEnvironment:
    return moat_temporal


@pytest.fixture(scope="session")
def engine(moat_engine: AsyncEngine) -> AsyncEngine:
    return moat_engine


@pytest.fixture(scope="session")
def sessions(moat_sessions: async_sessionmaker[AsyncSession]) -> async_sessionmaker[AsyncSession]:
    """As the owner (a superuser here, so past row-level security): set-up and checks."""
    return moat_sessions


@pytest.fixture(scope="session")
def app_sessions(
    moat_app_sessions: async_sessionmaker[AsyncSession],
) -> async_sessionmaker[AsyncSession]:
    """As the application role ``moat_app``, like the gateway and worker: row-level security
    holds, so every transaction names its tenant."""
    return moat_app_sessions


@pytest.fixture
def make_stack(moat_make_stack: StackFactory) -> StackFactory:
    """``async with make_stack(**settings) as stack`` — settings override the defaults;
    ``temporal_env`` runs it on another Temporal server than the session's."""
    return moat_make_stack


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
