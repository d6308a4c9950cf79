"""A stack that is not there is said at once: the ``error: <code>: …`` line and the
``hint:`` line naming what to run, exit code 3, within a second or two, whether nothing
listens on the port (refused) or the connection hangs (a short connect timeout), for the
commands through the gateway and those that go to PostgreSQL or Temporal directly."""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from starter.cli.output import UNAVAILABLE
from starter.cli.root import main
from starter.devstack import free_port

# A command that takes longer than this is hanging: the test ends it as a failure.
HANG = 15.0
# What the person waits, at most, to be told.
PROMPT = 3.0


@pytest.fixture
def hanging_port() -> Iterator[int]:
    """A port whose TCP connections hang: a listener with a full backlog that never
    accepts, so the kernel drops further handshakes."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    queued = []
    for _ in range(4):
        waiting = socket.socket()
        waiting.setblocking(False)
        waiting.connect_ex(("127.0.0.1", port))
        queued.append(waiting)
    time.sleep(0.2)
    yield port
    for each in (*queued, listener):
        each.close()


def moat(
    args: list[str],
    env: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> tuple[int | None, str, float]:
    """Run ``moat ARGS`` as the console script does (``main``): exit code, stderr, seconds.
    It runs in a daemon thread so that a hanging command fails the test without holding
    the suite."""
    monkeypatch.setenv("MOAT_HOME", str(tmp_path))
    monkeypatch.setenv("MOAT_API_KEY", "moat_k_" + "s" * 32)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(sys, "argv", ["moat", *args])
    exit_code: list[int | None] = []

    def run() -> None:
        try:
            main()
        except SystemExit as exc:
            exit_code.append(exc.code if isinstance(exc.code, int) else 1)
        else:
            exit_code.append(0)

    started = time.monotonic()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(HANG)
    elapsed = time.monotonic() - started
    assert not thread.is_alive(), f"moat {' '.join(args)} still waiting after {HANG:g} s"
    return exit_code[0], capsys.readouterr().err, elapsed


GATEWAY_COMMANDS = [
    ["execute", "demo.echo", "--input", "{}"],
    ["receipts", "list"],
    ["receipts", "show", "rcpt_x"],
    ["dlq", "list"],
    ["webhook", "deliveries", "wh_x"],
    ["approvals", "list"],
    ["policy", "show"],
    ["evidence", "export", "--since", "0", "never-written-bundle"],
]


@pytest.mark.parametrize("args", GATEWAY_COMMANDS, ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("where", ["refused", "hanging"])
def test_no_gateway_is_one_line_at_once(
    args: list[str],
    where: str,
    hanging_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    port = free_port() if where == "refused" else hanging_port
    url = f"http://127.0.0.1:{port}"
    code, err, elapsed = moat(args, {"MOAT_GATEWAY_URL": url}, monkeypatch, capsys, tmp_path)
    assert err.strip().splitlines() == [
        f"error: gateway_unavailable: no Moat gateway at {url}",
        "hint: start one with `make up` (or `moat up`), or set MOAT_GATEWAY_URL",
    ]
    assert code == UNAVAILABLE
    assert elapsed < PROMPT, f"{elapsed:.1f} s"


DATABASE_COMMANDS = [
    ["tenant", "list"],
    ["api-key", "list", "acme"],
    ["connection", "list", "acme"],
    ["budget", "list", "acme"],
    ["probe", "list", "acme"],
]


@pytest.mark.parametrize("args", DATABASE_COMMANDS, ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("where", ["refused", "hanging"])
def test_no_database_is_one_line_at_once(
    args: list[str],
    where: str,
    hanging_port: int,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    port = free_port() if where == "refused" else hanging_port
    env = {"MOAT_DATABASE_URL": f"postgresql://moat@127.0.0.1:{port}/moat"}
    code, err, elapsed = moat(args, env, monkeypatch, capsys, tmp_path)
    [line, hint] = err.strip().splitlines()
    assert line.startswith("error: database_unavailable: cannot reach PostgreSQL: "), line
    assert hint == (
        "hint: start the stack with `make up` (or `moat up`), or point MOAT_DATABASE_URL at a "
        "running PostgreSQL"
    ), hint
    assert code == UNAVAILABLE
    # libpq's shortest connect timeout is 2 s.
    assert elapsed < PROMPT + (1 if where == "hanging" else 0), f"{elapsed:.1f} s"


def test_no_temporal_is_one_line_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    env = {"MOAT_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}"}
    code, err, elapsed = moat(
        ["probe", "pause", "acme", "prb_x"], env, monkeypatch, capsys, tmp_path
    )
    [line, hint] = err.strip().splitlines()
    assert line.startswith("error: temporal_unavailable: cannot reach Temporal: "), line
    assert "MOAT_TEMPORAL_ADDRESS" in hint
    assert code == UNAVAILABLE
    assert elapsed < PROMPT, f"{elapsed:.1f} s"
