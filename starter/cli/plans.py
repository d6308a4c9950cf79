"""``moat plan``: run a plan (several capability calls as one durable run, each step once)
through the gateway with the agents' client, read it, resume or cancel it. Each answer is
summarised: the plan's status and id, a table of its steps, its error, the run in the
Temporal UI (``--json``: the envelope)."""

from __future__ import annotations

import json
import sys
import time
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from starter.cli.agent import agent_client, gateway_answers
from starter.cli.identity import AsTenant
from starter.cli.output import AsJson, id_column, out, print_json, usage
from starter.cli.tenant_api import call
from starter.devstack.ports import local_settings

if TYPE_CHECKING:
    from moat_client import PlanResult, PlanStep

    from schemas.settings import MoatSettings

plan_app = typer.Typer(
    no_args_is_help=True, help="Plans: several capability calls as one durable run."
)

PLAN_COLOURS = {"executed": "green", "failed": "red", "accepted": "yellow", "planned": "cyan"}
STEP_COLOURS = {
    "executed": "green",
    "failed": "red",
    "pending": "yellow",
    "skipped": "dim",
    "compensated": "magenta",
}
FILE_HINT = 'give a JSON object: {"schema_version": "1", "steps": [...]}, in a file or - (stdin)'
# Under this many columns a step's receipts go under its id, its capability and error under
# its status: nothing is cut to make the rest fit.
WIDE = 120

PlanArg = Annotated[str, typer.Argument(help="The plan's id, as moat plan run printed it.")]
Note = Annotated[str, typer.Option("--note", help="Why, for the record.")]


