"""The conformance kit: a pytest plugin that checks an adapter against a fake of its
provider through a real Moat stack (``docs/adapters.md``).

Opt in from a ``conftest.py`` (the plugin is not registered under ``pytest11``: it would
load Moat's servers into every pytest run of an environment where Moat is installed)::

    pytest_plugins = ["moat.testing"]

then, in a test module, a fixture ``moat_conformance`` returning a ``Conformance``. The kit
adds its checks to that module as the class ``TestMoatConformance``: a duplicate storm, a
lost answer, a ``temporal workflow reset``, ``Retry-After``, the wording of failures, and
no secret at rest. It brings its own servers: PostgreSQL and the Temporal dev server (one
of each per session, the ``embedded`` extra), a worker and the gateway per check.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest
import pytest_asyncio

from moat.testing.conformance import (
    Conformance,
    ConnectionSpec,
    KitRun,
    ProviderFake,
    allow_entries,
    duplicate_storm,
    failures_worded,
    kit_declaration,
    lost_answer,
    no_secret_at_rest,
    reset,
    retry_after,
)
from moat.testing.stack import (
    Stack,
    StackFactory,
    moat_app_sessions,
    moat_engine,
    moat_make_stack,
    moat_postgres_server,
    moat_sessions,
    moat_settings,
    moat_temporal,
)
from schemas.capabilities import CapabilityCatalog

__all__ = [
    "Conformance",
    "ConformanceChecks",
    "ConnectionSpec",
    "KitRun",
    "ProviderFake",
    "Stack",
    "kit_run",
    "moat_app_sessions",
    "moat_conformance_run",
    "moat_engine",
    "moat_make_stack",
    "moat_postgres_server",
    "moat_sessions",
    "moat_settings",
    "moat_temporal",
]

FIXTURE = "moat_conformance"
CLASS_NAME = "TestMoatConformance"


async def _connect(stack: Stack, conformance: Conformance) -> str | None:
    spec = conformance.connection
    if spec is None:
        return None
    return await stack.add_connection(str(spec.type), spec.secret, config=dict(spec.config))


def kit_run(make_stack: StackFactory, conformance: Conformance) -> _KitRunContext:
    """``async with kit_run(moat_make_stack, conformance) as run``: a stack serving the
    capability as the kit runs it, its connection stored."""
    return _KitRunContext(make_stack, conformance)


class _KitRunContext:
    def __init__(self, make_stack: StackFactory, conformance: Conformance) -> None:
        self._make_stack = make_stack
        self._conformance = conformance
        self._context: object = None

    async def __aenter__(self) -> KitRun:
        declaration = kit_declaration(self._conformance)
        catalog = CapabilityCatalog([declaration])
        self._context = self._make_stack(
            catalog=catalog,
            worker_catalog=catalog,
            http_allow_hosts=allow_entries(self._conformance.fake),
        )
        stack: Stack = await self._context.__aenter__()  # type: ignore[attr-defined]
        connection_id = await _connect(stack, self._conformance)
        return KitRun(self._conformance, declaration, stack, connection_id)

    async def __aexit__(self, *exc: object) -> None:
        await self._context.__aexit__(*exc)  # type: ignore[attr-defined]


@pytest_asyncio.fixture(loop_scope="session")
async def moat_conformance_run(
    moat_make_stack: StackFactory, moat_conformance: Conformance
) -> AsyncIterator[KitRun]:
    """A stack for one check of the conformance the module's ``moat_conformance`` gives."""
    async with kit_run(moat_make_stack, moat_conformance) as run:
        yield run


class ConformanceChecks:
    """The kit's checks, added to every module that defines ``moat_conformance``."""

    @pytest.mark.asyncio(loop_scope="session")
    async def test_duplicate_storm_makes_one_effect(self, moat_conformance_run: KitRun) -> None:
        await duplicate_storm(moat_conformance_run)

    @pytest.mark.asyncio(loop_scope="session")
    async def test_lost_answer_never_makes_two_effects(self, moat_conformance_run: KitRun) -> None:
        await lost_answer(moat_conformance_run)

    @pytest.mark.asyncio(loop_scope="session")
    async def test_reset_repeats_nothing(self, moat_conformance_run: KitRun) -> None:
        await reset(moat_conformance_run)

    @pytest.mark.asyncio(loop_scope="session")
    async def test_retry_after_is_honoured(self, moat_conformance_run: KitRun) -> None:
        await retry_after(moat_conformance_run)

    @pytest.mark.asyncio(loop_scope="session")
    @pytest.mark.parametrize("how", ["server_error", "rate_limited"])
    async def test_failures_are_worded_by_the_adapter(
        self, moat_conformance_run: KitRun, how: str
    ) -> None:
        await failures_worded(moat_conformance_run, how)

    @pytest.mark.asyncio(loop_scope="session")
    async def test_no_secret_at_rest(self, moat_conformance_run: KitRun) -> None:
        await no_secret_at_rest(moat_conformance_run)


class _KitModule(pytest.Module):
    """A test module that may define ``moat_conformance``: when it does, the kit's checks
    are collected with its own tests."""

    def collect(self) -> Iterable[pytest.Item | pytest.Collector]:
        module = self.obj
        if callable(getattr(module, FIXTURE, None)) and not hasattr(module, CLASS_NAME):
            setattr(module, CLASS_NAME, type(CLASS_NAME, (ConformanceChecks,), {}))
        return super().collect()


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(
    module_path: Path, parent: pytest.Collector
) -> pytest.Module | None:
    if module_path.name == "__init__.py":
        return None
    try:
        source = module_path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    if FIXTURE not in source:
        return None
    module: pytest.Module = _KitModule.from_parent(parent, path=module_path)
    return module
