"""The CLI as an agent: the agents' client on the gateway with the tenant's API key
(``identity``: ``--api-key``, ``MOAT_API_KEY``, the profile's, else the demo tenant's key
``moat up`` created), and the gateway's refusals and absence said as every error is."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from schemas.settings import MoatSettings
from starter.cli import identity
from starter.cli.output import CONNECT_TIMEOUT, fail, gateway_unavailable
from starter.cli.tenant_api import key_of, refusal

if TYPE_CHECKING:
    from moat_client import MoatClient


def agent_client(settings: MoatSettings) -> MoatClient:
    """The agents' client for a person at a terminal: one try per request (they run the
    command again, with the same key), and a short connect timeout."""
    from moat_client import MoatClient, RetryPolicy

    return MoatClient(
        _gateway(settings),
        key_of(settings).value or "",
        retry=RetryPolicy(max_attempts=1),
        connect_timeout=CONNECT_TIMEOUT,
    )


def _gateway(settings: MoatSettings) -> str:
    return identity.gateway_url(settings).value or settings.local_gateway_url


@contextmanager
def gateway_answers(settings: MoatSettings) -> Iterator[None]:
    """A refusal is the gateway's error (exit 1); a gateway that is not there, exit 3."""
    import httpx
    from moat_client import GatewayUnavailable, MoatError

    try:
        yield
    except GatewayUnavailable as exc:
        if isinstance(exc.__cause__, httpx.ConnectError | httpx.ConnectTimeout):
            raise gateway_unavailable(_gateway(settings)) from None
        raise fail(
            exc.code, exc.message, "run the command again; `moat status` shows the local stack"
        ) from None
    except MoatError as exc:
        raise refusal(
            exc.code,
            exc.message,
            exc.details,
            identity.api_key(settings),
            http_status=exc.http_status,
            trace_id=exc.trace_id,
        ) from None
    except OSError:
        raise gateway_unavailable(_gateway(settings)) from None
