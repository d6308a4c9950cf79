"""The embedded servers ``moat up`` runs: start, stop, and reuse of their data on disk."""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
from temporalio.client import Client

from schemas.names import SEARCH_ATTRIBUTES
from schemas.settings import MoatSettings
from starter.devstack import (
    EmbeddedPostgres,
    TemporalDevServer,
    free_port,
    temporal_binary,
)
from starter.devstack.home import ensure_database_passwords
from starter.devstack.processes import ChildProcess, pid_alive, run_sync
from tests.support.stack import repo_root


def test_postgres_keeps_data_across_restarts(tmp_path: Path) -> None:
    data, port = tmp_path / "pg", free_port()
    with EmbeddedPostgres(data, port, fast=True) as pg:
        assert pg.url == f"postgresql://postgres@127.0.0.1:{port}/moat"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE kept (x int)")
            conn.execute("INSERT INTO kept VALUES (42)")
        pid = pg.pid
    assert pid is not None and not pid_alive(pid)
    assert not (data / "postmaster.pid").exists()

    with EmbeddedPostgres(data, port) as pg, psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT x FROM kept").fetchall() == [(42,)]


def test_postgres_refuses_a_live_data_dir_and_recovers_after_a_crash(tmp_path: Path) -> None:
    data = tmp_path / "pg"
    first = EmbeddedPostgres(data, free_port(), fast=True)
    first.start()
    try:
        with pytest.raises(RuntimeError, match="already runs"):
            EmbeddedPostgres(data, free_port()).start()
        assert first.pid is not None
        os.kill(first.pid, signal.SIGKILL)
        while first.poll() is None:
            time.sleep(0.05)
        assert (data / "postmaster.pid").exists()  # left behind, names a dead process
    finally:
        first.stop()

    with EmbeddedPostgres(data, free_port(), fast=True) as pg, psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)


PASSWORD = "pw-" + "Kq7" * 10


@pytest.fixture
def no_client_passwords(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """libpq would otherwise supply a password from the environment or ~/.pgpass."""
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))


def _refused(**params: object) -> None:
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(connect_timeout=10, dbname="moat", **params).close()


@pytest.mark.usefixtures("no_client_passwords")
def test_postgres_with_a_password_refuses_connections_without_it(tmp_path: Path) -> None:
    data, port = tmp_path / "pg", free_port()
    with EmbeddedPostgres(data, port, fast=True, password=PASSWORD) as pg:
        assert pg.url == f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/moat"
        with psycopg.connect(pg.url, autocommit=True) as conn:
            conn.execute("CREATE ROLE moat_app LOGIN")
        pg.set_password("moat_app", "app-" + PASSWORD)
        for user in ("postgres", "moat_app"):
            _refused(host="127.0.0.1", port=port, user=user)
            _refused(host="127.0.0.1", port=port, user=user, password="wrong")
            if (data / f".s.PGSQL.{port}").exists():  # the unix socket holds too
                _refused(host=str(data), port=port, user=user)
        app_url = f"postgresql://moat_app:app-{PASSWORD}@127.0.0.1:{port}/moat"
        with psycopg.connect(app_url) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("moat_app",)
    # Passwords travel as SCRAM verifiers: not even the server's log has them.
    assert PASSWORD not in (data / "server.log").read_text()


@pytest.mark.usefixtures("no_client_passwords")
def test_a_trusting_cluster_is_switched_to_passwords(tmp_path: Path) -> None:
    """A home made before passwords: its cluster trusted every local connection."""
    data, port = tmp_path / "pg", free_port()
    with EmbeddedPostgres(data, port, fast=True) as pg, psycopg.connect(pg.url) as conn:
        assert conn.execute("SELECT 1").fetchone() == (1,)
    for _ in range(2):  # switched once, then started as it is
        with EmbeddedPostgres(data, port, fast=True, password=PASSWORD) as pg:
            _refused(host="127.0.0.1", port=port, user="postgres")
            with psycopg.connect(pg.url) as conn:
                assert conn.execute("SELECT 1").fetchone() == (1,)


