"""``moat log``: the tenants' transparency logs, as the operator (the owner role, each
transaction scoped to its tenant). ``checkpoint`` does now what the schedule does every
interval: sequence the waiting leaves and sign a checkpoint of each log that grew."""

from __future__ import annotations

from typing import Annotated

import typer

from schemas.checkpoints import LogCheckpointReport
from schemas.settings import MoatSettings
from starter.cli.identity import AsOperator
from starter.cli.output import AsJson, out, print_json, run
from starter.cli.tenants import tenant_of
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_sessions
from starter.service import translog
from store import tenants

log_app = typer.Typer(
    no_args_is_help=True, help="The tenants' transparency logs: checkpoint them now."
)


async def _checkpoint(settings: MoatSettings, tenant: str | None) -> LogCheckpointReport:
    async with owner_sessions(settings) as sessions:
        async with sessions.begin() as session:
            if tenant is None:
                ids = await tenants.tenant_ids(session)
            else:
                ids = [(await tenant_of(session, tenant, "--tenant")).id]
        return await translog.checkpoint_now(sessions, settings, ids)


@log_app.command("checkpoint", cls=AsOperator)
def checkpoint(
    tenant: Annotated[
        str | None, typer.Option(help="Tenant id or name. Unset: every tenant.")
    ] = None,
    as_json: AsJson = False,
) -> None:
    """Sequence the logs' waiting leaves and sign a checkpoint of each log that grew (what
    the schedule does every MOAT_LOG_CHECKPOINT_INTERVAL_SECONDS)."""
    report = run(_checkpoint(local_settings(), tenant))
    if as_json:
        print_json(report.model_dump(mode="json"))
        return
    out.print(
        f"{report.tenants} log(s): {report.sequenced} leaves sequenced, "
        f"{report.checkpoints} new checkpoint(s)"
    )
