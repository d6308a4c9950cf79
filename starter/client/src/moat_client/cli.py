"""``moat-client sendlog show|dead-letters|purge``: the agent's send log as a table.

argparse and plain text, so the client keeps its two dependencies; with ``rich``
installed the table is drawn with it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from moat_client._config import SENDLOG_FILE, STATE_DIR_ENV, default_sendlog_path
from moat_client.sendlog import SendLog, SendRecord

SHOWN = (
    "timestamp",
    "sender",
    "target",
    "idempotent_key",
    "attempt",
    "outcome",
    "payload_chars",
    "receipt_id",
    "dead_letter_task_id",
)


def _table(title: str, records: Sequence[SendRecord]) -> None:
    cells = [[_cell(getattr(r, column)) for column in SHOWN] for r in records]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        widths = [max([len(c), *(len(row[i]) for row in cells)]) for i, c in enumerate(SHOWN)]
        sys.stdout.write(title + "\n")
        for row in [list(SHOWN), *cells]:
            line = "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True))
            sys.stdout.write(line.rstrip() + "\n")
        return
    table = Table(title=title)
    for column in SHOWN:
        table.add_column(column, overflow="fold")
    for row in cells:
        table.add_row(*row)
    Console().print(table)


def _cell(value: object) -> str:
    return "-" if value is None else str(value)


def main(argv: Sequence[str] | None = None) -> int:
    """``moat-client``: show the send log, its dead letters, or apply its retention.

    Args:
        argv: The arguments; None reads the command line.

    Returns:
        The exit status: 0, or 1 when there is no send log at the path (one line on stderr).

    Raises:
        SystemExit: The arguments are not understood (argparse's usage, status 2).
    """
    parser = argparse.ArgumentParser(
        prog="moat-client", description="The Moat client's local records."
    )
    commands = parser.add_subparsers(dest="group", required=True)
    sendlog = commands.add_parser("sendlog", help="what this agent sent through Moat")
    actions = sendlog.add_subparsers(dest="action", required=True)
    for name, text in (
        ("show", "every attempt, newest first"),
        ("dead-letters", "the sends that kept timing out, filed for a person"),
        ("purge", "drop cycles older than the current one and the two before it"),
    ):
        action = actions.add_parser(name, help=text)
        action.add_argument(
            "--path",
            type=Path,
            default=None,
            help=f"the log file (default: ${STATE_DIR_ENV}/{SENDLOG_FILE}, "
            f"now {default_sendlog_path()})",
        )
        action.add_argument("--json", action="store_true", help="JSON lines instead of a table")
        if name == "show":
            action.add_argument("--key", help="only this idempotent key")
            action.add_argument("--limit", type=int, default=100, help="at most this many rows")
    args = parser.parse_args(argv)
    path: Path = args.path or default_sendlog_path()
    if args.action != "purge" and not path.exists():
        sys.stderr.write(
            f"error: no send log at {path}\n"
            f"hint: pass --path, or set {STATE_DIR_ENV} to the agent's state directory\n"
        )
        return 1
    with SendLog(path) as log:
        if args.action == "purge":
            removed = log.purge()
            sys.stdout.write(f"removed {removed} rows from {path}\n")
            return 0
        if args.action == "show":
            records = log.rows(key=args.key, limit=args.limit)
            title = f"send log {path} ({len(records)} attempts)"
        else:
            records = log.dead_letters()
            title = f"dead letters in {path} ({len(records)})"
    if args.json:
        for record in records:
            sys.stdout.write(json.dumps(asdict(record)) + "\n")
    else:
        _table(title, records)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
