"""Two stacks on one machine: ``moat up`` moves off taken default ports, refuses a taken
port the user set (naming the variable), and remembers its ports for the commands run in
its home; ``moat status`` shows them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from typer.testing import CliRunner

from schemas.settings import MoatSettings
from starter.cli import app as cli
from starter.devstack.ports import (
    PortTaken,
    choose_ports,
    forget,
    free_or_next,
    remember,
    variable,
    with_running_stack,
)
from starter.devstack.processes import free_port
from starter.devstack.up import healthy
from tests.devstack.test_up import _environment, moat, spawn_up


@contextmanager
def listening(port: int = 0) -> Iterator[int]:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", port))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_taken_default_moves_a_taken_setting_is_refused() -> None:
    with listening() as held:
        moved = free_or_next("gateway_port", held, explicit=False, taken={held + 1})
        assert moved not in (held, held + 1)
        with listening(moved):  # it was free
            pass
        with pytest.raises(PortTaken, match="MOAT_GATEWAY_PORT"):
            free_or_next("gateway_port", held, explicit=True, taken=set())


def test_choose_ports_keeps_what_the_user_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    with listening() as held:
        monkeypatch.setenv("MOAT_DATABASE_PORT", str(held))
        with pytest.raises(PortTaken, match="MOAT_DATABASE_PORT"):
            choose_ports(MoatSettings())
    free = free_port()
    monkeypatch.setenv("MOAT_DATABASE_PORT", str(free))
    ports = choose_ports(MoatSettings())
    assert ports["database_port"] == free
    assert len(set(ports.values())) == len(ports)


def test_commands_in_the_home_use_the_remembered_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    remember(MoatSettings(), {"gateway_port": 18001, "temporal_ui_port": 18002})
    monkeypatch.setenv("MOAT_TEMPORAL_UI_PORT", "18999")
    settings = with_running_stack(MoatSettings())
    assert settings.local_gateway_url == "http://127.0.0.1:18001"
    assert settings.temporal_ui_port == 18999  # set by the user: theirs


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_moat_up_beside_taken_default_ports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    defaults = MoatSettings.model_fields
    gateway_default = defaults["gateway_port"].default
    database_default = defaults["database_port"].default
    if not (_bindable(gateway_default) and _bindable(database_default)):
        pytest.skip("the default gateway or Postgres port is in use on this machine")
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    home = tmp_path / "home"
    env = _environment(home)
    # Both left to their defaults, which this test holds; Temporal's on free ports.
    del env["MOAT_GATEWAY_PORT"], env["MOAT_DATABASE_PORT"]
    with ExitStack() as held:
        held.enter_context(listening(gateway_default))
        held.enter_context(listening(database_default))

        refused = moat({**env, "MOAT_GATEWAY_PORT": str(gateway_default)}, "up")
        assert refused.returncode == 1
        assert "MOAT_GATEWAY_PORT" in refused.stdout, refused.stdout

        proc = spawn_up(env)
        try:
            status = _wait_up(env, proc)
            ports = {m["name"]: m["port"] for m in status["members"]}
            assert ports["gateway"] not in (None, gateway_default)
            assert ports["postgres"] not in (None, database_default)
            assert ports["Temporal UI"] == int(env["MOAT_TEMPORAL_UI_PORT"])
            assert all(m["alive"] for m in status["members"]), status

            table = moat({**env, "COLUMNS": "200"}, "status")
            assert table.returncode == 0
            assert f"http://127.0.0.1:{ports['gateway']}" in table.stdout

            # No MOAT_GATEWAY_PORT: execute finds the gateway where `moat up` put it.
            summary = moat(env, "execute", "demo.echo", "--input", '{"two":"stacks"}')
            assert summary.returncode == 0, summary.stdout + summary.stderr
            assert f"http://127.0.0.1:{env['MOAT_TEMPORAL_UI_PORT']}/" in summary.stdout
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(60)
        assert code == 0, proc.stdout.read() if proc.stdout else ""
    after = moat(env, "status", "--json")
    assert after.returncode == 1 and json.loads(after.stdout)["running"] is False


def _wait_up(env: dict[str, str], proc: subprocess.Popen[str]) -> dict:  # type: ignore[type-arg]
    deadline = time.monotonic() + 120
    while True:
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, "moat up did not come up in 120 s"
        status = moat(env, "status", "--json")
        if status.returncode == 0:
            report = json.loads(status.stdout)
            gateway = next(m for m in report["members"] if m["name"] == "gateway")
            if gateway["url"] and healthy(gateway["url"]):
                return report  # type: ignore[no-any-return]
        time.sleep(0.5)


FAKES = ("fake_slack_port", "fake_github_port", "fake_webhook_port")


def test_the_fakes_listen_on_the_same_ports_at_the_next_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Connections name a fake's address: a second ``moat up`` in the home listens there
    again, even one the first start moved to because its default was taken."""
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    for field in ("database_port", "temporal_port", "temporal_ui_port", "gateway_port"):
        monkeypatch.setenv(variable(field), str(free_port()))
    default = MoatSettings().fake_slack_port
    with ExitStack() as held:
        if _bindable(default):
            held.enter_context(listening(default))  # another stack's fake holds it
        first = choose_ports(MoatSettings(), fake_providers=True)
        assert first["fake_slack_port"] != default
        remember(MoatSettings(), first)
        forget(MoatSettings())  # the first stack stopped
    second = choose_ports(MoatSettings(), fake_providers=True)
    assert {f: second[f] for f in FAKES} == {f: first[f] for f in FAKES}
    assert len(set(second.values())) == len(second)
    # A port set by the user is theirs.
    chosen = free_port()
    monkeypatch.setenv("MOAT_FAKE_GITHUB_PORT", str(chosen))
    assert choose_ports(MoatSettings(), fake_providers=True)["fake_github_port"] == chosen


def test_moat_status_lists_the_fakes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    ports = {"gateway_port": 18001, "fake_slack_port": 18701, "fake_github_port": 18702,
             "fake_webhook_port": 18703}  # fmt: skip
    remember(MoatSettings(), ports)  # this process plays `moat up`, its fakes alive
    (tmp_path / "run" / "providers.pid").write_text(f"{os.getpid()}\n")
    shown = CliRunner().invoke(cli, ["status"])
    assert shown.exit_code == 0, shown.output
    for name, url in (
        ("fake slack", "http://127.0.0.1:18701/api"),
        ("fake github", "http://127.0.0.1:18702"),
        ("fake webhook", "http://127.0.0.1:18703"),
    ):
        row = next(line for line in shown.output.splitlines() if name in line)
        assert url in row and "│ up " in row, shown.output
    report = json.loads(CliRunner().invoke(cli, ["status", "--json"]).output)
    fakes = {m["name"]: (m["url"], m["port"], m["alive"]) for m in report["members"]}
    assert fakes["fake slack"] == ("http://127.0.0.1:18701/api", 18701, True)
