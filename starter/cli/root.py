"""The ``moat`` command: its command groups, and ``main``, which names what it cannot reach
(PostgreSQL, Temporal, a key file) in one error line instead of a traceback."""

from __future__ import annotations

import typer

from starter.cli import codec, execute, mcp, stack, status
from starter.cli.api_keys import api_key_app
from starter.cli.approvals import approvals_app
from starter.cli.budgets import budget_app
from starter.cli.connections import connection_app
from starter.cli.dead_letters import dlq_app
from starter.cli.manifests import manifest_app
from starter.cli.output import error_line, unavailable
from starter.cli.policy import policy_app
from starter.cli.receipts import receipts_app
from starter.cli.runs import runs_app
from starter.cli.signing_keys import signing_key_app
from starter.cli.tenants import tenant_app
from starter.cli.trust import probe_app, trust_command
from starter.cli.webhooks import webhook_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_show_locals=False,  # locals may hold keys and secrets
    help="Moat: durable, idempotent execution of agents' side effects.",
)
app.command()(stack.up)
app.command()(stack.worker)
app.command()(stack.gateway)
app.command()(stack.migrate)
app.command("codec-url")(codec.url_alias)
app.command()(execute.execute)
app.command()(status.status)
app.command()(mcp.mcp)
app.command("trust")(trust_command)
app.add_typer(tenant_app, name="tenant")
app.add_typer(api_key_app, name="api-key")
app.add_typer(budget_app, name="budget")
app.add_typer(connection_app, name="connection")
app.add_typer(policy_app, name="policy")
app.add_typer(approvals_app, name="approvals")
app.add_typer(codec.codec_app, name="codec")
app.add_typer(receipts_app, name="receipts")
app.add_typer(runs_app, name="runs")
app.add_typer(manifest_app, name="manifest")
app.add_typer(signing_key_app, name="signing-key")
app.add_typer(webhook_app, name="webhook")
app.add_typer(dlq_app, name="dlq")
app.add_typer(probe_app, name="probe")
# Hidden aliases of ``api-key`` and ``signing-key`` (names too alike to tell apart), kept
# for one release so scripts can move over.
app.add_typer(api_key_app, name="key", hidden=True)
app.add_typer(signing_key_app, name="keys", hidden=True)


def main() -> None:
    """The console script: the app, with the services it cannot reach named plainly."""
    from sqlalchemy.exc import InterfaceError, OperationalError

    from store.keyrings.signing import KeyringMissingError

    try:
        app()
    except KeyringMissingError as exc:
        error_line(str(exc))
        raise SystemExit(1) from None
    except (OperationalError, InterfaceError) as exc:
        reason = str(exc.orig or exc).strip().splitlines()[0]
        raise SystemExit(
            unavailable(
                "database_unavailable",
                f"cannot reach PostgreSQL: {reason}",
                "start the stack with `make up` (or `moat up`), or point MOAT_DATABASE_URL "
                "at a running PostgreSQL",
            ).exit_code
        ) from None
    except RuntimeError as exc:
        if not str(exc).startswith("Failed client connect"):
            raise
        reason = str(exc).strip().splitlines()[0]
        raise SystemExit(
            unavailable(
                "temporal_unavailable",
                f"cannot reach Temporal: {reason}",
                "start the stack with `make up` (or `moat up`), or point MOAT_TEMPORAL_ADDRESS "
                "at a running Temporal",
            ).exit_code
        ) from None
