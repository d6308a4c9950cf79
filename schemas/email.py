"""``email.send``: one email, exactly once, over SMTP or Resend's API (``docs/email.md``).

The input names the message; the sender is the connection's (``config.from``). An ``smtp``
connection holds the server and its login (the password is the secret) and, optionally, an
IMAP mailbox where the server keeps what it was given (``config.imap``): what a repeated
attempt reads to tell whether an earlier one was delivered. A ``resend`` connection holds
Resend's API key; Resend dedupes by ``Idempotency-Key`` for 24 hours.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from schemas.capabilities import Capability, CapabilitySpec, EffectType, IdempotencyStrategy
from schemas.connections import ConnectionKind

# An address as SMTP carries it without extensions: ASCII, a dot-atom local part (no quoted
# forms) and a DNS domain of at least two labels. No white space, angle bracket, comma, CR or
# LF can pass, so an address never ends a header or a command early.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_ATOM = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
ADDRESS_PATTERN = rf"^{_ATOM}(?:\.{_ATOM})*@{_LABEL}(?:\.{_LABEL})+$"
MAX_ADDRESS_LENGTH = 254
Address = Annotated[
    str, Field(min_length=3, max_length=MAX_ADDRESS_LENGTH, pattern=ADDRESS_PATTERN)
]
# A header's text (the subject): no control character, so no CR or LF that would start a
# header of its own; non-ASCII text is encoded (RFC 2047) when the message is written.
HEADER_TEXT_PATTERN = r"^[^\x00-\x08\x0a-\x1f\x7f]*$"
_HEADER_TEXT = re.compile(HEADER_TEXT_PATTERN)
MAX_RECIPIENTS = 50
# The connection types email.send takes, and Resend's API when the config names no base_url.
SMTP = "smtp"
RESEND = "resend"
RESEND_BASE_URL = "https://api.resend.com"
MAX_BODY_CHARS = 1_000_000
# An SMTP server's host name, or an IP address: no white space or control characters.
_HOST_PATTERN = r"^[A-Za-z0-9._:\[\]-]{1,253}$"
# A mailbox name as IMAP quotes it: printable ASCII without `"` or `\`.
_MAILBOX_PATTERN = r"^[ !#-\[\]-~]{1,200}$"
# A login name: visible ASCII (it goes into SMTP AUTH and IMAP LOGIN).
_USERNAME_PATTERN = r"^[!-~]{1,320}$"


def _no_line_breaks(value: str) -> str:
    if not _HEADER_TEXT.fullmatch(value):
        raise PydanticCustomError(
            "header_text_invalid",
            "may not hold control characters (CR, LF, NUL, …): a line break would start a "
            "header of its own",
        )
    return value


HeaderText = Annotated[str, AfterValidator(_no_line_breaks)]


class EmailSendInput(BaseModel):
    """Input of ``email.send``: at most 50 recipients in all, and a text or HTML body (or
    both: sent as alternatives)."""

    # A refused value may be an address or a message: the error text never repeats it.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    to: list[Address] = Field(min_length=1, max_length=MAX_RECIPIENTS)
    cc: list[Address] | None = Field(default=None, max_length=MAX_RECIPIENTS)
    bcc: list[Address] | None = Field(
        default=None,
        max_length=MAX_RECIPIENTS,
        description="Recipients not named in the message's headers.",
    )
    subject: Annotated[HeaderText, Field(min_length=1, max_length=998)]
    text: str | None = Field(default=None, min_length=1, max_length=MAX_BODY_CHARS)
    html: str | None = Field(default=None, min_length=1, max_length=MAX_BODY_CHARS)
    reply_to: Address | None = None

    @model_validator(mode="after")
    def _body_and_recipients(self) -> EmailSendInput:
        if self.text is None and self.html is None:
            raise PydanticCustomError("body_missing", "give `text`, `html` or both")
        if len(self.recipients()) > MAX_RECIPIENTS:
            raise PydanticCustomError(
                "too_many_recipients",
                "at most {limit} recipients in to, cc and bcc together",
                {"limit": MAX_RECIPIENTS},
            )
        for body in (self.text, self.html):
            if body is not None and "\x00" in body:
                raise PydanticCustomError("body_invalid", "a body may not hold NUL characters")
        return self

    def recipients(self) -> list[str]:
        """Every recipient, in order, each once."""
        return list(dict.fromkeys([*self.to, *(self.cc or ()), *(self.bcc or ())]))


class ImapConfig(BaseModel):
    """Where an SMTP connection's server keeps the messages it was given: read, never
    written, by a repeated attempt that looks for its ``Message-ID``. Logs in with the SMTP
    connection's username and password."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    host: str = Field(pattern=_HOST_PATTERN)
    port: int = Field(default=993, ge=1, le=65535)
    security: Literal["tls", "starttls", "none"] = "tls"
    mailbox: str = Field(default="Sent", pattern=_MAILBOX_PATTERN)


