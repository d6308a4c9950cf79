"""``moat runs``: rebuild and verify the runs projection, show an execution's event log."""

from __future__ import annotations

import asyncio
import json
from collections import Counter, defaultdict
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from schemas.errors import ErrorCode
from schemas.events import EffectOrigin, Event, EventType, effect_origin
from schemas.planrun import PLAN_CAPABILITY
from schemas.settings import MoatSettings
from starter.cli.identity import AsOperator
from starter.cli.output import AsJson, id_argument, out, print_json, refusals
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_sessions
from starter.service import MoatError, prefixes
from store import events as event_log
from store import receipts, tenancy, tenants
from store.models import ReceiptRow

runs_app = typer.Typer(no_args_is_help=True, help="Executions and their event log.")


async def _tenants(session: AsyncSession, only: str | None) -> list[str]:
    """Tenant ids from the operators' directory (row-level security closes the table)."""
    if only:
        tenant = await tenants.find_tenant(session, only)
        if tenant is None:
            raise MoatError(ErrorCode.TENANT_NOT_FOUND, f"no tenant {only!r} (from --tenant)")
        return [tenant.id]
    return [t.id for t in await tenants.list_tenants(session)]


async def _rebuild(settings: MoatSettings, tenant: str | None, verify_only: bool) -> int:
    table = Table("tenant", "receipt", "field", "stored", "from events", title="differences")
    checked = differing = 0
    origins: Counter[EffectOrigin] = Counter()
    notable = Table("tenant", "receipt", "effect", title="effects reconciled or of unknown outcome")
    async with owner_sessions(settings) as sessions:
        async with sessions() as session:
            tenant_ids = await _tenants(session, tenant)
        for tenant_id in tenant_ids:
            async with sessions.begin() as session:
                await tenancy.set_tenant(session, tenant_id)
                rebuilt, diffs = await event_log.compare(session, tenant_id)
                checked += len(rebuilt)
                for receipt_id, origin in (
                    await event_log.effect_origins(session, tenant_id)
                ).items():
                    origins[origin] += 1
                    if origin != EffectOrigin.FRESH:
                        notable.add_row(tenant_id, receipt_id, origin.value)
                for diff in diffs:
                    differing += 1
                    for name, (stored, derived) in diff.fields.items():
                        table.add_row(tenant_id, diff.receipt_id, name, str(stored), str(derived))
                if diffs and not verify_only:
                    await event_log.repair(session, rebuilt, diffs)
    if differing:
        out.print(table)
    if notable.row_count:
        out.print(notable)
    verb = "differ" if verify_only else "differed and were rebuilt from their events"
    out.print(
        f"{checked} runs replayed from events across {len(tenant_ids)} tenants; {differing} {verb}"
    )
    # A reconciled effect was found at the provider, left by an earlier attempt; a fresh one
    # was performed by the attempt that recorded it.
    out.print(
        f"effects: {origins[EffectOrigin.FRESH]} fresh, {origins[EffectOrigin.RECONCILED]} "
        f"reconciled, {origins[EffectOrigin.OUTCOME_UNKNOWN]} outcome unknown"
    )
    return 1 if differing and verify_only else 0


@runs_app.command("rebuild", cls=AsOperator)
def rebuild(
    tenant: Annotated[str | None, typer.Option(help="Only this tenant (id or name).")] = None,
    verify: Annotated[
        bool, typer.Option("--verify", help="Only compare; exit 1 on a difference.")
    ] = False,
) -> None:
    """Replay the event log into a fresh projection and report every run whose stored
    state differs (and, without --verify, rewrite it from the events)."""
    with refusals():
        code = asyncio.run(_rebuild(local_settings(), tenant, verify))
    raise typer.Exit(code)


async def _named(
    sessions: async_sessionmaker[AsyncSession], candidates: list[str], given: str
) -> dict[str, str]:
    """What ``given`` names in each of the ``candidates`` tenants: a receipt with that id
    (then only its tenant), else the one receipt id it starts, else ``given`` itself (a run
    still going has events before its receipt). A prefix that starts receipts in more than
    one tenant is ``id_ambiguous``: the tenant is not picked by the order of a loop."""
    prefixed: dict[str, str] = {}
    for tenant_id in candidates:
        async with sessions.begin() as session:
            await tenancy.set_tenant(session, tenant_id)
            if await receipts.get_receipt(session, tenant_id, given) is not None:
                return {tenant_id: given}
            whole = await prefixes.unique_id(session, ReceiptRow, tenant_id, given, "receipt")
            if whole is not None:
                prefixed[tenant_id] = whole
    if len(prefixed) > 1:
        raise MoatError(
            ErrorCode.ID_AMBIGUOUS,
            f"{given[:80]!r} starts receipt ids of {len(prefixed)} tenants: "
            f"{', '.join(sorted(prefixed.values())[:5])}; give more characters or --tenant.",
            {"candidates": sorted(prefixed.values())[:5]},
        )
    return prefixed or dict.fromkeys(candidates, given)


