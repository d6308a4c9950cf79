"""The ``moat`` command: its commands (each named with its help line here, its module
imported only when it runs), ``--version``, shell completion, and ``main``, which names
what it cannot reach (PostgreSQL, Temporal, a key file) in one error line instead of a
traceback."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from starter.cli.lazy import Lazy, lazy_group
from starter.cli.output import error_line, out, unavailable

# Each command's line in ``moat --help``; a test holds it to the command's own help.
COMMANDS = (
    Lazy("up", "starter.cli.stack:up", "Run the whole stack on embedded defaults until Ctrl-C."),
    Lazy("down", "starter.cli.stack:down", "Stop what moat up started in this MOAT_HOME."),
    Lazy("worker", "starter.cli.stack:worker",
         "Run one Temporal worker against the configured Temporal and Postgres."),
    Lazy("gateway", "starter.cli.stack:gateway",
         "Run the HTTP gateway against the configured Temporal and Postgres."),
    Lazy("migrate", "starter.cli.stack:migrate", "Apply database migrations (as the owner role)."),
    Lazy("codec-url", "starter.cli.codec:url_alias",
         "Print the codec address to give a Temporal Web UI (the same as moat codec url)."),
    Lazy("execute", "starter.cli.execute:execute",
         "Execute a capability through the gateway and print a summary: status, receipt, "
         "replay or not, the output, the run in the Temporal UI. --json: the whole envelope."),
    Lazy("capabilities", "starter.cli.capabilities:capabilities",
         "The capabilities the gateway executes; with an ID, one of them and its input schema."),
    Lazy("status", "starter.cli.status:status",
         "Print the local stack's processes (alive or not), their addresses and ports; exit 1 "
         "when no moat up runs in MOAT_HOME."),
    Lazy("mcp", "starter.cli.mcp:mcp",
         "Serve Moat's capabilities as MCP tools. Over stdio the tools run as the tenant of "
         "MOAT_API_KEY; over HTTP each client sends its tenant's API key as a bearer token."),
    Lazy("trust", "starter.cli.trust:trust_command",
         "Trust scores: success rate (rate-limited counts half; gateway errors and denials left "
         "out), samples, latency p50/p95, top error; red below 90 %, yellow below 99 %."),
    Lazy("tenant", "starter.cli.tenants:tenant_app", "Tenants."),
    Lazy("api-key", "starter.cli.api_keys:api_key_app",
         "API keys (moat_<id>_<secret>, stored hashed)."),
    Lazy("budget", "starter.cli.budgets:budget_app", "Per-tenant, per-capability budgets."),
    Lazy("connection", "starter.cli.connections:connection_app",
         "Connections: credentials stored once, sealed, named by id."),
    Lazy("policy", "starter.cli.policy:policy_app", "The tenant's policy document."),
    Lazy("approvals", "starter.cli.approvals:approvals_app", "Approvals of calls held by policy."),
    Lazy("codec", "starter.cli.codec:codec_app",
         "The Temporal Web UI's codec address (decode only), rotated."),
    Lazy("receipts", "starter.cli.receipts:receipts_app", "Receipts, read through the gateway."),
    Lazy("runs", "starter.cli.runs:runs_app", "Executions and their event log."),
    Lazy("manifest", "starter.cli.manifests:manifest_app",
         "Fetch, verify and inspect run manifests."),
    Lazy("signing-key", "starter.cli.signing_keys:signing_key_app", "Manifest signing keys."),
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
    """The console script: the app, with the services it cannot reach named plainly."""
    try:
        app()
    except Exception as exc:
        code = _unreachable(exc)
        if code is None:
            raise
        raise SystemExit(code) from None


def _unreachable(exc: Exception) -> int | None:
    """The exit code of a missing key file or an unreachable PostgreSQL or Temporal, said in
    one line; None for any other fault. A library never imported raised nothing."""
    signing = sys.modules.get("store.keyrings.signing")
    if signing is not None and isinstance(exc, signing.KeyringMissingError):
        error_line(str(exc))
        return 1
    database = sys.modules.get("sqlalchemy.exc")
    lost = () if database is None else (database.OperationalError, database.InterfaceError)
    if isinstance(exc, lost):
        reason = str(exc.orig or exc).strip().splitlines()[0]
        return unavailable(
            "database_unavailable",
            f"cannot reach PostgreSQL: {reason}",
            "start the stack with `make up` (or `moat up`), or point MOAT_DATABASE_URL "
            "at a running PostgreSQL",
        ).exit_code
    if isinstance(exc, RuntimeError) and str(exc).startswith("Failed client connect"):
        reason = str(exc).strip().splitlines()[0]
        return unavailable(
            "temporal_unavailable",
            f"cannot reach Temporal: {reason}",
            "start the stack with `make up` (or `moat up`), or point MOAT_TEMPORAL_ADDRESS "
            "at a running Temporal",
        ).exit_code
    return None
