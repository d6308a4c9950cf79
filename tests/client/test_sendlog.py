"""The send log against a gateway that times out and drops connections (a misbehaving
proxy in front of the live one): skip what was delivered this cycle, three timeouts make
one dead letter, three cycles kept, two processes on one file, and ``moat-client sendlog``."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from moat_client import AsyncMoatClient, DeadLetter, RetryPolicy, SendLog
from moat_client.cli import main as moat_client_cli

from tests.client.proxy import flaky_proxy
from tests.support.stack import Stack

# One request per attempt, quickly: an attempt that gets no answer is a timeout.
ONE_TRY = RetryPolicy(base_delay=0.01, max_delay=0.02, max_attempts=1)
CYCLES = ["2026-02-16T05:25Z", "2026-02-16T05:30Z", "2026-02-16T05:35Z", "2026-02-16T05:40Z"]
FIELDS = {
    "id",
    "sender",
    "target",
    "timestamp",
    "idempotent_key",
    "payload_chars",
    "outcome",
    "attempt",
    "max_attempts",
    "cycle_id",
    "dead_letter_task_id",
    "receipt_id",
}


def rows(path: Path) -> list[dict[str, object]]:
    with sqlite3.connect(path) as db:
        db.row_factory = sqlite3.Row
        return [dict(r) for r in db.execute("SELECT * FROM sends ORDER BY timestamp, attempt")]


async def test_skip_what_was_delivered_and_send_again_in_a_new_cycle(
    stack: Stack, tmp_path: Path
) -> None:
    path = tmp_path / "sendlog.sqlite3"
    secret_input = {"text": "hello", "token": "xoxb-not-logged"}
    async with flaky_proxy(stack.url) as proxy:
        proxy.plan = ["lose_answer"]
        log = SendLog(path, sender="agent-1")
        async with AsyncMoatClient(proxy.url, stack.api_key, retry=ONE_TRY, send_log=log) as moat:
            first = await moat.send(
                "demo.echo", secret_input, task_id="T1", action="status-update", cycle=CYCLES[0]
            )
            sent = len(proxy.seen)
            again = await moat.send(
                "demo.echo", secret_input, task_id="T1", action="status-update", cycle=CYCLES[0]
            )
            assert len(proxy.seen) == sent  # answered by the log: nothing sent
            later = await moat.send(
                "demo.echo", secret_input, task_id="T1", action="status-update", cycle=CYCLES[1]
            )
    # The lost answer was attempt 1 (a timeout); attempt 2 found Moat's receipt.
    assert first.delivered and not first.skipped and first.attempt == 2
    assert first.result is not None and first.result.replayed
    assert first.idempotent_key == "T1:status-update:2026-02-16T05:25Z"
    assert again.skipped and again.delivered and again.receipt_id == first.receipt_id
    assert later.delivered and not later.skipped and later.receipt_id != first.receipt_id

    logged = rows(path)
    assert set(logged[0]) == FIELDS
    assert [(r["attempt"], r["outcome"]) for r in logged] == [
        (1, "timeout"),
        (2, "delivered"),
        (1, "delivered"),
    ]
    assert all(r["sender"] == "agent-1" and r["target"] == "demo.echo" for r in logged)
    assert all(r["max_attempts"] == 3 for r in logged)
    assert logged[0]["payload_chars"] == len(json.dumps(secret_input, separators=(",", ":")))
    # Metadata only: neither the payload nor its secret is on disk.
    raw = b"".join(p.read_bytes() for p in sorted(tmp_path.glob("sendlog.sqlite3*")))  # noqa: ASYNC240
    assert b"xoxb-not-logged" not in raw and b"hello" not in raw


async def test_three_timeouts_file_one_dead_letter_and_stop(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sendlog.sqlite3"
    filed: list[DeadLetter] = []

    def file_task(letter: DeadLetter) -> str:
        filed.append(letter)
        return "TASK-9"

    async with flaky_proxy(stack.url) as proxy:
        proxy.plan = ["stall", "drop"]
        proxy.default = "drop"
        log = SendLog(path, sender="agent-2", on_dead_letter=file_task)
        async with AsyncMoatClient(
            proxy.url, stack.api_key, retry=ONE_TRY, send_log=log, timeout=0.5
        ) as moat:
            outcome = await moat.send(
                "demo.echo", {"n": 1}, task_id="T2", action="escalation", cycle=CYCLES[0]
            )
            assert len(proxy.posts()) == 3
            proxy.default = "pass"
            after = await moat.send(
                "demo.echo", {"n": 1}, task_id="T2", action="escalation", cycle=CYCLES[0]
            )
            assert len(proxy.posts()) == 3  # stopped: not sent again this cycle

    assert outcome.outcome == "timeout" and outcome.attempt == 3
    assert outcome.dead_letter_task_id == "TASK-9"
    assert after.skipped and after.outcome == "timeout" and after.dead_letter_task_id == "TASK-9"
    assert len(filed) == 1 and filed[0].idempotent_key == "T2:escalation:2026-02-16T05:25Z"
    assert filed[0].attempts == 3 and filed[0].target == "demo.echo"
    logged = rows(path)
    assert [(r["attempt"], r["outcome"]) for r in logged] == [
        (1, "timeout"),
        (2, "timeout"),
        (3, "timeout"),
    ]
    assert [r["dead_letter_task_id"] for r in logged] == [None, None, "TASK-9"]

    assert moat_client_cli(["sendlog", "dead-letters", "--path", str(path)]) == 0
    assert "dead letters in" in capsys.readouterr().out
    assert moat_client_cli(["sendlog", "dead-letters", "--path", str(path), "--json"]) == 0
    listed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["idempotent_key"], d["dead_letter_task_id"]) for d in listed] == [
        ("T2:escalation:2026-02-16T05:25Z", "TASK-9")
    ]


async def test_three_cycles_are_kept_and_dead_letters_for_ever(
    stack: Stack, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sendlog.sqlite3"
    async with flaky_proxy(stack.url) as proxy:
        proxy.plan = ["drop"] * 3
        log = SendLog(path, sender="agent-3")
        async with AsyncMoatClient(proxy.url, stack.api_key, retry=ONE_TRY, send_log=log) as moat:
            for cycle in CYCLES:
                await moat.send(
                    "demo.echo", {"c": cycle}, task_id="T3", action="report", cycle=cycle
                )
        log.close()
    assert {r["cycle_id"] for r in rows(path)} == set(CYCLES)

    SendLog(path).close()  # opening applies retention
    kept = rows(path)
    assert {r["cycle_id"] for r in kept} == set(CYCLES)
    # The first cycle's timeouts are gone; its dead letter stays.
    first = [r for r in kept if r["cycle_id"] == CYCLES[0]]
    assert [(r["attempt"], r["dead_letter_task_id"] is not None) for r in first] == [(3, True)]
    assert {r["cycle_id"] for r in kept if r["dead_letter_task_id"] is None} == set(CYCLES[1:])

    async with AsyncMoatClient(stack.url, stack.api_key, send_log=SendLog(path)) as moat:
        await moat.send(
            "demo.echo", {"c": 5}, task_id="T3", action="report", cycle="2026-02-16T05:45Z"
        )
    live = {r["cycle_id"] for r in rows(path) if r["dead_letter_task_id"] is None}
    assert live == {CYCLES[2], CYCLES[3], "2026-02-16T05:45Z"}  # a new cycle drops the oldest

    assert moat_client_cli(["sendlog", "show", "--path", str(path)]) == 0
    assert "send log" in capsys.readouterr().out
    assert moat_client_cli(["sendlog", "show", "--path", str(path), "--json"]) == 0
    shown = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert shown[0]["idempotent_key"] == "T3:report:2026-02-16T05:45Z"  # newest first
    assert len(shown) == len(rows(path))
    assert moat_client_cli(["sendlog", "purge", "--path", str(path)]) == 0
    assert "removed 0 rows" in capsys.readouterr().out


PROCESS = """
import sys
from moat_client import MoatClient, SendLog

