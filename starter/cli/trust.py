"""``moat trust``: how reliable each capability has been (a tenant's traffic, or every
tenant's); ``moat probe``: the synthetic probes that keep measuring it. Both as the
operator (the owner role, each transaction scoped to its tenant)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Annotated, Any

import typer
from rich.markup import escape
from rich.table import Table

from schemas.capabilities import CapabilityCatalog
from schemas.probes import ProbeCreate, ProbeInfo
from schemas.settings import MoatSettings
from schemas.trust import TrustReport, TrustScore, TrustWindow
from starter.cli.identity import AsOperator
from starter.cli.output import AsJson, id_column, out, print_json, run, usage
from starter.cli.tenants import TenantArg, tenant_of
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_sessions, owner_transaction
from starter.runtime.temporal import connect
from starter.service import probes, trust
from store import tenancy

probe_app = typer.Typer(
    no_args_is_help=True, help="Synthetic probes: capabilities run on a schedule."
)

# Below these a capability is shown in red (unhealthy) or yellow (degraded).
UNHEALTHY = 0.9
DEGRADED = 0.99


async def _report(
    settings: MoatSettings, tenant: str | None, window: TrustWindow, capability: str | None
) -> TrustReport:
    now = datetime.now(UTC)
    if tenant is None:
        async with owner_sessions(settings) as sessions:
            return await trust.platform_report(
                sessions, window, now, settings.trust_min_samples, capability
            )
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant, "--tenant")
        await tenancy.set_tenant(session, row.id)
        return await trust.tenant_report(
            session, row.id, window, now, settings.trust_min_samples, capability
        )


def _rate(score: TrustScore) -> str:
    if score.success_rate is None:
        return "[dim]n/a[/]"
    colour = (
        "red"
        if score.success_rate < UNHEALTHY
        else "yellow"
        if score.success_rate < DEGRADED
        else "green"
    )
    return f"[{colour}]{score.success_rate:.1%}[/]"


def _ms(value: float | None) -> str:
    return "" if value is None else f"{value:.0f}"


def trust_command(
    tenant: Annotated[
        str | None, typer.Option(help="Tenant id or name. Unset: every tenant's traffic.")
    ] = None,
    window: Annotated[TrustWindow, typer.Option(help="1h, 24h, 7d or 30d.")] = TrustWindow.H24,
    capability: Annotated[str | None, typer.Option(help="One capability id.")] = None,
    synthetic: Annotated[
        bool, typer.Option("--synthetic", help="The probes' traffic instead of the real one.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Trust scores: success rate (rate-limited counts half; gateway errors and denials left
    out), samples, latency p50/p95, top error; red below 90 %, yellow below 99 %."""
    settings = local_settings()
    report = run(_report(settings, tenant, window, capability))
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    traffic = "synthetic" if synthetic else "real"
    table = Table(
        "capability",
        "version",
        "success rate",
        "n",
        "p50 ms",
        "p95 ms",
        "top error",
        "trend",
        title=f"{traffic} traffic, last {window.value}"
        + (f" (rollup as of {report.refreshed_at:%H:%M:%S} UTC)" if report.refreshed_at else ""),
    )
    for entry in report.scores:
        score = entry.synthetic if synthetic else entry.real
        delta = score.trend.delta
        table.add_row(
            escape(entry.capability_id),
            escape(entry.capability_version),
            _rate(score),
            str(score.samples),
            _ms(score.latency_ms.p50),
            _ms(score.latency_ms.p95),
            escape(score.top_error or ""),
            "" if delta is None else f"{delta:+.1%}",
        )
    out.print(table)
    if not report.scores:
        out.print(f"no outcomes in the last {window.value}")
    else:
        out.print(
            f"n/a: fewer than {report.min_samples} counted outcomes (MOAT_TRUST_MIN_SAMPLES)",
            style="dim",
        )


def _probe_table(rows: list[ProbeInfo]) -> Table:
    table = Table()
    id_column(table, "probe", [p.id for p in rows])
    for name in ("capability", "every", "state", "input"):
        table.add_column(name)
    id_column(table, "connection", [p.connection_id for p in rows])
    for p in rows:
        table.add_row(
            p.id,
            escape(p.capability_id + (f"@{p.capability_version}" if p.capability_version else "")),
            f"{p.interval_seconds} s",
            "[yellow]paused[/]" if p.paused else "[green]running[/]",
            escape(json.dumps(p.input)[:60]),
            escape(p.connection_id or ""),
        )
    return table


