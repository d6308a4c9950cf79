"""The ``moat`` command loads only what a command uses: ``moat --help`` and ``moat execute``
import nothing of the database, Temporal or the gateway (each is seconds of start-up), and
every command is still listed, with its help, without being imported."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap

from typer.main import get_command
from typer.testing import CliRunner

from starter.cli import app as cli
from tests.support.stack import Stack

# Libraries and rooms a command talking to the gateway has no use for.
HEAVY = ("sqlalchemy", "temporalio", "fastapi", "alembic", "uvicorn", "store", "starter.service")

PROBE = textwrap.dedent(
    """
    import json, sys
    heavy = json.loads(sys.argv[2])
    sys.argv = ["moat", *json.loads(sys.argv[1])]
    from starter.cli.root import main
    try:
        main()
    except SystemExit as end:
        code = end.code
    loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
    print("\\nLOADED " + json.dumps({"code": code, "loaded": loaded}))
    """
)


def loaded_by(args: list[str], env: dict[str, str] | None = None) -> tuple[int, list[str]]:
    """Run ``moat ARGS`` in a fresh interpreter: its exit code and the heavy modules it
    imported."""
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(args), json.dumps(HEAVY)],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    last = done.stdout.rpartition("\nLOADED ")[2]
    assert last, done.stdout + done.stderr
    found = json.loads(last)
    return found["code"], found["loaded"]


def test_help_imports_nothing_heavy() -> None:
    code, loaded = loaded_by(["--help"])
    assert code == 0
    assert loaded == []


async def test_execute_imports_nothing_heavy(stack: Stack) -> None:
    env = {**os.environ, "MOAT_GATEWAY_URL": stack.url, "MOAT_API_KEY": stack.api_key}
    args = ["execute", "demo.echo", "--input", '{"lazy": true}', "--json"]
    code, loaded = await asyncio.to_thread(loaded_by, args, env)
    assert code == 0
    assert loaded == []


def test_every_command_is_listed_with_its_own_help() -> None:
    """The help line written beside each name is the command's own first paragraph."""
    from starter.cli.lazy import Placeholder
    from starter.cli.root import COMMANDS

    root = get_command(cli)
    ctx = root.make_context("moat", [], resilient_parsing=True)
    for entry in COMMANDS:
        placeholder = root.get_command(ctx, entry.name)
        assert isinstance(placeholder, Placeholder)
        real = placeholder.load()
        own = " ".join((real.help or "").split("\n\n")[0].split())
        assert own == entry.help, entry.name
    listed = CliRunner().invoke(cli, ["--help"], env={"COLUMNS": "200"}).output
    names = {line.strip("│ ").split(" ")[0] for line in listed.splitlines()}
    for entry in COMMANDS:
        assert (entry.name in names) != entry.hidden, entry.name
