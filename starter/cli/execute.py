"""``moat execute``: run a capability through the gateway, as an agent would, with the
agents' client, and print a short summary (``--json``: the envelope)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from schemas.settings import MoatSettings
from starter.cli.agent import agent_client, gateway_answers
from starter.cli.output import AsJson, err, out, usage
from starter.devstack.ports import local_settings
from starter.runtime import links

if TYPE_CHECKING:
    from moat_client import ExecutionResult, MoatClient

# The most of an output the summary shows; --json shows all of it.
SUMMARY_OUTPUT_CHARS = 2000
INPUT_HINT = 'give a JSON object, e.g. --input \'{"text": "hi"}\''
STATUS_COLOURS = {"executed": "green", "failed": "red", "accepted": "yellow", "planned": "cyan"}


def execute(
    capability: Annotated[str, typer.Argument(help="Capability id, e.g. demo.echo.")],
    input_json: Annotated[str, typer.Option("--input", help="The capability's input, JSON.")],
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Capability version.")] = None,
    connection: Annotated[
        str | None,
        typer.Option("--connection", help="The id of the connection (con_…) the call uses."),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Execute a capability through the gateway and print a summary: status, receipt,
    replay or not, the output, the run in the Temporal UI. ``--json``: the whole envelope."""
    settings = local_settings()
    try:
        data: Any = json.loads(input_json)
    except ValueError as exc:
        raise usage(
            f"--input is not valid JSON: {exc}", 'give an object, e.g. {"text": "hi"}'
        ) from None
    if not isinstance(data, dict):
        raise usage("--input must be a JSON object", 'give an object, e.g. {"text": "hi"}')
    client = agent_client(settings)
    with gateway_answers(settings):
        started = time.monotonic()
        if as_json or not out.is_terminal:
            result = _execute(client, capability, data, key, version, connection, settings)
        else:
            # The client call blocks; the display's own thread keeps spinner and clock moving.
            with Progress(
                SpinnerColumn(),
                TextColumn(f"executing {escape(capability)}, waiting for the run"),
                TimeElapsedColumn(),
                console=out,
                transient=True,
            ) as progress:
                progress.add_task("execute", total=None)
                result = _execute(client, capability, data, key, version, connection, settings)
        elapsed = time.monotonic() - started
    if as_json:
        if result.replayed:
            err.print("[cyan]idempotent replay:[/] the stored receipt, nothing executed again")
        out.print_json(result.envelope.model_dump_json())
    else:
        _summary(result, settings, elapsed)
    raise typer.Exit(0 if result.ok else 1)


def _execute(
    client: MoatClient,
    capability: str,
    data: dict[str, Any],
    key: str | None,
    version: str | None,
    connection: str | None,
    settings: MoatSettings,
) -> ExecutionResult:
    """The execution's result; a policy denial (raised by the client, with its receipt) is
    shown like any failed execution, and a call held for approval like any accepted one.
    The gateway's wait is asked for explicitly, so the client reads for that long (plus a
    margin) and never sends a slow run again as if lost."""
    from moat_client import ApprovalRequired, ExecutionResult, PolicyDenied

    try:
        return client.execute(
            capability,
            data,
            idempotency_key=key,
            capability_version=version,
            connection_id=connection,
            wait_seconds=settings.wait_seconds,
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
        out.print(
            f"[yellow]awaiting approval[/] {escape(approval.id)} until "
            f"{approval.expires_at.isoformat()}: moat approvals show {escape(approval.id)}"
        )
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
        url = links.temporal_run(
            f"http://127.0.0.1:{settings.temporal_ui_port}",
            settings.temporal_namespace,
            envelope.workflow_id,
            envelope.run_id,
        )
        out.print(f"run: {escape(url)}", soft_wrap=True)


def _trimmed(value: Any) -> str:
    text = json.dumps(value, indent=2, ensure_ascii=False)
    if len(text) <= SUMMARY_OUTPUT_CHARS:
        return text
    return (
        text[:SUMMARY_OUTPUT_CHARS]
        + f"\n… ({len(text) - SUMMARY_OUTPUT_CHARS} more characters; --json shows all)"
    )