async def _add(settings: MoatSettings, tenant: str, body: ProbeCreate) -> ProbeInfo:
    client = await connect(settings)
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        await tenancy.set_tenant(session, row.id)
        return await probes.add_probe(
            session, client, settings, CapabilityCatalog(), row.id, body, lender=probes.OPERATOR
        )


@probe_app.command("add", cls=AsOperator)
def add(
    tenant: TenantArg,
    capability: Annotated[str, typer.Argument(help="A capability that declares a safe probe.")],
    input: Annotated[
        str | None, typer.Option("--input", help="JSON input. Unset: the capability's own.")
    ] = None,
    every: Annotated[int, typer.Option(help="Seconds between runs.", min=1)] = 60,
    connection: Annotated[str | None, typer.Option(help="Connection id it runs with.")] = None,
    version: Annotated[str | None, typer.Option(help="Capability version.")] = None,
    as_json: AsJson = False,
) -> None:
    """Probe a capability on a schedule, through the normal path, marked synthetic (no
    budget, no webhook; scored apart from real traffic). Made here, by an operator, its
    runs act with Moat's own authority; through the API they act for the creating key."""
    value: dict[str, Any] | None = None
    if input is not None:
        try:
            value = json.loads(input)
        except ValueError as err:
            raise usage(f"--input is not valid JSON: {err}", "give a JSON object") from None
        if not isinstance(value, dict):
            raise usage("--input must be a JSON object", "give a JSON object")
    body = ProbeCreate(
        capability_id=capability,
        capability_version=version,
        input=value,
        connection_id=connection,
        interval_seconds=every,
    )
    settings = local_settings()
    probe = run(_add(settings, tenant, body), hint="`GET /v1/capabilities` shows each `probe`")
    if as_json:
        print_json(probe.model_dump(mode="json"))
        return
    out.print(_probe_table([probe]))


async def _list(settings: MoatSettings, tenant: str) -> list[ProbeInfo]:
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        await tenancy.set_tenant(session, row.id)
        return await probes.list_probes(session, row.id)


@probe_app.command("list", cls=AsOperator)
def list_(tenant: TenantArg, as_json: AsJson = False) -> None:
    """A tenant's probes."""
    rows = run(_list(local_settings(), tenant))
    if as_json:
        print_json([p.model_dump(mode="json") for p in rows])
        return
    out.print(_probe_table(rows))


async def _change(
    settings: MoatSettings, tenant: str, probe_id: str, action: str
) -> ProbeInfo | None:
    client = await connect(settings)
    async with owner_transaction(settings) as session:
        row = await tenant_of(session, tenant)
        await tenancy.set_tenant(session, row.id)
        if action == "remove":
            await probes.remove_probe(session, client, row.id, probe_id)
            return None
        if action == "pause":
            return await probes.pause_probe(session, client, row.id, probe_id)
        return await probes.resume_probe(
            session, client, CapabilityCatalog(), row.id, probe_id, lender=probes.OPERATOR
        )


ProbeArg = Annotated[
    str, typer.Argument(help="Probe id (prb_…, or its first 6 or more characters).")
]


@probe_app.command("pause", cls=AsOperator)
def pause(
    tenant: TenantArg,
    probe_id: ProbeArg,
    resume: Annotated[bool, typer.Option("--resume", help="Resume a paused probe.")] = False,
) -> None:
    """Pause a probe's schedule (--resume starts it again)."""
    probe = run(_change(local_settings(), tenant, probe_id, "resume" if resume else "pause"))
    assert probe is not None
    out.print(_probe_table([probe]))


@probe_app.command("remove", cls=AsOperator)
def remove(tenant: TenantArg, probe_id: ProbeArg) -> None:
    """Remove a probe and its schedule (its receipts and scores stay)."""
    run(_change(local_settings(), tenant, probe_id, "remove"))
    out.print(f"removed {probe_id}")