@plan_app.command("run", cls=AsTenant)
def run(
    file: Annotated[
        str, typer.Option("--file", help="The plan (JSON): a file's path, or - for stdin.")
    ],
    key: Annotated[
        str | None,
        typer.Option("--key", help="The plan's idempotency key; default: the plan's own, if any."),
    ] = None,
    wait: Annotated[
        float | None,
        typer.Option(
            "--wait",
            min=0,
            help="Seconds the gateway waits for the plan to end before answering accepted "
            "(default: the settings' wait, 60).",
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Check every step's policy and references only: nothing runs, the key stays "
            "free. Exit 1 when the policy refuses a step.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Run a plan once per idempotency key and print its steps.

    Exit 0 when it executed (or a dry run found every step allowed), 1 otherwise."""
    settings = local_settings()
    plan = _read_plan(file)
    client = agent_client(settings)
    started = time.monotonic()
    with gateway_answers(settings):
        result = client.run_plan(
            plan,
            idempotency_key=key,
            wait_seconds=settings.wait_seconds if wait is None else wait,
            dry_run=dry_run,
            poll=False,
        )
    _answer(result, settings, as_json, time.monotonic() - started)
    raise typer.Exit(0 if result.ok or _would_run(result) else 1)


@plan_app.command("list", cls=AsTenant)
def list_plans(
    status: Annotated[
        str | None,
        typer.Option(help="accepted, planned, executed or failed (default: every plan)."),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, max=200, help="At most this many.")] = 50,
    cursor: Annotated[str | None, typer.Option(help="Where the previous page ended.")] = None,
    as_json: AsJson = False,
) -> None:
    """The tenant's plans, newest first, a page at a time."""
    params = {"status": status, "limit": limit, "cursor": cursor}
    page = call(local_settings(), "GET", "/v1/plans", params=params)
    if as_json:
        print_json(page)
        return
    out.print(plans_table(page["items"]))
    more = f" (more: --cursor {page['next_cursor']})" if page.get("next_cursor") else ""
    out.print(f"{len(page['items'])} plans{more}")


def plans_table(items: list[dict[str, Any]]) -> Table:
    """One plan a row: its id whole, when, its status (and error), its steps by status."""
    table = Table()
    id_column(table, "plan", [p["plan_id"] for p in items])
    for name in ("time (UTC)", "status", "steps"):
        table.add_column(name)
    for p in items:
        status = p["status"] + (f"\n[dim]{p['error_code']}[/]" if p.get("error_code") else "")
        steps = ", ".join(f"{n} {name}" for name, n in sorted(p["steps"].items()))
        table.add_row(
            p["plan_id"],
            p["created_at"][:19].replace("T", " "),
            f"[{PLAN_COLOURS.get(p['status'], 'white')}]{status}[/]",
            escape(steps),
        )
    return table


@plan_app.command("show", cls=AsTenant)
def show(plan_id: PlanArg, as_json: AsJson = False) -> None:
    """How a plan stands: its status and each step's, with receipts and errors."""
    settings = local_settings()
    with gateway_answers(settings):
        result = agent_client(settings).get_plan(plan_id)
    _answer(result, settings, as_json)


@plan_app.command("resume", cls=AsTenant)
def resume(
    plan_id: PlanArg,
    effect_did_not_happen: Annotated[
        bool,
        typer.Option(
            "--effect-did-not-happen",
            help="You checked that the failed step's effect did not take place: it runs "
            "again under a new key. Required.",
        ),
    ] = False,
    note: Note = "",
    as_json: AsJson = False,
) -> None:
    """Continue a failed plan from its first unfinished step.

    Completed steps are not repeated. Needs scope plans:write."""
    settings = local_settings()
    with gateway_answers(settings):
        result = agent_client(settings).resume_plan(
            plan_id, effect_did_not_happen=effect_did_not_happen, note=note
        )
    _answer(result, settings, as_json)


@plan_app.command("cancel", cls=AsTenant)
def cancel(plan_id: PlanArg, note: Note = "", as_json: AsJson = False) -> None:
    """Stop a plan: no later step starts.

    A step already calling its provider finishes. Needs scope plans:write."""
    settings = local_settings()
    with gateway_answers(settings):
        result = agent_client(settings).cancel_plan(plan_id, note=note)
    _answer(result, settings, as_json)


def _read_plan(given: str) -> dict[str, Any]:
    """The plan ``--file`` names: a file, or ``-`` for stdin."""
    where = "stdin" if given == "-" else given
    try:
        text = sys.stdin.read() if given == "-" else Path(given).read_text()
    except OSError as exc:
        raise usage(
            f"cannot read --file {given}: {exc.strerror or exc}", FILE_HINT, code="unreadable_file"
        ) from None
    try:
        data: Any = json.loads(text)
    except ValueError as exc:
        raise usage(
            f"{where} is not valid JSON: {exc}", FILE_HINT, code="unreadable_file"
        ) from None
    if not isinstance(data, dict):
        raise usage(f"{where} must hold a JSON object", FILE_HINT)
    return data


def _would_run(result: PlanResult) -> bool:
    """A dry run whose policy decisions let every step through."""
    if result.status != "planned":
        return False
    return all((s.decision or {}).get("decision") != "deny" for s in result.steps)


def _answer(
    result: PlanResult, settings: MoatSettings, as_json: bool, elapsed: float | None = None
) -> None:
    if as_json:
        out.print_json(result.envelope.model_dump_json())
        return
    envelope = result.envelope
    status = envelope.status.value
    took = f"  ({elapsed:.2f}s)" if elapsed is not None else ""
    colour = PLAN_COLOURS.get(status, "white")
    out.print(f"[bold {colour}]{status}[/]  {escape(envelope.plan_id)}{took}", soft_wrap=True)
    if result.replayed:
        out.print("[cyan]idempotent replay:[/] the stored plan, nothing executed again")
    approval = envelope.approval
    if status == "accepted" and approval is not None and approval.status == "pending":
        expires = f"{approval.expires_at.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
        out.print(f"[yellow]awaiting approval[/] {escape(approval.id)} until {expires}")
        out.print(f"see it: moat approvals show {escape(approval.id)}", soft_wrap=True)
    out.print(steps_table(envelope.steps))
    if envelope.error is not None:
        out.print(f"[red]{escape(envelope.error.code)}[/]: {escape(envelope.error.message)}")
    if status == "planned":
        out.print("[dim]dry run: nothing executed, no budget used, the key is still free[/]")
    elif status == "accepted":
        out.print(f"see how it stands: moat plan show {escape(envelope.plan_id)}", soft_wrap=True)
    if envelope.workflow_id:
        from starter.runtime import links

        ui = f"http://127.0.0.1:{settings.temporal_ui_port}"
        url = links.temporal_run(ui, settings.temporal_namespace, envelope.workflow_id, None)
        out.print(f"run: {escape(url)}", soft_wrap=True)


def _ids(step: PlanStep) -> list[str]:
    """The receipts of a step: its execution's, and the one that undid it."""
    return [i for i in (step.receipt_id, step.compensation_receipt_id) if i]


def _error(step: PlanStep) -> str:
    """A step's error code, or for a dry run its policy decision (and a person's approval
    when the step needs one: ``allow: approval``)."""
    if step.error is not None:
        return escape(step.error.code)
    decision = (step.decision or {}).get("decision")
    if not decision:
        return ""
    if (step.decision or {}).get("rule_hit") == "APPROVAL_REQUIRED":
        return escape(f"{decision}: approval")
    return escape(str(decision))


def steps_table(steps: list[PlanStep]) -> Table:
    """One step a row, its receipt ids whole (``moat receipts show`` takes them); a
    compensated step's second receipt is the call that undid it."""
    wide = out.width >= WIDE
    table = Table()
    receipts = [i for s in steps for i in _ids(s)]
    if wide:
        table.add_column("step", overflow="fold")
        table.add_column("status")
        table.add_column("capability", overflow="fold")
        id_column(table, "receipt", receipts)
        table.add_column("error", overflow="fold")
    else:
        id_column(table, "step / receipt", [*receipts, *(s.id for s in steps)])
        table.add_column("status / capability / error", overflow="fold")
    for step in steps:
        colour = STEP_COLOURS.get(step.status, "white")
        status = f"[{colour}]{escape(step.status)}[/]"
        ids = "\n".join(_ids(step))
        if wide:
            table.add_row(escape(step.id), status, escape(step.capability_id), ids, _error(step))
        else:
            error = f"\n[red]{_error(step)}[/]" if _error(step) else ""
            receipt = f"\n[dim]{ids}[/]" if ids else ""
            table.add_row(
                escape(step.id) + receipt, f"{status}\n{escape(step.capability_id)}{error}"
            )
    return table
