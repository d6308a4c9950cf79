"""``http.request``: one HTTP call an agent describes, sent with Moat's ``Idempotency-Key``."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from activities.adapters.base import parse_input
from activities.adapters.guard import HostGuard
from activities.adapters.responses import answered, interpret
from activities.adapters.sender import SendRequest, send
from schemas.capabilities import DEFAULT_MAX_RESPONSE_BYTES, HttpRequestInput
from schemas.connections import ConnectionType, Credential
from schemas.oauth import OAUTH2
from schemas.run import AdapterInput, AdapterOutput

# Headers that describe this one connection or the message's framing, not the request:
# the HTTP client writes its own, and an agent's copy would travel beside them (two framings
# of one body, a second Host) or steer a proxy. Any header starting "proxy-" goes too.
DROPPED_HEADERS = frozenset(
    {
        "host",
        "transfer-encoding",
        "content-length",
        "connection",
        "keep-alive",
        "upgrade",
        "te",
        "trailer",
        "idempotency-key",  # Moat sends its own, derived from the execution
    }
)


def agent_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The agent's headers that may go out: none of ``DROPPED_HEADERS`` nor ``Proxy-*``,
    whatever their case."""
    return {
        name: value
        for name, value in headers.items()
        if name.lower() not in DROPPED_HEADERS and not name.lower().startswith("proxy-")
    }


class HttpAdapter:
    """``http.request``: one HTTP call, ``Idempotency-Key`` sent downstream. The answer's
    body is read up to ``max_response_bytes``; a larger one is cut (see ``Body``).

    ``client`` should come from ``http_client``, which keeps no cookies."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        guard: HostGuard,
        *,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self._client = client
        self._guard = guard
        self._max_response_bytes = max_response_bytes

    async def __call__(
        self, inp: AdapterInput, credential: Credential | None = None
    ) -> AdapterOutput:
        req = parse_input(inp, HttpRequestInput)
        headers = agent_headers(req.headers)
        if credential is not None and credential.type in (ConnectionType.HTTP_BEARER, OAUTH2):
            # The connection's token, never the agent's: it replaces any Authorization the
            # agent sent, whatever its case.
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
            headers["Authorization"] = f"Bearer {credential.secret}"
        request = SendRequest(
            req.method,
            str(req.url),
            headers=headers,
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
            max_response_bytes=self._max_response_bytes,
            json_body=req.json_body,
            idempotency_key=inp.idempotency_key,
            credential=credential,
        )
        answer = await send(self._client, self._guard, request)
        out = interpret(answer.response, answer.body, repeat=inp.repeat)
        return answered(out, answer.body, "http")
