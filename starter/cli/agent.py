"""The CLI as an agent: the agents' client on the local gateway with the tenant's API key
(``MOAT_API_KEY``, else the demo tenant's key ``moat up`` created), and the gateway's
refusals and absence said in one line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

from schemas.settings import MoatSettings
from starter.cli.output import fail, out
from starter.devstack.home import demo_api_key

if TYPE_CHECKING:
    from moat_client import MoatClient


def agent_client(settings: MoatSettings) -> MoatClient:
    from moat_client import MoatClient

    api_key = settings.api_key or demo_api_key(settings)
    if not api_key:
        raise fail(
            "no API key",
            "set MOAT_API_KEY, or run `moat up` to create the demo tenant's key",
            code=2,
        )
    return MoatClient(settings.local_gateway_url, api_key)


@contextmanager
def gateway_answers(settings: MoatSettings) -> Iterator[None]:
    """A refusal prints the gateway's error as JSON (exit 1); an unreachable gateway is
    the one error line."""
    from moat_client import MoatError

    try:
        yield
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
