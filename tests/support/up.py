"""A whole local stack as a newcomer runs it: ``moat up --fake-providers`` as a process of
its own in a fresh folder, on free ports, with the CLI run against it as a shell would.

Each port has as many digits as its default (``8000``, ``8233``, ``55432``…), so what the
commands print keeps its layout when a test writes the defaults back in its place."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from schemas.settings import MoatSettings
from starter.devstack.processes import pid_alive
from starter.devstack.up import healthy

# The ports of ``moat up --fake-providers``, by setting.
PORT_FIELDS = (
    "database_port",
    "temporal_port",
    "temporal_ui_port",
    "gateway_port",
    "fake_slack_port",
    "fake_github_port",
    "fake_webhook_port",
    "fake_notion_port",
)
# Linux's default first ephemeral port (net.ipv4.ip_local_port_range); the ports picked
# here stay below it.
EPHEMERAL_LOW = 32768
DEFAULT_PORTS = {field: int(MoatSettings.model_fields[field].default) for field in PORT_FIELDS}


@dataclass
class LocalStack:
    """A running ``moat up``: where it runs, its ports, and the banner it printed."""

    folder: Path
    env: dict[str, str]
    ports: dict[str, int]
    banner: str

    @property
    def home(self) -> Path:
        return self.folder / ".moat"

    def url(self, field: str) -> str:
        return f"http://127.0.0.1:{self.ports[field]}"

    def moat(self, *args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
        """``moat ARGS`` in the stack's folder, as a terminal ``columns`` wide."""
        return subprocess.run(
            [sys.executable, "-m", "starter.cli", *args],
            cwd=self.folder,
            env={**self.env, "COLUMNS": str(columns)},
            capture_output=True,
            text=True,
            timeout=60,
        )


def free_port_like(default: int, taken: set[int]) -> int:
    """A free loopback port with as many digits as ``default`` (never one in ``taken``),
    below the kernel's range of ephemeral ports: a port free when picked there can be taken
    by any process's next outgoing connection (the other test process's, say) before the
    stack binds it."""
    digits = len(str(default))
    low, high = max(1024, 10 ** (digits - 1)), min(EPHEMERAL_LOW - 1, 10**digits - 1)
    for _ in range(200):
        port = random.randint(low, high)
        if port in taken or port in DEFAULT_PORTS.values():
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        taken.add(port)
        return port
    raise AssertionError(f"no free port of {digits} digits")


def stack_environment(folder: Path) -> tuple[dict[str, str], dict[str, int]]:
    """The environment of a stack in ``folder`` (its home the default ``.moat`` there), on
    free ports; and those ports by setting."""
    taken: set[int] = set()
    ports = {field: free_port_like(DEFAULT_PORTS[field], taken) for field in PORT_FIELDS}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MOAT_")}
    env.update({f"MOAT_{field.upper()}": str(port) for field, port in ports.items()})
    # The CLI of this environment first on the PATH, as after `. .venv/bin/activate`.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PGPASSWORD", None)  # libpq would send it
    env["PGPASSFILE"] = str(folder / "no-pgpass")
    return env, ports


@contextmanager
def local_stack(folder: Path, timeout: float = 120) -> Iterator[LocalStack]:
    """``moat up --fake-providers`` in ``folder`` until it has printed its banner; stopped
    with SIGTERM on exit."""
    env, ports = stack_environment(folder)
    proc = subprocess.Popen(
        [sys.executable, "-m", "starter.cli", "up", "--fake-providers"],
        cwd=folder,
        env={**env, "COLUMNS": "80"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        banner = _wait_for_banner(proc, f"http://127.0.0.1:{ports['gateway_port']}", timeout)
        yield LocalStack(folder, env, ports, banner)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        _reap(folder / ".moat" / "run")


def _wait_for_banner(proc: subprocess.Popen[str], gateway: str, timeout: float) -> str:
    """What ``moat up`` printed up to the end of its banner, once its gateway answers."""
    deadline = time.monotonic() + timeout
    while not healthy(gateway):
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        assert time.monotonic() < deadline, f"moat up did not come up in {timeout:.0f} s"
        time.sleep(0.2)
    seen: list[str] = []
    while not seen or not seen[-1].startswith("╰"):
        assert time.monotonic() < deadline, "moat up printed no banner:\n" + "".join(seen)
        line = proc.stdout.readline() if proc.stdout else ""
        assert line, "".join(seen)
        seen.append(line)
    return "".join(seen)


def _reap(run: Path) -> None:
    """A child that outlived its ``moat up`` (a failed stop) is ended, so a test leaves no
    server behind."""
    for pid_file in run.glob("*.pid"):
        text = pid_file.read_text().strip()
        if text.isdigit() and pid_alive(int(text)):
            os.kill(int(text), signal.SIGKILL)
