"""``email.send`` over SMTP (reconcile by Message-ID) or Resend's API (provider key).

SMTP has no idempotency key. The message's ``Message-ID`` is derived from the execution's
downstream key (``message_id_for``), the same on every attempt and reset. A failure before
the message's last byte (the final ``.`` of ``DATA``) leaves nothing at the server and is
safe to repeat (its details say ``not_performed``). A connection lost after it and before
the server's reply may have delivered the message:

- with ``config.imap``, the failure stands and the next attempt looks first (``find``): it
  logs in over IMAP and searches the mailbox the server files submissions in for the
  Message-ID; found, that send is the answer (``reconciled: true``);
- without it, nothing can be read back, so the call ends ``outcome_unknown`` at once. A
  repeated attempt then only ever follows a failure that left nothing at the server, and
  sends; a run resumed on an execution that held its key already (a reset, a terminated run)
  cannot tell and ends ``outcome_unknown``. A worker that dies mid-exchange leaves its retry
  as blind as that: only a mailbox to read settles it.

Resend dedupes by ``Idempotency-Key`` (the downstream key) for 24 hours: every attempt sends
the same request and Resend answers a repeat with the first email's id.
"""

from __future__ import annotations

import asyncio
import email.policy
import email.utils
import hashlib
import ssl
from email.message import EmailMessage
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError
from temporalio.exceptions import ApplicationError

from activities.adapters.base import fail, parse_input
from activities.adapters.guard import HostGuard
from activities.adapters.plugins import AdapterContext
from activities.adapters.reconcile import NOT_PERFORMED, base_url, outcome_unknown
from activities.adapters.responses import ProviderResponse, parse_retry_after, recorded
from activities.adapters.sender import SendRequest, send
from activities.adapters.smtp import (
    Envelope,
    ImapError,
    ImapTarget,
    SmtpError,
    SmtpTarget,
    find_message_id,
    submit,
)
from activities.connections import Scrubber
from schemas.connections import Credential
from schemas.email import (
    RESEND,
    RESEND_BASE_URL,
    SMTP,
    EmailSendInput,
    ImapConfig,
    ResendConfig,
    SmtpConfig,
)
from schemas.errors import ErrorCode
from schemas.provider_evidence import ProviderEvidence
from schemas.records import ErrorTaxonomy
from schemas.run import MAX_RETRY_AFTER, AdapterInput, AdapterOutput

# SMTP replies that ask to come back later (RFC 5321: service closing, mailbox busy, local
# error, insufficient storage or too many recipients): the provider's form of a rate limit.
SMTP_LATER = frozenset({421, 450, 451, 452})
# SMTP replies that refuse the login (RFC 4954: authentication required, too weak, invalid
# credentials, encryption required).
SMTP_AUTH = frozenset({530, 534, 535, 538})
SMTP_OPENING = frozenset({"connect", "greeting", "EHLO", "STARTTLS"})
# How much of a server's reply text a failure keeps.
REPLY_TEXT_CHARS = 300

M = TypeVar("M", bound=BaseModel)


def message_id_for(key: str, domain: str) -> str:
    """The Message-ID of the execution with downstream key ``key``: the same on every
    attempt, and no trace of the key itself."""
    return f"<moat.{hashlib.sha256(key.encode()).hexdigest()[:32]}@{domain}>"


def email_adapter(ctx: AdapterContext) -> EmailAdapter:
    """The adapter of ``email.send`` (``schemas.email``)."""
    return EmailAdapter(ctx.http, ctx.guard)


