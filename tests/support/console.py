"""Signing in to the console (``/console``) in tests: over HTTP with httpx (``sign_in``),
and in a real browser (``open_signed_in``), as a person does, through the sign-in form.

The browser needs a gateway that answers while the test's Playwright holds the main
thread: ``console_stack`` (module-scoped) runs a whole Moat stack (gateway + worker, the
session's Postgres and Temporal) on an event loop of its own, in a thread, and
``ThreadStack.run(coro)`` runs a coroutine there (set-up, checks)."""

from __future__ import annotations

import asyncio
import re
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import httpx
import pytest
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment

from moat.testing.stack import ADMIN_KEY, Stack
from schemas.settings import MoatSettings

if TYPE_CHECKING:
    from playwright.sync_api import BrowserContext, Page

CSRF = re.compile(r'name="csrf_token" value="([^"]*)"')


def csrf_of(html: str) -> str:
    """The CSRF token of the first form of a console page."""
    found = CSRF.search(html)
    assert found is not None, html[:2000]
    return found.group(1)


async def sign_in(http: httpx.AsyncClient, base_url: str, api_key: str) -> str:
    """Sign ``http`` (which keeps cookies) in with ``api_key`` through the sign-in form, as
    a browser would; the CSRF token of the session's forms."""
    form = await http.get(f"{base_url}/console/sign-in")
    assert form.status_code == 200, form.text
    signed = await http.post(
        f"{base_url}/console/sign-in",
        data={"csrf_token": csrf_of(form.text), "api_key": api_key, "next": "/console"},
    )
    assert signed.status_code == 303, signed.text
    home = await http.get(f"{base_url}/console")
    assert home.status_code == 200, home.text
    return csrf_of(home.text)


def open_signed_in(context: BrowserContext, base_url: str, api_key: str, path: str = "") -> Page:
    """A new tab of ``context`` signed in to the console with ``api_key`` through the
    sign-in form (typed, as a person does), then at ``path`` (``/console/...``) if given."""
    page = context.new_page()
    page.goto(f"{base_url}/console/sign-in")
    page.get_by_label("API key").fill(api_key)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(f"{base_url}/console")
    if path:
        page.goto(f"{base_url}{path}")
    return page


T = TypeVar("T")


@dataclass
class ThreadStack:
    """A Moat stack served from a thread of its own (``console_stack``): ``stack`` is the
    usual ``moat.testing.stack.Stack`` (its ``url``, tenant, key, owner sessions, HTTP
    client), all bound to that thread's event loop; ``run`` runs a coroutine there."""

    stack: Stack
    loop: asyncio.AbstractEventLoop

    @property
    def url(self) -> str:
        return self.stack.url

    def run(self, work: Coroutine[Any, Any, T], timeout: float = 90) -> T:
        """Run ``work`` on the stack's loop and return its result (from a sync test)."""
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout)

    def new_key(self, scopes: list[str]) -> str:
        """A new key of the stack's tenant with ``scopes``, made through the admin API."""

        async def make() -> str:
            made = await self.stack.http.post(
                f"{self.url}/v1/admin/tenants/{self.stack.tenant_id}/keys",
                json={"scopes": scopes},
                headers={"Authorization": f"Bearer {ADMIN_KEY}"},
            )
            assert made.status_code == 201, made.text
            key: str = made.json()["api_key"]
            return key

        return self.run(make())


async def _serve_stack(
    settings: MoatSettings,
    temporal: WorkflowEnvironment,
    ready: Callable[[Stack], None],
    stop: asyncio.Event,
) -> None:
    import worker as worker_module
    from starter.devstack import serve_asgi
    from starter.gateway.app import create_app
    from store import make_engine, make_sessionmaker

    config = temporal.client.config()
    client = await Client.connect(
        temporal.client.service_client.config.target_host,
        namespace=temporal.client.namespace,
        data_converter=config["data_converter"],
    )
    owner = make_engine(settings.sqlalchemy_url, pool_size=2)
    app_engine = make_engine(settings.app_sqlalchemy_url)
    try:
        async with worker_module.activity_deps(settings) as (wsessions, http_out):
            worker = worker_module.build_worker(client, settings, wsessions, http_out)
            delivering = worker_module.delivery_worker(client, settings, wsessions)
            async with worker, delivering:
                app = create_app(
                    settings,
                    client=client,
                    sessions=make_sessionmaker(app_engine),
                    owner_sessions=make_sessionmaker(owner),
                )
                async with serve_asgi(app) as url, httpx.AsyncClient(timeout=60) as http:
                    stack = Stack(settings, url, client, make_sessionmaker(owner), "", "", http)
                    stack.tenant_id, stack.api_key = await stack.new_tenant()
                    ready(stack)
                    await stop.wait()
    finally:
        await app_engine.dispose()
        await owner.dispose()


@contextmanager
def thread_stack(
    settings: MoatSettings, temporal: WorkflowEnvironment, **overrides: Any
) -> Iterator[ThreadStack]:
    """A gateway + worker on a fresh task queue and a fresh tenant, served by a thread with
    its own event loop until the block ends; ``overrides`` change the settings."""
    settings = settings.model_copy(
        update={"task_queue": f"tq-console-{uuid.uuid4().hex}", **overrides}
    )
    loop = asyncio.new_event_loop()
    started: Future[Stack] = Future()
    stop = asyncio.Event()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(_serve_stack(settings, temporal, started.set_result, stop))
        except BaseException as err:
            if not started.done():
                started.set_exception(err)
            raise
        finally:
            loop.close()

    thread = threading.Thread(target=serve, name="console-stack", daemon=True)
    thread.start()
    try:
        yield ThreadStack(started.result(timeout=120), loop)
    finally:
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def console_stack(
    moat_settings: MoatSettings, moat_temporal: WorkflowEnvironment
) -> Iterator[ThreadStack]:
    """A Moat stack for one browser test module, answering while Playwright holds the main
    thread (the session's Postgres and Temporal; a fresh task queue and tenant)."""
    with thread_stack(moat_settings, moat_temporal) as running:
        yield running
