"""How the CLI speaks: results on stdout (a table, or JSON with ``--json``), refusals and
faults on stderr as one ``error:`` line (and a hint), never a traceback."""

from __future__ import annotations

import json
from collections.abc import Coroutine, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

if TYPE_CHECKING:
    from rich.table import Table

out = Console()
err = Console(stderr=True)

T = TypeVar("T")

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON only.")]

# The exit code of a command whose gateway, PostgreSQL or Temporal is not there.
UNAVAILABLE = 3
# Seconds a command waits for a connection: nothing answering is said at once.
CONNECT_TIMEOUT = 2.0


def id_argument(kind: str) -> Any:
    """An argument naming one of the tenant's ``kind`` by id, or by a prefix (6 characters
    or more) that starts no other id, as git takes commits."""
    return typer.Argument(help=f"The {kind}'s id, or its first characters (6 or more).")


# What to do next, for refusals an operator can act on.
HINTS = {
    "tenant_not_found": "give a tenant's id or name; see `moat tenant list`",
    "key_not_found": "see `moat api-key list TENANT`",
    "connection_not_found": "see `moat connection list TENANT`",
}


def id_column(table: Table, header: str, ids: Iterable[str | None]) -> None:
    """A column of ids a next command takes: each printed whole on one line, however narrow
    the terminal: the column is as wide as the longest of ``ids`` (a cell may stack two ids,
    one a line) and the table's other columns wrap or shorten to make room."""
    width = max((len(value) for value in ids if value), default=len(header))
    table.add_column(header, no_wrap=True, min_width=width, overflow="ignore")


def print_json(value: Any) -> None:
    out.print_json(json.dumps(value))


def error_line(message: str, hint: str | None = None) -> None:
    """The one line a failed command leaves on stderr (and a dimmed hint below it)."""
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    if hint:
        err.print(f"[dim]{escape(hint)}[/]", soft_wrap=True)


def fail(message: str, hint: str | None = None, code: int = 1) -> typer.Exit:
    """Say what went wrong in one line; raise the returned exit."""
    error_line(message, hint)
    return typer.Exit(code)


def unavailable(code: str, message: str, remedy: str) -> typer.Exit:
    """A service the command needs is not there: one line with what to run, exit 3."""
    err.print(f"[bold red]error:[/] {escape(f'{code}: {message} — {remedy}')}", soft_wrap=True)
    return typer.Exit(UNAVAILABLE)


def gateway_unavailable(url: str) -> typer.Exit:
    return unavailable(
        "gateway_unavailable",
        f"no Moat gateway at {url}",
        "start one with `make up` (or `moat up`), or set MOAT_GATEWAY_URL",
    )


@contextmanager
def refusals(hint: str | None = None) -> Iterator[None]:
    """A service's refusal (``MoatError``) as the one error line, exit code 1."""
    from starter.service import MoatError  # the services load with the command using them

    try:
        yield
    except MoatError as exc:
        raise fail(exc.message, hint or HINTS.get(exc.code)) from None


def run(coroutine: Coroutine[Any, Any, T], hint: str | None = None) -> T:
    """Run a command's coroutine; a refusal ends the command with its one error line."""
    import asyncio  # loaded by the commands that run one, not by every command

    with refusals(hint):
        return asyncio.run(coroutine)