class EmailAdapter:
    """``call`` sends; ``find`` looks for an earlier attempt's message (SMTP with IMAP)."""

    def __init__(
        self, client: httpx.AsyncClient, guard: HostGuard, tls: ssl.SSLContext | None = None
    ) -> None:
        self._client = client
        self._guard = guard
        # The system's trust store: the server's certificate must name the configured host.
        self._tls = tls or ssl.create_default_context()

    async def call(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput:
        mail = parse_input(inp, EmailSendInput)
        cred = _credential(inp, credential)
        if cred.type == RESEND:
            return await self._resend(inp, mail, cred)
        return await self._smtp(inp, mail, cred)

    def looks_in(self, inp: AdapterInput) -> str:
        """What ``find`` reads, for a failed look-up's message."""
        return "the smtp connection's IMAP mailbox (config.imap) for the message's Message-ID"

    async def find(self, inp: AdapterInput, credential: Credential | None) -> AdapterOutput | None:
        mail = parse_input(inp, EmailSendInput)
        cred = _credential(inp, credential)
        if cred.type == RESEND:
            return None  # Resend answers a repeated key with the first email
        config = _config(inp, cred, SmtpConfig)
        message_id = message_id_for(inp.idempotency_key, config.sender_domain)
        if config.imap is None:
            if inp.resumed:
                raise outcome_unknown(
                    "this run resumes an execution whose message may have been sent, and the "
                    "smtp connection has no IMAP mailbox (config.imap) to look in"
                )
            # A retry: every earlier attempt failed before the message's end (one that may
            # have sent it ended the execution).
            return None
        target = await self._imap_target(inp, config.imap)
        username = config.username or ""  # SmtpConfig requires one with imap
        timeout = inp.capability.timeout_seconds
        try:
            # The socket's timeout bounds each read; this bounds the whole look-up.
            found = await asyncio.wait_for(
                asyncio.to_thread(
                    find_message_id, target, username, cred.secret, message_id, timeout
                ),
                timeout,
            )
        except ImapError as err:
            raise _imap_failure(err, config.imap) from None
        except TimeoutError:
            raise fail(
                ErrorTaxonomy.TIMEOUT,
                f"the IMAP look-up in {config.imap.host} took longer than {timeout}s",
            ) from None
        if not found:
            return None
        return _output(message_id, mail.recipients(), None, reconciled=True)

    # --- SMTP ---------------------------------------------------------------------------

    async def _smtp(
        self, inp: AdapterInput, mail: EmailSendInput, cred: Credential
    ) -> AdapterOutput:
        config = _config(inp, cred, SmtpConfig)
        message_id = message_id_for(inp.idempotency_key, config.sender_domain)
        target = await self._smtp_target(inp, config)
        envelope = Envelope(config.sender, mail.recipients(), _message(mail, config, message_id))
        try:
            await submit(
                target, config.username, cred.secret, envelope, inp.capability.timeout_seconds
            )
        except SmtpError as err:
            scrubbed = Scrubber(cred.secret).text(err.text)[:REPLY_TEXT_CHARS]
            raise _smtp_failure(err, scrubbed, readable=config.imap is not None) from None
        return _output(message_id, mail.recipients(), None, reconciled=None)

    async def _smtp_target(self, inp: AdapterInput, config: SmtpConfig) -> SmtpTarget:
        address = await self._pinned(inp, config.host, config.port, config.security, "SMTP")
        return SmtpTarget(
            config.host, config.port, config.security, address, self._tls, config.sender_domain
        )

    async def _imap_target(self, inp: AdapterInput, imap: ImapConfig) -> ImapTarget:
        address = await self._pinned(inp, imap.host, imap.port, imap.security, "IMAP")
        return ImapTarget(imap.host, imap.port, imap.security, address, self._tls, imap.mailbox)

    async def _pinned(
        self, inp: AdapterInput, host: str, port: int, security: str, what: str
    ) -> str | None:
        """The vetted address of ``host`` (None: allow-listed by name, connected to as is).
        Without encryption the password would cross the network in clear: only to a host an
        operator allow-listed."""
        try:
            address = await self._guard.check(host, port, inp.http_allow_hosts)
        except ApplicationError as err:
            if err.type != ErrorTaxonomy.NETWORK_ERROR.value:
                raise
            # The name did not resolve: nothing was sent.
            raise fail(
                ErrorTaxonomy.NETWORK_ERROR, err.message, more={NOT_PERFORMED: True}
            ) from None
        if security == "none" and not self._guard.allow_listed(
            host, port, inp.http_allow_hosts, address
        ):
            raise fail(
                ErrorTaxonomy.GATEWAY_ERROR,
                f"the {what} server {host} (port {port}) is set to `security: none`, which "
                "sends the password unencrypted: allowed only for a host:port on the "
                "allow-list (MOAT_HTTP_ALLOW_HOSTS or the tenant's); use starttls or tls",
                code=ErrorCode.HOST_NOT_ALLOWED,
                retryable=False,
                more={NOT_PERFORMED: True},
            )
        return address

    # --- Resend -------------------------------------------------------------------------

    async def _resend(
        self, inp: AdapterInput, mail: EmailSendInput, cred: Credential
    ) -> AdapterOutput:
        config = _config(inp, cred, ResendConfig)
        body: dict[str, Any] = {"from": config.sender, "to": mail.to, "subject": mail.subject}
        for name in ("cc", "bcc", "reply_to", "text", "html"):
            value = getattr(mail, name)
            if value is not None:
                body[name] = value
        request = SendRequest(
            "POST",
            f"{base_url(cred, RESEND_BASE_URL)}/emails",
            headers={"Authorization": f"Bearer {cred.secret}"},
            credential=cred,
            timeout=inp.capability.timeout_seconds,
            allow_hosts=inp.http_allow_hosts,
            json_body=body,
            idempotency_key=inp.idempotency_key,
        )
        answer = await send(self._client, self._guard, request)
        if answer.status >= 300:
            raise _resend_refusal(answer)
        said = answer.json()
        email_id = said.get("id") if isinstance(said, dict) else None
        if not isinstance(email_id, str):
            raise fail(ErrorTaxonomy.UNKNOWN, "Resend answered without the email's id")
        return _output(None, mail.recipients(), email_id, reconciled=None, status=answer.status)


def _credential(inp: AdapterInput, credential: Credential | None) -> Credential:
    """The call's credential: an smtp or a resend connection."""
    if credential is None:
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"{inp.capability.id} needs a connection of type {SMTP} or {RESEND}: create one "
            "(moat connection add) and name it in the request's connection_id",
            code=ErrorCode.CONNECTION_REQUIRED,
            retryable=False,
        )
    if credential.type not in (SMTP, RESEND):
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"{inp.capability.id} takes an {SMTP} or a {RESEND} connection, not {credential.type}",
            code=ErrorCode.CONNECTION_TYPE_MISMATCH,
            retryable=False,
        )
    return credential


