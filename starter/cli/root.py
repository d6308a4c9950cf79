"""The ``moat`` command: its command groups, and ``main``, which says every failure one
way (what it cannot reach, a refusal, a wrong command line), never as a traceback."""

from __future__ import annotations

import typer

from starter.cli import codec, execute, mcp, profiles, stack, status
from starter.cli.api_keys import api_key_app
from starter.cli.approvals import approvals_app
from starter.cli.budgets import budget_app
from starter.cli.connections import connection_app
from starter.cli.dead_letters import dlq_app
from starter.cli.identity import AsOperator, AsTenant, Local
from starter.cli.manifests import manifest_app
from starter.cli.output import main_of
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
app.command(cls=Local)(stack.up)
app.command(cls=Local)(stack.worker)
app.command(cls=Local)(stack.gateway)
app.command(cls=AsOperator)(stack.migrate)
app.command("codec-url", cls=Local)(codec.url_alias)
app.command(cls=AsTenant)(execute.execute)
app.command(cls=Local)(status.status)
app.command(cls=AsTenant)(mcp.mcp)
app.command("trust", cls=AsOperator)(trust_command)
app.command(cls=AsTenant)(profiles.whoami)
app.add_typer(profiles.profile_app, name="profile")
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
    """The console script: the app, every failure said one way (``output.main_of``)."""
    raise SystemExit(main_of(app))