url, key, path, name = sys.argv[1:5]
with MoatClient(url, key, send_log=SendLog(path, sender=name)) as moat:
    for i in range(6):
        out = moat.send("demo.echo", {"i": i}, task_id=f"task{i}", action="report", cycle="C1")
        assert out.delivered, out
"""


async def test_two_processes_share_one_log(stack: Stack, tmp_path: Path) -> None:
    path = tmp_path / "sendlog.sqlite3"
    SendLog(path).close()
    processes = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            PROCESS,
            stack.url,
            stack.api_key,
            str(path),
            f"proc-{n}",
            stderr=asyncio.subprocess.PIPE,
        )
        for n in (1, 2)
    ]
    for process in processes:
        _, err = await process.communicate()
        assert process.returncode == 0, err.decode()

    logged = rows(path)
    by_key: dict[str, list[dict[str, object]]] = {}
    for row in logged:
        by_key.setdefault(str(row["idempotent_key"]), []).append(row)
    assert sorted(by_key) == [f"task{i}:report:C1" for i in range(6)]
    async with AsyncMoatClient(stack.url, stack.api_key) as moat:
        for key, attempts in by_key.items():
            # No attempt lost or counted twice, within the limit; Moat ran each key once.
            assert sorted(r["attempt"] for r in attempts) == list(range(1, len(attempts) + 1))
            assert len(attempts) <= 3 and any(r["outcome"] == "delivered" for r in attempts)
            assert len((await moat.list_receipts(idempotency_key=key)).items) == 1


def mode(path: Path) -> int:
    return path.stat().st_mode & 0o777


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which a file is created 0644 unless asked otherwise."""
    before = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(before)


def test_the_log_is_its_owners_only_in_folders_it_made(tmp_path: Path, umask_022: None) -> None:
    path = tmp_path / "agents" / "a1" / "sendlog.sqlite3"
    with SendLog(path):
        # Open, SQLite's write-ahead log and shared memory sit beside the file.
        files = {p.name: mode(p) for p in path.parent.iterdir()}
    assert files == {f"sendlog.sqlite3{end}": 0o600 for end in ("", "-wal", "-shm")}
    assert (mode(tmp_path / "agents"), mode(path.parent)) == (0o700, 0o700)
    # An existing log (an older client made it 0644) is tightened when opened.
    path.chmod(0o644)
    SendLog(path).close()
    assert mode(path) == 0o600


def test_a_folder_the_user_chose_is_left_as_it_is(tmp_path: Path, umask_022: None) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    SendLog(shared / "sendlog.sqlite3").close()
    assert mode(shared) == 0o755
    assert mode(shared / "sendlog.sqlite3") == 0o600


def test_moats_own_state_folder_is_tightened(
    tmp_path: Path, umask_022: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("MOAT_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    own = tmp_path / "state" / "moat"
    own.mkdir(parents=True, mode=0o755)
    SendLog().close()
    assert mode(own) == 0o700
    assert mode(tmp_path / "state") == 0o755  # the XDG folder is the user's
    assert {mode(p) for p in own.iterdir()} == {0o600}
