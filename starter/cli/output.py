"""How the CLI speaks: results on stdout (a table, or JSON with ``--json``), and every
failure said one way (``docs/cli.md``, "Errors and exit codes"): on stderr the line
``error: <code>: <message>`` and the line ``hint: <what to do>``, never a traceback; with
``--json``, ``{"error": {"code", "message", "hint", "details"}}`` on stdout and nothing on
stderr. The exit code says which kind of failure it was."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.text import Text
from typer._click import exceptions as click_errors
from typer._click.globals import get_current_context

if TYPE_CHECKING:
    from rich.table import Table


class _Console(Console):
    """A console whose width is read from the terminal (or ``COLUMNS``) at each print, not
    once when the module is imported: a process that changes ``COLUMNS`` (a test, a shell
    resized) is printed for at its width then."""

    @property
    def _width(self) -> int | None:
        return None

    @_width.setter
    def _width(self, value: int | None) -> None:
        pass


out: Console = _Console()
err: Console = _Console(stderr=True)

T = TypeVar("T")

AsJson = Annotated[bool, typer.Option("--json", help="Print JSON only.")]

# The exit codes: done; refused or failed; the command line is wrong; a service the
# command needs (gateway, PostgreSQL, Temporal) is not there; interrupted (Ctrl-C).
OK = 0
FAILED = 1
USAGE = 2
UNAVAILABLE = 3
INTERRUPTED = 130
# Seconds a command waits for a connection: nothing answering is said at once.
CONNECT_TIMEOUT = 2.0
# Said of a fault no rule of Moat's explains: a bug, not a refusal.
BUG_HINT = "this is a bug in moat: report it with the command you ran"


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


# ``--json`` on the command line, for a failure said after its command's context is gone.
_json_argv: ContextVar[bool] = ContextVar("json_argv", default=False)


def wants_json() -> bool:
    """Whether the running command was given ``--json``."""
    ctx = get_current_context(silent=True)
    while ctx is not None:
        if ctx.params.get("as_json"):
            return True
        ctx = ctx.parent
    return _json_argv.get()


def _help_hint() -> str | None:
    ctx = get_current_context(silent=True)
    return f"see `{ctx.command_path} --help`" if ctx is not None else None


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _field_errors(details: dict[str, Any], message: str = "") -> str:
    """A refusal's field errors (``details.errors``, else an invalid plan's
    ``details.problems``), said after its message."""
    errors = details.get("errors")
    if not isinstance(errors, list) or not errors:
        return _problems(details, message)
    said = [
        f"{'.'.join(str(p) for p in e.get('loc', [])) or 'body'}: {e.get('msg', '')}"
        for e in errors
        if isinstance(e, dict)
    ]
    return ": " + "; ".join(said)


def _problems(details: dict[str, Any], message: str) -> str:
    """An invalid plan's problems (``details.problems``), each with its step, place and
    reference, and what is wrong unless ``message`` says it already."""
    problems = details.get("problems")
    if not isinstance(problems, list) or not problems:
        return ""
    said = []
    for p in (p for p in problems if isinstance(p, dict)):
        where = f"step {p.get('step')} {p.get('where')}"
        if p.get("reference"):
            where += f" {p['reference']}"
        why = str(p.get("message", ""))
        said.append(where if why and why in message else f"{where}: {why}")
    return ": " + "; ".join(said)


def say_error(
    code: str,
    message: str,
    hint: str | None = None,
    details: dict[str, Any] | None = None,
    **extra: Any,
) -> None:
    """Say one failure: two lines on stderr, or with ``--json`` one object on stdout."""
    hint = _one_line(hint or _help_hint() or "")
    message = _one_line(message + _field_errors(details or {}, message))
    if wants_json():
        error = {"code": code, "message": message, "hint": hint, "details": details or {}}
        print_json({"error": error | extra})
        return
    err.print(Text.assemble(("error:", "bold red"), f" {code}: {message}"), soft_wrap=True)
    if hint:
        err.print(Text.assemble(("hint:", "dim"), f" {hint}"), soft_wrap=True)


def fail(
    code: str,
    message: str,
    hint: str | None = None,
    *,
    exit_code: int = FAILED,
    details: dict[str, Any] | None = None,
    **extra: Any,
) -> typer.Exit:
    """Say what went wrong (``say_error``); raise the returned exit."""
    say_error(code, message, hint, details, **extra)
    return typer.Exit(exit_code)


def usage(message: str, hint: str | None = None, code: str = "usage") -> typer.Exit:
    """The command line is wrong (a value no option takes, an input that does not parse)."""
    return fail(code, message, hint, exit_code=USAGE)


def unavailable(code: str, message: str, hint: str) -> typer.Exit:
    """A service the command needs is not there: what to run, exit 3."""
    return fail(code, message, hint, exit_code=UNAVAILABLE)


def gateway_unavailable(url: str) -> typer.Exit:
    return unavailable(
        "gateway_unavailable",
        f"no Moat gateway at {url}",
        "start one with `make up` (or `moat up`), or set MOAT_GATEWAY_URL",
    )


def refused(code: str, message: str, details: dict[str, Any], hint: str | None) -> typer.Exit:
    """A refusal by one of Moat's rules (a service's ``MoatError``, or the gateway's)."""
    return fail(code, message, hint or HINTS.get(code), details=details)


