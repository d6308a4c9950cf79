"""``moat up`` end to end, as a new user runs it: the whole stack from an empty home, an
execution through the CLI, the Temporal UI wired to the payload codec, a clean stop on
SIGTERM, and a second start that keeps the data."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil
import psycopg
import pytest

from starter.devstack.processes import free_port, pid_alive
from starter.devstack.up import Backoff, healthy
from starter.runtime.codec_door import Door
from tests.support.stack import repo_root

NAMES = ("postgres", "temporal", "worker", "gateway")


def _environment(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOAT_")}
    ports = {
        "MOAT_DATABASE_PORT": free_port(),
        "MOAT_TEMPORAL_PORT": free_port(),
        "MOAT_TEMPORAL_UI_PORT": free_port(),
        "MOAT_GATEWAY_PORT": free_port(),
    }
    return {**env, **{k: str(v) for k, v in ports.items()}, "MOAT_HOME": str(home)}


def spawn_up(env: dict[str, str]) -> subprocess.Popen[str]:
    """``moat up`` as its own process, its output (stdout and stderr) in one pipe."""
    return subprocess.Popen(
        [sys.executable, "-m", "starter.cli", "up"],
        cwd=repo_root(),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


@contextmanager
def moat_up(env: dict[str, str]) -> Iterator[dict[str, int]]:
    """``moat up`` until the gateway answers; SIGTERM on exit, which must end it with 0 and
    leave no process or pid file behind. Yields the children's pids."""
    home = Path(env["MOAT_HOME"])
    gateway = f"http://127.0.0.1:{env['MOAT_GATEWAY_PORT']}"
    proc = spawn_up(env)
    try:
        deadline = time.monotonic() + 120
        while not healthy(gateway):
            assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
            assert time.monotonic() < deadline, "moat up did not come up in 120 s"
            time.sleep(0.2)
        # Answering is not the end of starting: wait for the banner, after which moat up only
        # supervises (a child killed before it is a failed start, not a crash to restart).
        seen: list[str] = []
        while not any("Moat is up" in line for line in seen[-1:]):
            assert time.monotonic() < deadline, "moat up printed no banner in 120 s"
            line = proc.stdout.readline() if proc.stdout else ""
            assert line, "".join(seen)
            seen.append(line)
        run = home / "run"
        pids = {name: int((run / f"{name}.pid").read_text()) for name in NAMES}
        assert all(pid_alive(pid) for pid in pids.values()), pids
        yield pids
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        code = proc.wait(60)
    assert code == 0, proc.stdout.read() if proc.stdout else ""
    assert not list((home / "run").glob("*.pid"))
    assert not [name for name, pid in pids.items() if pid_alive(pid)]


