"""``moat log``: the tenants' transparency logs, as the operator (the owner role, each
transaction scoped to its tenant). ``checkpoint`` does now what the schedule does every
interval: sequence the waiting leaves and sign a checkpoint of each log that grew."""

from __future__ import annotations

from typing import Annotated

import typer

from schemas.checkpoints import LogCheckpointReport
from schemas.settings import MoatSettings
from schemas.translog import make_vkey
from starter.cli.identity import AsOperator, Local
from starter.cli.output import AsJson, fail, out, print_json, run
from starter.cli.tenants import tenant_of
from starter.devstack.ports import local_settings
from starter.runtime.database import owner_sessions
from starter.service import translog
from store import tenants
from store.keyrings import log as log_key

log_app = typer.Typer(
    no_args_is_help=True, help="The tenants' transparency logs: checkpoint them now, their key."
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


@log_app.command("key", cls=Local)
def key(
    tenant: Annotated[
        str | None, typer.Option(help="Also print this tenant log's verifier key.")
    ] = None,
) -> None:
    """Make the log's Ed25519 key if it is missing (at MOAT_LOG_KEY, its public half at
    MOAT_LOG_PUBLIC_KEY) and say where both are: mount the key on workers only, the public
    half on gateways."""
    settings = local_settings()
    try:
        private = log_key.load_or_create(settings.log_key_path, settings.log_public_key_path)
    except (OSError, ValueError) as exc:
        raise fail(
            "unreadable",
            f"cannot read or make the log key at {settings.log_key_path}: {exc}",
            "point MOAT_LOG_KEY at the log's Ed25519 PEM key, or at a path to make it",
            exit_code=2,
        ) from None
    out.print(
        f"log key: {settings.log_key_path} (workers only); public key: "
        f"{settings.log_public_key_path} (gateways)",
        soft_wrap=True,
    )
    if tenant is not None:
        origin = log_key.origin(settings, tenant)
        out.print(make_vkey(origin, private.public_key()), soft_wrap=True)
