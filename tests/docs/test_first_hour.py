"""docs/first-hour.md is a transcript, and this test runs it: each ``$ command`` of its
console blocks against a stack started as the page starts it (``moat up --fake-providers``,
tests/support/up.py), in a terminal 80 columns wide, and compares what it prints with the
page, placeholders for what changes per run (tests/docs/transcript.py).

When the CLI's output changes on purpose, rewrite the page's outputs from a run:
``MOAT_UPDATE_TRANSCRIPT=1 pytest tests/docs/test_first_hour.py``, then read the diff."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.docs import transcript
from tests.support.stack import repo_root
from tests.support.up import DEFAULT_PORTS, LocalStack, local_stack

# The stack's start and some twenty commands, each a `moat` process of its own.
pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

PAGE = repo_root() / "docs" / "first-hour.md"
UPDATE = os.environ.get("MOAT_UPDATE_TRANSCRIPT") == "1"


def test_the_first_hour_reads_as_it_runs(tmp_path: Path) -> None:
    page = PAGE.read_text()
    expected = transcript.blocks(page)
    assert expected, f"{PAGE} has no console block"
    names = transcript.Placeholders()
    ran: list[list[transcript.Command]] = []
    with local_stack(tmp_path) as stack:
        for block in expected:
            ran.append([run(stack, names, command.line) for command in block])
    if UPDATE:
        PAGE.write_text(transcript.rewrite(page, ran))
        return
    for block, got in zip(expected, ran, strict=True):
        for want, seen in zip(block, got, strict=True):
            assert transcript.canonical(seen.output) == transcript.canonical(want.output), (
                f"$ {want.line}\n--- the page says:\n{want.output}--- it printed:\n"
                f"{seen.output}(MOAT_UPDATE_TRANSCRIPT=1 rewrites the page)"
            )


def run(stack: LocalStack, names: transcript.Placeholders, line: str) -> transcript.Command:
    """``line`` run by bash in the stack's folder, 80 columns wide, with the placeholders
    and default ports it names made real; what it printed (its errors too), made general."""
    command = line
    for placeholder, value in names.values().items():
        command = command.replace(placeholder, value)
    command = re.sub(r"127\.0\.0\.1:(\d+)", lambda m: _port(stack, m), command)
    started = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", command],
        cwd=stack.folder,
        env={**stack.env, "COLUMNS": "80", "TERM": "dumb"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=90,
    )
    sys.stderr.write(f"{time.monotonic() - started:5.1f} s  $ {line}\n")
    output = done.stdout
    if done.returncode:
        output += f"(exit status {done.returncode})\n"
    for field, port in stack.ports.items():
        output = re.sub(rf"(?<![\d.]){port}(?!\d)", str(DEFAULT_PORTS[field]), output)
    output = output.replace(str(stack.folder), "<folder>")
    names.learn(output)
    return transcript.Command(line, names.hide(output))


def _port(stack: LocalStack, match: re.Match[str]) -> str:
    default = int(match.group(1))
    actual = {DEFAULT_PORTS[f]: port for f, port in stack.ports.items()}.get(default, default)
    return f"127.0.0.1:{actual}"
