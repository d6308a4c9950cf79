"""``moat execute``: run a capability through the gateway, as an agent would, with the
agents' client, and print a short summary (``--json``: the envelope)."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer
from rich.markup import escape

from starter.cli.agent import agent_client, gateway_answers
from starter.cli.output import AsJson, err, out, usage
from starter.devstack.ports import local_settings

if TYPE_CHECKING:
    from moat_client import ExecutionResult, MoatClient

    from schemas.settings import MoatSettings

# The most of an output the summary shows; --json shows all of it.
SUMMARY_OUTPUT_CHARS = 2000
INPUT_HINT = 'give a JSON object: --input \'{"text": "hi"}\', --input @input.json or @- (stdin)'
STATUS_COLOURS = {"executed": "green", "failed": "red", "accepted": "yellow", "planned": "cyan"}


def execute(
    capability: Annotated[str, typer.Argument(help="Capability id, e.g. demo.echo.")],
    input_json: Annotated[
        str,
        typer.Option(
            "--input",
            help="The capability's input: JSON, @FILE to read it from a file, @- from stdin.",
        ),
    ],
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Capability version.")] = None,
    connection: Annotated[
        str | None,
        typer.Option("--connection", help="The id of the connection (con_…) the call uses."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Ask the gateway for the policy decision only: nothing runs, no budget is "
            "used, the idempotency key stays free. Prints the decision and its rule; exit 1 "
            "when the policy refuses the call.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Execute a capability through the gateway and print a summary: status, receipt,
    replay or not, the output, the run in the Temporal UI. --json: the whole envelope."""
    settings = local_settings()
    data = _input(input_json)
    client = agent_client(settings)
    call = _Call(capability, data, key, version, connection, dry_run)
    with gateway_answers(settings):
        started = time.monotonic()
        if as_json or not out.is_terminal:
            result = _execute(client, call, settings)
        else:
            result = _with_spinner(client, call, settings)
        elapsed = time.monotonic() - started
    if as_json:
        if result.replayed:
            err.print("[cyan]idempotent replay:[/] the stored receipt, nothing executed again")
        out.print_json(result.envelope.model_dump_json())
    else:
        _summary(result, settings, elapsed)
    raise typer.Exit(0 if result.ok or _would_run(result) else 1)


def _input(given: str) -> dict[str, Any]:
    """The ``--input`` object: inline JSON, ``@FILE`` or ``@-`` (stdin)."""
    where = "--input"
    text = given
    if given.startswith("@"):
        where = "stdin" if given == "@-" else given[1:]
        try:
            text = sys.stdin.read() if given == "@-" else Path(given[1:]).read_text()
        except OSError as exc:
            raise usage(f"cannot read --input {given}: {exc.strerror or exc}", INPUT_HINT) from None
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise usage(f"{where} is not valid JSON: {exc}", INPUT_HINT) from None
    if not isinstance(data, dict):
        raise usage(f"{where} must hold a JSON object", INPUT_HINT)
    return data


class _Call(NamedTuple):
    capability: str
    data: dict[str, Any]
    key: str | None
    version: str | None
    connection: str | None
    dry_run: bool


def _with_spinner(client: MoatClient, call: _Call, settings: MoatSettings) -> ExecutionResult:
    """The call under a spinner and a clock (the display's own thread keeps them moving
    while the client call blocks)."""
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    doing = "planning" if call.dry_run else "executing"
    waiting = "the policy decision" if call.dry_run else "the run"
    with Progress(
        SpinnerColumn(),
        TextColumn(f"{doing} {escape(call.capability)}, waiting for {waiting}"),
        TimeElapsedColumn(),
        console=out,
        transient=True,
    ) as progress:
        progress.add_task("execute", total=None)
        return _execute(client, call, settings)


def _execute(client: MoatClient, call: _Call, settings: MoatSettings) -> ExecutionResult:
    """The execution's result; a policy denial (raised by the client, with its receipt) is
    shown like any failed execution, and a call held for approval like any accepted one.
    The gateway's wait is asked for explicitly, so the client reads for that long (plus a
    margin) and never sends a slow run again as if lost."""
    from moat_client import ApprovalRequired, ExecutionResult, PolicyDenied

    try:
        return client.execute(
            call.capability,
            call.data,
            idempotency_key=call.key,
            capability_version=call.version,
            connection_id=call.connection,
            wait_seconds=settings.wait_seconds,
            dry_run=call.dry_run,
        )
    except PolicyDenied as denied:
        if denied.envelope is None:
            raise
        return ExecutionResult(denied.http_status, denied.envelope, False)
    except ApprovalRequired as held:
        assert held.envelope is not None
        return ExecutionResult(202, held.envelope, False)


def _summary(result: ExecutionResult, settings: MoatSettings, elapsed: float) -> None:
    envelope = result.envelope
    status = envelope.status.value
    colour = STATUS_COLOURS.get(status, "white")
    out.print(f"[bold {colour}]{status}[/]  {escape(envelope.receipt_id or '-')}  ({elapsed:.2f}s)")
    if result.replayed:
        out.print("[cyan]idempotent replay:[/] the stored receipt, nothing executed again")
    approval = envelope.approval
    if status == "accepted" and approval is not None:
        expires = f"{approval.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        out.print(f"[yellow]awaiting approval[/] {escape(approval.id)} until {expires}")
        out.print(f"see it: moat approvals show {escape(approval.id)}", soft_wrap=True)
    if envelope.plan is not None:
        _plan(envelope.plan)
    if envelope.error is not None:
        out.print(f"[red]{escape(envelope.error.code)}[/]: {escape(envelope.error.message)}")
        if envelope.error.details:
            out.print(escape(_trimmed(envelope.error.details)))
    for warning in envelope.warnings:
        out.print(f"[yellow]warning {escape(warning.code)}[/]: {escape(warning.message)}")
    if envelope.output_expired:
        out.print("[dim]output: no longer kept (its idempotency window closed)[/]")
    elif status == "executed":
        out.print("output:")
        out.print(escape(_trimmed(envelope.output)), highlight=True)
    if envelope.workflow_id:
        from starter.runtime import links

        url = links.temporal_run(
            f"http://127.0.0.1:{settings.temporal_ui_port}",
            settings.temporal_namespace,
            envelope.workflow_id,
            envelope.run_id,
        )
        out.print(f"run: {escape(url)}", soft_wrap=True)


def _would_run(result: ExecutionResult) -> bool:
    """A dry run whose policy decision lets the call through (a monitored refusal too)."""
    plan = result.envelope.plan
    return plan is not None and plan.decision != "deny"


def _plan(plan: Any) -> None:
    """What a dry run found: the decision the call would run under, and nothing ran."""
    colour = "green" if plan.decision == "allow" else "red"
    out.print(
        f"policy: [{colour}]{escape(plan.decision)}[/] by rule {escape(plan.rule_hit)} "
        f"({escape(plan.mode)} mode){': ' + escape(plan.reason) if plan.reason else ''}"
    )
    out.print("[dim]dry run: nothing executed, no budget used, the key is still free[/]")


def _trimmed(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) <= SUMMARY_OUTPUT_CHARS:
        return text
    return (
        text[:SUMMARY_OUTPUT_CHARS]
        + f"\n… ({len(text) - SUMMARY_OUTPUT_CHARS} more characters; --json shows all)"
    )
