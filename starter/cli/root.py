"""The ``moat`` command: its commands (each named with its help line here, its module
imported only when it runs), ``--version``, shell completion, and ``main``, which says every
failure one way (what it cannot reach, a refusal, a wrong command line), never as a
traceback."""

from __future__ import annotations

from typing import Annotated

import typer

from starter.cli.lazy import Lazy, lazy_group
from starter.cli.output import main_of, out

# Each command's line in ``moat --help``; a test holds it to the command's own help.
COMMANDS = (
    Lazy("up", "starter.cli.stack:up", "Run the whole stack on embedded defaults until Ctrl-C.",
         role="Local"),
    Lazy("down", "starter.cli.stack:down", "Stop what moat up started in this MOAT_HOME.",
         role="Local"),
    Lazy("worker", "starter.cli.stack:worker",
         "Run one Temporal worker against the configured Temporal and Postgres.", role="Local"),
    Lazy("gateway", "starter.cli.stack:gateway",
         "Run the HTTP gateway against the configured Temporal and Postgres.", role="Local"),
    Lazy("migrate", "starter.cli.stack:migrate", "Apply database migrations (as the owner role).",
         role="AsOperator"),
    Lazy("codec-url", "starter.cli.codec:url_alias",
         "Print the codec address to give a Temporal Web UI (the same as moat codec url).",
         role="Local"),
    Lazy("execute", "starter.cli.execute:execute",
         "Execute a capability through the gateway and print a summary: status, receipt, "
         "replay or not, the output, the run in the Temporal UI. --json: the whole envelope.",
         role="AsTenant"),
    Lazy("plan", "starter.cli.plans:plan_app",
         "Plans: several capability calls as one durable run."),
    Lazy("capabilities", "starter.cli.capabilities:capabilities",
         "The capabilities the gateway executes; with an ID, one of them and its input schema.",
         role="AsTenant"),
    Lazy("status", "starter.cli.status:status",
         "Print the local stack's processes (alive or not), their addresses and ports; exit 1 "
         "when no moat up runs in MOAT_HOME.", role="Local"),
    Lazy("whoami", "starter.cli.profiles:whoami",
         "Who tenant commands act as: the gateway, the API key (its id, never its secret), its "
         "tenant (id and name) and scopes, as the gateway knows them; and the tenant operator "
         "commands act on. Each with where it came from.", role="AsTenant"),
    Lazy("profile", "starter.cli.profiles:profile_app",
         "Profiles: who the CLI acts as (key, tenant, gateway)."),
    Lazy("mcp", "starter.cli.mcp:mcp",
         "Serve Moat's capabilities as MCP tools. Over stdio the tools run as the tenant of the "
         "API key (--api-key, MOAT_API_KEY, the profile's, the demo key); over HTTP each client "
         "sends its tenant's API key as a bearer token.",
         role="AsTenant"),
    Lazy("trust", "starter.cli.trust:trust_command",
         "Trust scores: success rate (rate-limited counts half; gateway errors and denials left "
         "out), samples, latency p50/p95, top error; red below 90 %, yellow below 99 %.",
         role="AsOperator"),
    Lazy("tenant", "starter.cli.tenants:tenant_app", "Tenants."),
    Lazy("api-key", "starter.cli.api_keys:api_key_app",
         "API keys (moat_<id>_<secret>, stored hashed)."),
    Lazy("budget", "starter.cli.budgets:budget_app", "Per-tenant, per-capability budgets."),
    Lazy("connection", "starter.cli.connections:connection_app",
         "Connections: credentials stored once, sealed, named by id."),
    Lazy("policy", "starter.cli.policy:policy_app", "The tenant's policy document."),
    Lazy("approvals", "starter.cli.approvals:approvals_app", "Approvals of calls held by policy."),
    Lazy("alerts", "starter.cli.alerts:alerts_app", "The tenant's own operations alerts."),
    Lazy("people", "starter.cli.people:people_app",
         "People: approvers who sign in to the console or use Slack."),
    Lazy("codec", "starter.cli.codec:codec_app",
         "The Temporal Web UI's codec address (decode only), rotated."),
    Lazy("receipts", "starter.cli.receipts:receipts_app", "Receipts, read through the gateway."),
    Lazy("runs", "starter.cli.runs:runs_app", "Executions and their event log."),
    Lazy("manifest", "starter.cli.manifests:manifest_app",
         "Fetch, verify and inspect run manifests."),
    Lazy("signing-key", "starter.cli.signing_keys:signing_key_app", "Manifest signing keys."),
    Lazy("log", "starter.cli.log:log_app",
         "The tenants' transparency logs: checkpoint them now, their key."),
    Lazy("evidence", "starter.cli.evidence:evidence_app",
         "Export the tenant's transparency log as a bundle; verify a bundle offline."),
    Lazy("witness", "starter.cli.witness:witness_app",
         "Witness a tenant's log: cosign each checkpoint consistent with the last one."),
    Lazy("webhook", "starter.cli.webhooks:webhook_app",
         "Webhook subscriptions (signed deliveries); listen for them locally."),
    Lazy("dlq", "starter.cli.dead_letters:dlq_app", "Dead letters: list, show, requeue, resolve."),
    Lazy("probe", "starter.cli.trust:probe_app",
         "Synthetic probes: capabilities run on a schedule."),
    # Hidden aliases of ``api-key`` and ``signing-key`` (names too alike to tell apart), kept
    # for one release so scripts can move over.
    Lazy("key", "starter.cli.api_keys:api_key_app",
         "API keys (moat_<id>_<secret>, stored hashed).", hidden=True),
    Lazy("keys", "starter.cli.signing_keys:signing_key_app", "Manifest signing keys.", hidden=True),
)  # fmt: skip

app = typer.Typer(
    cls=lazy_group(*COMMANDS),
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,  # locals may hold keys and secrets
    help="Moat: durable, idempotent execution of agents' side effects.",
)


def _version(value: bool) -> None:
    if not value:
        return
    from importlib.metadata import PackageNotFoundError, version

    for distribution in ("moat-execution", "moat-client"):
        try:
            out.print(f"{distribution} {version(distribution)}", highlight=False)
        except PackageNotFoundError:
            out.print(f"{distribution} not installed", highlight=False)
    raise typer.Exit(0)


@app.callback()
def root(
    show_version: Annotated[
        bool,
        typer.Option(
            "--version", is_eager=True, callback=_version, help="Print the versions and exit."
        ),
    ] = False,
) -> None:
    """Moat: durable, idempotent execution of agents' side effects."""


def main() -> None:
    """The console script: the app, every failure said one way (``output.main_of``)."""
    raise SystemExit(main_of(app))
