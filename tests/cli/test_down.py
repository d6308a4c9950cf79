"""``moat down`` stops what ``moat up`` started in a ``$MOAT_HOME`` (the ``moat up`` process
first, then any of its processes still named in ``run/*.pid``), says what it stopped, and
is a no-op when nothing runs: a real ``moat up`` stopped from another process, and stand-in
processes for each path of the stop (a ``moat up`` gone, members left, one to kill)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from starter.cli import app as cli
from starter.devstack import down
from starter.devstack.ports import LISTEN_PORT
from tests.devstack.test_up import _environment, moat, moat_up

# Exits on SIGTERM and SIGINT. Both are set here, not inherited: a shell starts a background
# job with SIGINT ignored, and Python then leaves it ignored.
OBEYS = (
    "import signal, time\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
    "while True: time.sleep(0.05)"
)
IGNORES = OBEYS.replace("signal.SIGTERM, signal.SIG_DFL", "signal.SIGTERM, signal.SIG_IGN")


@pytest.fixture
def spawned() -> Iterator[list[subprocess.Popen[bytes]]]:
    children: list[subprocess.Popen[bytes]] = []
    yield children
    for child in children:
        child.kill()
        child.wait()


def start(children: list[subprocess.Popen[bytes]], code: str) -> int:
    child = subprocess.Popen([sys.executable, "-c", code])
    children.append(child)
    return child.pid


def test_down_stops_up_then_what_it_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, spawned: list[subprocess.Popen[bytes]]
) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setattr(down, "MEMBER_GRACE", 1.0)
    run = tmp_path / "run"
    run.mkdir()
    up = start(spawned, OBEYS)
    (run / "stack.json").write_text(f'{{"pid": {up}, "ports": {{}}}}\n')
    members = {"postgres": OBEYS, "gateway": OBEYS, "worker": IGNORES}
    pids = {name: start(spawned, code) for name, code in members.items()}
    for name, pid in pids.items():
        (run / f"{name}.pid").write_text(f"{pid}\n")
    (run / "temporal.pid").write_text("999999999\n")  # long gone

    said = CliRunner().invoke(cli, ["down"])
    assert said.exit_code == 0, said.output
    assert said.output.splitlines() == [
        f"stopped moat up (pid {up})",
        f"stopped gateway (pid {pids['gateway']})",
        f"stopped worker (pid {pids['worker']}) (it did not stop in time: killed)",
        f"stopped postgres (pid {pids['postgres']})",
    ]
    assert all(down.gone(pid) for pid in [up, *pids.values()])
    assert list(run.iterdir()) == []

    again = CliRunner().invoke(cli, ["down"])
    assert again.exit_code == 0, again.output
    assert again.output.startswith(f"nothing to stop: no moat up running in {tmp_path}")


def test_down_in_a_home_never_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MOAT_HOME", str(tmp_path / "new"))
    said = CliRunner().invoke(cli, ["down"])
    assert said.exit_code == 0 and said.output.startswith("nothing to stop")


def test_down_stops_a_real_moat_up(tmp_path: Path) -> None:
    env = _environment(tmp_path / "home")
    # moat_up checks, on leaving, that moat up ended with 0 and left no process or pid file.
    with moat_up(env) as pids:
        # moat up lets webhooks go to where `moat webhook listen` listens by default.
        hook = moat(
            env,
            "webhook",
            "add",
            f"http://127.0.0.1:{LISTEN_PORT}/",
            "-e",
            "execution.completed",
            "--json",
        )
        assert hook.returncode == 0, hook.stderr
        said = moat(env, "down")
        assert said.returncode == 0, said.stderr
        assert said.stdout.startswith("stopped moat up (pid "), said.stdout
        assert all(down.gone(pid) for pid in pids.values())
    assert moat(env, "down").stdout.startswith("nothing to stop")
