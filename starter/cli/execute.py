"""``moat execute``: run a capability through the gateway, as an agent would, with the
agents' client, and print the envelope."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from schemas.settings import MoatSettings
from starter.cli.output import err, fail, out
from starter.devstack.home import demo_api_key


def execute(
    capability: Annotated[str, typer.Argument(help="Capability id, e.g. demo.echo.")],
    input_json: Annotated[str, typer.Option("--input", help="The capability's input, JSON.")],
    key: Annotated[str | None, typer.Option("--key", help="Idempotency key.")] = None,
    version: Annotated[str | None, typer.Option("--version", help="Capability version.")] = None,
) -> None:
    """Execute a capability through the gateway and print the envelope."""
    from moat_client import MoatClientSync, MoatError

    settings = MoatSettings()
    try:
        data: Any = json.loads(input_json)
    except ValueError as exc:
        raise fail(f"--input is not valid JSON: {exc}", code=2) from None
    if not isinstance(data, dict):
        raise fail("--input must be a JSON object", code=2)
    api_key = settings.api_key or demo_api_key(settings)
    if not api_key:
        raise fail(
            "no API key",
            "set MOAT_API_KEY, or run `moat up` to create the demo tenant's key",
            code=2,
        )
    client = MoatClientSync(settings.local_gateway_url, api_key)
    try:
        result = client.execute(capability, data, idempotency_key=key, capability_version=version)
    except MoatError as exc:
        out.print_json(
            json.dumps(
                {
                    "http_status": exc.http_status,
                    "error": {"code": exc.code, "message": exc.message, "details": exc.details},
                    "trace_id": exc.trace_id,
                }
            )
        )
        raise typer.Exit(1) from None
    except OSError as exc:
        raise fail(
            f"cannot reach the gateway at {settings.local_gateway_url}: {exc}",
            "start it with `make up` (or set MOAT_GATEWAY_URL)",
        ) from None
    if result.replayed:
        err.print("[cyan]idempotent replay:[/] the stored receipt, nothing executed again")
    out.print_json(result.envelope.model_dump_json())
    raise typer.Exit(0 if result.ok else 1)
