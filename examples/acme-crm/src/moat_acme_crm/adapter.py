"""``acme.create_ticket``'s adapter: ``call`` creates the ticket, ``find`` looks for the
one an earlier attempt created. Moat calls ``find`` before any attempt that may repeat an
earlier one, and ``call`` only when it finds nothing.

Acme's API (an imaginary internal CRM; ``fake.py`` serves it for tests):

- ``POST /tickets`` ``{"subject", "body", "customer_id", "external_ref"}`` → 201 the ticket
  ``{"id", "url", ...}``; 401 a bad token; 422 a refused field; 429 with ``Retry-After``;
  5xx a failure (the ticket may or may not exist).
- ``GET /tickets?external_ref=…`` → 200 ``{"tickets": [...]}``.

The adapter keeps no state between calls, sends every request through ``send`` (the host
guard, the byte cap, the token scrubbed from answers) and words every failure itself.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from moat.adapters import (
    AdapterContext,
    AdapterInput,
    AdapterOutput,
    Credential,
    ErrorTaxonomy,
    ProviderResponse,
    SendRequest,
    fail,
    parse_input,
    recorded,
    send,
)
from moat_acme_crm.capabilities import ACME_CRM, CreateTicketInput

# The most of an answer the adapter reads: a ticket, or a page of them.
MAX_ANSWER_BYTES = 256 * 1024


class AcmeTickets:
    def __init__(self, ctx: AdapterContext) -> None:
        self._ctx = ctx

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        ticket = parse_input(inp, CreateTicketInput)
        cred = _credential(inp, credential)
        body = {**ticket.model_dump(), "external_ref": inp.idempotency_key}
        answer = await self._send(inp, cred, "POST", "/tickets", json_body=body)
        if answer.status != 201:
            raise _refusal(answer, "creating the ticket")
        return _output(answer.json(), reconciled=False)

    async def find(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput | None:
        cred = _credential(inp, credential)
        answer = await self._send(
            inp, cred, "GET", "/tickets", params={"external_ref": inp.idempotency_key}
        )
        if answer.status != 200:
            raise _refusal(answer, "looking the ticket up")
        found = (answer.json() or {}).get("tickets") or []
        return _output(found[0], reconciled=True) if found else None

    async def _send(
        self, inp: AdapterInput, cred: Credential, method: str, path: str, **more: Any
    ) -> ProviderResponse:
        base = str(cred.config.get("base_url") or "").rstrip("/")
        return await send(
            self._ctx.http,
            self._ctx.guard,
            SendRequest(
                method,
                f"{base}{path}",
                {"Authorization": f"Bearer {cred.secret}", "Accept": "application/json"},
                timeout=inp.capability.timeout_seconds,
                allow_hosts=inp.http_allow_hosts,
                max_response_bytes=MAX_ANSWER_BYTES,
                credential=cred,
                **more,
            ),
        )


def make(ctx: AdapterContext) -> AcmeTickets:
    """The factory the declaration names (``moat_acme_crm.adapter:make``)."""
    return AcmeTickets(ctx)


def _credential(inp: AdapterInput, credential: Credential | None) -> Credential:
    if credential is None or credential.type != ACME_CRM.name:
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"{inp.capability.id} needs an acme_crm connection, whose base_url is the tenant's "
            "Acme API",
            code="acme_connection_required",
            retryable=False,
        )
    return credential


def _output(ticket: Any, *, reconciled: bool) -> AdapterOutput:
    ticket = ticket if isinstance(ticket, dict) else {}
    return recorded(
        201 if not reconciled else 200,
        {"ticket_id": ticket.get("id"), "url": ticket.get("url"), "reconciled": reconciled},
    )


def _refusal(answer: ProviderResponse, doing: str) -> Exception:
    """Acme's refusal in the adapter's own words (the answer's body goes to the details,
    scrubbed and bounded, never into the message)."""
    status = answer.status
    said = answer.said()
    if status == 429:
        wait = answer.response.headers.get("retry-after", "")
        return fail(
            ErrorTaxonomy.PROVIDER_RATE_LIMITED,
            f"Acme rate-limited {doing}",
            http_status=status,
            retry_after=timedelta(seconds=int(wait)) if wait.isdigit() else None,
            provider_response=said,
        )
    if status in (401, 403):
        return fail(
            ErrorTaxonomy.PROVIDER_AUTH_FAILURE,
            f"Acme refused the connection's token while {doing}",
            http_status=status,
            retryable=False,
            provider_response=said,
        )
    if 400 <= status < 500:
        return fail(
            ErrorTaxonomy.PROVIDER_INVALID_INPUT,
            f"Acme refused {doing} (HTTP {status})",
            http_status=status,
            retryable=False,
            provider_response=said,
        )
    return fail(
        ErrorTaxonomy.PROVIDER_SERVER_ERROR,
        f"Acme failed while {doing} (HTTP {status})",
        http_status=status,
        provider_response=said,
    )