def moat(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "starter.cli", *args],
        cwd=repo_root(),
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_moat_up_runs_the_stack_and_keeps_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)  # libpq would send it
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    env = _environment(tmp_path / "home")
    gateway = f"http://127.0.0.1:{env['MOAT_GATEWAY_PORT']}"
    ui = f"http://127.0.0.1:{env['MOAT_TEMPORAL_UI_PORT']}"
    with moat_up(env) as pids:
        first = moat(
            env, "execute", "demo.echo", "--input", '{"hello":"up"}', "--key", "k1", "--json"
        )
        assert first.returncode == 0, first.stderr
        envelope = json.loads(first.stdout)
        assert envelope["status"] == "executed"
        assert envelope["receipt"]["workflow_id"] == envelope["workflow_id"]

        # The dev server's UI was started with Moat's codec address, and the gateway lets
        # that UI's origin call it.
        door = Door.read(tmp_path / "home" / "codec-door.json")
        codec = f"{gateway}/codec/ui/{door.token}"
        settings = httpx.get(f"{ui}/api/v1/settings", timeout=10).json()
        assert settings["Codec"]["Endpoint"] == codec
        # Not through its command line, which every user of the machine can read.
        for name, pid in pids.items():
            assert door.token not in " ".join(psutil.Process(pid).cmdline()), name
        assert moat(env, "codec", "url").stdout.strip() == codec
        assert moat(env, "codec-url").stdout.strip() == codec
        preflight = httpx.options(
            f"{codec}/decode",
            headers={
                "Origin": ui,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "content-type,x-namespace",
            },
            timeout=10,
        )
        assert preflight.headers.get("access-control-allow-origin") == ui

        # The database asks for the passwords `moat up` generated, kept for its user only.
        kept = tmp_path / "home" / "db-passwords.json"
        assert stat.S_IMODE(kept.stat().st_mode) == 0o600
        passwords = json.loads(kept.read_text())
        port = env["MOAT_DATABASE_PORT"]
        for role in ("postgres", "moat_app"):
            with pytest.raises(psycopg.OperationalError, match="password"):
                psycopg.connect(f"postgresql://{role}@127.0.0.1:{port}/moat", connect_timeout=10)

    # The worker logs JSON lines (MOAT_LOG_FORMAT's default).
    lines = (tmp_path / "home" / "logs" / "worker.log").read_text().splitlines()
    entries = [json.loads(line) for line in lines if line.startswith("{")]
    assert any(
        e["service"] == "moat-worker" and e["message"].startswith("worker polling task queue")
        for e in entries
    ), lines

    with moat_up(env):  # the same home: the same tenant, key and receipt
        again = moat(
            env, "execute", "demo.echo", "--input", '{"hello":"up"}', "--key", "k1", "--json"
        )
        assert again.returncode == 0, again.stderr
        assert "idempotent replay" in again.stderr
        assert json.loads(again.stdout)["receipt_id"] == envelope["receipt_id"]

    # No log of any process names a database password.
    for log in (tmp_path / "home" / "logs").iterdir():
        assert not any(pw in log.read_text() for pw in passwords.values()), log.name


def test_moat_up_restarts_a_crashed_worker_and_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "no-pgpass"))
    env = _environment(tmp_path / "home")
    gateway = f"http://127.0.0.1:{env['MOAT_GATEWAY_PORT']}"
    with moat_up(env) as pids:
        back = _crash_and_wait(tmp_path / "home", gateway, pids, ("worker", "gateway"))
        fresh = moat(env, "execute", "demo.echo", "--input", '{"after":"crash"}', "--json")
        assert fresh.returncode == 0, fresh.stderr
        assert json.loads(fresh.stdout)["status"] == "executed"
    assert not [name for name, pid in back.items() if pid_alive(pid)]


def _crash_and_wait(
    home: Path, gateway: str, pids: dict[str, int], names: tuple[str, ...]
) -> dict[str, int]:
    """``kill -9`` each of ``names``; wait until ``moat up`` has started each again (a new
    live pid, and the restart noted in its log). Returns the new pids."""
    for name in names:
        os.kill(pids[name], signal.SIGKILL)
    back: dict[str, int] = {}
    deadline = time.monotonic() + 90
    while len(back) < len(names):
        assert time.monotonic() < deadline, f"not restarted in 90 s: {set(names) - set(back)}"
        for name in names:
            text = (home / "run" / f"{name}.pid").read_text().strip()
            pid = int(text) if text.isdigit() else pids[name]  # caught mid-write: look again
            if pid != pids[name] and pid_alive(pid):
                back[name] = pid
        time.sleep(0.2)
    for name in names:
        log = (home / "logs" / f"{name}.log").read_text()
        assert f"moat up: {name} exited unexpectedly (code -9); restarting it" in log
    deadline = time.monotonic() + 90
    while not healthy(gateway):
        assert time.monotonic() < deadline, "the restarted gateway did not answer in 90 s"
        time.sleep(0.2)
    return back


def test_restart_backoff_doubles_then_resets_once_steady_and_gives_up_on_a_crash_loop() -> None:
    backoff = Backoff(first=0.5, longest=4.0, steady=60.0, give_up=5)
    delays = [backoff.next_delay(now) for now in (0.0, 1.0, 3.0, 7.0)]
    assert delays == [0.5, 1.0, 2.0, 4.0]
    assert backoff.next_delay(100.0) == 0.5  # it stayed up a minute: a fresh start
    crash_loop = [backoff.next_delay(100.0 + i) for i in range(1, 6)]
    assert crash_loop == [1.0, 2.0, 4.0, 4.0, None]
