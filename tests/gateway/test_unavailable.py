"""A dependency that is briefly away is ``503 unavailable`` with ``Retry-After``, never a
500, and the gateway recovers on its own once it is back; a retry with the same key runs
the request once.

PostgreSQL here is one of the test's own (the session's is shared by every test): it is
crashed (an immediate shutdown, every connection cut, as in the chaos campaign) and started
again under a gateway and worker that keep running. Temporal is a frontend that does not
answer (a client of a port nobody listens on)."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from temporalio.client import Client
from temporalio.service import RetryConfig

from schemas.settings import MoatSettings
from starter.devstack import EmbeddedPostgres, free_port, serve_asgi
from starter.gateway.app import create_app
from starter.runtime.codec import data_converter
from store import api_keys, make_engine, make_sessionmaker, receipts, tenancy, tenants, upgrade
from tests.support.stack import Stack, StackFactory

BODY: dict[str, Any] = {"schema_version": "1", "capability_id": "demo.echo", "input": {"m": 1}}


def _assert_unavailable(response: httpx.Response, dependency: str) -> None:
    assert response.status_code == 503, response.text
    assert response.headers["Retry-After"].isdigit()
    error = response.json()["error"]
    assert error["code"] == "unavailable"
    assert error["details"]["dependency"] == dependency
    assert error["details"]["retry_after_seconds"] == int(response.headers["Retry-After"])


def _crash(pg: EmbeddedPostgres) -> None:
    """An immediate shutdown (SIGQUIT): every backend gone at once, no checkpoint."""
    assert pg.pid is not None
    os.kill(pg.pid, signal.SIGQUIT)
    while pg.poll() is None:
        pass
    pg.stop()  # forgets the ended process


async def test_a_restarting_postgres_is_503_with_retry_after_then_recovers(
    make_stack: StackFactory, tmp_path: Path
) -> None:
    pg = EmbeddedPostgres(tmp_path / "pg", free_port())  # durable: it is crashed
    url = await asyncio.to_thread(pg.start)
    try:
        await asyncio.to_thread(upgrade, MoatSettings(database_url=url).sqlalchemy_url)
        owner = make_engine(MoatSettings(database_url=url).sqlalchemy_url, pool_size=1)
        async with make_sessionmaker(owner).begin() as session:
            tenant = await tenants.create_tenant(session, f"t-{uuid.uuid4().hex[:8]}")
            api_key = await api_keys.create_api_key(session, tenant.id)
        await owner.dispose()
        # The worker and this gateway on the test's PostgreSQL.
        async with make_stack(database_url=url, auth_cache_seconds=0.2) as stack:
            app = create_app(stack.settings, client=stack.client)
            async with serve_asgi(app) as gateway, httpx.AsyncClient(timeout=60) as http:
                post = f"{gateway}/v1/executions"

                def headers(key: str) -> dict[str, str]:
                    return {"Authorization": f"Bearer {api_key}", "Idempotency-Key": key}

                first = await http.post(post, json=BODY, headers=headers("before"))
                assert first.status_code == 200, first.text

                await asyncio.to_thread(_crash, pg)
                retried = {**BODY, "input": {"m": 2}}
                # A key verified moments ago, then one looked up again: both 503.
                _assert_unavailable(
                    await http.post(post, json=retried, headers=headers("during")), "postgres"
                )
                await asyncio.sleep(0.3)
                _assert_unavailable(
                    await http.post(post, json=retried, headers=headers("during")), "postgres"
                )
                poll = f"{gateway}/v1/executions/{first.json()['receipt_id']}"
                _assert_unavailable(await http.get(poll, headers=headers("x")), "postgres")

                await asyncio.to_thread(pg.start)
                # Back: the same request, the same key, until it is answered; never a 500.
                statuses = []
                for _ in range(50):
                    again = await http.post(post, json=retried, headers=headers("during"))
                    statuses.append(again.status_code)
                    if again.status_code != 503:
                        break
                    await asyncio.sleep(0.2)
                assert again.status_code == 200, (statuses, again.text)
                assert set(statuses) <= {200, 503}, statuses
                assert (await http.get(poll, headers=headers("x"))).status_code == 200
                # Run once: one receipt for the key, whatever the retries.
                repeat = await http.post(post, json=retried, headers=headers("during"))
                assert repeat.json()["receipt_id"] == again.json()["receipt_id"]
        engine = make_engine(MoatSettings(database_url=url).sqlalchemy_url, pool_size=1)
        try:
            async with make_sessionmaker(engine).begin() as session:
                await tenancy.set_tenant(session, tenant.id)
                found = await receipts.get_receipt(session, tenant.id, again.json()["receipt_id"])
                assert found is not None and found.idempotency_key == "during"
        finally:
            await engine.dispose()
    finally:
        await asyncio.to_thread(pg.stop)


class Cable:
    """A TCP forwarder to Temporal's frontend that can be cut: the client connected through
    it sees the frontend go away (its connections dropped, new ones refused)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def __aenter__(self) -> str:
        self.server = await asyncio.start_server(self._connect, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def __aexit__(self, *exc: object) -> None:
        self.cut()

    def cut(self) -> None:
        if self.server is not None:
            self.server.close()
        for writer in self.writers:
            writer.transport.abort()

    async def _connect(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)
        self.writers += [writer, up_writer]

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except OSError:
                pass
            finally:
                dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


async def test_an_unavailable_temporal_is_503_with_retry_after(
    stack: Stack, app_sessions: async_sessionmaker[AsyncSession]
) -> None:
    cable = Cable(stack.client.service_client.config.target_host)
    async with cable as through:
        client = await Client.connect(
            through,
            namespace=stack.settings.temporal_namespace,
            data_converter=data_converter(stack.settings),
            retry_config=RetryConfig(max_retries=1, initial_interval_millis=50),
        )
        app = create_app(stack.settings, client=client, sessions=app_sessions)
        async with serve_asgi(app) as gateway, httpx.AsyncClient(timeout=60) as http:
            auth = {"Authorization": f"Bearer {stack.api_key}"}
            post = f"{gateway}/v1/executions"
            before = await http.post(post, json=BODY, headers=auth)
            assert before.status_code == 200, before.text
            cable.cut()
            started = await http.post(post, json=BODY, headers={**auth, "Idempotency-Key": "away"})
            _assert_unavailable(started, "temporal")
            # An execution Postgres does not know yet is looked for in Temporal: not a 404.
            unknown = f"{gateway}/v1/executions/{uuid.uuid4()}"
            _assert_unavailable(await http.get(unknown, headers=auth), "temporal")
    # The same key on a gateway whose Temporal answers: run once, as usual.
    done = await stack.execute("demo.echo", BODY["input"], key="away")
    assert done.status_code == 200, done.text
    assert done.json()["receipt_id"] != before.json()["receipt_id"]
