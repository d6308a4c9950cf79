"""Every command's ``--help`` reads as text at 80 columns: no console markup, reST or
Markdown quoting left raw (``[bold]``, backticks, ``\\[``) in any line of it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from typer.main import get_command
from typer.testing import CliRunner

from starter.cli import app as cli

RAW = re.compile(r"`|\\\[|\[/|\[(bold|dim|italic|red|green|yellow|cyan|blue|magenta)\b")


def command_paths(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """The path of every visible command and group under ``command``, itself first."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        if sub.hidden:
            continue
        loaded = sub.load() if hasattr(sub, "load") else sub  # the root's commands load lazily
        yield from command_paths(loaded, (*path, name))


def test_no_raw_markup_in_any_help() -> None:
    runner = CliRunner()
    paths = list(command_paths(get_command(cli)))
    raw = {}
    for path in paths:
        shown = runner.invoke(cli, [*path, "--help"], env={"COLUMNS": "80"}, color=False)
        assert shown.exit_code == 0, (path, shown.output)
        lines = [line for line in shown.output.splitlines() if RAW.search(line)]
        if lines:
            raw[" ".join(path)] = lines
    assert raw == {}
    assert ("webhook", "listen") in paths and ("capabilities",) in paths
