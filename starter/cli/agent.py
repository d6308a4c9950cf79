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
from starter.cli.output import CONNECT_TIMEOUT, fail, gateway_unavailable, out
from starter.devstack.home import demo_api_key

if TYPE_CHECKING:
    from moat_client import MoatClient


def agent_client(settings: MoatSettings) -> MoatClient:
    """The agents' client for a person at a terminal: one try per request (they run the
    command again, with the same key), and a short connect timeout."""
    from moat_client import MoatClient, RetryPolicy

    api_key = settings.api_key or demo_api_key(settings)
    if not api_key:
        raise fail(
            "no API key",
            "set MOAT_API_KEY, or run `moat up` to create the demo tenant's key",
            code=2,
        )
    return MoatClient(
        settings.local_gateway_url,
        api_key,
        retry=RetryPolicy(max_attempts=1),
        connect_timeout=CONNECT_TIMEOUT,
    )


@contextmanager
def gateway_answers(settings: MoatSettings) -> Iterator[None]:
    """A refusal prints the gateway's error as JSON (exit 1); a gateway that is not there
    is the one error line (exit 3)."""
    import httpx
    from moat_client import GatewayUnavailable, MoatError

    try:
        yield
    except GatewayUnavailable as exc:
        if isinstance(exc.__cause__, httpx.ConnectError | httpx.ConnectTimeout):
            raise gateway_unavailable(settings.local_gateway_url) from None
        raise fail(f"{exc.code}: {exc.message}") from None
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
    except OSError:
        raise gateway_unavailable(settings.local_gateway_url) from None