async def _show(settings: MoatSettings, receipt_id: str, tenant: str | None, view: str) -> int:
    async with owner_sessions(settings) as sessions:
        async with sessions() as session:
            candidates = await _tenants(session, tenant)
        events: list[Event] = []
        run = None
        named = await _named(sessions, candidates, receipt_id)
        for tenant_id, whole in named.items():  # the execution's tenant is not known up front
            async with sessions.begin() as session:
                await tenancy.set_tenant(session, tenant_id)
                events = await event_log.events_of(session, tenant_id, whole)
                if events:
                    run = await event_log.get_run(session, tenant_id, whole)
                    receipt_id = whole
                    break
    if not events:
        raise MoatError(
            ErrorCode.RECEIPT_NOT_FOUND,
            f"no events for execution {receipt_id}",
            {"receipt_id": receipt_id},
        )
    if view == "json":
        print_json(
            {
                "receipt_id": receipt_id,
                "run": run.model_dump(mode="json") if run is not None else None,
                "events": [event.model_dump(mode="json") for event in events],
            }
        )
        return 0
    if view == "tree":
        out.print(causal_tree(receipt_id, events))
    else:
        out.print(event_table(receipt_id, events))
    if run is not None and _is_plan(events):
        # A plan's steps are executions of their own (their ids in its checkpoints).
        checkpoints = sum(e.event_type == EventType.RUN_CHECKPOINT_CREATED for e in events)
        out.print(f"plan: status {run.status.value}, checkpoints {checkpoints}")
    elif run is not None:
        origin = effect_origin(events)
        out.print(
            f"status {run.status.value}, steps {run.total_steps} "
            f"({run.failed_steps} failed), retries {run.retries}, replays {run.replays}"
            + (f", effect {origin.value}" if origin is not None else "")
        )
    return 0


def _is_plan(events: list[Event]) -> bool:
    """Whether the events are a plan's (its run started as ``moat.plan``)."""
    return any(
        e.event_type == EventType.RUN_STARTED
        and e.event_data.get("capability_id") == PLAN_CAPABILITY
        for e in events
    )


def event_table(receipt_id: str, events: list[Event]) -> Table:
    """Events in the order they were recorded, one row each."""
    table = Table("#", "time (UTC)", "event", "aggregate", "actor", "data", title=receipt_id)
    for event in events:
        data = {k: v for k, v in event.event_data.items() if v is not None and k != "run_id"}
        table.add_row(
            str(event.sequence_number),
            f"{event.occurred_at:%H:%M:%S.%f}"[:-3],
            f"[cyan]{event.event_type}[/]",
            event.aggregate_type.lower(),
            event.actor,
            escape(json.dumps(data, default=str)) if data else "",
        )
    return table


def causal_tree(receipt_id: str, events: list[Event]) -> Tree:
    """Events as a tree: each under the event that caused it."""
    children: dict[str | None, list[Event]] = defaultdict(list)
    ids = {e.id for e in events}
    for event in events:
        children[event.causation_id if event.causation_id in ids else None].append(event)
    root = Tree(f"[bold]{'plan' if _is_plan(events) else 'execution'} {receipt_id}[/]")

    def grow(node: Tree, parent: str | None) -> None:
        for event in children.get(parent, []):
            data = {k: v for k, v in event.event_data.items() if v is not None and k != "run_id"}
            label = (
                f"#{event.sequence_number} [cyan]{event.event_type}[/] "
                f"{event.aggregate_type.lower()} {event.actor} "
                f"{event.occurred_at:%H:%M:%S.%f}"[:-3]
            )
            branch = node.add(label + (f"  [dim]{data}[/]" if data else ""))
            grow(branch, event.id)

    grow(root, None)
    return root


@runs_app.command("show", cls=AsOperator)
def show(
    receipt_id: Annotated[str, id_argument("receipt")],
    tenant: Annotated[str | None, typer.Option(help="The execution's tenant (id or name).")] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="Each event under the event that caused it.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Print an execution's event log as a table (--tree: as a causal tree; --json:
    the events and the run's projected state)."""
    view = "json" if as_json else "tree" if tree else "table"
    with refusals():  # a prefix that starts several receipts' ids
        code = asyncio.run(_show(local_settings(), receipt_id, tenant, view))
    raise typer.Exit(code)