@contextmanager
def refusals(hint: str | None = None) -> Iterator[None]:
    """A service's refusal (``MoatError``) said as ``refused`` says it, exit code 1."""
    from starter.service import MoatError  # the services load with the command using them

    try:
        yield
    except MoatError as exc:
        raise refused(exc.code, exc.message, exc.details, hint) from None


def run(coroutine: Coroutine[Any, Any, T], hint: str | None = None) -> T:
    """Run a command's coroutine; a refusal ends the command with its error."""
    import asyncio  # loaded by the commands that run one, not by every command

    with refusals(hint):
        return asyncio.run(coroutine)


# Click's usage errors, by the code they are said with.
_USAGE_CODES: dict[type[click_errors.UsageError], str] = {
    click_errors.NoSuchOption: "no_such_option",
    click_errors.BadOptionUsage: "bad_option",
    click_errors.MissingParameter: "missing_parameter",
    click_errors.BadParameter: "bad_parameter",
    click_errors.BadArgumentUsage: "bad_argument",
}


def _usage_error(exc: click_errors.UsageError) -> int:
    code = next((c for kind, c in _USAGE_CODES.items() if isinstance(exc, kind)), "usage")
    if code == "usage" and exc.message.startswith("No such command"):
        code = "no_such_command"
    path = exc.ctx.command_path if exc.ctx is not None else "moat"
    say_error(code, exc.format_message(), f"see `{path} --help`")
    return exc.exit_code


def _database_fault(exc: Exception) -> str | None:
    """Why PostgreSQL could not be reached, if that is what ``exc`` says."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    if not isinstance(exc, OperationalError | InterfaceError):
        return None
    return str(exc.orig or exc).strip().splitlines()[0]


def _fault(exc: Exception) -> int:
    """An exception no command turned into an error: a service the CLI cannot reach, a
    refusal, or a bug; said one way all the same, never as a traceback."""
    # What raised it was loaded by the command: a library not loaded raised nothing here.
    if "starter.service" in sys.modules:
        from starter.service import MoatError

        if isinstance(exc, MoatError):
            return refused(exc.code, exc.message, exc.details, None).exit_code
    if "store.keyrings.signing" in sys.modules:
        from store.keyrings.signing import KeyringMissingError

        if isinstance(exc, KeyringMissingError):
            hint = "provide the keyring the message names (`moat signing-key rotate` makes one)"
            return fail("keyring_missing", str(exc), hint).exit_code
    reason = _database_fault(exc) if "sqlalchemy.exc" in sys.modules else None
    if reason is not None:
        return unavailable(
            "database_unavailable",
            f"cannot reach PostgreSQL: {reason}",
            "start the stack with `make up` (or `moat up`), or point MOAT_DATABASE_URL "
            "at a running PostgreSQL",
        ).exit_code
    if isinstance(exc, RuntimeError) and str(exc).startswith("Failed client connect"):
        reason = str(exc).strip().splitlines()[0]
        return unavailable(
            "temporal_unavailable",
            f"cannot reach Temporal: {reason}",
            "start the stack with `make up` (or `moat up`), or point MOAT_TEMPORAL_ADDRESS "
            "at a running Temporal",
        ).exit_code
    return fail("internal_error", f"{type(exc).__name__}: {exc}", BUG_HINT).exit_code


def main_of(command: Callable[..., Any], args: Sequence[str] | None = None) -> int:
    """Run the ``moat`` command on ``args`` (else the process's) and return its exit code;
    every failure, click's usage errors too, is said as ``say_error`` says it."""
    argv = list(sys.argv[1:] if args is None else args)
    _json_argv.set("--json" in argv)
    try:
        code = command(args=argv, prog_name="moat", standalone_mode=False)
    except click_errors.NoArgsIsHelpError as exc:
        return exc.exit_code  # the help, already printed
    except click_errors.UsageError as exc:
        return _usage_error(exc)
    except click_errors.ClickException as exc:
        return fail("usage", exc.format_message(), exit_code=exc.exit_code).exit_code
    except typer.Abort:
        return fail("aborted", "stopped before it finished", "run the command again").exit_code
    except Exception as exc:
        return _fault(exc)
    return code if isinstance(code, int) else OK