class SmtpConfig(BaseModel):
    """``config`` of an ``smtp`` connection; its secret is the password."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, populate_by_name=True)

    host: str = Field(pattern=_HOST_PATTERN)
    port: int = Field(default=587, ge=1, le=65535)
    security: Literal["starttls", "tls", "none"] = Field(
        default="starttls",
        description="`none` (no encryption: the password in clear) is refused at call time "
        "unless the host is on the worker's or the tenant's allow-list.",
    )
    username: str | None = Field(
        default=None,
        pattern=_USERNAME_PATTERN,
        description="The login (SMTP AUTH, and IMAP's). None: no login, for a relay that "
        "takes mail without one (the secret is then unused).",
    )
    sender: Address = Field(alias="from")
    imap: ImapConfig | None = None

    @model_validator(mode="after")
    def _imap_logs_in(self) -> SmtpConfig:
        if self.imap is not None and self.username is None:
            raise PydanticCustomError(
                "imap_needs_username", "config.imap logs in with config.username: give one"
            )
        return self

    @property
    def sender_domain(self) -> str:
        return self.sender.rpartition("@")[2].lower()


class ResendConfig(BaseModel):
    """``config`` of a ``resend`` connection; its secret is the API key."""

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True, populate_by_name=True)

    base_url: str | None = None
    allowed_origins: list[str] | None = None
    sender: Address = Field(alias="from")


def checked_smtp_config(config: dict[str, Any]) -> dict[str, Any]:
    """An ``smtp`` connection's config, refused when it does not match ``SmtpConfig``."""
    return _checked(SmtpConfig, SMTP, config)


def checked_resend_config(config: dict[str, Any]) -> dict[str, Any]:
    """A ``resend`` connection's config: ``from`` is required, as an address."""
    return _checked(ResendConfig, RESEND, config)


def _checked(model: type[BaseModel], kind: str, config: dict[str, Any]) -> dict[str, Any]:
    """``config`` when ``model`` takes it; else refused naming fields and error types, never
    a value."""
    try:
        model.model_validate(config)
    except ValidationError as err:
        where = "; ".join(
            f"config.{'.'.join(str(p) for p in e['loc'])} ({e['type']})" for e in err.errors()
        )
        raise PydanticCustomError(
            "connection_config",
            "this {kind} connection's config is invalid: {where}",
            {"kind": kind, "where": where},
        ) from None
    return config


OUTPUT_SHAPE: dict[str, Any] = dict.fromkeys(
    ("message_id", "accepted", "provider_id", "reconciled")
)

EMAIL_SEND = CapabilitySpec(
    id="email.send",
    version="1.0.0",
    adapter="email",
    adapter_id="email-adapter-v1",
    description=(
        "Sends one email from the connection's `from` address. Over Resend's API (`resend` "
        "connection), Resend dedupes by the Idempotency-Key Moat sends (the same on every "
        "attempt: provider_key for 24 hours). Over SMTP (`smtp` connection) there is no key: "
        "the message's Message-ID is derived from Moat's key, the same on every attempt, and "
        "an attempt that may repeat an earlier one first looks for that Message-ID in the "
        "connection's IMAP mailbox (`config.imap`, e.g. Sent). A connection lost after the "
        "message's last byte and before the server's answer, with no mailbox to read, ends "
        "`outcome_unknown`: never sent twice."
    ),
    effect_type=EffectType.SEND_EMAIL,
    timeout_seconds=30.0,
    idempotency=IdempotencyStrategy.RECONCILE,
    connection_types=(SMTP, RESEND),
    connection_required=True,
)

CONNECTION_KINDS: tuple[ConnectionKind, ...] = (
    ConnectionKind(
        SMTP,
        "An SMTP server's login (the secret is the password) and, optionally, the IMAP "
        "mailbox it files sent mail in.",
        check_config=checked_smtp_config,
        http=False,
        config_schema=SmtpConfig.model_json_schema(),
    ),
    ConnectionKind(
        RESEND,
        "A Resend API key.",
        RESEND_BASE_URL,
        check_config=checked_resend_config,
        config_schema=ResendConfig.model_json_schema(),
    ),
)

CAPABILITIES: tuple[Capability, ...] = (
    Capability(
        spec=EMAIL_SEND,
        input_model=EmailSendInput,
        adapter="activities.adapters.email:email_adapter",
        output_shape=OUTPUT_SHAPE,
        connection_kinds=CONNECTION_KINDS,
    ),
)