def _config(inp: AdapterInput, cred: Credential, model: type[M]) -> M:
    try:
        return model.model_validate(dict(cred.config))
    except ValidationError as err:
        where = "; ".join(
            f"config.{'.'.join(str(p) for p in e['loc'])} ({e['type']})" for e in err.errors()
        )
        raise fail(
            ErrorTaxonomy.GATEWAY_ERROR,
            f"the {cred.type} connection's config is not usable: {where}",
            code=ErrorCode.CONNECTION_INVALID,
            retryable=False,
        ) from None


def _message(mail: EmailSendInput, config: SmtpConfig, message_id: str) -> bytes:
    """The message as submitted: headers encoded where they are not ASCII, CRLF line ends,
    no Bcc header."""
    msg = EmailMessage(policy=email.policy.SMTP)
    msg["From"] = config.sender
    msg["To"] = ", ".join(mail.to)
    if mail.cc:
        msg["Cc"] = ", ".join(mail.cc)
    if mail.reply_to:
        msg["Reply-To"] = mail.reply_to
    msg["Subject"] = mail.subject
    msg["Date"] = email.utils.formatdate(usegmt=True)
    msg["Message-ID"] = message_id
    if mail.text is not None:
        msg.set_content(mail.text)
        if mail.html is not None:
            msg.add_alternative(mail.html, subtype="html")
    elif mail.html is not None:
        msg.set_content(mail.html, subtype="html")
    return msg.as_bytes()


def _output(
    message_id: str | None,
    accepted: list[str],
    provider_id: str | None,
    *,
    reconciled: bool | None,
    status: int | None = None,
) -> AdapterOutput:
    out = recorded(
        status,
        {
            "message_id": message_id,
            "accepted": accepted,
            "provider_id": provider_id,
            "reconciled": bool(reconciled),
        },
    )
    evidence = ProviderEvidence(
        provider="email",
        object_type="email",
        object_id=message_id or provider_id,
        attributes={"provider_id": provider_id} if provider_id else {},
        http_status=status,
    )
    return out.model_copy(update={"reconciled": reconciled, "evidence": evidence})