def test_settings_derive_the_embedded_urls_from_the_kept_passwords(tmp_path: Path) -> None:
    settings = MoatSettings(home=tmp_path / "home", database_port=5999)
    assert settings.sqlalchemy_url == "postgresql+psycopg://postgres@127.0.0.1:5999/moat"
    passwords = ensure_database_passwords(settings)
    assert ensure_database_passwords(settings) == passwords  # kept, not regenerated
    assert set(passwords) == {"postgres", "moat_app"}
    assert stat.S_IMODE(settings.database_passwords_path.stat().st_mode) == 0o600
    owner, app = passwords["postgres"], passwords["moat_app"]
    assert owner != app
    assert settings.sqlalchemy_url == f"postgresql+psycopg://postgres:{owner}@127.0.0.1:5999/moat"
    assert settings.app_sqlalchemy_url == (
        f"postgresql+psycopg://moat_app:{app}@127.0.0.1:5999/moat"
    )
    # An external database is configured whole: nothing from the home is added to it.
    external = settings.model_copy(update={"database_url": "postgresql://o:pw@db:5432/m"})
    assert external.app_sqlalchemy_url == "postgresql+psycopg://moat_app@db:5432/m"
    # Settings may be logged: their URLs' passwords are not shown.
    assert "pw@" not in repr(external) and "o:***@db" in repr(external)
    assert owner not in repr(settings) + str(settings)


def test_servers_refuse_a_busy_port(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(RuntimeError, match="already in use"):
            EmbeddedPostgres(tmp_path / "pg", port).start()
        with pytest.raises(RuntimeError, match="already in use"):
            TemporalDevServer(port, free_port()).start()


async def _describe(address: str, namespace: str) -> tuple[int, set[str]]:
    client = await Client.connect(address, namespace=namespace)
    described = await client.workflow_service.describe_namespace(
        DescribeNamespaceRequest(namespace=namespace)
    )
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=namespace)
    )
    retention = described.config.workflow_execution_retention_ttl.seconds
    return retention, set(listed.custom_attributes)


def test_temporal_reuses_its_db_and_completes_search_attributes(tmp_path: Path) -> None:
    db = tmp_path / "temporal.db"
    # An older db file that knows one attribute: start-dev skips the rest on reuse.
    old = ChildProcess(
        [str(temporal_binary()), "server", "start-dev", "--headless", "--ip", "127.0.0.1",
         "--port", str(port := free_port()), "--namespace", "moat", "--db-filename", str(db),
         "--search-attribute", "MoatTenant=Keyword"],
        tmp_path / "old.log",
    )  # fmt: skip
    old.start()
    old.wait_ready("old Temporal", lambda: db.exists() and _answers(port), timeout=60)
    old.stop()

    wanted = {name for name, _ in SEARCH_ATTRIBUTES}
    for attempt in range(2):
        server = TemporalDevServer(free_port(), free_port(), "moat", db, tmp_path / "t.log")
        with server:
            assert server.address == f"127.0.0.1:{server.port}"
            if attempt == 0:
                server.ensure_retention(48)
            retention, attributes = run_sync(_describe(server.address, "moat"))
            assert retention == 48 * 3600
            assert wanted <= attributes
            pid = server.pid
        assert pid is not None and not pid_alive(pid)


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) == 0


def test_cli_names_a_service_it_cannot_reach_without_a_traceback() -> None:
    closed = free_port()  # nothing listens there
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOAT_")}
    cases = [
        (["tenant", "list"], {"MOAT_DATABASE_URL": f"postgresql://moat@127.0.0.1:{closed}/moat"},
         "cannot reach PostgreSQL", "MOAT_DATABASE_URL"),
        (["worker"], {"MOAT_TEMPORAL_ADDRESS": f"127.0.0.1:{closed}"},
         "cannot reach Temporal", "MOAT_TEMPORAL_ADDRESS"),
    ]  # fmt: skip
    for args, extra, message, hint in cases:
        done = subprocess.run(
            [sys.executable, "-m", "starter.cli", *args],
            cwd=repo_root(),
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 3, done.stderr  # a service that is not there
        assert message in done.stderr and hint in done.stderr, done.stderr
        assert "Traceback" not in done.stderr + done.stdout


def test_the_codec_token_is_not_on_the_temporal_command_line(tmp_path: Path) -> None:
    """Every user of the machine can read a command line (``ps``): the UI's codec address,
    which holds the codec door's token, reaches the dev server another way."""
    token = "door-token-" + "x" * 32
    endpoint = f"http://127.0.0.1:{free_port()}/codec/ui/{token}"
    server = TemporalDevServer(free_port(), free_port(), "moat", log_file=tmp_path / "t.log",
                               ui_codec_endpoint=endpoint)  # fmt: skip
    with server:
        assert server.pid is not None
        process = psutil.Process(server.pid)
        argv = process.cmdline()
        for each in (process, *process.children(recursive=True)):
            assert not any(token in arg for arg in each.cmdline()), each.cmdline()
        # The UI was still given the address, so it decodes through the gateway.
        settings = httpx.get(f"{server.ui_url}/api/v1/settings", timeout=10).json()
        assert settings["Codec"]["Endpoint"] == endpoint
        # The presets file it was read from is gone.
        assert not Path(argv[argv.index("--env-file") + 1]).exists()