def _smtp_failure(err: SmtpError, text: str, *, readable: bool) -> ApplicationError:
    """An SMTP exchange's failure, by when it happened and what the server said."""
    said = {"stage": err.stage, "smtp_code": err.code, "text": text} if err.code else None
    if err.code is None:
        how = "timed out" if err.timed_out else "lost its connection"
        taxonomy = ErrorTaxonomy.TIMEOUT if err.timed_out else ErrorTaxonomy.NETWORK_ERROR
        if not err.after_data:
            if err.stage in ("STARTTLS", "AUTH") and text:
                return fail(
                    ErrorTaxonomy.GATEWAY_ERROR,
                    f"the SMTP server offers no usable {err.stage} ({text}): check the "
                    "connection's security setting",
                    code=ErrorCode.CONNECTION_INVALID,
                    retryable=False,
                    more={NOT_PERFORMED: True},
                )
            return fail(
                taxonomy,
                f"the SMTP exchange {how} at {err.stage}, before the message was sent",
                more={NOT_PERFORMED: True},
            )
        if not readable:
            return outcome_unknown(
                f"the SMTP server was sent the whole message, then the exchange {how} before "
                "its answer, and the connection has no IMAP mailbox (config.imap) to look in"
            )
        return fail(
            taxonomy,
            f"the SMTP server was sent the whole message, then the exchange {how} before its "
            "answer: the next attempt looks for the message first",
        )
    return _smtp_refusal(err, said)


def _smtp_refusal(err: SmtpError, said: dict[str, Any] | None) -> ApplicationError:
    code = err.code or 0
    message = f"the SMTP server refused {err.stage} with {code}"
    more = {NOT_PERFORMED: True}
    if code in SMTP_LATER:
        return fail(
            ErrorTaxonomy.PROVIDER_RATE_LIMITED,
            message + " (try later)",
            provider_response=said,
            more=more,
        )
    if 400 <= code < 500:
        return fail(
            ErrorTaxonomy.PROVIDER_SERVER_ERROR,
            message + " (temporary)",
            provider_response=said,
            more=more,
        )
    if code in SMTP_AUTH:
        taxonomy = ErrorTaxonomy.PROVIDER_AUTH_FAILURE
    elif err.stage in SMTP_OPENING:
        taxonomy = ErrorTaxonomy.PROVIDER_SERVER_ERROR
    elif 500 <= code < 600:
        taxonomy = ErrorTaxonomy.PROVIDER_INVALID_INPUT
    else:
        taxonomy = ErrorTaxonomy.UNKNOWN
    return fail(taxonomy, message, retryable=False, provider_response=said, more=more)


def _imap_failure(err: ImapError, imap: ImapConfig) -> ApplicationError:
    where = f"the IMAP server {imap.host} (port {imap.port}), mailbox {imap.mailbox!r}"
    if err.refused:
        return fail(
            ErrorTaxonomy.PROVIDER_AUTH_FAILURE
            if err.stage == "login"
            else ErrorTaxonomy.PROVIDER_NOT_FOUND,
            f"{where} refused {err.stage}",
            retryable=False,
        )
    return fail(ErrorTaxonomy.NETWORK_ERROR, f"{where} could not be read ({err.stage})")


def _resend_refusal(answer: ProviderResponse) -> ApplicationError:
    """Resend's errors (its API reference): 400/422 validation, 401/403 the key (a 403
    ``validation_error``: the sender's domain is not verified), 404, 409 the idempotency
    key (used with another payload, or still in progress), 429 with ``retry-after``, 5xx."""
    status = answer.status
    said = answer.said()
    name = said.get("name") if isinstance(said, dict) else None
    message = f"Resend answered HTTP {status}" + (f" ({name})" if isinstance(name, str) else "")
    if status == 429:
        delay = parse_retry_after(answer.response.headers.get("retry-after"))
        return fail(
            ErrorTaxonomy.PROVIDER_RATE_LIMITED,
            message,
            http_status=status,
            retry_after=min(delay, MAX_RETRY_AFTER) if delay is not None else None,
            provider_response=said,
        )
    if status >= 500 or (status == 409 and name == "concurrent_idempotent_requests"):
        # In progress elsewhere, or Resend's own failure: may have sent; the repeat's key
        # answers with the first email.
        return fail(
            ErrorTaxonomy.PROVIDER_SERVER_ERROR, message, http_status=status, provider_response=said
        )
    if status == 401 or (status == 403 and name != "validation_error"):
        taxonomy = ErrorTaxonomy.PROVIDER_AUTH_FAILURE
    elif status == 404:
        taxonomy = ErrorTaxonomy.PROVIDER_NOT_FOUND
    else:
        taxonomy = ErrorTaxonomy.PROVIDER_INVALID_INPUT
    return fail(taxonomy, message, http_status=status, retryable=False, provider_response=said)
